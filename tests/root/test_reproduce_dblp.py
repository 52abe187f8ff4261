"""Claim 3 (dblp) in a small form, through the same code path as `emu reproduce`: the
3 x 3 cross-DC sweep, host-link loss and one microburst setting, one repetition of 5
rounds each, no training (about a minute)."""

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
    small = {**spec.params, "rounds": 5, "delays_ms": [1.0, 3.0, 6.0],
             "burst_settings": ["all_paths"], "training_systems": []}
    KIND.check(small)
    spec = dataclasses.replace(spec, params=small, quick={})
    r = KIND.run(spec, ClaimContext(tmp_path, False, 1, lambda m: None))
    assert r.verdict in VERDICTS and r.verdict != "failed"
    cross = r.raw["cross_dc"]
    assert isinstance(cross, list)
    assert {(x["delay_ms"], x["loss"]) for x in cross} == {
        (d, x) for d in (1.0, 3.0, 6.0) for x in (0.001, 0.01, 0.03)}
    assert len(cross) == 9 * 4
    for x in cross:
        assert x["ok"] and x["rounds"] == 5
        # a round's last chunk crosses the long haul: at least its one-way delay
        assert x["p50_ms"] >= x["delay_ms"]
        tol = 0.05 if x["system"] == "mlt" else 0.2 if x["system"] == "dblp" else 0.0
        assert x["delivered_min"] >= 1 - tol - 1e-9
    bursts = r.raw["bursts"]
    assert isinstance(bursts, list) and len(bursts) == 4
    # bursts that bite: every run's burst dropped packets at its target
    assert all(x["burst_drops"] > 0 for x in bursts)
    assert all((tmp_path / p).exists() for p in r.plots)
    json.dumps(r.raw)
