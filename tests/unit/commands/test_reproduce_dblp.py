"""The DBLP claim (claim 3) without a fabric: the block check that refuses a tolerance
that cannot let a chunk go, the claim file's checks, the round plans, and the verdict,
tables and plots from recorded rounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from commands.bench.dblp import p99
from commands.reproduce import claim_dblp as cd
from commands.reproduce import dblp_report as rep
from commands.reproduce.claim import ClaimContext, ClaimSpecError
from commands.reproduce.dblp_rounds import RoundPlan
from commands.reproduce.dblp_training import late_tolerance, transports
from commands.reproduce.spec import CLAIMS_DIR, parse
from workloads.experiment.dblp import BlockTooSmall, block_chunks, check_block, droppable_chunks


def _spec() -> Any:
    return parse(CLAIMS_DIR / "dblp.toml", {cd.KIND.name: cd.KIND})


def test_digits_blocks_are_refused_with_the_reason() -> None:
    # the digits CNN: 9930 values over 4 workers, blocks of 2482 values = 9928 B = 2 chunks
    assert block_chunks(9930, 4) == 2
    with pytest.raises(BlockTooSmall, match=r"2 chunk\(s\) of 8000 B.*floor\(0.3 x 2\) = 0.*"
                                            r"reliable MRC.*>= 4 chunks.*at most 2482 B"):
        check_block(0.3, 9930, 4, what="digits")


def test_lm_blocks_let_chunks_go() -> None:
    # the tiny LM: 116060 values over 4 workers: 29015 values = 116060 B = 15 chunks
    assert check_block(0.1, 116060, 4) == 15
    assert droppable_chunks(0.1, 15) == 1 and droppable_chunks(0.2, 15) == 3
    with pytest.raises(BlockTooSmall, match=">= 20 chunks"):
        check_block(0.05, 116060, 4)  # floor(0.05 x 15) = 0
    assert check_block(0.0, 9930, 4) == 2  # reliable: nothing to let go, nothing refused


def test_block_chunks_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="workers=0"):
        block_chunks(100, 0)


def test_claim_file_parses_with_a_sweep_of_at_least_3_by_3() -> None:
    spec = _spec()
    for quick in (False, True):
        p = spec.effective_params(quick)
        assert len(p["delays_ms"]) >= 3 and len(p["losses"]) >= 3
    assert spec.effective_params(True)["training_reps"] == 1


@pytest.mark.parametrize("key,value,needle", [
    ("delays_ms", [2.0, 5.0], ">= 3 distinct one-way DCI delays"),
    ("losses", [0.01, 0.01, 0.02], ">= 3 distinct DCI loss rates"),
    ("systems", ["mrc", "dblp"], "all four"),
    ("burst_settings", ["host"], "one_path, all_paths"),
    ("model", "resnet", "tiny_lm"),
])
def test_check_names_the_bad_key(key: str, value: object, needle: str) -> None:
    with pytest.raises(ClaimSpecError, match=needle):
        cd.KIND.check({**_spec().params, key: value})


def test_round_plans() -> None:
    plan = RoundPlan(10, 0.05)
    assert plan.bounds("mrc") == ("mrc", [None] * 10)
    assert plan.bounds("mlt")[1][0] == {"tolerance": 0.05, "deadline_s": None}
    transport, bounds = plan.bounds("dblp")
    assert transport == "dblp" and len(bounds) == 10
    assert all(b is not None and 0 < b["tolerance"] <= 0.2 for b in bounds)  # the late phase
    with pytest.raises(ValueError, match="system 'x'"):
        plan.bounds("x")
    assert p99([float(i) for i in range(1, 101)]) == 99.0
    assert p99([3.0, 1.0, 2.0]) == 3.0


def test_training_variants_and_late_tolerance() -> None:
    tr = transports({"base": 0.1}, 0.2)
    assert tr["dblp_fixed"]["dblp"] == {"policy": "fixed", "fill": "error_feedback",
                                        "tolerance": 0.2}
    assert tr["gloo"]["collective"] == "ring" and tr["dblp"]["collective"] == "transpose"
    records = [{"type": "job_step", "label": "lm/dblp", "rep": 0, "step": i,
                "tolerance": 0.0 if i < 4 else 0.1 + 0.01 * i} for i in range(9)]
    assert late_tolerance(records, "lm/dblp", 0) == pytest.approx(0.17)  # steps 6-8
    assert late_tolerance(records, "lm/mrc", 0) is None


def _rounds(setting: str, p99s: dict[str, list[float]], **extra: Any) -> list[dict]:
    return [{"setting": setting, "system": s, "rep": i, "ok": True, "rounds": 12,
             "p50_ms": x / 2, "p99_ms": x, "max_ms": x, "delivered_mean": 0.95,
             "delivered_min": 0.9, "retx": 3, **extra}
            for s, xs in p99s.items() for i, x in enumerate(xs)]


def _measured(bursts: dict[str, list[float]]) -> dict[str, Any]:
    flat = {"mrc": [10.0] * 3, "tcp": [10.0] * 3, "mlt": [10.0] * 3, "dblp": [10.0] * 3}
    cross = []
    for d in (2.0, 5.0, 10.0):
        for loss in (0.001, 0.01, 0.03):
            cross += [{**r, "delay_ms": d, "loss": loss}
                      for r in _rounds("cross_dc", {**flat, "tcp": [40.0, 30.0, 50.0]})]
    return {"reps": 3, "rounds": 12, "round_bytes": 256 << 10, "round_chunks": 33,
            "dblp_tolerance_range": [0.12, 0.2], "training": None,
            "burst": {"on_ms": 20.0, "every_ms": 100.0},
            "time_scale": {"describe": "time scale: 100 Mbit/s links stand for 100 Gbit/s"},
            "cross_dc": cross, "host_loss": _rounds("host_loss", flat),
            "bursts": _rounds("one_path", bursts, burst_drops=40)
            + _rounds("all_paths", bursts, burst_drops=80)}


def test_result_when_mrc_already_removes_the_tail(tmp_path: Path) -> None:
    spec = _spec()
    p = spec.effective_params(True)
    m = _measured({"mrc": [60.0, 62.0, 58.0], "tcp": [400.0, 380.0, 420.0],
                   "mlt": [55.0, 50.0, 52.0], "dblp": [58.0, 64.0, 56.0]})
    r = rep.result(spec, ClaimContext(tmp_path, True, 3, lambda s: None), p, m)
    assert r.verdict == "does not hold here"  # MRC's P99 ~ DBLP's: no gain beyond spread
    assert "MRC's own fast recovery already removes most of the retransmission tail" in r.reason
    assert "Training" not in r.reason and r.plots == ("dblp_p99.png", "dblp_cross_dc.png")
    assert all((tmp_path / name).stat().st_size > 1000 for name in r.plots)
    cross = r.tables[1]
    assert len(cross.rows) == 9
    assert cross.rows[0][-1] == "4.00 [3.00-5.00]"  # TCP / DBLP per repetition
    burst_rows = [x for x in r.tables[0].rows if x[0] == "one_path"]
    assert [x[-1] for x in burst_rows] == ["40 [40-40]"] * 4  # drops reported per system


def test_result_holds_in_direction_when_dblp_cuts_the_tail(tmp_path: Path) -> None:
    spec = _spec()
    m = _measured({"mrc": [200.0, 210.0, 190.0], "tcp": [400.0, 380.0, 420.0],
                   "mlt": [90.0, 95.0, 85.0], "dblp": [50.0, 52.0, 48.0]})
    r = rep.result(spec, ClaimContext(tmp_path, True, 3, lambda s: None),
                   spec.effective_params(True), m)
    assert r.verdict == "holds in direction"  # 4x, below the paper's 5.88x
    assert "cuts the tail beyond both reliable baselines' recovery" in r.reason
    assert "Cross-DC, DBLP's P99 over the better reliable baseline's: 1.00x" in r.reason
    f = next(x for x in r.figures if x.name == "P99: best reliable baseline / DBLP, one_path")
    assert (f.median, f.lo, f.hi) == pytest.approx((4.0, 3.958, 4.038), abs=1e-3)


def test_training_is_judged_only_with_three_repetitions() -> None:
    runs = [{"label": f"lm/{s}", "rep": i, "time_to_target_s": t, "final_loss": 2.4,
             "healthy_step_ms": 30.0, "delivered_min": 1.0, "burst_drops": 50}
            for s, t in (("mrc", 13.0), ("gloo", 20.0), ("dblp", 10.0)) for i in range(3)]
    t = {"runs": runs, "aggregate": {f"lm/{s}": {} for s in ("mrc", "gloo", "dblp")},
         "model": "tiny_lm", "target_loss": 2.5, "block_chunks": 15}
    table, figs, verdict, note = rep.training_part(t, 1.32)
    assert verdict is not None and verdict[0] == "holds in direction" and "1.30x" in verdict[1]
    assert table is not None and table.rows[0][1] == "13.00 [13.00-13.00]"
    one = {**t, "runs": [r for r in runs if r["rep"] == 0]}
    _, _, verdict, note = rep.training_part(one, 1.32)
    assert verdict is None and "fewer than 3 repetitions" in note
