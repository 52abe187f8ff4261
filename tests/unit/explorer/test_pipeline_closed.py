"""Pipeline closed forms: reductions, scalar == numpy, agreement with the simulator.

The agreement grid is the one in explorer/pipeline.py's docstring: a fixed random sample
of it (every axis value appears) and all of its ~30,000 cases (about 20 s) are checked.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from explorer.pipeline import (
    GPIPE,
    INTERLEAVED,
    ONE_F_ONE_B,
    SCHEDULE_CODES,
    inflight,
    inflight_np,
    pipeline_time,
    pipeline_time_np,
    simulated_time,
    uniform_case,
    warmup_extras,
)
from explorer.pipesim import simulate

T_F, T_B = 1.0, 2.0


def grid() -> list[tuple]:
    """Every case of the agreement grid, as pipeline_time's arguments."""
    cases = []
    for schedule in ("gpipe", "1f1b", "interleaved"):
        for p, g in [(2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (8, 1), (8, 2), (8, 4),
                     (16, 1), (16, 2), (16, 4)]:
            ms = {p, 2 * p, 4 * p, 8 * p}
            if schedule != "interleaved":
                ms |= {max(1, p // 2), max(1, p // 4)}
            vs = (1, 2, 4) if schedule == "interleaved" else (1,)
            es = (0,) if schedule == "gpipe" else (0, 1, 2, 4)
            x_lats = (0.0, 1.0, 3.0, 10.0) if g > 1 else (0.0,)
            sers = ((0.0, 0.0), (0.5, 0.5), (0.2, 1.0), (0.1, 1.5))
            for m, v, e, c_lat, x_lat, (c_ser, x_ser) in itertools.product(
                    sorted(ms), vs, es, (0.0, 0.1, 1.0), x_lats, sers):
                cases.append((schedule, p, m, v, e, T_F, T_B, c_lat, c_ser, x_lat, x_ser, g))
    return cases


def errors(cases: list[tuple]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"gpipe": [], "1f1b": [], "interleaved": []}
    closed = pipeline_time_np(*as_arrays(cases))  # the closed forms, all cases at once
    for args, t in zip(cases, closed, strict=True):
        sim = simulated_time(*args)
        out[args[0]].append((float(t) - sim) / sim)
    return out


def check_agreement(cases: list[tuple]) -> None:
    err = errors(cases)
    worst = {k: max(map(abs, v)) for k, v in err.items()}
    off = sum(abs(x) > 0.05 for x in err["interleaved"]) / len(err["interleaved"])
    summary = f"worst relative error {worst}, interleaved share above 5 %: {off:.3f}"
    assert worst["gpipe"] < 1e-9, summary  # exact
    assert worst["1f1b"] <= 0.05, summary
    # Interleaved: short runs with extra warm-up are the documented corner.
    assert off <= 0.04 and worst["interleaved"] <= 0.20, summary


def test_closed_forms_match_the_simulator_on_a_sample_of_the_grid() -> None:
    cases = grid()
    sample = random.Random(20240).sample(cases, 2000)
    for axis in range(1, 12):  # every value of every axis is in the sample
        assert {c[axis] for c in sample} == {c[axis] for c in cases}
    check_agreement(sample)


def test_closed_forms_match_the_simulator_on_the_full_grid() -> None:
    check_agreement(grid())


# -- reductions ----------------------------------------------------------------------------

SHAPES = [(1, 1, 1), (1, 3, 1), (2, 1, 1), (2, 2, 2), (3, 7, 1), (4, 2, 2), (4, 9, 4),
          (8, 8, 2), (8, 40, 4), (16, 5, 4)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m", "g"), SHAPES)
@pytest.mark.parametrize("e", [0, 1, 4])
def test_free_boundaries_reduce_to_m_plus_p_minus_1(schedule: str, p: int, m: int, g: int,
                                                    e: int) -> None:
    t = pipeline_time(schedule, p, m, 1, e, 0.7, 1.9, 0.0, 0.0, 0.0, 0.0, g)
    assert t == pytest.approx((m + p - 1) * 2.6, rel=1e-12)


@pytest.mark.parametrize(("p", "k", "g"), [(1, 3, 1), (2, 1, 2), (4, 2, 2), (4, 1, 4),
                                           (8, 4, 2), (16, 2, 4), (3, 5, 1)])
@pytest.mark.parametrize("v", [1, 2, 3, 4])
@pytest.mark.parametrize("e", [0, 2, 5])
def test_free_boundaries_interleaved_bubble_is_p_minus_1_over_m_v(p: int, k: int, g: int,
                                                                  v: int, e: int) -> None:
    m = k * p
    t = pipeline_time("interleaved", p, m, v, e, 0.7, 1.9, 0.0, 0.0, 0.0, 0.0, g)
    assert t == pytest.approx((m + (p - 1) / v) * 2.6, rel=1e-12)
    assert t / (m * 2.6) - 1 == pytest.approx((p - 1) / (m * v), rel=1e-9)


def test_gpipe_is_the_tandem_queue_formula() -> None:
    # Forward: p t_f + sum(lat + ser) + (m - 1) max(t_f, ser); backward likewise.
    t = pipeline_time("gpipe", 4, 6, 1, 0, 1.0, 2.0, 0.1, 0.3, 5.0, 1.5, 2)
    d = 2 * (0.1 + 0.3) + (5.0 + 1.5)
    assert t == pytest.approx(4 * 3.0 + 2 * d + 5 * (1.5 + 2.0), rel=1e-12)


def test_latency_stalled_1f1b_matches_the_hand_computed_schedule() -> None:
    # tests/unit/explorer/test_pipesim.py computes this one by hand: 19 (17 without the stall).
    assert pipeline_time("1f1b", 2, 4, 1, 0, 1.0, 2.0, 1.0, 0.0, 0.0, 0.0, 1) == 19.0


def test_extra_warmup_per_dci_boundary_hides_the_dci_loop() -> None:
    # 1F1B, two DCs, 10 t_f of DCI latency: e extra microbatches before the DCI boundary.
    args = dict(p=8, m=32, v=1, t_f=1.0, t_b=2.0, c_lat=0.0, c_ser=0.0, x_lat=10.0,
                x_ser=0.0, g=2)
    fill_drain = (32 + 8 - 1) * 3.0 + 2 * 10.0
    times = [pipeline_time("1f1b", e=e, **args) for e in range(9)]
    sims = [simulated_time("1f1b", e=e, **args) for e in range(9)]
    assert all(a >= b for a, b in itertools.pairwise(times))
    assert times[0] > 1.5 * fill_drain
    assert times[7] == fill_drain == sims[7]  # 2 x_lat <= e (t_f + t_b): hidden
    assert warmup_extras("1f1b", 8, 7, 2) == (7, 7, 7, 7, 0, 0, 0, 0)


# -- monotonicity and bounds ---------------------------------------------------------------

def random_cases(n: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        schedule = rng.choice(["gpipe", "1f1b", "interleaved"])
        p = rng.choice([1, 2, 3, 4, 6, 8, 12, 16])
        g = rng.choice([d for d in range(1, p + 1) if p % d == 0])
        v = rng.randint(1, 4) if schedule == "interleaved" else 1
        m = p * rng.randint(1, 6) if schedule == "interleaved" else rng.randint(1, 40)
        times = [rng.uniform(0.0, 3.0) for _ in range(6)]
        cases.append((schedule, p, m, v, rng.randint(0, 5), *times, g))
    return cases


@pytest.mark.parametrize("which", [7, 8, 9, 10])  # c_lat, c_ser, x_lat, x_ser
def test_monotonic_in_every_boundary_cost_and_never_below_zero_comm(which: int) -> None:
    for args in random_cases(300, seed=which):
        zero = list(args)
        zero[7:11] = [0.0] * 4
        t0 = pipeline_time(*zero)
        prev = t0
        for x in (0.0, 0.3, 1.0, 4.0, 20.0):
            a = list(args)
            a[which] = x
            t = pipeline_time(*a)
            assert t >= prev - 1e-9 * prev and t >= t0 - 1e-9 * t0, (a, t, prev)
            prev = t


# -- scalar == numpy -----------------------------------------------------------------------

def as_arrays(cases: list[tuple]) -> list[np.ndarray]:
    codes = np.array([SCHEDULE_CODES[c[0]] for c in cases])
    return [codes] + [np.array([c[i] for c in cases]) for i in range(1, 12)]


def test_numpy_agrees_with_scalar_on_random_inputs() -> None:
    # One formula: a batch of any mix of kinds gives what each point gives on its own.
    cases = random_cases(600, seed=1)
    got = pipeline_time_np(*as_arrays(cases))
    want = np.array([pipeline_time(*c) for c in cases])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    got_in = inflight_np(*as_arrays(cases)[:5], as_arrays(cases)[11])
    want_in = np.array([inflight(c[0], c[1], c[2], c[3], c[4], c[11]) for c in cases])
    np.testing.assert_allclose(got_in, want_in, rtol=1e-12, atol=0)


def test_numpy_broadcasts_and_accepts_integral_floats() -> None:
    x_lat = np.array([[0.0], [1.0], [10.0]])  # (3, 1) x (4,) -> (3, 4)
    m = np.array([4.0, 8.0, 12.0, 16.0])
    got = pipeline_time_np(ONE_F_ONE_B, 4, m, 1, 2, 1.0, 2.0, 0.1, 0.0, x_lat, 0.5, 2)
    assert got.shape == (3, 4)
    for i, j in itertools.product(range(3), range(4)):
        want = pipeline_time("1f1b", 4, int(m[j]), 1, 2, 1.0, 2.0, 0.1, 0.0,
                             float(x_lat[i, 0]), 0.5, 2)
        assert got[i, j] == pytest.approx(want, rel=1e-12)
    assert pipeline_time_np(GPIPE, 2, 3, 1, 0, 1.0, 1.0, 0, 2.0, 0, 0, 1).shape == ()


def test_numpy_invalid_elements_raise_or_become_nan() -> None:
    sched = np.array([GPIPE, INTERLEAVED, ONE_F_ONE_B, ONE_F_ONE_B])
    p = np.array([4, 4, 4, 4])
    m = np.array([8, 6, 8, 8])  # 6 is not a multiple of p for INTERLEAVED
    g = np.array([2, 2, 3, 2])  # 3 does not divide 4
    with pytest.raises(ValueError, match=r"g=3.0 at index \(2,\) is invalid: must be a "
                                         r"divisor of p.*invalid='nan'"):
        pipeline_time_np(sched, p, m, 2 * (sched == INTERLEAVED) + (sched != INTERLEAVED),
                         0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, g)
    got = pipeline_time_np(sched, p, m, 1, 0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, g,
                           invalid="nan")
    assert np.isnan(got[1:3]).all()
    assert got[0] == got[3] == 33.0
    with pytest.raises(ValueError, match=r"m=2.5 is invalid: must be an integer >= 1"):
        pipeline_time_np(GPIPE, 4, 2.5, 1, 0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1)
    with pytest.raises(ValueError, match=r"x_lat=-1.0 is invalid: must be finite"):
        pipeline_time_np(GPIPE, 4, 2, 1, 0, 1.0, 2.0, 0.0, 0.0, -1.0, 0.0, 1)
    with pytest.raises(ValueError, match="invalid='maybe' is invalid"):
        inflight_np(GPIPE, 4, 2, 1, 0, 1, invalid="maybe")


@pytest.mark.parametrize(("args", "match"), [
    (("zb", 4, 8, 1, 0), "schedule='zb'"),
    (("1f1b", 4, 8, 2, 0), "v=2 is invalid for '1f1b'"),
    (("interleaved", 4, 6, 2, 0), "m=6 is invalid for 'interleaved' with p=4"),
    (("1f1b", 4, 8, 1, -1), "e=-1"),
    (("1f1b", 0, 8, 1, 0), "p=0"),
    (("1f1b", 4, 8.0, 1, 0), "m=8.0"),
])
def test_scalar_invalid_arguments_name_the_bad_value(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pipeline_time(*args, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1)
    with pytest.raises(ValueError, match="g=3 is invalid for p=4"):
        pipeline_time("1f1b", 4, 8, 1, 0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3)
    with pytest.raises(ValueError, match="x_ser=nan"):
        pipeline_time("1f1b", 4, 8, 1, 0, 1.0, 2.0, 0.0, 0.0, 0.0, math.nan, 1)


# -- in-flight activations and the simulator case ------------------------------------------

@pytest.mark.parametrize("args", [
    ("gpipe", 4, 8, 1, 0, 1), ("1f1b", 4, 8, 1, 0, 1), ("1f1b", 4, 2, 1, 0, 1),
    ("1f1b", 8, 32, 1, 3, 2), ("1f1b", 8, 32, 1, 2, 4), ("1f1b", 8, 9, 1, 2, 4),
    ("interleaved", 4, 8, 2, 0, 1), ("interleaved", 8, 16, 4, 0, 2),
    ("interleaved", 4, 8, 2, 3, 2), ("interleaved", 4, 4, 4, 9, 1),
    ("interleaved", 1, 3, 3, 1, 1)])
def test_inflight_is_the_simulated_peak_of_stage_0(args: tuple) -> None:
    schedule, p, m, v, e, g = args
    peak = simulate(uniform_case(schedule, p, m, v, e, 1.0, 2.0, 0.1, 0.1, 2.0, 0.5,
                                 g)).peak_inflight
    assert inflight(*args) == pytest.approx(peak[0], rel=1e-12)
    assert peak[0] == max(peak)
    code = SCHEDULE_CODES[schedule]
    for s in range(p):  # every stage's own peak (memory is the busiest stage's)
        got = inflight_np(code, p, m, v, e, g, stage=s)
        assert got == pytest.approx(peak[s], rel=1e-12), s


def test_inflight_formulas() -> None:
    assert inflight("interleaved", 8, 16, 4, 0, 1) == 8 * (1 + 7 / (8 * 4))
    assert inflight("1f1b", 8, 32, 1, 3, 4) == 8 + 3 * 3
    assert inflight("gpipe", 8, 32, 1, 3, 4) == 32


def test_uniform_case_places_dci_boundaries_and_the_wrap() -> None:
    c = uniform_case("interleaved", 4, 8, 2, 1, 1.0, 2.0, 0.1, 0.2, 5.0, 1.5, 2)
    # Virtual boundaries 0..6: stages 0-1, 1-2 (DCI), 2-3, wrap 3-0 (DCI), 0-1, 1-2, 2-3.
    assert c.fwd_lat == (0.1, 5.0, 0.1, 5.0, 0.1, 5.0, 0.1) == c.bwd_lat
    assert c.fwd_ser == (0.2, 1.5, 0.2, 1.5, 0.2, 1.5, 0.2) == c.bwd_ser
    assert c.t_fwd == (0.5,) * 8 and c.warmup_extra == (1,) * 4
    assert uniform_case("1f1b", 4, 8, 1, 2, 1.0, 2.0, 0, 0, 1, 0, 4).warmup_extra == (
        6, 4, 2, 0)


def test_rows_of_one_stage_count_at_a_time_give_the_same_times(monkeypatch) -> None:
    # The grouped path skips loop candidates a (p, g) cannot have; over random valid rows
    # it must equal the path that masks them on mixed columns.
    import explorer.pipeline as pl

    rng = np.random.default_rng(7)
    n = 4000
    sched = rng.integers(0, 3, n)
    p = 2 ** rng.integers(0, 6, n)
    g = np.minimum(2 ** rng.integers(0, 3, n), p)
    v = np.where(sched == pl.INTERLEAVED, rng.integers(1, 5, n), 1)
    m = p * rng.integers(1, 9, n)
    e = rng.integers(0, 3, n)
    args = [sched, p, m, v, e, *(rng.random(n) for _ in range(6)), g]
    grouped = pl.pipeline_time_np(*args)
    monkeypatch.setattr(pl, "_MAX_GROUPS", 0)
    mixed = pl.pipeline_time_np(*args)
    assert len(np.unique(p * 8 + g)) > 10
    assert np.array_equal(grouped, mixed)
