"""DBLP through a real microburst (root): rounds close at the bound, reliable ones retransmit."""

from __future__ import annotations

import pytest

from emu.fabric import Fabric
from emu.microburst import Microburst, MicroburstSpec
from topologies import LinkSpec, MultiPlaneClos
from transports.testing.harness import Transfer, run_transfers

pytestmark = pytest.mark.root

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=3,
                      host_link=LinkSpec(100.0, 16), fabric_link=LinkSpec(100.0, 16))
ROUNDS, SIZE, TOL = 12, 1 << 20, 0.1


def rounds(bound: dict | None) -> list[Transfer]:
    return [Transfer("h0", "h3", SIZE, after=i - 1 if i else None, bound=bound)
            for i in range(ROUNDS)]


def run_through_bursts(fab: Fabric, transport: str, bound: dict | None):
    bursts = [Microburst(fab, MicroburstSpec(f"p{p}l1:h3", ("h4", "h5"), 20.0, 100.0))
              for p in range(SPEC.planes)]
    for b in bursts:
        b.start()
    try:
        res = run_transfers(fab, transport, rounds(bound), deadline_s=60)
    finally:
        for b in bursts:
            b.stop()
    drops = sum(b.report()["target"]["drops"] or 0 for b in bursts)
    stats = res.drivers["h0"]["stats"].values()
    retx = sum(st.get("tx_retx", 0) for st in stats)
    parked = sum(st.get("retx_parked", 0) for st in stats)
    return res, drops, retx, parked


@pytest.fixture(scope="module")
def fab():
    with Fabric(SPEC, name="dblptest") as f:
        yield f


def test_dblp_rounds_close_at_the_bound_while_reliable_ones_retransmit(fab):
    bound = {"tolerance": TOL, "deadline_s": None}
    dblp, dblp_drops, _, dblp_parked = run_through_bursts(fab, "dblp", bound)
    mrc, mrc_drops, mrc_retx, mrc_parked = run_through_bursts(fab, "mrc", None)
    assert dblp_drops > 0 and mrc_drops > 0  # the bursts really overflowed the FIFOs
    # Every DBLP round respected its bound and every placed byte is exact.
    assert dblp.ok, dblp.messages
    assert all(m["delivered"] >= 1 - TOL for m in dblp.messages)
    # Rounds that lost chunks closed without them: no retransmission beyond the bound.
    assert any(m["missing"] > 0 for m in dblp.messages)
    # DBLP declined to resend losses its bound did not need; reliable MRC never does.
    # (How many each retransmits is not compared: the two runs meet different bursts.)
    assert dblp_parked > 0 and mrc_parked == 0
    # The reliable baseline delivered everything, by retransmitting what the bursts dropped.
    assert mrc.ok and all(m["delivered"] == 1.0 for m in mrc.messages)
    assert mrc_retx > 0
