"""MRC's reorder timer (rule B between ACKs), on the fake network.

A packet that only a short tail followed, the first of a two-packet message say, is
lost when the tail is acknowledged and the packet has been out longer than its path
allows: one later transmission is fewer than ``dupthresh``, so without the timer it
waited for the probe timeout, its tail probe's round trip, then the resend (or its
RTO, which also strikes and cuts the window). With it the
resend goes when rule B's timing (with a reorder window of the RTT the tail took and
the ACK delay) says so. Reordering between paths of different lengths, and a queue
every path crosses, condemn nothing.

Rule B's loss bound is about an RTO of the packet's EV without the floor, capped at
three smoothed RTTs: a queue that came and went leaves a variance of its whole depth,
and ``srtt + 4 rttvar`` outlasts the queue itself. An EV without RTT samples of its own
takes the overall estimator's bound, uncapped (it mixes other packet sizes' RTTs).
"""

from dataclasses import replace

import pytest

from transports.core import wire
from transports.core.mrc import MrcConfig, MrcCore
from transports.testing.fakenet import FakeNet, PathSpec, exchange

MS = 1e-3
CFG = MrcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=2.0)
EVS = 4
TWO_PACKETS = CFG.mtu_payload + 1000


def setup(seed, reorder_timer=True, delays=(0.25 * MS,) * EVS, jitter=0.0, **knobs):
    cfg = replace(CFG, reorder_timer=reorder_timer, **knobs)
    a, b = MrcCore(3, EVS, cfg, seed), MrcCore(3, EVS, cfg, seed + 50)
    net = FakeNet(seed)
    net.connect("a", a, "b", b, [PathSpec(delay=d, jitter=jitter) for d in delays])
    return net, a, b


def send(net, msg, data):
    (buf,) = exchange(net, "a", "b", {msg: data}, net.now + 5.0).values()
    assert all(c.ok for c in net.done["a"] + net.done["b"]) and buf == data


def warm_up(net, n=20):
    """Messages enough for RTT samples on every EV."""
    for m in range(1, n + 1):
        send(net, m, bytes([m]) * 3 * CFG.mtu_payload)
        net.run(net.now + 1 * MS)
    return n


def data_records(net, psn):
    return [r for r in net.log if r.src == "a" and r.kind == wire.DATA and r.psn == psn]


def lose_head_of_next_message(net, a):
    """The first copy of the next message's first packet is lost on its way."""
    psn = a.snd.snd_nxt
    dropped = []

    def tamper(rec, data):
        if rec.src == "a" and rec.kind == wire.DATA and rec.psn == psn and not dropped:
            dropped.append(net.now)
            return b""
        return None

    net.tamper = tamper
    return psn, dropped


def recovery(seed, reorder_timer):
    net, a, b = setup(seed, reorder_timer)
    m = warm_up(net) + 1
    before = dict(a.stats)
    psn, dropped = lose_head_of_next_message(net, a)
    t0 = net.now
    send(net, m, bytes(range(256)) * (TWO_PACKETS // 256) + bytes(TWO_PACKETS % 256))
    assert dropped, "the scenario lost nothing"
    copies = data_records(net, psn)
    assert len(copies) == 2  # the lost first copy and one resend
    delta = {k: a.stats[k] - before.get(k, 0) for k in a.stats}
    return net, a, delta, copies[1].t - t0


def test_a_lost_head_followed_by_a_short_tail_is_resent_by_the_reorder_timer():
    for seed in (1, 2, 3):
        net, a, d, resent = recovery(seed, reorder_timer=True)
        assert d.get("loss_reorder") == 1 and d.get("tx_retx") == 1
        assert not d.get("loss_tail_probe") and not d.get("loss_rto")
        assert not d.get("tx_retx_spurious")
        # rule B's timing: the tail's RTT plus its reorder window and the ACK delay, or
        # the lost packet's own path bound, whichever is longer: a few base RTTs
        srtt = a.loss.timeouts.srtt.srtt
        bound = max(a.loss.evidence.loss_bound(ev) for ev in range(EVS))
        assert resent <= 1.25 * bound + 2 * srtt
        _, _, d_off, resent_off = recovery(seed, reorder_timer=False)
        # without it: a tail probe's answer or the RTO (whichever timer came first)
        assert not d_off.get("loss_reorder")
        assert d_off.get("loss_tail_probe", 0) + d_off.get("loss_rto", 0) == 1
        assert resent < resent_off


def test_paths_of_different_lengths_reorder_without_a_loss():
    # EV 0 is 8x longer than the others: a message's first packet sent on it arrives
    # after the tail sent on a short one, every time; nothing is lost
    # (the first RTO, before EV 0's RTT is known, takes it for lost either way)
    runs = {}
    for timer in (True, False):
        net, a, b = setup(4, timer, delays=(2 * MS, 0.25 * MS, 0.25 * MS, 0.25 * MS))
        warm_up(net, 60)
        runs[timer] = a.stats, b.stats
    (on, on_b), (off, off_b) = runs[True], runs[False]
    assert on["loss_reorder"] == 0
    assert on["tx_retx"] == off["tx_retx"] <= 1 and on_b["dup_data"] == off_b["dup_data"]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_queue_every_path_crosses_condemns_nothing(seed):
    # two-packet messages through a receiver port that bursts fill for ~60 ms: the tails'
    # RTTs jump, and the paths' jitter lets a tail overtake its head by a little while
    # the queue grows (a reorder window of the old, short RTT would condemn the head);
    # nothing is lost, so the reorder timer must not resend
    net, a, b = setup(seed, jitter=0.1 * MS)
    port = net.port("a", "b", rate=12.5e6, buffer=8 << 20)
    m = warm_up(net, 5)
    t = net.now
    while t < net.now + 2.0:
        net.port_burst("a", "b", t + 2 * MS, t + 22 * MS, rate=50e6)
        t += 150 * MS
    for k in range(1, 300):
        send(net, m + k, bytes(TWO_PACKETS))
        net.run(net.now + 2 * MS)
    assert port.dropped == port.other_dropped == 0 and port.other_bytes > 0
    st = a.stats
    assert st["loss_reorder"] == st["tx_retx"] == st["tx_retx_spurious"] == 0


def test_a_loss_after_a_queue_came_and_went_is_resent_within_three_srtts():
    net, a, b = setup(1, pto=False)  # rule B alone: a tail probe would find it first here
    net.port("a", "b", rate=25e6, buffer=8 << 20)
    net.port_burst("a", "b", 1 * MS, 1 * MS + 50e-6, rate=1_000_000 / 50e-6)  # 40 ms queue
    net.run(0.5 * MS)
    send(net, 1, bytes(40 * CFG.mtu_payload))
    net.run(net.now + 60 * MS)  # drained
    loss = a.loss
    est = [loss.timeouts.rtt[ev] for ev in range(EVS)]
    uncapped = max(e.bound() for e in est)
    capped = max(3 * e.srtt for e in est)
    assert uncapped > capped + 10 * MS  # the variance outlasts three smoothed RTTs
    hold = loss.timeouts.peer_hold.value  # the receiver's ACK delay, beyond the samples
    assert all(loss.evidence.loss_bound(ev) <= 3 * est[ev].srtt + hold + 1e-12
               for ev in range(EVS))
    lost, _ = lose_head_of_next_message(net, a)  # the later ones of the message get through
    t0 = net.now
    before = dict(a.stats)
    send(net, 2, bytes([2]) * 8 * CFG.mtu_payload)
    (r,) = [x for x in data_records(net, lost) if x.flags & wire.FLAG_RETX]
    assert r.t - t0 <= capped + 1 * MS < uncapped  # by the capped bound, not the variance
    new = {k: a.stats[k] - before.get(k, 0) for k in a.stats}
    assert new.get("loss_cross_ev", 0) + new.get("loss_reorder", 0) == 1  # rule B found it
    assert new["tx_retx"] == 1 and b.stats["dup_data"] == 0  # nothing else was resent


def test_an_ev_without_samples_is_judged_by_the_overall_estimate_uncapped():
    net, a, b = setup(2)
    send(net, 1, bytes(CFG.mtu_payload))  # one packet: one EV's sample
    timeouts = a.loss.timeouts
    fresh = [ev for ev in range(EVS) if not timeouts.rtt[ev].srtt]
    assert fresh
    timeouts.srtt.srtt, timeouts.srtt.rttvar = 1 * MS, 2 * MS  # other sizes: 9 ms > 3 srtt
    for ev in fresh:
        assert a.loss.evidence.loss_bound(ev) == timeouts.srtt.bound()
