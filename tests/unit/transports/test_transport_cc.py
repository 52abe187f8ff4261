"""NSCC (transports/core/cc.py): one window over EVs, each with a windowed, guarded base RTT."""

import pytest

from transports.core import cc as ccmod
from transports.core.cc import Nscc, NsccConfig

MTU = 8064
RTT = 10e-3  # a 5 ms one-way long-haul path, as between two DCs


def feed(cc, t0, t1, rtt, ev=0, per_rtt=8, acked=MTU):
    """ACKs at a steady pace from t0 to t1, each with sample ``rtt`` (a path without queue)."""
    t = t0
    step = RTT / per_rtt
    while t < t1:
        cc.on_ack(acked, rtt, t, *([ev] if ev else []))
        t += step
    return t


def test_one_batch_of_too_small_samples_does_not_pin_the_window():
    # a host that stamped its clock, then was descheduled while reading a batch of ACKs:
    # every sample of the batch carries the same stale `now` and reads too short
    cc = Nscc(NsccConfig(), MTU)
    t = feed(cc, 0.0, 0.3, RTT)
    grown = cc.cwnd
    assert grown > 16 * MTU
    for r in (8e-3, 6e-3, 4e-3, 2e-3):
        cc.on_ack(MTU, r, t)
    t = feed(cc, t + 1e-4, t + 0.3, RTT)
    assert cc.base_rtt >= 0.75 * RTT  # lowered by at most base_rtt_drop
    assert cc.n_md == cc.n_qa == 0  # a path without queue never reads as congested
    assert cc.cwnd > grown


def test_single_low_sample_is_not_taken_as_base():
    cc = Nscc(NsccConfig(), MTU)
    t = feed(cc, 0.0, 0.1, RTT)
    cc.on_ack(MTU, 1e-3, t)  # one outlier at its own instant (e.g. an overstated ACK hold)
    t = feed(cc, t + 1e-3, t + 0.2, RTT)
    assert cc.base_rtt == pytest.approx(RTT)
    assert cc.n_md == cc.n_qa == 0


def test_too_small_base_ages_out_and_the_window_grows_again():
    cfg = NsccConfig(base_rtt_window=0.5)
    cc = Nscc(cfg, MTU)
    t = feed(cc, 0.0, 0.1, RTT)
    # confirmed (two instants) but wrong: the stall lasted a while
    cc.on_ack(MTU, 2e-3, t)
    cc.on_ack(MTU, 2e-3, t + 1e-3)
    assert cc.base_rtt == pytest.approx(2e-3)
    t = feed(cc, t + 2e-3, t + 0.3, RTT)
    low = cc.cwnd
    assert low < 16 * MTU  # meanwhile every real RTT reads as queueing
    t = feed(cc, t, t + 1.0, RTT)  # past the window: the real base is back
    assert cc.base_rtt == pytest.approx(RTT)
    t = feed(cc, t, t + 0.3, RTT)
    assert cc.cwnd > 4 * low


def test_each_ev_against_its_own_base():
    # EV 0 rerouted over a 20 ms fibre (40 ms RTT), EVs 1-3 at 10 ms: no queue anywhere
    cc = Nscc(NsccConfig(), MTU)
    t, step = 0.0, RTT / 8
    while t < 0.5:
        for ev in range(4):
            cc.on_ack(MTU, 4 * RTT if ev == 0 else RTT, t, ev)
            t += step / 4
    assert cc.n_md == cc.n_qa == 0
    assert cc.base(0) == pytest.approx(4 * RTT) and cc.base(1) == pytest.approx(RTT)
    assert cc.rtt_ref(0) > 4 * RTT > cc.rtt_ref(1)
    assert cc.cwnd > 64 * MTU


def test_queueing_on_one_ev_still_cuts_the_window():
    cc = Nscc(NsccConfig(), MTU)
    t = feed(cc, 0.0, 0.1, RTT, ev=1)
    before = cc.cwnd
    feed(cc, t, t + 0.1, 2.5 * RTT, ev=1)  # 15 ms of queue on a 10 ms path
    assert cc.n_md > 0 and cc.cwnd < before


def test_longer_path_is_learnt_within_the_window():
    b = ccmod.BaseRtt(window=1.0)
    t = 0.0
    while t < 0.5:
        b.sample(RTT, t)
        t += 1e-3
    while t < 2.0:
        b.sample(4 * RTT, t)
        t += 1e-3
    assert b.value == pytest.approx(4 * RTT)
    b2 = ccmod.BaseRtt(window=1.0)
    b2.sample(RTT, 0.0)
    b2.sample(4 * RTT, 0.9)
    assert b2.value == pytest.approx(RTT)  # still inside the window


def test_shorter_path_is_learnt_from_two_instants():
    b = ccmod.BaseRtt(window=1.0)
    for i in range(10):
        b.sample(4 * RTT, i * 1e-3)
    b.sample(RTT, 0.02)
    assert b.value == pytest.approx(4 * RTT)  # one sample far below: not yet
    b.sample(RTT, 0.03)
    assert b.value == pytest.approx(RTT)
    b.sample(0.9 * RTT, 0.04)  # within base_rtt_drop: taken at once
    assert b.value == pytest.approx(0.9 * RTT)


def test_forget_relearns_the_base():
    cc = Nscc(NsccConfig(), MTU)
    feed(cc, 0.0, 0.05, RTT, ev=2)
    cc.forget(2)
    cc.forget(5)  # never seen: nothing to do
    cc.on_ack(MTU, 4 * RTT, 0.06, 2)
    assert cc.base(2) == pytest.approx(4 * RTT)


def test_configured_base_rtt_is_used_for_every_ev():
    cc = Nscc(NsccConfig(base_rtt=RTT), MTU)
    cc.on_ack(MTU, 1e-3, 0.0, 3)
    assert cc.base(3) == cc.base(0) == cc.base_rtt == RTT
    assert cc.bases == {}


@pytest.mark.parametrize("kw", [{"base_rtt_window": 0}, {"base_rtt_drop": 1.0},
                                {"base_rtt_drop": -0.1}])
def test_config_checks(kw):
    with pytest.raises(ValueError):
        NsccConfig(**kw)


@pytest.mark.parametrize("floor", [None, MTU])
def test_quick_adapt_leaves_a_sender_limited_by_its_application_two_packets(floor):
    # one message of two packets per RTT, then a queue of 20 RTTs: the first ACK after
    # it is all the last RTT delivered, one packet, yet the next message's two packets
    # still leave together
    cc = Nscc(NsccConfig(min_cwnd=floor), MTU)
    t = feed(cc, 0.0, 0.1, RTT, per_rtt=1, acked=2 * MTU)
    cc.on_ack(MTU, 20 * RTT, t + 20 * RTT)
    assert cc.n_qa == 1
    assert cc.cwnd == (floor or 2 * MTU)  # the configured floor, else two packets


def test_report_states_the_window_and_what_moved_it():
    # a run's record says why a flow went at its rate: how far the window grew, and how
    # often queueing delay cut it
    cc = Nscc(NsccConfig(), MTU)
    assert cc.report()["cwnd"] == cc.report()["cwnd_peak"] == 16 * MTU
    t = feed(cc, 0.0, 0.2, RTT)
    grown = cc.cwnd
    assert cc.report()["decreases"] == 0 and cc.report()["base_rtt"] == pytest.approx(RTT)
    t = feed(cc, t, t + 0.1, 3 * RTT)  # two base RTTs of queueing: above the target
    r = cc.report()
    assert r["decreases"] == cc.n_md > 0
    assert r["cwnd"] < round(grown) <= r["cwnd_peak"]
