"""The parts of MRC's loss detection, each built and driven alone at a fake clock:
Timeouts (RTOs, floor, strikes), Blame (for undo), Evidence (rules A and B), Probes."""

import random
from collections import Counter

import pytest

from transports.core import wire
from transports.core.mrc.blame import MAX_BLAME, Blame
from transports.core.mrc.config import MrcConfig
from transports.core.mrc.evidence import Evidence
from transports.core.mrc.flight import Flight
from transports.core.mrc.probes import Probes
from transports.core.mrc.timeouts import BACKOFF_JITTER, Timeouts
from transports.testing.clock import FakeClock

from mrcparts import packets, spray_over, transmit

MS = 1e-3
CFG = MrcConfig(rto_init=10 * MS, rto_min=1 * MS, rto_min_rtts=4.0, rto_max=0.1,
                max_retries=2, give_up_s=1.0)


# ---- Timeouts --------------------------------------------------------------------------------


def test_an_rto_comes_from_the_samples_within_the_floor():
    t = Timeouts(CFG, 2, random.Random(1))
    assert t.rto(0) == CFG.rto_init  # no sample yet
    t.sample(0, 2 * MS)  # srtt 2 ms, rttvar 1 ms
    assert t.rto(0) == pytest.approx(6 * MS)
    assert t.rto(1) == pytest.approx(6 * MS)  # an EV without samples: the overall RTO
    t.sample_ev(1, 8 * MS)  # a probe's answer: EV 1 alone
    assert t.rto(1) == pytest.approx(24 * MS) and t.srtt.srtt == 2 * MS
    t.new_floor(5 * MS)  # NSCC's base RTT: 4 of them
    assert t.floor == pytest.approx(20 * MS) and t.rto(0) == pytest.approx(20 * MS)
    t.set_host_delay(3 * MS, 5 * MS)  # this host's scheduling delay on top
    assert t.floor == pytest.approx(23 * MS)


def test_strikes_double_jitter_and_spend_the_retry_budget():
    clock = FakeClock()
    t = Timeouts(CFG, 1, random.Random(7))
    t.sample(0, 2 * MS)
    assert t.jittered(0) == t.backed_off(0) == pytest.approx(6 * MS)  # no strike: no jitter
    t.strike(clock.now)
    assert t.backed_off(0) == pytest.approx(12 * MS)
    assert 12 * MS <= t.jittered(0) <= 12 * MS * (1 + BACKOFF_JITTER)
    assert t.in_round(clock.now) and not t.in_round(clock.now + 1.0)
    t.strike(clock.advance(0.5))
    t.strike(clock.advance(0.4))
    assert t.strikes == 3 > CFG.max_retries and not t.exhausted(clock.now)  # 0.9 s < give_up_s
    assert t.exhausted(clock.advance(0.2))
    for _ in range(10):
        t.strike(clock.now)
    assert t.backed_off(0) == CFG.rto_max and t.backed_off(0, strikes=0) == pytest.approx(6 * MS)
    t.reset()
    assert t.strikes == 0 and not t.exhausted(clock.now)


# ---- Blame -----------------------------------------------------------------------------------


def test_a_blame_is_undone_only_through_the_ev_it_was_blamed_on():
    b = Blame(keep_s=0.5)
    b.record(10, 2, 1.0)
    b.cut(10, 5000.0)
    assert b.take(10, via=3) is None and len(b) == 1
    assert b.take(10, via=2) == (2, 1.0, 5000.0) and len(b) == 0
    assert b.take(10, via=2) is None


def test_blames_are_forgotten_after_keep_s_and_beyond_max_blame():
    b = Blame(keep_s=0.5)
    b.record(1, 0, 1.0)
    b.record(2, 0, 1.4)
    b.record(3, 0, 1.6)  # psn 1 was declared 0.6 s ago: no copy of it can come back now
    assert [e[1] for e in b.entries()] == [1.4, 1.6]
    b.record(2, 1, 1.7)  # declared again: last in order
    assert [e[:2] for e in b.entries()] == [(0, 1.6), (1, 1.7)]
    big = Blame(keep_s=1.0)
    for psn in range(MAX_BLAME + 10):
        big.record(psn, 0, 0.0)
    assert len(big) == MAX_BLAME and big.take(9, 0) is None and big.take(10, 0) is not None
    big.clear()
    assert not big.entries()


# ---- Evidence (rules A and B) ----------------------------------------------------------------


def evidence(evs: int, nics=None, cfg: MrcConfig = CFG):
    flight = Flight()
    timeouts = Timeouts(cfg, evs, random.Random(1))
    return Evidence(cfg, evs, nics, timeouts, flight), flight, timeouts


def test_rule_a_a_later_packet_on_the_same_ev_condemns_an_earlier_one():
    clock = FakeClock(1.0)
    ev, flight, _ = evidence(2)
    ps = packets(3)
    for p, on in zip(ps, (0, 1, 0), strict=True):
        transmit(flight, p, on, clock.now)
        ev.sent(p)
        clock.advance(0.1 * MS)
    flight.acked(2)
    ev.first_copy_acked(ps[2], clock.advance(1 * MS))
    assert list(ev.same_ev(1, clock.now)) == []  # nothing later got through on EV 1
    assert list(ev.same_ev(0, clock.now)) == [ps[0]]  # sent more than reo_wnd before psn 2
    assert list(ev.same_ev(0, clock.now)) == []  # taken out of the send order
    assert ev.later_delivered(ps[1].seq) and not ev.later_delivered(ps[2].seq)


def test_rule_b_needs_dupthresh_later_packets_and_its_timing():
    clock = FakeClock()
    ev, flight, timeouts = evidence(4)
    for e in range(4):
        timeouts.sample(e, 1 * MS)  # srtt 1 ms, rttvar 0.5 ms: loss bound 3 ms
    ps = packets(4)
    for i, p in enumerate(ps):
        transmit(flight, p, i, clock.now)
        ev.sent(p)
        clock.advance(0.01 * MS)
    clock.advance(1 * MS)
    for p in ps[1:]:
        flight.acked(p.psn)
        ev.first_copy_acked(p, clock.now)
    assert ev.loss_bound(0) == pytest.approx(3 * MS)
    assert list(ev.plane_condemned(clock.now)) == []  # not out for its loss bound yet
    assert ev.reorder_deadline() < clock.now + 3 * MS  # the timer would judge it then
    assert list(ev.plane_condemned(clock.advance(2.1 * MS))) == [ps[0]]
    assert list(ev.cross_plane(clock.now)) == []  # one plane: nothing is only suspected


def test_another_planes_evidence_only_suspects():
    clock = FakeClock()
    ev, flight, timeouts = evidence(4, nics=[0, 0, 1, 1])
    for e in range(4):
        timeouts.sample(e, 1 * MS)
    ps = packets(4)
    for p, on in zip(ps, (0, 2, 3, 2), strict=True):
        transmit(flight, p, on, clock.now)
        ev.sent(p)
    clock.advance(1 * MS)
    for p in ps[1:]:
        flight.acked(p.psn)
        ev.first_copy_acked(p, clock.now)
    clock.advance(3 * MS)
    assert list(ev.plane_condemned(clock.now)) == []  # its own plane says nothing
    assert list(ev.cross_plane(clock.now)) == [ps[0]]  # plane 1's ACKs: a suspect
    assert not ev.own_plane_delivered(ps[0]) and ev.plane_progress(0) == -float("inf")


def test_a_flush_takes_the_packets_sent_before_the_path_went_silent():
    clock = FakeClock()
    ev, flight, _ = evidence(2)
    ps = packets(3)
    for p in ps:
        transmit(flight, p, 0, clock.now)
        ev.sent(p)
        clock.advance(1 * MS)
    assert list(ev.flush(0, clock.now, since=1.5 * MS)) == ps[:2]
    assert [p.psn for p in ev.outstanding()] == [0, 1, 2]  # flushing declares nothing lost
    ev.clear()
    assert ev.oldest() is None


# ---- Probes ----------------------------------------------------------------------------------


def probes(evs: int = 4, nics=None):
    flight = Flight()
    spray, paths = spray_over(evs, nics)
    stats: Counter[str] = Counter()
    return Probes(1, CFG, evs, stats, flight, spray, paths), flight, stats


def test_a_silent_packet_gets_one_tail_probe_behind_it_and_one_around_it():
    clock = FakeClock(2.0)
    pr, flight, stats = probes()
    (p,) = packets(1)
    transmit(flight, p, 2, clock.now)
    pr.add_tail(p.psn)
    out: list = []
    pr.send_tail(clock.advance(10 * MS), out)
    heads = [(ev, wire.parse(buf)) for ev, buf in out]
    assert [ev for ev, _ in heads] == [0, 2]  # around it first, then on its own EV, last
    assert all(h.kind == wire.PROBE and h.flags & wire.FLAG_TAIL and h.psn == p.psn
               for _, h in heads)
    own = heads[1][1]
    assert pr.answers(own.ts) and pr.take_tail(own.ts) == (p.seq + 2, clock.now, p.psn, True)
    assert pr.take_tail(own.ts) is None and stats["tx_tail_probe"] == 2 and not pr.tail_due


def test_a_suspect_gets_one_plane_probe_until_it_is_answered():
    clock = FakeClock(1.0)
    pr, flight, stats = probes(4, nics=[0, 0, 1, 1])
    (p,) = packets(1)
    transmit(flight, p, 1, clock.now)
    pr.suspect(p, clock.now)
    pr.suspect(p, clock.now)  # one probe behind it is enough
    out: list = []
    pr.send_plane(clock.now, out)
    (ev, buf), = out
    h = wire.parse(buf)
    assert ev == 1 and h.flags & wire.FLAG_TAIL and stats["plane_suspect"] == 2
    assert not pr.plane_due() and pr.unanswered_for(p, clock.advance(6 * MS), 5 * MS)
    seq, sent, on = pr.take_plane(h.ts)
    pr.plane_answered(seq, on)
    assert not pr.unanswered_for(p, clock.now, 0.0)


def test_the_probe_timeout_fires_once_per_activity():
    pr, _, _ = probes()
    assert pr.pto_deadline(1.0, 0.0, 1 * MS) == float("inf")  # no RTT sample yet
    due = pr.pto_deadline(1.0, 1 * MS, 0.5 * MS)
    assert due == pytest.approx(1.0 + 2 * MS + CFG.ack_delay)
    assert pr.pto_deadline(1.0, 0.1 * MS, 5 * MS) == pytest.approx(1.0 + 5 * MS)  # the floor
    pr.pto_fired(1.0)
    assert pr.pto_deadline(1.0, 1 * MS, 0.5 * MS) == float("inf")
    assert pr.pto_deadline(1.2, 1 * MS, 0.5 * MS) < float("inf")  # new activity since
