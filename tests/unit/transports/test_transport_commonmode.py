"""MRC (and DBLP, RC) under common-mode delay, on the fake network.

A receiver's port (``FakeNet.port``) that every EV crosses fills with another
sender's burst: every path of the connection stalls behind the same FIFO for ~27
base RTTs. MRC must keep every EV in service, not flush, keep its window, and
resend only a few packets (each counted as spurious: nothing is lost). A path that
really dies is still retired. Spurious retransmissions are counted exactly in hand-
computed cases (a duplicate's ACK names the copy that arrived twice), and a loss
blamed on a path that was only late is undone by that path's own ACK.
"""

import random

import pytest

from transports.core import wire
from transports.core.dblp import DblpCore
from transports.core.mrc import MrcConfig, MrcCore
from transports.core.mrc.evtable import EV_ASSUMED_BAD, EV_GOOD
from transports.core.rc import RcConfig, RcCore
from transports.testing.fakenet import FakeNet, PathSpec

MS = 1e-3
MTU = 8000 + wire.HEADER_LEN
STALL_AT = 50 * MS  # a 1 MB block enters the 25 MB/s port: 40 ms of queue ahead of all EVs


def stalled_transfer(cls, cfg, seed, kill=None, evs=8, size=6_000_000):
    a, b = cls(1, evs, cfg, seed), cls(1, evs, cfg, seed + 100)
    net = FakeNet(seed)
    net.connect("a", a, "b", b, [PathSpec(delay=0.25 * MS, rate=12.5e6)] * evs)
    port = net.port("a", "b", rate=25e6, buffer=8 << 20)
    net.port_burst("a", "b", STALL_AT, STALL_AT + 50e-6, rate=1_000_000 / 50e-6)
    if kill is not None:
        net.kill("a", "b", kill, 30 * MS)
    cwnd = []

    def sample():
        cwnd.append((net.now, a.cc.cwnd))
        if net.now < 0.2:
            net.at(net.now + 0.1 * MS, sample)

    net.at(0.0, sample)
    data = random.Random(seed).randbytes(size)
    buf = bytearray(size)
    net.run(1 * MS)
    net.post_recv("b", 1, buf)
    net.post_send("a", 1, data)
    net.run(10.0, stop=lambda: net.done["a"] and net.done["b"])
    assert net.done["a"][0].ok and net.done["b"][0].ok and buf == data
    assert port.dropped == 0 and port.other_dropped == 0  # a delay, not a loss
    return net, a, b, cwnd


CONFIGS = {"default": MrcConfig(rto_max=2.0),
           "fixed_1ms_floor": MrcConfig(rto_min=1 * MS, rto_min_rtts=0, rto_max=2.0)}


@pytest.mark.parametrize("cls", [MrcCore, DblpCore])
@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("seed", [1, 2])
def test_common_mode_stall_keeps_every_ev_and_the_window(cls, cfg, seed):
    net, a, b, cwnd = stalled_transfer(cls, CONFIGS[cfg], seed)
    st = a.stats
    assert st["rto_silent"] >= 1  # the stall outlasted the RTO: the rule was exercised
    assert a.ev_changes() == [] and st["ev_retired"] == 0  # every EV stayed in service
    assert st["loss_rto"] == st["loss_ev_flush"] == st["loss_unblamed"] == 0
    assert st["tx_retx"] <= 2 * st["rto_silent"] <= 10  # a few probes, not a storm
    # nothing was lost, so every retransmission was spurious, and each one is counted
    assert st["tx_retx_spurious"] == b.stats["dup_data"] == st["tx_retx"]
    assert a.cc.n_rto == 0  # no timeout cut the window ...
    assert min(c for t, c in cwnd if STALL_AT <= t < 150 * MS) >= 4 * MTU  # ... nor collapsed


def test_dead_path_is_retired_and_only_it():
    net, a, b, cwnd = stalled_transfer(MrcCore, CONFIGS["default"], 1, kill=3)
    changes = a.ev_changes()
    assert [(ev, new) for _, ev, _, new in changes] == [(3, EV_ASSUMED_BAD)]
    assert 30 * MS < changes[0][0] < 40 * MS  # within a few RTTs, before the stall
    assert a.ev_state(3) == EV_ASSUMED_BAD
    assert all(a.ev_state(ev) == EV_GOOD for ev in range(8) if ev != 3)
    assert net.sent("a", ev=3, kind=wire.DATA, after=changes[0][0]) == []


def one_packet(cls, cfg, lose_first):
    """One 100-byte message over one 5 ms path, an RTO of 1 ms (no RTT sample yet): the
    first copy arrives at 6 ms (or is lost), its ACK at 11 ms; RTOs fire at 2, 4 and 8 ms
    (doubling). Returns the net, both ends and when DATA was sent (ms)."""
    a, b = (cls(3, 1, cfg, 1), cls(3, 1, cfg, 2)) if cls is MrcCore else (cls(3, cfg, 1),
                                                                          cls(3, cfg, 2))
    net = FakeNet(1)
    net.connect("a", a, "b", b, [PathSpec(delay=5 * MS)])
    if lose_first:
        net.kill("a", "b", 0, 1 * MS, 1.5 * MS)
    buf = bytearray(100)
    net.run(1 * MS)
    net.post_recv("b", 1, buf)
    net.post_send("a", 1, bytes(range(100)))
    net.run(30 * MS)
    assert buf == bytes(range(100))
    return net, a, b, [round(r.t / MS, 6) for r in net.sent("a", kind=wire.DATA)]


def test_rc_spurious_retransmissions_counted_exactly():
    cfg = RcConfig(rto_init=1 * MS, rto_min=0.2 * MS)
    net, a, b, sent = one_packet(RcCore, cfg, lose_first=False)
    # the first copy was only late: all three resends were duplicates at the receiver
    assert sent == [1, 2, 4, 8] and a.stats["tx_retx"] == 3
    assert a.stats["tx_retx_spurious"] == b.stats["dup_data"] == 3
    assert net.done["a"][0].t == pytest.approx(11 * MS)
    # the first copy lost: the first resend was needed, the next two were not
    net, a, b, sent = one_packet(RcCore, cfg, lose_first=True)
    assert sent == [1, 2, 4, 8] and a.stats["tx_retx"] == 3
    assert a.stats["tx_retx_spurious"] == b.stats["dup_data"] == 2
    assert net.done["a"][0].t == pytest.approx(12 * MS)


def test_mrc_silent_rtos_probe_instead_of_resending():
    cfg = MrcConfig(rto_init=1 * MS, rto_min=0.2 * MS)
    net, a, b, sent = one_packet(MrcCore, cfg, lose_first=False)
    # only late: the tail probes at 2 and 4 ms arrive after it (FIFO); nothing resent
    assert sent == [1] and a.stats["rto_silent"] >= 2 and a.stats["tx_tail_probe"] >= 2
    assert a.stats["tx_retx"] == a.stats["tx_retx_spurious"] == b.stats["dup_data"] == 0
    assert net.done["a"][0].t == pytest.approx(11 * MS) and a.stats["ev_retired"] == 0
    # lost: the answer to the 2 ms probe (at 12 ms) shows it missing: resent once, acked
    # at 22 ms, one round trip later than a resend at the RTO would have been
    net, a, b, sent = one_packet(MrcCore, cfg, lose_first=True)
    assert sent == [1, 12] and a.stats["loss_tail_probe"] == 1
    assert a.stats["tx_retx"] == 1 and a.stats["tx_retx_spurious"] == b.stats["dup_data"] == 0
    assert net.done["a"][0].t == pytest.approx(22 * MS)


def test_a_late_path_blamed_for_a_loss_is_readmitted_by_its_own_ack():
    """EV 1's delay jumps from 0.1 to 3 ms: packets sent on EV 0, 2, 3 after EV 1's get
    through first, so rule B blames EV 1 and retires it. The late packets then arrive
    (duplicates: they were resent elsewhere) and their ACKs come back on EV 1, before
    any probe of EV 1 is answered: EV 1 is GOOD again at once."""
    cfg = MrcConfig(rto_min=0.2 * MS, rto_init=1 * MS, probe_min=0.2 * MS, probe_max=5 * MS)
    a, b = MrcCore(7, 4, cfg, 1), MrcCore(7, 4, cfg, 2)
    net = FakeNet(1)
    net.connect("a", a, "b", b, [PathSpec(delay=0.1 * MS, rate=125e6)] * 4)
    net.at(2 * MS, lambda: net.set_path("a", "b", 1, delay=3 * MS))
    net.run(0.5 * MS)
    net.post_recv("b", 1, bytearray(4_000_000))
    net.post_send("a", 1, bytes(4_000_000))
    net.run(1.0, stop=lambda: net.done["a"] and net.done["b"])
    assert net.done["a"][0].ok and net.done["b"][0].ok
    changes = [(t, new) for t, ev, _, new in a.ev_changes() if ev == 1]
    assert changes[0][1] == EV_ASSUMED_BAD and changes[1][1] == EV_GOOD
    answered = [r.t_arrive for r in net.sent("b", ev=1, kind=wire.PROBE_ACK)
                if r.fate == "delivered"]
    assert not answered or changes[1][0] < min(answered)  # not a probe: the undo
    assert a.stats["ev_undo"] >= 1
    acks_on_1 = [r.t_arrive for r in net.sent("b", ev=1, kind=wire.ACK)
                 if r.fate == "delivered"]
    assert changes[1][0] in acks_on_1  # re-admitted the instant an ACK came back on it
    assert a.stats["tx_retx_spurious"] == b.stats["dup_data"] > 0
    # each spurious one is told by the rule that resent it: here rule B's, on ACKs
    # (loss_cross_ev) or on its reorder timer (loss_reorder), and the flush of the EV
    # that rule retired (loss_ev_flush), as many as each declared
    by_rule = {k: v for k, v in a.stats.items() if k.startswith("spurious_")}
    assert sum(by_rule.values()) == a.stats["tx_retx_spurious"]
    assert by_rule == {f"spurious_{k}": a.stats[k]
                       for k in ("loss_cross_ev", "loss_reorder", "loss_ev_flush") if a.stats[k]}
