"""The spraying claim through `emu reproduce`'s runner on a real fabric (root), in a
smaller form than --quick (the permutation only, MRC against RC, 512 KiB per host): the
same code path, well under a minute."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from commands.reproduce.kinds import KINDS
from commands.reproduce.run import run_claims
from commands.reproduce.spec import CLAIMS_DIR, parse

pytestmark = pytest.mark.root

INFO = {"kernel": "test", "cores": 2, "netem": "not probed", "commit": "test"}


def test_spraying_claim_small(tmp_path: Path) -> None:
    spec = parse(CLAIMS_DIR / "spraying.toml", KINDS)
    spec = replace(spec, quick={**spec.quick, "patterns": ["permutation"],
                                "systems": ["mrc", "rc"], "bytes_per_host": 512 << 10,
                                "samples": 500})
    KINDS["spraying"].check(spec.effective_params(True))
    [o] = run_claims([spec], KINDS, tmp_path, quick=True, command="test", say=lambda m: None,
                     info=INFO)
    r = o.result
    assert r.verdict != "failed", r.error
    rows = r.raw["rows"]
    # interleaved on one fabric: mrc, rc, mrc, rc, mrc, rc
    assert [(x["rep"], x["system"]) for x in rows] == [(i, s) for i in range(3)
                                                      for s in ("mrc", "rc")]
    assert all(x["ok"] and x["failed"] == 0 for x in rows)
    # each system on its production switches, set per run on the one fabric; RC's
    # lossless ports never drop
    assert {x["system"]: x["switches"] for x in rows} == {"mrc": "ecn+trim",
                                                          "rc": "lossless+ecn"}
    assert all(x["port_dropped"] == x["fifo_dropped"] == 0 for x in rows if x["system"] == "rc")
    frac = {f.system: f for f in r.figures if f.name == "fraction of ideal, permutation"}
    assert frac["mrc"].n == frac["rc"].n == 3
    assert 0 < frac["rc"].hi < frac["mrc"].lo <= 1.05  # spraying beyond the spread
    assert r.verdict in ("holds", "holds in direction")
    assert (tmp_path / "spraying" / "fraction_of_ideal.png").is_file()
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["verdicts"] == {"spraying": r.verdict}
    assert "**Verdict: " in (tmp_path / "report.md").read_text()
