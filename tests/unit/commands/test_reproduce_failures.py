"""The failures claim (claim 1) without a fabric: its parameter checks, the full-scale
projection, the factor and verdict on recorded transfers, and the result's tables and
plot."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from commands.bench.transport import longest_stall
from commands.reproduce import claim_failures as cf
from commands.reproduce.claim import ClaimContext, ClaimSpecError
from commands.reproduce.failures_project import FullScale, project
from commands.reproduce.failures_transfers import TransferRun
from commands.reproduce.spec import CLAIMS_DIR, parse
from emu.errors import EmuError

FS = FullScale(rtt_s=8e-6, convergence_s=0.4, rto_s={"rc": 1.074, "tcp": 0.2},
               interruption_s=1020.0)
RTT = 0.0005


def _spec() -> Any:
    return parse(CLAIMS_DIR / "failures.toml", {cf.KIND.name: cf.KIND})


def _runs(lost: dict[tuple[str, str], list[float]]) -> list[dict]:
    """Transfer records: clean at 1 s, each failure's completion 1 s + its loss."""
    out = []
    for (system, kind), xs in lost.items():
        for rep, x in enumerate(xs):
            out.append(TransferRun(system, kind, rep, 1.0 + x, 1.0, 0.4, "p0l3-p0s1",
                                   0.0).record())
    return out


def _measured(lost: dict[tuple[str, str], list[float]], training: Any = None) -> dict:
    return {"reps": 3, "src": "h0", "dst": "h15", "rtt_s": RTT,
            "fabric": "2 planes x 4 spines x 4 racks x 4 hosts",
            "time_scale": {"describe": "time scale: 100 Mbit/s links stand for 100 Gbit/s"},
            "full_scale": {"rtt_s": FS.rtt_s, "convergence_s": FS.convergence_s,
                           "rto_s": FS.rto_s, "interruption_s": FS.interruption_s},
            "full_scale_text": "RTT 8 us", "transfers": _runs(lost), "training": training}


def test_claim_file_parses_and_quick_overrides() -> None:
    spec = _spec()
    assert spec.id == "failures" and spec.repetitions == 3
    quick = spec.effective_params(True)
    assert quick["kinds"] == list(cf.KINDS)  # every failure kind, even in quick form
    assert quick["training_kinds"] == ["link_cut"] and quick["training_reps"] == 1


@pytest.mark.parametrize("key,value,needle", [
    ("kinds", ["link_cut", "meteor"], "failure kinds among"),
    ("systems", ["rc", "tcp"], "with mrc"),
    ("gray_loss", 0.7, "gray_loss = 0.7 is invalid"),
    ("training_kinds", ["plane_down"], "training_kinds"),
])
def test_check_names_the_bad_key(key: str, value: object, needle: str) -> None:
    params = {**_spec().params, key: value}
    with pytest.raises(ClaimSpecError, match=needle):
        cf.KIND.check(params)


def test_check_refuses_steps_out_of_order() -> None:
    params = {**_spec().params, "fail_step": 30, "restore_step": 25}
    with pytest.raises(ClaimSpecError, match="fail_step < restore_step < training_steps"):
        cf.KIND.check(params)


def test_projection_follows_the_explorer_model() -> None:
    # MRC: its loss in RTTs at the full-scale RTT
    assert project("mrc", "link_cut", 0.01, RTT, FS) == pytest.approx(0.01 / RTT * 8e-6)
    # ECMP through a cut: the first retry at or after convergence (0.4 s), whatever the
    # emulator measured: TCP's RTO doubles (0.2, 0.6 s), RC's QP retries every 1.074 s
    assert project("tcp", "link_cut", 0.3, RTT, FS) == pytest.approx(0.6)
    assert project("rc", "flap", 0.05, RTT, FS) == 1.074
    # RC through a plane down: an interruption (restart + half a checkpoint interval)
    assert project("rc", "plane_down", 2.0, RTT, FS) == 1020.0
    # local failures: a whole RTO once the stall reached the emulated RTO floor
    assert project("tcp", "gray", 0.25, RTT, FS) == 0.2
    assert project("tcp", "gray", 0.05, RTT, FS) == pytest.approx(0.05 / RTT * 8e-6)
    with pytest.raises(ValueError, match="rtt_s"):
        project("mrc", "gray", 0.1, 0.0, FS)


def test_explorer_defaults_are_read_from_the_explorer() -> None:
    fs = FullScale.explorer_defaults()
    assert fs.rtt_s == pytest.approx(8e-6)
    assert fs.convergence_s == pytest.approx(0.4)  # 3 x 100 ms BFD + 50 + 50 ms
    assert fs.rto_s == {"rc": 1.074, "tcp": 0.2}
    # a restart (12 min) and half the reference job's Young/Daly checkpoint interval
    assert 12 * 60 < fs.interruption_s < 12 * 60 + 5 * 60


def test_factors_pair_repetitions_and_floor_at_one_rtt() -> None:
    lost = {("mrc", "link_cut"): [0.0, 0.002, 0.001], ("rc", "link_cut"): [0.1, 0.2, 0.3],
            ("tcp", "link_cut"): [0.05, 0.4, 0.5]}
    f = cf.factors(_runs(lost), ["mrc", "rc", "tcp"], ["link_cut"], 3, RTT)
    # rep 0: MRC lost nothing, counted as one RTT; the best baseline is TCP's 0.05
    assert f["link_cut"] == pytest.approx([0.05 / RTT, 0.2 / 0.002, 0.3 / 0.001])
    assert f["all"] == pytest.approx(f["link_cut"])


def test_geometric_mean_over_kinds() -> None:
    lost = {("mrc", "link_cut"): [0.01] * 3, ("rc", "link_cut"): [0.04] * 3,
            ("mrc", "gray"): [0.01] * 3, ("rc", "gray"): [0.01] * 3}
    f = cf.factors(_runs(lost), ["mrc", "rc"], ["link_cut", "gray"], 3, RTT)
    assert f["all"] == pytest.approx([math.sqrt(4.0)] * 3)


def test_result_holds_and_writes_its_plot(tmp_path: Path) -> None:
    spec = _spec()
    p = {**spec.effective_params(True), "kinds": ["link_cut", "gray"]}
    lost = {("mrc", "link_cut"): [0.01, 0.012, 0.011], ("rc", "link_cut"): [0.2, 0.21, 0.19],
            ("tcp", "link_cut"): [0.3, 0.25, 0.28], ("mrc", "gray"): [0.02, 0.03, 0.02],
            ("rc", "gray"): [0.03, 0.02, 0.025], ("tcp", "gray"): [0.05, 0.01, 0.04]}
    ctx = ClaimContext(tmp_path, True, 3, lambda m: None)
    r = cf.result(spec, ctx, {**p, "training_kinds": []}, _measured(lost))
    # the geometric mean over the kinds holds; gray's own factor reaches below 1
    assert r.verdict == "holds"
    assert "Not beyond the spread for gray (MRC 20 [20-30] ms vs best baseline" in r.reason
    lost[("rc", "link_cut")] = lost[("tcp", "link_cut")] = [0.012, 0.011, 0.01]
    r = cf.result(spec, ctx, {**p, "training_kinds": []}, _measured(lost))
    assert r.verdict == "does not hold here"
    assert (tmp_path / r.plots[0]).stat().st_size > 1000
    lost[("rc", "link_cut")], lost[("tcp", "link_cut")] = [0.2, 0.21, 0.19], [0.3, 0.25, 0.28]
    lost[("rc", "gray")] = [0.2, 0.2, 0.2]
    lost[("tcp", "gray")] = [0.3, 0.3, 0.3]
    r = cf.result(spec, ctx, {**p, "training_kinds": []}, _measured(lost))
    assert r.verdict == "holds"
    assert "Not beyond" not in r.reason
    table = r.tables[0]
    assert table.columns == ("failure", "system", "emulated", "RTTs", "full scale (Explorer)")
    assert len(table.rows) == 6
    row = next(x for x in table.rows if x[0] == "link_cut" and str(x[1]).startswith("RC"))
    assert row[2] == "200 [190-210] ms" and row[4] == "1074 [1074-1074] ms"
    clocks = {f.clock for f in r.figures}
    assert clocks == {"emulated", "dimensionless", "full-scale"}


def test_result_with_training_reports_its_steps(tmp_path: Path) -> None:
    spec = _spec()
    p = {**spec.effective_params(True), "kinds": ["link_cut"]}
    lost = {("mrc", "link_cut"): [0.01] * 3, ("rc", "link_cut"): [0.2] * 3,
            ("tcp", "link_cut"): [0.3] * 3}
    fig = {"median": 30.0, "lo": 29.0, "hi": 31.0, "n": 1}
    agg = {f"{s}/link_cut": {"healthy_step_ms": fig, "failure_step_ms_max": fig,
                             "failure_lost_s": {**fig, "median": 0.1 * (i + 1)},
                             "overrun_fraction": {**fig, "hi": 0.0}}
           for i, s in enumerate(("mrc", "rc", "tcp"))}
    training = {"runs": [], "aggregate": agg, "kinds": ["link_cut"]}
    r = cf.result(spec, ClaimContext(tmp_path, True, 3, lambda m: None), p,
                  _measured(lost, training))
    assert "time lost per failure: mrc 100 ms, rc 200 ms, tcp 300 ms" in r.reason
    assert r.tables[-1].columns[2] == "healthy step (ms)" and len(r.tables[-1].rows) == 3
    assert "one training per system" in r.setting


def test_training_with_repetitions_is_judged_per_kind(tmp_path: Path) -> None:
    spec = _spec()
    p = {**spec.effective_params(False), "kinds": ["link_cut"]}
    lost = {("mrc", "link_cut"): [0.01] * 3, ("rc", "link_cut"): [0.2] * 3,
            ("tcp", "link_cut"): [0.3] * 3}

    def f(med: float, lo: float, hi: float) -> dict:
        return {"median": med, "lo": lo, "hi": hi, "n": 3}

    by_kind = {"link_cut": {"mrc": f(0.06, 0.05, 0.09), "rc": f(0.16, 0.15, 0.19),
                            "tcp": f(0.28, 0.23, 0.30)},
               "spine_down": {"mrc": f(0.04, 0.04, 0.05), "rc": f(0.08, 0.04, 0.09),
                              "tcp": f(0.13, 0.09, 0.21)},
               "gray": {"mrc": f(0.09, 0.08, 0.10), "rc": f(0.04, 0.03, 0.05),
                        "tcp": f(0.10, 0.09, 0.12)}}
    agg = {f"{s}/{k}": {"failure_lost_s": v} for k, row in by_kind.items()
           for s, v in row.items()}
    training = {"runs": [], "aggregate": agg, "kinds": list(by_kind)}
    r = cf.result(spec, ClaimContext(tmp_path, False, 3, lambda m: None), p,
                  _measured(lost, training))
    assert ("link_cut: MRC 60 [50-90] ms vs rc 160 [150-190] ms, MRC loses less, beyond "
            "the spread") in r.reason
    assert "spine_down: MRC 40 [40-50] ms vs rc 80 [40-90] ms, within the spread" in r.reason
    assert "gray: MRC 90 [80-100] ms vs rc 40 [30-50] ms, MRC loses more, beyond" in r.reason
    assert "one training per system" not in r.setting


def test_longest_stall_and_clipped_loss() -> None:
    assert longest_stall([(0.0, 0), (0.1, 10), (0.2, 10), (0.35, 10), (0.4, 20)]) == 0.25
    run = TransferRun("mrc", "gray", 0, 0.98, 1.0, 0.4, "l", 0.0)
    assert run.lost_s == 0.0 and run.record()["raw_difference_s"] == -0.02


def _plan() -> Any:
    from commands.reproduce.failures_transfers import TransferPlan

    return TransferPlan(kinds=("link_cut",), systems=("rc",), size=1 << 20, outage_s=0.2,
                        fire_at=0.4, gray_loss=0.03, flap_period_s=0.2, flap_duty=0.5)


def test_a_failure_the_host_held_past_the_transfer_is_measured_again(monkeypatch) -> None:
    from commands.reproduce import failures_transfers as ft

    late = iter([0.3, 0.4, None])  # held back twice (transfers of 0.3, 0.4 s), then on time
    calls: list[tuple[str, float | None]] = []

    def fake_clean(fab, system, rep, plan):
        return TransferRun(system, "clean", rep, 0.5, 0.5, None, "", 0.0)

    def fake_through(fab, system, kind, rep, clean_s, plan, timing_s=None):
        calls.append((kind, timing_s))
        ended = next(late)
        if ended is not None:
            raise ft.FailureLate(f"{system} through {kind}: came after the transfer ended",
                                 ended)
        return TransferRun(system, kind, rep, 0.6, clean_s, 0.21, "p0l3-p0s0", 0.05)

    monkeypatch.setattr(ft, "clean", fake_clean)
    monkeypatch.setattr(ft, "through", fake_through)
    said: list[str] = []
    runs = ft.run_transfers_plan(None, _plan(), 1, said.append)  # type: ignore[arg-type]
    assert [r.kind for r in runs] == ["clean", "link_cut"]
    # a late try fires the next one at fire_at of the shortest transfer seen (a clean run
    # the host slowed put it late); the time lost still counts against the clean run
    assert calls == [("link_cut", 0.5), ("link_cut", 0.3), ("link_cut", 0.3)]
    assert runs[1].clean_s == 0.5
    assert sum("measured again" in m for m in said) == 2
    # held back in every try: the claim stops and says why
    late = iter([0.3] * ft.LATE_TRIES)
    with pytest.raises(EmuError, match=f"in each of {ft.LATE_TRIES} tries"):
        ft.run_transfers_plan(None, _plan(), 1, said.append)  # type: ignore[arg-type]
