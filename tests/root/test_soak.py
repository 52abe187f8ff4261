"""The soak (root): continuous MRC and DBLP streams under a flapping and a gray link.

Nothing is lost (every message byte-exact at the receiver, every DBLP round within its
bound, nothing failed, nothing left open but the next posted receives) and every
driver's resident memory is flat after warm-up: the line fitted to its samples
changes it by at most ``FLAT_PCT`` % over the window.

``make test`` runs it for ``DEFAULT_S`` seconds (about 2.5 minutes with the fabric and
the drain); ``make soak`` runs it alone for longer (``SAE_SOAK_S``, seconds).
"""

from __future__ import annotations

import os

import pytest

from emu.fabric import Fabric
from transports.testing.soak import SOAK_SPEC, run_soak

pytestmark = pytest.mark.root

DEFAULT_S = 60.0  # in `make test`; `make soak` runs it longer
FLAT_PCT = 3.0


def soak_seconds() -> float:
    raw = os.environ.get("SAE_SOAK_S")
    if raw is None:
        return DEFAULT_S
    try:
        s = float(raw)
    except ValueError:
        raise pytest.UsageError(f"SAE_SOAK_S={raw!r} must be a number of seconds") from None
    if s < 20:
        raise pytest.UsageError(f"SAE_SOAK_S={raw!r}: a soak needs at least 20 s")
    return s


def test_soak_loses_nothing_and_memory_stays_flat():
    seconds = soak_seconds()
    with Fabric(SOAK_SPEC, name="soaktest") as fab:
        res = run_soak(fab, seconds, flat_pct=FLAT_PCT)
    rows = {r["transport"]: r for r in res["streams"]}
    for r in rows.values():
        assert r["lost"] == 0, r
        assert r["messages"] > seconds, r  # more than one message a second, all intact
    # the faults were real: MRC retired paths and resent, DBLP lost chunks within bounds
    mrc, dblp = rows["mrc"], rows["dblp"]
    assert res["counters"][mrc["src"]]["ev_retired"] > 0, res["counters"]
    assert res["counters"][mrc["src"]]["tx_retx"] > 0, res["counters"]
    assert dblp["missing_chunks"] > 0 and dblp["delivered_min"] >= 0.95, dblp
    window = seconds - res["warmup_s"]
    for host, m in res["memory"].items():
        assert m["samples"] >= 0.8 * window / m["rss_every_s"], (host, m)  # all along
        assert abs(m["change_pct"]) <= FLAT_PCT, (host, m)
    assert res["ok"]
