"""MRC's silent RTO probes instead of resending: a tail probe in the data class, sent
after the silent packet, whose answer (a full ACK) tells whether that packet got
through. A lost tail is resent after one probe round trip; a delayed one is not resent
at all; a lost ACK is covered by the answer; a dead peer still fails the connection."""

import random

from transports.core import wire
from transports.core.mrc import MrcConfig, MrcCore
from transports.testing.fakenet import FakeNet, PathSpec

from corepair import connect_pair

MS = 1e-3
CFG = MrcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=50e-3)


def pair(seed, evs=4, spec=None):
    a, b = MrcCore(3, evs, CFG, seed), MrcCore(3, evs, CFG, seed + 50)
    return connect_pair(a, b, [spec or PathSpec(delay=0.25 * MS)] * evs, seed)


def lose_first_copy(net, psn, kind=wire.DATA, src="a"):
    """The first datagram of ``kind`` naming ``psn`` that ``src`` sends is lost."""
    state = {"done": False}

    def tamper(rec, data):
        if (not state["done"] and rec.src == src and rec.kind == kind and rec.psn == psn
                and not rec.flags & wire.FLAG_RETX):
            state["done"] = True
            return b""
        return None

    net.tamper = tamper


def send(net, data):
    buf = bytearray(len(data))
    net.post_recv("b", 1, buf)
    net.post_send("a", 1, data)
    net.run(5.0, stop=lambda: net.done["a"] and net.done["b"])
    assert net.done["a"][0].ok and net.done["b"][0].ok and buf == data


def tail_probes(net):
    return [r for r in net.log if r.src == "a" and r.kind == wire.PROBE
            and r.flags & wire.FLAG_TAIL]


def test_lost_tail_is_resent_after_the_probe_answers():
    net, a, b = pair(1)
    lose_first_copy(net, 2)  # the last of 3 packets: nothing after it to reveal it
    send(net, random.Random(1).randbytes(3 * CFG.mtu_payload))
    st = a.stats
    assert st["rto_silent"] == 1 and st["tx_tail_probe"] == 2  # two chances
    assert st["tail_answered"] >= 1 and st["loss_tail_probe"] == 1 and st["tx_retx"] == 1
    assert st["tx_retx_spurious"] == 0 and b.stats["dup_data"] == 0
    probe = tail_probes(net)[0]
    retx = [r for r in net.log if r.src == "a" and r.flags & wire.FLAG_RETX]
    assert len(retx) == 1 and retx[0].psn == 2 and retx[0].t > probe.t_arrive


def test_lost_ack_is_covered_by_the_probes_answer():
    net, a, b = pair(2)
    lose_first_copy(net, 3, kind=wire.ACK, src="b")  # the ACK of all 3 packets
    send(net, random.Random(2).randbytes(3 * CFG.mtu_payload))
    st = a.stats
    assert st["rto_silent"] == 1 and st["tail_answered"] >= 1
    assert st["tx_retx"] == 0 and b.stats["dup_data"] == 0  # nothing was resent


def test_delay_spike_on_every_ev_resends_nothing():
    net, a, b = pair(3)
    port = net.port("a", "b", rate=25e6, buffer=8 << 20)
    net.port_burst("a", "b", 2 * MS, 2 * MS + 50e-6, rate=1_000_000 / 50e-6)  # 40 ms queue
    net.run(1 * MS)
    send(net, random.Random(3).randbytes(2_000_000))
    st = a.stats
    assert port.dropped == 0  # a delay, not a loss
    assert st["rto_silent"] >= 1 and st["tx_tail_probe"] >= 1
    assert st["tx_retx"] == 0 and b.stats["dup_data"] == 0
    assert a.ev_changes() == []


def test_probe_goes_in_the_data_class_on_another_ev():
    net, a, b = pair(4)
    lose_first_copy(net, 0)
    send(net, b"x" * 100)  # one packet: its own tail
    probe = tail_probes(net)[0]
    first = next(r for r in net.log if r.src == "a" and r.kind == wire.DATA)
    assert probe.ev != first.ev and probe.psn == 0
    assert probe.flags & wire.FLAG_ACK_REQ


def test_unanswered_probes_still_fail_a_gone_peer():
    cfg = MrcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=50e-3, give_up_s=0.2)
    a, b = MrcCore(3, 4, cfg, 5), MrcCore(3, 4, cfg, 55)
    net = FakeNet(5)
    net.connect("a", a, "b", b, [PathSpec(delay=0.25 * MS)] * 4)
    for ev in range(4):
        net.kill("a", "b", ev, at=0.0)
    net.post_send("a", 1, bytes(20_000))
    t = net.run(10.0, stop=lambda: bool(net.done["a"]))
    assert not net.done["a"][0].ok and "peer unreachable" in net.done["a"][0].error
    st = a.stats
    assert 0.2 <= t < 2.0 and st["rto_silent"] > CFG.max_retries and st["tail_answered"] == 0
    assert st["tx_tail_probe"] > 0 and st["tx_retx"] == 0
    assert a.next_deadline() is None



def test_a_tail_probe_is_answered_by_its_own_stamp_when_the_engine_wakes_late():
    # An engine handles a datagram after it arrived (rx_t < now): a data ACK's echo is
    # advanced by that hold, but a tail probe's answer must echo the probe's stamp exactly,
    # or the sender never finds its probe and keeps timing out.
    b = MrcCore(3, 4, CFG, 51)
    probe = bytearray(wire.HEADER_LEN)
    ts = 123_456_789
    wire.pack_header(probe, wire.PROBE, wire.FLAG_ACK_REQ | wire.FLAG_TAIL, 3, 0, 0, 0, 0, 2,
                     0, ts)
    out = b.on_packet(bytes(probe), 1.0, 1.0 - 0.7 * MS)
    (ev, ack), = out
    h = wire.parse(ack)
    assert h.kind == wire.ACK and ev == 2 and h.ts_echo == ts
