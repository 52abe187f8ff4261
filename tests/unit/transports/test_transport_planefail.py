"""MRC through a whole plane going down and coming back, on the fake network.

Two planes (NICs) of four EVs each, every EV a rate-limited FIFO (a quarter of its
plane's NIC), as the failures claim's fabric (2 planes x 4 spines, one NIC per plane).
A plane down kills its four EVs for ``OUTAGE_S``: the transfer should go on at half
rate and lose about the missing plane's share of the outage (``OUTAGE_S / 2``), plus
the time a probe takes to find the plane back (``probe_max`` at most). When the plane's
routes come back only later than its links (as after a plane-wide BGP re-convergence),
the loss grows with that delay, never with a stall: the live plane carries its full
share throughout.
"""

import random

import pytest

from transports.core.mrc import MrcConfig, MrcCore
from transports.core.mrc.evtable import EV_GOOD
from transports.core.wire import DATA
from transports.testing.fakenet import PathSpec, exchange

from corepair import connect_pair

NICS = [0] * 4 + [1] * 4
PLANE_RATE = 12.5e6  # bytes/s per NIC (100 Mbit/s)
SIZE = 12 << 20
FIRE_AT = 0.2
OUTAGE_S = 0.25
CFG = MrcConfig(rto_max=2.0)  # the drivers' default (transports/plan.py)


def _run(seed: int, dead_until: float | None):
    a = MrcCore(7, 8, CFG, seed * 2 + 1, nics=NICS)
    b = MrcCore(7, 8, CFG, seed * 2 + 2, nics=NICS)
    spec = PathSpec(delay=0.5e-3, rate=PLANE_RATE / 4, buffer=25 * 8100)
    net, a, b = connect_pair(a, b, [spec] * 8, seed)
    if dead_until is not None:
        for ev in range(4):
            net.kill("a", "b", ev, at=FIRE_AT, until=dead_until)
    msg = {1: random.Random(seed).randbytes(SIZE)}
    bufs = exchange(net, "a", "b", msg, until=30.0)
    assert bufs[1] == msg[1]
    return net, a, next(c.t for c in net.done["b"] if c.ok)


def _delivered(net, after: float, before: float, evs: range) -> int:
    return sum(r.size for r in net.log if r.src == "a" and r.kind == DATA and r.ev in evs
               and r.fate == "delivered" and after <= r.t_arrive < before)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_plane_down_loses_about_the_missing_planes_share(seed):
    _, _, clean = _run(seed, None)
    net, a, t = _run(seed, FIRE_AT + OUTAGE_S)
    lost = t - clean
    # the plane's share of the outage, plus half a probe interval (at most, at half rate)
    # to find it back and a few RTTs to detect the loss
    assert OUTAGE_S / 2 * 0.8 < lost < OUTAGE_S / 2 + CFG.probe_max / 2 + 0.02
    assert a.stats["ev_retired"] >= 4 and a.stats["ev_readmitted"] >= 4
    assert all(a.ev_state(ev) == EV_GOOD for ev in range(8))
    back = FIRE_AT + OUTAGE_S
    for ev in range(4):  # every EV of the plane carries data again within a probe interval
        assert net.sent("a", ev=ev, kind=DATA, after=back, before=back + CFG.probe_max + 0.01)


@pytest.mark.parametrize("seed", [1, 2])
def test_plane_whose_routes_return_late_costs_the_delay_at_half_rate(seed):
    """The plane's links are back after OUTAGE_S, but it forwards only ``late`` s later:
    the loss grows by about half that delay, and the live plane never stalls."""
    _, _, clean = _run(seed, None)
    late = 0.3
    net, _, t = _run(seed, FIRE_AT + OUTAGE_S + late)
    lost = t - clean
    assert (OUTAGE_S + late) / 2 * 0.8 < lost < (OUTAGE_S + late) / 2 + CFG.probe_max / 2 + 0.02
    # while the plane is out, the other one carries its full NIC rate (no stall)
    got = _delivered(net, FIRE_AT + 0.05, FIRE_AT + OUTAGE_S, range(4, 8))
    assert got > 0.9 * PLANE_RATE * (OUTAGE_S - 0.05)
