"""RTO estimation (RFC 6298) with a floor in RTTs, the spurious-retransmission ledger, and
the window undo: hand values, and the floor scaling with the path on the fake network."""

import math

import pytest

from transports.core.cc import Nscc, NsccConfig
from transports.core.mrc import MrcConfig, MrcCore
from transports.core.rc import RcConfig, RcCore
from transports.core.rto import (
    HOST_DELAY_MAX_S,
    HostDelay,
    MinRtt,
    PeerHold,
    RttEstimator,
    rto_floor,
)
from transports.core.spurious import RetxLedger
from transports.testing.fakenet import FakeNet, PathSpec, exchange

MS = 1e-3


def test_estimator_follows_samples_by_hand():
    e = RttEstimator()
    assert e.rto(1 * MS, 1.0, 7 * MS) == 7 * MS  # no sample yet: the initial RTO
    assert e.rto(9 * MS, 1.0, 7 * MS) == 9 * MS  # ... not under the floor
    e.sample(10 * MS)  # srtt = r, rttvar = r / 2
    assert (e.srtt, e.rttvar) == (10 * MS, 5 * MS)
    assert e.rto(1 * MS, 1.0, 7 * MS) == pytest.approx(30 * MS)
    e.sample(20 * MS)  # rttvar += (|10 - 20| - 5) / 4; srtt += (20 - 10) / 8
    assert (e.srtt, e.rttvar) == (pytest.approx(11.25 * MS), pytest.approx(6.25 * MS))
    assert e.rto(1 * MS, 1.0, 7 * MS) == pytest.approx(36.25 * MS)
    e.sample(10 * MS)  # rttvar += (1.25 - 6.25) / 4; srtt += (10 - 11.25) / 8
    assert (e.srtt, e.rttvar) == (pytest.approx(11.09375 * MS), pytest.approx(5.0 * MS))
    assert e.bound() == pytest.approx(31.09375 * MS)
    assert e.rto(40 * MS, 1.0, 7 * MS) == 40 * MS  # the floor
    assert e.rto(1 * MS, 20 * MS, 7 * MS) == 20 * MS  # the cap


def test_floor_in_minimum_rtts_with_an_absolute_bound():
    assert rto_floor(250e-6, 4, 1 * MS) == pytest.approx(4 * MS)  # the path's part
    assert rto_floor(250e-6, 4, 10e-6) == 250e-6  # the timer-granularity part
    assert rto_floor(250e-6, 4, None) == 250e-6  # no RTT known yet
    assert rto_floor(1 * MS, 0, 50 * MS) == 1 * MS  # rto_min_rtts 0: the fixed floor
    m = MinRtt(window=1.0)
    for t, r in ((0.0, 3 * MS), (0.1, 2.5 * MS), (0.2, 5 * MS)):
        m.sample(r, t)
    assert m.value == 2.5 * MS


@pytest.mark.parametrize(("cls", "bad", "word"), [
    (MrcConfig, {"rto_min_rtts": -1}, "rto_min_rtts"), (RcConfig, {"rto_min_rtts": True},
                                                        "rto_min_rtts"),
    (MrcConfig, {"rto_min": 0.0}, "rto_min"), (RcConfig, {"rto_min": 2.0, "rto_max": 1.0},
                                               "rto_max"),
    (RcConfig, {"rto_init": 0}, "rto_init")])
def test_bad_rto_keys_are_named(cls, bad, word):
    with pytest.raises(ValueError, match=word):
        cls(**bad)


def _mrc_after_exchange(delay, evs=4):
    cfg = MrcConfig()  # the defaults: rto_min 250 us, rto_min_rtts 4
    a, b = MrcCore(1, evs, cfg, 1), MrcCore(1, evs, cfg, 2)
    net = FakeNet(1)
    net.connect("a", a, "b", b, [PathSpec(delay=delay)] * evs)
    net.run(1 * MS)  # (a clock that does not read 0)
    exchange(net, "a", "b", {1: bytes(200_000)}, until=10.0)
    return a


@pytest.mark.parametrize("delay", [0.5 * MS, 5 * MS])
def test_mrc_floor_scales_with_the_path(delay):
    """A fabric 10x slower has a floor 10x longer: the same number of minimum RTTs."""
    a = _mrc_after_exchange(delay)
    # no queue: every RTT sample is the propagation (packets sent at one instant are stamped
    # 1 ns apart, so a sample may read a few ns short)
    rtt = 2 * delay
    assert a.cc.base_rtt == pytest.approx(rtt, rel=1e-4)
    assert a.rto_floor() == pytest.approx(4 * rtt, rel=1e-4)
    timeouts = a.loss.timeouts
    assert timeouts.srtt.srtt == pytest.approx(rtt, rel=1e-4)
    # the RTO of an EV: srtt + 4 rttvar of that EV and of all EVs, never under the floor
    expect = max(a.rto_floor(), timeouts.srtt.bound(), timeouts.rtt[0].bound())
    assert timeouts.rto(0) == pytest.approx(expect)
    assert timeouts.rto(0) == pytest.approx(4 * rtt, rel=1e-4)  # equal samples: the floor rules


@pytest.mark.parametrize("delay", [0.5 * MS, 5 * MS])
def test_rc_floor_scales_with_the_path(delay):
    a, b = RcCore(1, RcConfig(), 1), RcCore(1, RcConfig(), 2)
    net = FakeNet(1)
    net.connect("a", a, "b", b, [PathSpec(delay=delay)])
    net.run(1 * MS)
    exchange(net, "a", "b", {1: bytes(200_000)}, until=10.0)
    assert a.min_rtt.value == pytest.approx(2 * delay)
    assert a.rto_floor() == pytest.approx(8 * delay)


def test_ledger_names_copies_and_tells_duplicates_by_the_receivers_clock():
    led = RetxLedger(horizon=1.0)
    led.record(100, 0, 5, 0.0)  # psn 5 first sent at ts 100 on EV 0 ...
    led.record(100, 0, 6, 0.0)  # ... with psn 6 (same instant, same EV)
    led.record(200, 1, 5, 0.1, "loss_cross_ev")  # psn 5 resent at ts 200 on EV 1 (rule B)
    assert led.why(5) == "loss_cross_ev" and led.why(6) == ""
    assert led.get(100, 0) == [5, 6] and led.get(200, 1) == [5] and led.get(100, 1) == []
    assert not led.duplicate(5, 10_000)  # never acknowledged yet
    led.acked(5, 1000)  # first acknowledged by an ACK the receiver sent at 1000 ns
    led.acked(5, 3000)  # (later ACKs do not move it)
    assert not led.duplicate(5, 1000)  # that same ACK, overtaken: not a duplicate's
    assert led.duplicate(5, 1001)
    led.resolve(100, 0, 5)
    assert led.get(100, 0) == [6]
    led.resolve(200, 1, 5)  # psn 5 named nowhere any more: its ACK time is forgotten
    assert not led.duplicate(5, 5000) and led.why(5) == ""
    led.record(300, 2, 9, 1.2)  # past the horizon: the entries of t = 0.0 expire
    assert led.get(100, 0) == [] and led.get(300, 2) == [9]
    small = RetxLedger(horizon=10.0, limit=2)
    for i in range(3):
        small.record(i, 0, i, 0.0)
    assert small.get(0, 0) == [] and small.get(2, 0) == [2]


def test_ledger_rejects_bad_arguments():
    with pytest.raises(ValueError, match="horizon"):
        RetxLedger(horizon=0.0)


def test_window_cut_on_timeout_is_undone_unless_cut_again():
    mtu = 8048
    cc = Nscc(NsccConfig(), mtu)
    assert cc.cwnd == 16 * mtu
    before = cc.on_timeout(1.0)  # nothing acknowledged lately: down to the floor
    assert before == 16 * mtu and cc.cwnd == cc.min_cwnd == 2 * mtu and cc.n_rto == 1
    assert cc.undo(before, 1.0) and cc.cwnd == 16 * mtu and cc.n_undo == 1
    before = cc.on_timeout(2.0)
    cc.quick_adapt(2.5)  # another cut since
    assert not cc.undo(before, 2.0) and cc.cwnd == 2 * mtu


def test_host_delay_is_a_decaying_peak_published_on_change():
    hd = HostDelay(decay_s=1.0, step=0.25)
    assert hd.value(0.0) == 0.0
    assert hd.sample(2 * MS, 10.0)  # a new peak: published
    assert hd.published == 2 * MS
    assert not hd.sample(0.1 * MS, 10.1)  # below the decayed peak, within 25 %: not
    assert hd.value(11.0) == pytest.approx(2 * MS * math.exp(-1.0))
    assert hd.sample(0.0, 12.0)  # decayed by e^-2: moved > 25 %, published again
    assert hd.published == pytest.approx(2 * MS * math.exp(-2.0))
    assert hd.sample(-1.0, 12.0) is False and hd.value(12.0) > 0  # early: counts as 0
    hd.sample(10.0, 13.0)  # a stopped process is not scheduling noise: capped
    assert hd.peak == HOST_DELAY_MAX_S
    assert hd.samples == 5
    with pytest.raises(ValueError, match="decay_s=0"):
        HostDelay(decay_s=0)


def test_host_delay_adds_to_either_floor():
    assert rto_floor(1 * MS, 4.0, 2 * MS, 3 * MS) == pytest.approx(11 * MS)
    assert rto_floor(1 * MS, 4.0, None, 3 * MS) == pytest.approx(4 * MS)  # no RTT yet
    a = _mrc_after_exchange(0.5 * MS)
    before = a.rto_floor()
    a.set_host_delay(2 * MS)
    assert a.rto_floor() == pytest.approx(before + 2 * MS)
    rc = RcCore(1, RcConfig(), 1)
    rc.set_host_delay(2 * MS)
    assert rc.rto_floor() == pytest.approx(RcConfig().rto_min + 2 * MS)


def test_mrc_with_host_delay_does_not_time_out_on_a_late_receiver():
    """The receiver stops for 8 ms every 50 ms (as a process waiting for a CPU) while a
    message goes every 5 ms: RTT samples between the stalls keep the RTO at its floor
    (4 x 1 ms), so the sender times out on each stall, unless the floor holds the host's
    delay."""
    def run(host_delay):
        cfg = MrcConfig(rto_min=200e-6, rto_init=1e-3)
        a, b = MrcCore(1, 2, cfg, 1), MrcCore(1, 2, cfg, 2)
        a.set_host_delay(host_delay)
        net = FakeNet(3)
        net.connect("a", a, "b", b, [PathSpec(delay=0.5 * MS)] * 2)
        net.stall("b", every=50 * MS, length=8 * MS, start=21 * MS)
        bufs = {m: bytearray(40_000) for m in range(1, 101)}

        def post(m):
            net.post_recv("b", m, bufs[m])
            net.post_send("a", m, bytes([m]) * 40_000)

        for m in bufs:
            net.at(m * 5 * MS, lambda m=m: post(m))
        net.run(10.0, stop=lambda: len(net.done["a"]) >= 100 and len(net.done["b"]) >= 100)
        assert all(c.ok for c in net.done["b"]) and len(net.done["b"]) == 100
        assert all(bufs[m] == bytes([m]) * 40_000 for m in bufs)
        return a.stats["rto_silent"], a.stats["tx_tail_probe"], a.stats["tx_retx"]

    silent, probes, retx = run(0.0)
    assert silent >= 5 and probes >= 5  # about one silent RTO per stall (probes only ...
    assert retx == 0  # ... MRC resends nothing on a silent RTO)
    assert run(8 * MS) == (0, 0, 0)


def test_peer_hold_rises_at_once_and_decays_with_time():
    hold = PeerHold(decay_s=1.0)
    hold.sample(2e-3, 0.0)
    assert hold.value == 2e-3
    hold.sample(0.5e-3, 1.0)  # a smaller hold a time constant later: the peak, decayed
    assert hold.value == pytest.approx(2e-3 / math.e)
    hold.sample(5e-3, 1.5)
    assert hold.value == 5e-3
    hold.sample(10.0, 2.0)  # a stopped peer is not a hold to plan for
    assert hold.value == HOST_DELAY_MAX_S
    with pytest.raises(ValueError, match="decay_s=0"):
        PeerHold(decay_s=0)
