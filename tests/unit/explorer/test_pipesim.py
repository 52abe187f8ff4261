"""The max-plus pipeline simulator: hand-computed schedules, orders, errors."""

from __future__ import annotations

import dataclasses

import pytest

from explorer.pipesim import Op, PipelineCase, simulate, stage_orders, warmup_count


def case(schedule: str, p: int, m: int, *, lat: float = 0.0, ser: float = 0.0, v: int = 1,
         extra: int | tuple[int, ...] = 0) -> PipelineCase:
    return PipelineCase.uniform(schedule, p, m, t_f=1.0, t_b=2.0, lat=lat, ser=ser, v=v,
                                warmup_extra=extra)


# -- zero communication ----------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(1, 1), (1, 5), (2, 1), (4, 2), (4, 8), (8, 16)])
def test_zero_comm_makespan_is_m_plus_p_minus_1_steps(schedule: str, p: int, m: int) -> None:
    r = simulate(case(schedule, p, m))
    assert r.makespan == pytest.approx((m + p - 1) * 3.0, rel=1e-12)
    assert r.stage_busy == pytest.approx((m * 3.0,) * p, rel=1e-12)


@pytest.mark.parametrize(("p", "m", "v"), [(2, 2, 2), (4, 8, 2), (4, 4, 4), (8, 16, 4),
                                           (3, 6, 3), (1, 3, 2)])
def test_zero_comm_interleaved_bubble_shrinks_by_v(p: int, m: int, v: int) -> None:
    r = simulate(case("interleaved", p, m, v=v))
    assert r.makespan == pytest.approx((m + (p - 1) / v) * 3.0, rel=1e-12)
    # Bubble (p - 1) / (m v) of the ideal m (t_f + t_b).
    assert r.bubble_fraction == pytest.approx(1 - m / (m + (p - 1) / v), rel=1e-12)


def test_bubble_fraction_gpipe_by_hand() -> None:
    r = simulate(case("gpipe", 4, 8))  # 33 long, every stage busy 24
    assert r.makespan == pytest.approx(33.0)
    assert r.bubble_fraction == pytest.approx(9 / 33)


def test_large_case_is_exact() -> None:
    # 16 stages x 1600 microbatches x 4 chunks: 204,800 operations in one pass.
    r = simulate(case("interleaved", 16, 1600, v=4))
    assert r.makespan == pytest.approx((1600 + 15 / 4) * 3.0, rel=1e-12)


# -- peak activations ------------------------------------------------------------------

def test_peak_inflight_per_schedule() -> None:
    assert simulate(case("gpipe", 4, 8)).peak_inflight == (8.0,) * 4
    assert simulate(case("1f1b", 4, 8)).peak_inflight == (4.0, 3.0, 2.0, 1.0)
    # Fewer microbatches than stages: warm-up is capped at m.
    assert simulate(case("1f1b", 4, 2)).peak_inflight == (2.0, 2.0, 2.0, 1.0)
    # Interleaved: (2 (p - s - 1) + (v - 1) p + 1) chunk forwards of 1/v each.
    assert simulate(case("interleaved", 4, 8, v=2)).peak_inflight == (5.5, 4.5, 3.5, 2.5)
    # Stage 0: p (1 + (p - 1) / (p v)), Korthikanti et al.'s count.
    assert simulate(case("interleaved", 8, 16, v=4)).peak_inflight[0] == 8 + 7 / 4
    assert simulate(case("1f1b", 4, 8, extra=(2, 1, 0, 0))).peak_inflight == (6, 4, 2, 1)


# -- latency, warm-up, serialisation by hand ---------------------------------------------

def test_latency_stalled_1f1b_by_hand() -> None:
    # p=2, m=4, t_f=1, t_b=2, 1 unit of latency each way. Stage 1 runs F0 2-3, B0 3-5,
    # F1 5-6, B1 6-8, F2 10-11, B2 11-13, F3 13-14, B3 14-16; stage 0 runs F0 0-1,
    # F1 1-2, then waits for B0's gradient (6): B0 6-8, F2 8-9, B1 9-11, F3 11-12,
    # B2 14-16, B3 17-19. Stage 1 waits for F2 (sent at 9, arrives 10): the stall.
    r = simulate(case("1f1b", 2, 4, lat=1.0))
    assert r.makespan == 19.0
    assert r.stage_finish == (19.0, 16.0)
    assert r.stage_busy == (12.0, 12.0)
    assert r.bubble_fraction == pytest.approx(7 / 19)


def test_extra_warmup_on_the_upstream_stage_removes_the_stall() -> None:
    # One more forward in flight before the slow boundary: stage 0 runs F0 F1 F2 B0 F3 B1
    # B2 B3 and every gradient arrives before it is needed; only fill and drain remain:
    # (m + p - 1)(t_f + t_b) + 2 * 1 = 17.
    assert simulate(case("1f1b", 2, 4, lat=1.0, extra=(1, 0))).makespan == 17.0
    # The same extra on every stage keeps the warm-up difference at one microbatch:
    # the last stage now waits for F1 before B0, and the loop stalls as before.
    assert simulate(case("1f1b", 2, 4, lat=1.0, extra=1)).makespan == 19.0


def test_links_are_fifo_and_serialise_one_transfer_at_a_time() -> None:
    # GPipe, p=2, m=3, t_f=t_b=1, serialisation 2: forwards finish at 1, 2, 3 but leave the
    # link at 3, 5, 7 (not 3, 4, 5): stage 1 runs F0 3-4, F1 5-6, F2 7-8, B2 8-9,
    # B1 9-10, B0 10-11; gradients arrive at 11, 13, 15; stage 0 ends B0 at 16.
    c = PipelineCase.uniform("gpipe", 2, 3, t_f=1.0, t_b=1.0, ser=2.0)
    r = simulate(c)
    assert r.makespan == 16.0
    assert r.stage_finish == (16.0, 11.0)
    # Latency adds once per direction and does not occupy the link.
    c = PipelineCase.uniform("gpipe", 2, 3, t_f=1.0, t_b=1.0, ser=2.0, lat=5.0)
    assert simulate(c).makespan == 26.0


def test_directions_have_their_own_costs() -> None:
    # Only the gradient direction is slow: 1F1B p=2, m=1 pays it once.
    c = dataclasses.replace(case("1f1b", 2, 1), bwd_lat=(4.0,))
    assert simulate(c).makespan == 3.0 * 2 + 4.0


# -- static orders -------------------------------------------------------------------------

def test_1f1b_order_warms_up_then_alternates() -> None:
    orders = stage_orders(case("1f1b", 3, 5))
    assert [(o.kind, o.microbatch) for o in orders[0]] == [
        ("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1), ("F", 4), ("B", 2),
        ("B", 3), ("B", 4)]
    assert [(o.kind, o.microbatch) for o in orders[2]][:4] == [
        ("F", 0), ("B", 0), ("F", 1), ("B", 1)]


def test_interleaved_order_follows_megatron_groups() -> None:
    # p=2, v=2, m=4, stage 0: warm-up 2*(p-1) + (v-1)*p = 4 chunk forwards; forwards in
    # groups of p microbatches per chunk, backwards with the chunks reversed.
    order = stage_orders(case("interleaved", 2, 4, v=2))[0]
    assert [(o.kind, o.microbatch, o.vstage) for o in order] == [
        ("F", 0, 0), ("F", 1, 0), ("F", 0, 2), ("F", 1, 2),
        ("F", 2, 0), ("B", 0, 2), ("F", 3, 0), ("B", 1, 2),
        ("F", 2, 2), ("B", 0, 0), ("F", 3, 2), ("B", 1, 0),
        ("B", 2, 2), ("B", 3, 2), ("B", 2, 0), ("B", 3, 0)]
    assert warmup_count("interleaved", 2, 4, 1, v=2) == 2


def test_custom_orders_give_the_same_result_as_defaults() -> None:
    c = case("interleaved", 4, 8, lat=0.5, ser=0.3, v=2)
    assert simulate(c, stage_orders(c)) == simulate(c)


# -- deadlock and invalid input ------------------------------------------------------------

def test_deadlock_is_reported_with_the_blocked_operations() -> None:
    c = case("1f1b", 2, 2)
    orders = ([Op("F", 0, 0), Op("B", 0, 0), Op("F", 1, 0), Op("B", 1, 0)],
              [Op("F", 1, 1), Op("F", 0, 1), Op("B", 0, 1), Op("B", 1, 1)])
    with pytest.raises(ValueError, match=r"deadlock.*stage 0 at B\(microbatch 0, vstage 0\)"
                                         r".*stage 1 at F\(microbatch 1, vstage 1\)"):
        simulate(c, orders)


def test_uneven_interleaved_warmup_deadlocks() -> None:
    # Three more chunk forwards on the first half than on the second: stage 0 waits for a
    # chunk-1 input that stage 3 only forwards after a backward stage 0 has not reached.
    with pytest.raises(ValueError, match="deadlock"):
        simulate(case("interleaved", 4, 16, v=2, extra=(3, 3, 0, 0)))


def test_backward_before_its_own_forward_deadlocks() -> None:
    c = case("gpipe", 1, 1)
    with pytest.raises(ValueError, match="deadlock"):
        simulate(c, [[Op("B", 0, 0), Op("F", 0, 0)]])


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(schedule="zb"), "schedule='zb'"),
    (dict(p=0), "p=0"),
    (dict(m=True), "m=True"),
    (dict(v=2), "v=2 is invalid for '1f1b'"),
    (dict(warmup_extra=-1), r"warmup_extra\[0\]=-1"),
    (dict(warmup_extra=(1, 2)), "tuple of p=3"),
    (dict(t_fwd=(1.0, 1.0)), "t_fwd has 2 values: it must have exactly 3"),
    (dict(fwd_lat=(1.0, -1.0)), r"fwd_lat\[1\]=-1.0"),
    (dict(bwd_ser=(1.0, float("inf"))), r"bwd_ser\[1\]=inf"),
    (dict(t_bwd="abc"), "t_bwd='abc'"),
])
def test_invalid_cases_name_the_bad_value(kwargs: dict, match: str) -> None:
    base = dict(schedule="1f1b", p=3, m=4, t_fwd=(1.0,) * 3, t_bwd=(2.0,) * 3,
                fwd_lat=(0.0,) * 2, fwd_ser=(0.0,) * 2, bwd_lat=(0.0,) * 2,
                bwd_ser=(0.0,) * 2)
    with pytest.raises(ValueError, match=match):
        PipelineCase(**{**base, **kwargs})


def test_interleaved_needs_m_multiple_of_p() -> None:
    with pytest.raises(ValueError, match="m=6 is invalid for 'interleaved' with p=4"):
        case("interleaved", 4, 6, v=2)


@pytest.mark.parametrize(("orders", "match"), [
    ([[Op("F", 0, 0), Op("B", 0, 0)]], "orders has 1 stages: it must have p=2"),
    ([[Op("F", 0, 1), Op("B", 0, 0)], [Op("F", 0, 1), Op("B", 0, 1)]], "belongs to stage 1"),
    ([[Op("F", 0, 0), Op("F", 0, 0)], [Op("F", 0, 1), Op("B", 0, 1)]], "exactly once"),
    ([[Op("X", 0, 0), Op("B", 0, 0)], [Op("F", 0, 1), Op("B", 0, 1)]], "kind must be"),
    ([[Op("F", 3, 0), Op("B", 0, 0)], [Op("F", 0, 1), Op("B", 0, 1)]], "microbatch in"),
    ([[("F", 0, 0), Op("B", 0, 0)], [Op("F", 0, 1), Op("B", 0, 1)]], "must hold Op values"),
])
def test_invalid_orders_are_rejected(orders: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        simulate(case("gpipe", 2, 1), orders)
