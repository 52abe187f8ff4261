"""The spraying claim's judgement on recorded measurements, and the explorer claim on a
one-scenario corner of its grid (no root: the explorer is a model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from commands.reproduce import claim_spraying as sp
from commands.reproduce.claim import ClaimContext, ClaimSpec
from commands.reproduce.claim_explorer import KIND as EXPLORER
from commands.reproduce.collisions import Clos
from commands.reproduce.kinds import KINDS
from commands.reproduce.spec import CLAIMS_DIR, parse

CLOS = Clos(2, 4, 4, 4)


def _ctx(tmp_path: Path) -> ClaimContext:
    return ClaimContext(out_dir=tmp_path, quick=True, repetitions=3, say=lambda m: None)


def _measured(fractions: dict[tuple[str, str], list[float]]) -> dict[str, Any]:
    rows = [{"rep": rep, "pattern": pat, "system": sys_, "ok": True, "fraction": f,
             "completion_s": round(1 / f, 3), "p50_completion_s": 0.9, "retx": 2,
             "timeouts": 5, "silent_timeouts": 7, "failed": 0}
            for (pat, sys_), fs in fractions.items() for rep, f in enumerate(fs)]
    return {"rows": rows, "clos": CLOS, "ideal_mbit": 157.8, "ideal_s": 0.86,
            "time_scale": "5 Mbit/s links stand for 100 Gbit/s",
            "bytes_per_pair": {"permutation": 1000}, "flows": {"permutation": 16}}


def _params(patterns: list[str]) -> dict[str, Any]:
    spec = parse(CLAIMS_DIR / "spraying.toml", KINDS)
    return {**spec.effective_params(True), "patterns": patterns, "systems": ["mrc", "rc"],
            "samples": 500}


def _spec() -> ClaimSpec:
    return parse(CLAIMS_DIR / "spraying.toml", KINDS)


def test_spraying_holds_when_mrc_beats_rc_by_the_collision_factor(tmp_path: Path) -> None:
    m = _measured({("permutation", "mrc"): [0.97, 0.98, 0.96],
                   ("permutation", "rc"): [0.30, 0.31, 0.25]})
    r = sp._result(_spec(), _ctx(tmp_path), _params(["permutation"]), m)
    assert r.verdict == "holds"
    ratio = next(f for f in r.figures if f.name == "MRC over rc goodput, permutation")
    assert (ratio.median, ratio.n) == (pytest.approx(0.97 / 0.30), 3)
    # paired per repetition: the spread is of the per-repetition ratios
    assert ratio.lo == pytest.approx(0.98 / 0.31) and ratio.hi == pytest.approx(0.96 / 0.25)
    frac = next(f for f in r.figures if f.name == "fraction of ideal, permutation"
                and f.system == "mrc")
    assert (frac.median, frac.lo, frac.hi, frac.clock) == (0.97, 0.96, 0.98, "dimensionless")
    occ = next(f for f in r.figures if f.name.startswith("ECMP balls-into-bins"))
    assert occ.median == pytest.approx(1 - 0.75 ** 4)
    assert {f.clock for f in r.figures if f.name.startswith("last completion")} == {"emulated"}
    assert r.plots == ("fraction_of_ideal.png",) and (tmp_path / r.plots[0]).is_file()
    assert "MRC reached permutation 0.97 of the ideal" in r.reason
    assert r.raw["time_scale"] in r.setting
    assert len(r.tables[0].rows) == 6


def test_spraying_weakest_pattern_decides_and_says_where_time_went(tmp_path: Path) -> None:
    m = _measured({("permutation", "mrc"): [0.97, 0.98, 0.96],
                   ("permutation", "rc"): [0.30, 0.31, 0.25],
                   ("all_to_all", "mrc"): [0.26, 0.25, 0.26],
                   ("all_to_all", "rc"): [0.30, 0.25, 0.32]})
    r = sp._result(_spec(), _ctx(tmp_path), _params(["permutation", "all_to_all"]), m)
    assert r.verdict == "does not hold here"
    assert r.reason.startswith("MRC's goodput over RC over ECMP's on the all_to_all is 0.87x")
    assert "On the all-to-all MRC's median flow ended at 0.90 s but its last at" in r.reason
    assert ("with 2 retransmissions, 5 retransmission timeouts and 7 silent timeouts"
            in r.reason)


def test_spraying_smaller_than_claimed_holds_in_direction(tmp_path: Path) -> None:
    m = _measured({("permutation", "mrc"): [0.60, 0.62, 0.61],
                   ("permutation", "rc"): [0.40, 0.41, 0.39]})
    r = sp._result(_spec(), _ctx(tmp_path), _params(["permutation"]), m)
    assert r.verdict == "holds in direction"  # 1.5x against 1 / 0.35 claimed


def test_explorer_claim_on_one_scenario(tmp_path: Path) -> None:
    spec = parse(CLAIMS_DIR / "explorer.toml", KINDS)
    fixed = {"dci.pair_tbps": 100.0, "model.preset": "llama3-70b", "cluster.dcs": 2,
             "dci.delay_ms": 5.0}
    # the fresh emulator check needs root: tests/root/test_reproduce_explorer.py
    spec = ClaimSpec(**{**spec.__dict__, "quick": {"fixed": fixed, "live_check": False}})
    EXPLORER.check(spec.effective_params(True))
    r = EXPLORER.run(spec, _ctx(tmp_path))
    assert r.verdict in ("holds", "holds in direction", "does not hold here")
    names = {(f.name, f.system) for f in r.figures}
    assert ("speed-up over production recipe (Llama 3 405B's)", "as calibrated") in names
    assert ("speed-up over state of the art (CrossPipe-style)", "as calibrated") in names
    prod = next(f for f in r.figures if f.name.startswith("speed-up over production"))
    assert prod.n == 1 and prod.lo == prod.median == prod.hi and prod.clock == "full-scale"
    assert r.raw["grids"]["as calibrated"]["scenarios"] == 1
    scen = r.raw["grids"]["as calibrated"]["per_scenario"][0]
    # one scenario is its own family's cheapest DCI: its gain cannot grow with the DCI
    assert scen["label"] == "not a scale-across gain"
    assert set(scen["removed_s"]) >= {"compute_s", "dp_s", "failure_s"}
    gain = [f for f in r.figures if "gain, hierarchical" in f.name]
    assert [f.system for f in gain] == ["explorer model", "emulator (recorded)"]
    assert "At emulator scale the model predicted" in r.reason
    assert "not scale-across gains" in r.reason
    assert (tmp_path / "speedups.png").is_file()
    assert r.tables[0].columns[-3:] == ("production PP, recompute", "removes most", "label")
    pp, rec = r.tables[0].rows[0][-3].split()
    assert pp.startswith("PP") and int(pp[2:]) >= 1 and rec in ("none", "selective", "full")
    # the DCI table has the fixed delay and capacity as its one cell
    assert r.tables[1].columns == ("delay ms", "100 Tbit/s")
    assert [row[0] for row in r.tables[1].rows] == [5.0]
    assert r.tables[1].rows[0][1] == pytest.approx(prod.median, abs=1e-3)
    checks = r.tables[2]
    assert checks.columns[:3] == ("check", "kind", "predicted") and len(checks.rows) >= 3


def test_explorer_fresh_check_sentence_and_figures() -> None:
    from commands.reproduce.claim_explorer import _live_part

    figs, text = _live_part({"delay_ms": 20.0, "predicted_gain": 1.12, "n": 3,
                             "measured_gain": (1.2, 1.1, 1.3)})
    assert [(f.system, f.median, f.lo, f.hi, f.n) for f in figs] == [
        ("explorer model", 1.12, 1.12, 1.12, 1), ("emulator", 1.2, 1.1, 1.3, 3)]
    assert "was 1.20x [1.10-1.30] faster than the flat one against 1.12x predicted (-6.7 %)" \
        in text
    figs, text = _live_part({"skipped": "not root"})
    assert figs == [] and "skipped (not root)" in text
