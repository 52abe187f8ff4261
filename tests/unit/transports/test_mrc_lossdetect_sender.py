"""MRC's LossDetector and Sender, each built without a core and driven by hand at a fake
clock: events in (a transmission, an ACK, the clock), decisions out (packets declared
lost into the Flight, EVs retired, probes and data to send)."""

from collections import Counter

from transports.core import wire
from transports.core.cc import NsccConfig
from transports.core.message import Completions, OutMsg
from transports.core.mrc.config import MrcConfig
from transports.core.mrc.evtable import EV_ASSUMED_BAD, EV_GOOD
from transports.core.mrc.sender import Sender
from transports.core.wire import HEADER_LEN
from transports.testing.clock import FakeClock

from mrcparts import SIZE, Parts, packets

MS = 1e-3
CFG = MrcConfig(mtu_payload=SIZE, rto_init=10 * MS, rto_min=1 * MS, rto_max=0.1,
                max_retries=1, give_up_s=0.0)


def test_a_silent_timeout_probes_instead_of_resending():
    clock, parts = FakeClock(), Parts(cfg=CFG)
    loss, flight = parts.loss, parts.flight
    (p,) = packets(1)
    parts.send(p, 2, clock.now)
    assert loss.next_rto() == CFG.rto_init
    assert loss.expire(clock.advance(CFG.rto_init)) is None
    assert parts.stats["rto_silent"] == 1 and loss.timeouts.strikes == 1
    assert not p.lost and not flight.waiting()  # nothing resent yet: no evidence of a loss
    out: list = []
    loss.send_probes(clock.now, out)
    assert [ev for ev, _ in out][-1] == 2 and len(out) == 2  # the last behind it, on its EV
    own = wire.parse(out[-1][1])
    assert loss.tail_answered(own.ts, clock.advance(1 * MS))  # its answer came, p did not
    assert p.lost and p.why == "loss_tail_probe" and parts.stats["loss_tail_probe"] == 1
    assert loss.timeouts.strikes == 0  # the peer answers
    assert parts.paths.state_of(2) == EV_ASSUMED_BAD  # the probe behind it got through


def test_a_blamed_timeout_retires_the_path_and_is_undone_by_the_path_itself():
    clock, parts = FakeClock(), Parts(cfg=CFG)
    loss, flight, paths, cc = parts.loss, parts.flight, parts.paths, parts.cc
    p0, p1 = packets(2)
    parts.send(p0, 0, clock.now)
    parts.send(p1, 1, clock.advance(1 * MS))
    parts.ack(p1, clock.advance(1 * MS))  # sent after p0, it got through
    window = cc.cwnd
    assert loss.expire(clock.advance(8 * MS)) is None  # p0's RTO: 10 ms after it left
    assert p0.lost and p0.why == "loss_rto" and flight.forced(0)  # resent past the window
    assert paths.state_of(0) == EV_ASSUMED_BAD and cc.cwnd < window
    assert parts.stats["loss_rto"] == 1 and len(loss.blame) == 1
    loss.undo(0, clock.advance(1 * MS), via=0)  # an ACK of p0's first copy, on EV 0
    assert paths.state_of(0) == EV_GOOD and cc.cwnd == window
    assert parts.stats["ev_undo"] == parts.stats["cwnd_undo"] == 1 and len(loss.blame) == 0


def test_rule_a_through_the_detector_blames_and_retires():
    clock, parts = FakeClock(), Parts(cfg=CFG)
    p0, p1 = packets(2)
    parts.send(p0, 3, clock.now)
    parts.send(p1, 3, clock.advance(1 * MS))
    parts.ack(p1, clock.advance(1 * MS))
    out: list = []
    parts.loss.detect(clock.now, {3}, out)
    assert p0.lost and parts.stats["loss_same_ev"] == 1 and not out
    assert parts.paths.state_of(3) == EV_ASSUMED_BAD


def test_a_peer_that_never_answers_fails_the_connection():
    clock, parts = FakeClock(), Parts(cfg=CFG)
    loss = parts.loss
    (p,) = packets(1)
    parts.send(p, 0, clock.now)
    errors = []
    for _ in range(10):
        now = loss.next_rto()
        clock.advance(now - clock.now)
        error = loss.expire(clock.now)
        loss.send_probes(clock.now, [])
        if error is not None:
            errors.append(error)
            break
    assert errors and errors[0].startswith("peer unreachable: 2 retransmission timeouts")
    loss.clear()
    assert loss.next_rto() == float("inf") and loss.state_sizes() == {"blame": 0,
                                                                       "tail_probes": 0}


class Hooks:
    """What the sender reports to its loss detector, recorded."""

    def __init__(self) -> None:
        self.sent: list = []
        self.acked: list = []

    def on_sent(self, p, now):
        self.sent.append((p.psn, p.ev, now))

    def first_copy_acked(self, p, now):
        self.acked.append((p.psn, now))


def sender(init_pkts: int = 2):
    cfg = MrcConfig(mtu_payload=SIZE, nscc=NsccConfig(init_cwnd=init_pkts * (SIZE + HEADER_LEN)))
    parts = Parts(cfg=cfg)
    hooks, done = Hooks(), Completions()
    snd = Sender(1, cfg, Counter(), done, parts.cc, parts.spray, parts.paths, parts.flight,
                 parts.ledger, hooks)
    return snd, parts, hooks, done


def test_the_sender_sends_what_the_window_allows_and_completes_on_acks():
    clock = FakeClock()
    snd, parts, hooks, done = sender()
    snd.post(OutMsg(7, bytes(4 * SIZE), SIZE, clock.now))
    out: list = []
    snd.pump(clock.now, out)
    assert [wire.parse(b).psn for _, b in out] == [0, 1] and len(hooks.sent) == 2
    assert not wire.parse(out[-1][1]).flags & wire.FLAG_ACK_REQ  # more of the burst waits
    newly, touched, _ = snd.ack(2, [], clock.advance(1 * MS), None)
    assert newly == 2 * (SIZE + HEADER_LEN) and [a[0] for a in hooks.acked] == [0, 1]
    assert touched == {ev for _, ev, _ in hooks.sent}
    out.clear()
    snd.pump(clock.now, out)
    assert [wire.parse(b).psn for _, b in out] == [2, 3]
    assert wire.parse(out[-1][1]).flags & (wire.FLAG_ACK_REQ | wire.FLAG_LAST)
    snd.ack(4, [], clock.advance(1 * MS), None)
    (c,) = done.drain()
    assert (c.msg, c.kind, c.ok, c.nbytes) == (7, "send", True, 4 * SIZE) and not snd


def test_a_forced_resend_leaves_past_a_full_window_with_its_ack_requested():
    clock = FakeClock()
    snd, parts, hooks, _ = sender(init_pkts=3)
    flight = parts.flight
    snd.post(OutMsg(1, bytes(4 * SIZE), SIZE, clock.now))
    out: list = []
    snd.pump(clock.now, out)
    assert [wire.parse(b).psn for _, b in out] == [0, 1, 2]
    flight.requeue(flight.get(0), "loss_rto")
    parts.cc.cwnd = parts.cc.min_cwnd  # cut: psn 1 and 2 hold all of it now
    out.clear()
    snd.pump(clock.advance(1 * MS), out)
    assert out == [] and flight.waiting()  # it waits for room ...
    flight.force_first()
    snd.pump(clock.now, out)
    (ev, buf), = out
    h = wire.parse(buf)
    assert h.psn == 0 and h.flags & wire.FLAG_RETX and h.flags & wire.FLAG_ACK_REQ  # ... or not
    assert ev == parts.spray.silent_ev and not flight.waiting()
