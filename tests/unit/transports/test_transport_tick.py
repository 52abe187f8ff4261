"""Cores woken in ticks, as the engine wakes them (transports/io/tick.py), on the fake
network: timers fire late by at most one tick, every wake-up answers the data it carried
with one ACK (or one per ``ack_every``), and RTT samples stay those of the path because
each datagram carries its arrival time."""

import dataclasses

import pytest

from transports.core.mrc import MrcConfig, MrcCore
from transports.core.rc import RcConfig, RcCore
from transports.core.wire import ACK, DATA
from transports.io.tick import Coalescing
from transports.testing.fakenet import FakeNet, PathSpec, exchange

from corepair import messages

TICK = 1e-3
WAKEUP = {"ack_wakeup": True, "ack_every": 16}


def _mrc_pair(tick, specs, cfg=None, seed=1):
    cfg = cfg or MrcConfig(mtu_payload=1000, **WAKEUP)
    net = FakeNet(seed, tick_s=tick)
    a, b = MrcCore(1, len(specs), cfg, 1), MrcCore(1, len(specs), cfg, 2)
    net.connect("a", a, "b", b, specs)
    return net, a, b


def test_the_wake_up_rule():
    rule = Coalescing(2e-3)
    assert rule.wake_at(1.0, 1.0005) == 1.002  # not sooner than a tick after the last
    assert rule.wake_at(1.0, 1.5) == 1.5  # idle: at once
    assert Coalescing(0.0).wake_at(1.0, 1.0) == 1.0
    with pytest.raises(ValueError, match="tick_s=-1"):
        Coalescing(-1)


@pytest.mark.parametrize("tick", [0.5e-3, TICK, 2e-3])
def test_timers_fire_late_by_at_most_one_tick(tick):
    # lossy, reordering paths: RTOs, tail probes, EV probes and reorder timers all fire;
    # one timer in ten or so falls due between two wake-ups, so three seeds together
    late_any = 0
    for seed in (1, 2, 3):
        specs = [PathSpec(delay=300e-6, jitter=200e-6, loss=0.05, reorder=0.1,
                          reorder_delay=1e-3, rate=12.5e6, buffer=64_000)] * 4
        net, a, b = _mrc_pair(tick, specs, seed=seed)
        msgs = messages(3, [1_000_000, 120_000])
        bufs = exchange(net, "a", "b", msgs, until=30.0)
        assert all(bufs[m] == d for m, d in msgs.items())
        late = net.tick.late
        assert len(late) > 10 and max(late) <= tick + 1e-12  # timers fired, none a tick late
        late_any += sum(1 for x in late if x > 0)
        for name in "ab":  # every datagram after the posts at 0 left at a wake-up of its core
            times = sorted({r.t for r in net.log if r.src == name and r.t > 0})
            gaps = [y - x for x, y in zip(times, times[1:], strict=False)]
            assert gaps and min(gaps) >= tick - 1e-12
    assert late_any > 0  # some fell due between wake-ups: the bound was exercised


def test_one_ack_per_wake_up_or_per_ack_every():
    specs = [PathSpec(delay=200e-6, rate=12.5e6)] * 4  # 4 x 100 Mbit/s: ~6 packets a tick
    net, a, b = _mrc_pair(TICK, specs)
    msgs = messages(4, [2_000_000])
    bufs = exchange(net, "a", "b", msgs, until=10.0)
    assert bufs[1] == msgs[1]
    acks = net.sent("b", kind=ACK)
    data = [r for r in net.log if r.dst == "b" and r.kind == DATA and r.fate == "delivered"]
    # one per wake-up that carried data, one more per 16 packets, and those sent at once
    # (a duplicate's, a tail probe's)
    at_once = b.stats["dup_data"] + b.stats["rx_tail_probe"]
    assert len(acks) <= len(net.tick.batches) + len(data) // 16 + at_once
    assert len(acks) < len(data) / 3  # coalesced: ~6 packets per ACK here
    assert b.stats["tx_ack"] == len(acks)


def test_rtt_samples_are_the_paths_whatever_the_tick():
    # 2 ms of round trip on every EV, no queue: the minimum RTT a sender learns must be
    # that, not that plus up to a tick of waiting at either end
    specs = [PathSpec(delay=1e-3)] * 2
    rtts = {}
    for tick in (0.0, 1.5e-3):
        net, a, b = _mrc_pair(tick, specs)
        exchange(net, "a", "b", messages(5, [200_000]), until=10.0)
        rtts[tick] = a.timeouts.srtt.srtt
    assert rtts[0.0] == pytest.approx(2e-3, rel=0.01)
    assert rtts[1.5e-3] == pytest.approx(2e-3, rel=0.05)  # ACK hold time taken out exactly


def test_rc_in_ticks_delivers_exactly_with_losses():
    cfg = RcConfig(mtu_payload=1000, aimd=True, **WAKEUP)
    net = FakeNet(3, tick_s=TICK)
    a, b = RcCore(1, cfg, 1), RcCore(1, cfg, 2)
    net.connect("a", a, "b", b, [PathSpec(delay=300e-6, loss=0.02, rate=12.5e6)])
    msgs = messages(6, [400_000, 50_000])
    bufs = exchange(net, "a", "b", msgs, until=30.0)
    assert all(bufs[m] == d for m, d in msgs.items())
    assert b.stats["tx_nack"] > 0 and max(net.tick.late, default=0.0) <= TICK + 1e-12


def test_per_packet_acks_are_unchanged_without_ack_wakeup():
    # the class default (ack_wakeup False): a gap or an ACK request is answered at once
    cfg = dataclasses.replace(MrcConfig(mtu_payload=1000), ack_every=4)
    net, a, b = _mrc_pair(None, [PathSpec(delay=100e-6)] * 2, cfg)
    exchange(net, "a", "b", messages(7, [100_000]), until=5.0)
    assert b.stats["tx_ack"] >= b.stats["rx_data_pkts"] // 4


# paths that reorder (jitter across EVs) under a tick long against the round trip: the
# pairs where the hold once cost spurious retransmissions and retired EVs (2 ms, 50 us:
# 99 resent, 48 retirements)
@pytest.mark.parametrize("tick,delay,rate", [(1e-3, 500e-6, 12.5e6), (2e-3, 50e-6, 50e6),
                                             (2e-3, 150e-6, 50e6)])
def test_a_lossless_fabric_costs_no_retransmission_however_long_acks_are_held(tick, delay,
                                                                              rate):
    # every packet of a wake-up but the last waits for its ACK up to a tick at the
    # receiver, a hold its RTT samples leave out: the ACKs state it (the peer's ACK
    # delay), and the RTOs and loss bounds allow it, so nothing is declared lost
    specs = [PathSpec(delay=delay, jitter=100e-6, rate=rate)] * 4
    net, a, b = _mrc_pair(tick, specs)
    msgs = messages(7, [3_000_000, 500_000])
    bufs = exchange(net, "a", "b", msgs, until=20.0)
    assert all(bufs[m] == d for m, d in msgs.items())
    assert a.stats["tx_retx"] == 0 and a.stats["ev_retired"] == 0, dict(a.stats)
    assert b.stats["dup_data"] == 0
    assert not [r for r in net.log if r.fate not in ("delivered", "in_flight")]
    held = a.timeouts.peer_hold.peak
    assert 0 < held <= tick + 1e-9  # the receiver's hold, learnt from its ACKs
