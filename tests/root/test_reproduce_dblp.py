"""Claim 3 (dblp) in a small form, through the same code path as `emu reproduce`: a 2 x 2
x 2 map in virtual time, one cross-DC point, host-link loss and all_paths bursts shorter
and longer than a round, one repetition of 20 rounds each, no training (a few minutes)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from commands.reproduce.claim import VERDICTS, ClaimContext
from commands.reproduce.claim_dblp import KIND
from commands.reproduce.spec import CLAIMS_DIR, parse

pytestmark = pytest.mark.root


def test_dblp_claim_small(tmp_path: Path) -> None:
    spec = parse(CLAIMS_DIR / "dblp.toml", {KIND.name: KIND})
    small = {**spec.params, "rounds": 20, "delays_ms": [3.0], "losses": [0.01],
             "burst_placements": ["all_paths"], "burst_ratios": [0.5, 2.0],
             "map_losses": [0.0, 0.01], "map_rtts_ms": [0.3, 4.0], "map_ratios": [0.0, 2.0],
             "map_rounds": 20, "map_seeds": 2, "training_systems": []}
    KIND.check(small)
    spec = dataclasses.replace(spec, params=small, quick={})
    r = KIND.run(spec, ClaimContext(tmp_path, False, 1, lambda m: None))
    assert r.verdict in VERDICTS and r.verdict != "failed"
    raw = r.raw
    mlt = small["mlt_tolerance"]
    # the paper's baseline is DBLP's core at one fixed tolerance: every round it runs
    # delivers at least 1 - that tolerance, DBLP at least 1 - its late-phase cap
    lo, hi = raw["dblp_tolerance_range"]
    assert 0 < lo <= hi < 0.5 and mlt <= lo
    cross = raw["cross_dc"]
    assert {(x["delay_ms"], x["loss"], x["system"]) for x in cross} == {
        (3.0, 0.01, s) for s in ("mlt", "tcp", "mrc", "dblp")}
    for x in cross + raw["host_loss"] + raw["bursts"]:
        assert x["ok"] and x["rounds"] == 20
        tol = mlt if x["system"] == "mlt" else hi if x["system"] == "dblp" else 0.0
        assert x["delivered_min"] >= 1 - tol - 1e-9
    for x in cross:  # a round's last chunk crosses the long haul: at least its delay
        assert x["p50_ms"] >= x["delay_ms"]
    bursts = raw["bursts"]
    assert {(x["ratio"], x["system"]) for x in bursts} == {
        (q, s) for q in (0.5, 2.0) for s in ("mlt", "tcp", "mrc", "dblp")}
    assert all(x["burst_drops"] > 0 for x in bursts)  # bursts that bite
    cells = raw["map"]["cells"]
    assert len(cells) == 8 and all(c["seeds"] == 2 for c in cells)
    assert all(c["burst_drops"] > 0 for c in cells if c["ratio"] > 0)
    assert all(c["burst_drops"] == 0 for c in cells if c["ratio"] == 0)
    assert all(c["dblp_delivered"] >= 1 - hi - 1e-9 for c in cells)
    assert all((tmp_path / p).exists() for p in r.plots)
    json.dumps(raw)
