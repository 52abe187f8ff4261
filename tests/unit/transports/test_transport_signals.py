"""Congestion signals from the switches, met by the cores on the fake network: a trimmed
packet is NACKed and resent at once without blaming its path, CE marks come back as ECN
echoes, NSCC's quadrants, and NIC shares that follow each plane's marks."""

from __future__ import annotations

import random

import pytest

from transports.core import wire
from transports.core.cc import Nscc, NsccConfig
from transports.core.mrc import EV_GOOD, MrcConfig, MrcCore
from transports.core.mrc.pathsel import NicShares, Oblivious
from transports.testing.fakenet import FakeNet, PathSpec, exchange

FAST = MrcConfig(rto_min=200e-6, rto_init=1e-3, probe_min=200e-6, probe_max=5e-3)
FRAME = wire.HEADER_LEN + FAST.mtu_payload


def _pair(spec: PathSpec, evs: int = 4, cfg: MrcConfig = FAST, seed: int = 1,
          nics: list[int] | None = None) -> tuple[FakeNet, MrcCore, MrcCore]:
    a = MrcCore(7, evs, cfg, seed * 2 + 1, nics=nics)
    b = MrcCore(7, evs, cfg, seed * 2 + 2, nics=nics)
    net = FakeNet(seed)
    net.connect("a", a, "b", b, [spec] * evs)
    return net, a, b


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_trimmed_packets_are_resent_at_once_without_blame(seed: int) -> None:
    # a shallow FIFO per EV that trims: every overflow becomes a header and a NACK
    net, a, b = _pair(PathSpec(delay=20e-6, rate=25e6, buffer=3 * FRAME, trim=True),
                      seed=seed)
    data = random.Random(seed).randbytes(400 * FAST.mtu_payload)
    assert exchange(net, "a", "b", {1: data}, until=5.0)[1] == data
    trims = [r for r in net.log if r.flags & wire.FLAG_TRIMMED]
    assert trims and all(r.fate == "delivered" and r.size == wire.HEADER_LEN for r in trims)
    assert b.stats["tx_trim_nack"] == len(trims) == a.stats["rx_trim_nack"]
    # no path blamed for a trim: a retirement here is reordering across EVs of unequal
    # queues, taken back when the packet proved spurious (Eifel), never a trim's
    assert a.stats["ev_retired"] == a.stats["ev_undo"] and a.state == [EV_GOOD] * 4
    assert a.stats["rto_silent"] == 0 and not a.stats["loss_rto"]  # no timeout needed
    assert a.stats["tx_retx"] - a.stats["tx_retx_spurious"] == len(trims)
    assert a.cc.n_trim == len(trims)


def test_without_trimming_the_same_overflows_are_losses() -> None:
    net, a, b = _pair(PathSpec(delay=20e-6, rate=25e6, buffer=3 * FRAME))
    data = random.Random(1).randbytes(400 * FAST.mtu_payload)
    assert exchange(net, "a", "b", {1: data}, until=5.0)[1] == data
    assert any(r.fate == "queue_drop" for r in net.log)
    assert a.stats["rx_trim_nack"] == 0 and b.stats["tx_trim_nack"] == 0


def test_trim_ok_off_leaves_packets_to_be_dropped() -> None:
    cfg = MrcConfig(rto_min=200e-6, rto_init=1e-3, probe_min=200e-6, probe_max=5e-3,
                    trim_ok=False)
    net, a, b = _pair(PathSpec(delay=20e-6, rate=25e6, buffer=3 * FRAME, trim=True), cfg=cfg)
    data = random.Random(1).randbytes(200 * cfg.mtu_payload)
    assert exchange(net, "a", "b", {1: data}, until=5.0)[1] == data
    assert not any(r.flags & wire.FLAG_TRIMMED for r in net.log)
    assert any(r.fate == "queue_drop" for r in net.log)


def test_ce_marks_come_back_as_ecn_echoes_on_their_ev() -> None:
    net, a, b = _pair(PathSpec(delay=20e-6, rate=25e6, buffer=64 * FRAME, mark=2 * FRAME))
    data = random.Random(2).randbytes(300 * FAST.mtu_payload)
    assert exchange(net, "a", "b", {1: data}, until=5.0)[1] == data
    ce = [r for r in net.log if r.src == "a" and r.flags & wire.FLAG_CE]
    ece = [r for r in net.log if r.src == "b" and r.flags & wire.FLAG_ECE]
    assert ce and ece
    assert a.stats["rx_ecn_echo"] == len(ece)
    assert a.cc.marks_seen and a.cc.n_ecn == len(ece)
    # each mark is echoed at once (its own ACK), on the EV it came by
    marked_evs = {r.ev for r in ce}
    assert {r.ev for r in ece} <= marked_evs
    assert len(ece) == len([r for r in ce if r.fate == "delivered"])


def _nscc(**kw: object) -> Nscc:
    """A window of 100 kB on a 100 us path with a 50 us target; the sample alone decides a
    decrease unless ``delay_memory`` is given (each quadrant on one ACK)."""
    kw.setdefault("delay_memory", 0.0)
    cc = Nscc(NsccConfig(base_rtt=100e-6, target_delay=50e-6, **kw), 8048)  # type: ignore[arg-type]
    cc.cwnd = 100_000.0
    return cc


def test_nscc_quadrants_once_the_fabric_marks() -> None:
    cc = _nscc()
    cc.on_ack(8048, 120e-6, 0.0)  # low delay, no mark, no mark seen yet: increase
    assert cc.cwnd > 100_000.0 and not cc.marks_seen
    w = cc.cwnd
    cc.on_ack(8048, 110e-6, 1e-3, ecn=True)  # marked, delay below target: no change
    assert cc.marks_seen and cc.cwnd == w and cc.n_noop == 1
    cc.on_ack(8048, 180e-6, 2e-3)  # not marked, delay above target: fair increase only
    fair = 8048 * 8048 / w
    assert cc.cwnd == pytest.approx(w + fair)
    w = cc.cwnd
    cc.on_ack(8048, 180e-6, 3e-3, ecn=True)  # marked and delayed: multiplicative decrease
    assert cc.cwnd == pytest.approx(w * (1 - 0.8 * 30e-6 / 80e-6))


def test_nscc_without_ecn_stays_delay_only() -> None:
    cc = _nscc(ecn=False)
    cc.on_ack(8048, 110e-6, 0.0, ecn=True)
    assert not cc.marks_seen and cc.cwnd > 100_000.0  # a mark is ignored
    w = cc.cwnd
    cc.on_ack(8048, 180e-6, 1e-3)  # delay above target: decrease, as before
    assert cc.cwnd < w


def test_a_decrease_waits_for_the_filtered_delay_and_is_sized_by_it() -> None:
    cc = _nscc(delay_memory=0.5, ecn=False)
    for i in range(20):  # an empty path: the average stays at 0
        cc.on_ack(8048, 100e-6, i * 1e-4)
    w = cc.cwnd
    cc.on_ack(8048, 180e-6, 3e-3)  # one sample 80 us above base: the average is not
    assert cc.n_md == 0 and cc.cwnd == w and 0 < cc.avg_delay < 50e-6
    t = 3e-3
    while cc.n_md == 0:  # a standing queue of 80 us: the average climbs past the target
        t += 1e-4
        w = cc.cwnd
        cc.on_ack(8048, 180e-6, t)
        assert t < 5e-3  # within about a window's worth of ACKs
    assert 50e-6 < cc.avg_delay < 80e-6 and cc.cwnd == pytest.approx(
        w * (1 - 0.8 * (cc.avg_delay - 50e-6) / cc.avg_delay))


def test_a_trim_quick_adapts_once_per_gate() -> None:
    cc = _nscc()
    cc.on_ack(40_000, 120e-6, 0.0)
    cc.on_trim(1e-4)
    assert cc.n_trim == 1 and cc.n_qa == 1 and cc.cwnd == pytest.approx(40_000)
    cc.on_trim(1.5e-4)  # within qa_gate base RTTs: counted, no second cut
    assert cc.n_trim == 2 and cc.n_qa == 1


def test_nic_shares_follow_each_planes_marks() -> None:
    s = NicShares(2)
    for _ in range(200):
        s.signal(0, True)
        s.signal(1, False)
    assert s.w[1] == 1.0 and s.w[0] == s.floor
    for _ in range(2000):
        s.signal(0, False)
    assert s.w[0] == 1.0
    for _ in range(50):  # every plane marked alike: the shares stay equal
        s.signal(0, True)
        s.signal(1, True)
    assert s.w == [1.0, 1.0]


def test_oblivious_turns_are_weighted_by_the_shares() -> None:
    nics = [0, 0, 1, 1]
    sel = Oblivious(4, random.Random(1), nics, shares=True)
    assert sel.shares is not None
    sel.shares.w = [0.25, 1.0]
    picks = [nics[sel.next_ev(i)] for i in range(1000)]
    assert picks.count(0) == 200  # 0.25 / 1.25 of the packets
    equal = Oblivious(4, random.Random(1), nics)
    assert [nics[equal.next_ev(i)] for i in range(1000)].count(0) == 500


def test_a_marked_plane_sheds_load_to_the_other() -> None:
    # plane 0's paths mark early (a plane whose fabric is the bottleneck), plane 1's do not
    nics = [0, 0, 1, 1]
    a = MrcCore(7, 4, FAST, 3, nics=nics)
    b = MrcCore(7, 4, FAST, 4, nics=nics)
    net = FakeNet(1)
    slow = PathSpec(delay=20e-6, rate=6e6, buffer=64 * FRAME, mark=2 * FRAME)
    fast = PathSpec(delay=20e-6, rate=25e6, buffer=64 * FRAME, mark=2 * FRAME)
    net.connect("a", a, "b", b, [slow, slow, fast, fast])
    data = random.Random(3).randbytes(600 * FAST.mtu_payload)
    assert exchange(net, "a", "b", {1: data}, until=5.0)[1] == data
    sent = [r for r in net.log if r.src == "a" and r.kind == wire.DATA]
    late = sent[len(sent) // 2:]
    share0 = sum(1 for r in late if nics[r.ev] == 0) / len(late)
    assert share0 < 0.4, share0
