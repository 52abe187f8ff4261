"""DBLP's tail-loss timer and receiver linger on the fake network: a path goes silent.

Two EVs of eight die while a bounded round is out, and their RTT estimates are
long (as after samples taken under a full FIFO), so MRC's per-path rules and RTO
find those chunks lost only after ~0.5 s. DBLP's tail timer (nothing acked for
two healthy RTTs after the oldest bounded chunk out) declares them lost; only as
many are resent as the bound needs, on the live paths, and the round closes about
one RTT after the last needed resend. The receiver does not wait an RTO for a lost
last chunk either: it lingers only as long as the arrival rate says the sender's
first pass lasts.
"""

import random

import pytest

from transports.core import wire
from transports.core.dblp import DblpCore, LossBound
from transports.core.mrc import INF, MrcConfig
from transports.testing.fakenet import FakeNet, PathSpec

CFG = MrcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=2.0, probe_min=200e-6, probe_max=5e-3)
EVS = 8
DEAD = (0, 1)
SLOW = 0.5  # the dead EVs' RTT estimate
NCHUNKS = 40


def NoTail(*args):
    core = DblpCore(*args)
    core.bsend._tail_deadline = lambda: INF
    return core


def silent_paths_round(cls, bound, seed, kill_at=0.0):
    a, b = cls(7, EVS, CFG, seed), cls(7, EVS, CFG, seed + 100)
    net = FakeNet(seed)
    net.connect("a", a, "b", b, [PathSpec(delay=10e-6, jitter=1e-6)] * EVS)
    for ev in range(EVS):  # every path measured; the dead ones were slow
        a.loss.timeouts.rtt[ev].sample(SLOW if ev in DEAD else 25e-6)
    a.loss.timeouts.srtt.sample(25e-6)
    for ev in DEAD:
        net.kill("a", "b", ev, kill_at)
    data = random.Random(seed).randbytes(NCHUNKS * CFG.mtu_payload)
    buf = bytearray(len(data))
    net.send("b", b.post_recv(1, buf, 0.0, bound))
    net.send("a", a.post_send(1, data, 0.0, bound))
    net.run(5.0, stop=lambda: net.done["a"] and net.done["b"])
    return net, a, b, data, buf


def data_recs(net, retx):
    return [r for r in net.log if r.src == "a" and r.kind == wire.DATA
            and bool(r.flags & wire.FLAG_RETX) == retx]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_silent_paths_resend_only_what_the_bound_needs_promptly(seed):
    bound = LossBound(0.1)
    needed = bound.needed(NCHUNKS)
    net, a, b, data, buf = silent_paths_round(DblpCore, bound, seed)
    (cs,), (cr,) = net.done["a"], net.done["b"]
    assert cs.ok and cr.ok and not cr.deadline
    assert cr.delivered >= 1 - bound.tolerance
    first_ok = sum(r.fate == "delivered" for r in data_recs(net, retx=False))
    assert first_ok < needed  # the bound does need resends
    resent = data_recs(net, retx=True)
    assert a.stats["tx_retx"] == len(resent) <= needed - first_ok  # no more than needed
    assert all(r.ev not in DEAD for r in resent)  # on live paths
    assert a.stats["loss_dblp_tail"] > 0
    # closed ~one RTT after the last needed resend, not an RTO (SLOW) later
    assert cr.t - max(r.t for r in resent) < 0.5e-3
    assert cr.t < 5e-3 < SLOW


@pytest.mark.parametrize("seed", [1, 2])
def test_without_the_tail_timer_the_round_waits_for_the_slow_paths(seed):
    net, a, _, _, _ = silent_paths_round(NoTail, LossBound(0.1), seed)
    (cr,) = net.done["b"]
    assert cr.t > 0.8 * SLOW


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tolerance_zero_stays_exactly_reliable(seed):
    net, a, b, data, buf = silent_paths_round(DblpCore, LossBound(0.0), seed)
    (cs,), (cr,) = net.done["a"], net.done["b"]
    assert cs.ok and cr.ok and buf == data and cr.missing == ()
    assert a.stats["loss_dblp_tail"] == 0 and not a.bsend.bq  # MRC's rules only


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_within_tolerance_nothing_is_resent(seed):
    """A quarter of the chunks lost, a tolerance of 0.3: no resend at all."""
    bound = LossBound(0.3)
    net, a, b, data, buf = silent_paths_round(DblpCore, bound, seed)
    (cr,) = net.done["b"]
    assert cr.ok and cr.delivered >= 0.7 and a.stats["tx_retx"] == 0


def test_receiver_does_not_wait_an_rto_for_a_lost_last_chunk():
    """The last chunk is dropped: the receiver closes about when the first pass ends
    (by the arrival rate), not an RTO (rto_init here: 1 ms) after it had enough."""
    a, b = DblpCore(7, EVS, CFG, 1), DblpCore(7, EVS, CFG, 2)
    net = FakeNet(1)
    net.connect("a", a, "b", b, [PathSpec(delay=10e-6, rate=125e6)] * EVS)
    net.tamper = lambda rec, d: (bytes(d[:-1]) + bytes([d[-1] ^ 1])
                                 if rec.kind == wire.DATA and rec.flags & wire.FLAG_LAST
                                 else None)  # a bad CRC: the last chunk counts as lost
    bound = LossBound(0.1)
    data = random.Random(1).randbytes(NCHUNKS * CFG.mtu_payload)
    buf = bytearray(len(data))
    net.send("b", b.post_recv(1, buf, 0.0, bound))
    net.send("a", a.post_send(1, data, 0.0, bound))
    net.run(1.0, stop=lambda: net.done["a"] and net.done["b"])
    (cr,) = net.done["b"]
    first = [r for r in net.log if r.kind == wire.DATA and r.fate == "delivered"]
    assert cr.ok and NCHUNKS - 1 - len(cr.missing) >= 0 and (NCHUNKS - 1) in cr.missing
    last_arrival = max(r.t_arrive for r in first if r.t_arrive <= cr.t)
    assert cr.t - last_arrival < 0.3 * CFG.rto_init
    assert b.stats["crc_bad"] >= 1
