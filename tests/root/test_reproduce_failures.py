"""Claim 1 (failures) in a small form, through the same code path as `emu reproduce`:
the claim file's kind on a real BGP fabric, two systems through two failure kinds, three
repetitions, no training (about a minute)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from commands.reproduce.claim import VERDICTS, ClaimContext
from commands.reproduce.claim_failures import KIND
from commands.reproduce.spec import CLAIMS_DIR, parse

pytestmark = pytest.mark.root


def test_failures_claim_small(tmp_path: Path) -> None:
    spec = parse(CLAIMS_DIR / "failures.toml", {KIND.name: KIND})
    small = {**spec.params, "systems": ["mrc", "rc"], "kinds": ["link_cut", "gray"],
             "transfer_mib": 10, "outage_s": 0.2, "training_kinds": []}
    KIND.check(small)
    spec = dataclasses.replace(spec, params=small, quick={})
    ctx = ClaimContext(tmp_path, False, 3, lambda m: None)
    r = KIND.run(spec, ctx)
    assert r.verdict in VERDICTS and r.verdict != "failed"
    runs = r.raw["transfers"]
    assert isinstance(runs, list)
    # per repetition: each system clean, then each kind x each system
    assert len(runs) == 3 * (2 + 2 * 2)
    assert [(x["system"], x["kind"]) for x in runs[:6]] == [
        ("mrc", "clean"), ("rc", "clean"), ("mrc", "link_cut"), ("rc", "link_cut"),
        ("mrc", "gray"), ("rc", "gray")]
    for x in runs:
        assert x["lost_s"] >= 0
        if x["kind"] != "clean":
            # the failure fired inside the transfer, on a leaf-spine link into h15's rack
            assert 0 < x["fired_at_s"] < x["completion_s"]
            assert x["target"].startswith(("p0l3-p0s", "p1l3-p1s"))

    def lost(system: str) -> float:
        return statistics.median(x["lost_s"] for x in runs
                                 if x["system"] == system and x["kind"] == "link_cut")

    # RC over ECMP waits for BGP to withdraw the cut link; MRC routes around it at once
    assert lost("rc") > lost("mrc")
    assert (tmp_path / r.plots[0]).exists()
    json.dumps(r.raw)  # JSON-able, as the summary needs
