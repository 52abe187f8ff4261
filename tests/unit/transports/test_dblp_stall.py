"""DBLP park-stall liveness on the fake network.

A bounded sender parks a lost chunk when the chunks acked, in flight and not yet
sent still reach the bound (transports/core/dblp/send.py ``BoundedSender.may_retransmit``
/ ``_need``). If the
chunks counted "in flight" are then lost too on paths whose RTO is long (RTT
samples taken under a full FIFO push a path's RTO towards ``rto_max``), nothing
brings the parked chunks back until those RTOs fire: the round stalls. The
liveness check (``park_check`` in ``BoundedSender.on_timer``) resends the parked
chunks after one connection-wide RTO without ack progress.
"""

import random
from dataclasses import replace

import pytest

from transports.core.dblp import DblpCore, LossBound
from transports.core.mrc import INF, MrcConfig
from transports.testing.fakenet import FakeNet, PathSpec

CFG = MrcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=2.0, probe_min=200e-6, probe_max=5e-3)
EVS = 8
SLOW_RTO = 1.5  # the in-flight chunks' paths: an RTO grown to 1.5 s
OUTAGE = 200e-6  # how long EVs 4-7 drop everything once chunks are parked
BOUND = LossBound(0.25)  # 40 chunks: 30 needed


def NoTail(*args):
    """A DblpCore without the tail timer (tests/unit/transports/test_dblp_tail.py) and
    without the loss detector's probe timeout (its tail probes before an RTO) and reorder
    timer (rule B between ACKs), any of which would also end the stall (first, once RTT
    samples say how long a healthy path takes)."""
    conn, evs, cfg, *rest = args
    core = DblpCore(conn, evs, replace(cfg, reorder_timer=False), *rest)
    core.bsend._tail_deadline = lambda: INF
    core.loss.pto_deadline = lambda: INF
    return core


def NoLiveness(*args):
    """... and without the park-stall check (what the fix added, switched off)."""
    core = NoTail(*args)
    bsend = core.bsend
    may = bsend.may_retransmit

    def no_park_check(p):
        ok = may(p)
        st = bsend.tx.get(p.om.msg)
        if st is not None:
            st.park_check = INF
        return ok

    bsend.may_retransmit = no_park_check
    return core


def stalled_round(cls, seed=1):
    a, b = cls(7, EVS, CFG, seed), cls(7, EVS, CFG, seed + 100)
    net = FakeNet(seed)
    net.connect("a", a, "b", b, [PathSpec(delay=10e-6)] * EVS)
    # EVs 0-3 are dead from the start: their chunks (half the round) are lost and,
    # detected by the chunks acked on 4-7, mostly parked (the unsent ones count).
    for ev in range(4):
        net.kill("a", "b", ev, 0.0)
    # Once chunks are parked, EVs 4-7 drop everything for OUTAGE (a burst), with a
    # long RTO: the chunks counted in flight there are lost and their loss is not
    # seen for SLOW_RTO.
    trap = {}

    def slow_rto(ev, _orig=a.loss.timeouts.rto):
        return SLOW_RTO if ev >= 4 and "t" in trap else _orig(ev)

    a.loss.timeouts.rto = slow_rto

    def arm():
        if a.stats["retx_parked"] and "t" not in trap:
            trap["t"] = net.now
            for ev in range(4, EVS):
                net.kill("a", "b", ev, net.now, net.now + OUTAGE)
        elif "t" not in trap:
            net.at(net.now + 20e-6, arm)

    data = random.Random(seed).randbytes(40 * CFG.mtu_payload)
    buf = bytearray(len(data))
    net.send("b", b.post_recv(1, buf, 0.0, BOUND))
    net.send("a", a.post_send(1, data, 0.0, BOUND))
    net.at(20e-6, arm)
    net.run(3.0, stop=lambda: net.done["a"] and net.done["b"])
    return net, a, trap


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parked_chunks_come_back_when_in_flight_ones_are_lost(seed):
    net, a, trap = stalled_round(NoTail, seed)
    assert "t" in trap, "the scenario did not park a chunk"
    (cs,), (cr,) = net.done["a"], net.done["b"]
    assert cs.ok and cr.ok and not cr.deadline
    assert cr.delivered >= 1 - BOUND.tolerance
    assert a.stats["retx_unparked_stall"] > 0  # the liveness check fired
    # closed within a few connection RTOs of the burst, far below the slow paths' RTO
    assert cr.t - trap["t"] < 0.05 < SLOW_RTO


@pytest.mark.parametrize("seed", [1, 2])
def test_without_liveness_the_round_waits_for_the_slow_rto(seed):
    net, a, trap = stalled_round(NoLiveness, seed)
    assert "t" in trap
    assert a.stats["retx_unparked_stall"] == 0
    # nothing resent the parked chunks before the in-flight chunks' RTO fired
    assert not net.done["b"] or net.done["b"][0].t >= trap["t"] + SLOW_RTO * 0.9


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_stall_ends_as_fast_with_every_mechanism_on(seed):
    net, a, trap = stalled_round(DblpCore, seed)
    assert "t" in trap
    (cs,), (cr,) = net.done["a"], net.done["b"]
    assert cs.ok and cr.ok and cr.delivered >= 1 - BOUND.tolerance
    assert cr.t - trap["t"] < 0.05 < SLOW_RTO
