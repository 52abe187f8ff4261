"""DBLP's sending side: what may be retransmitted, the tail timer, and obeying a STOP.

``BoundedSender`` is the sender part of the DBLP policy
(transports/core/dblp/connection.py), plugged into MRC's ``Sender``
(transports/core/mrc/sender.py ``SendPolicy``). Every chunk is sprayed once, as MRC. A
lost chunk of a bounded message is resent only while ``acked + in flight + not yet sent
< needed``: a loss spike does not turn into a retransmission storm; the other lost
chunks are *parked* and come back only if packets thought in flight are lost too
(``before_pump``), or after an RTO without progress (the park check: every parked chunk
goes, until an ack shows progress).

Tail timer (bounded messages only). MRC learns that a silent path lost a chunk only by
its RTO, which grew with that path's queue; a round's last chunks have nothing after
them either. When no bounded chunk was acked for a PTO (2 RTTs of the latest chunk
acked, or the connection's srtt, + a reordering window; doubling while nothing is acked)
after the oldest one out was sent, every bounded chunk out longer than a PTO is declared
lost (``loss_dblp_tail``). That only takes them out of flight (the window is not cut);
the bound rule above resends as many as it needs. Messages at tolerance 0 never use it
(MRC byte for byte).

STOP. The send completes (ok=True) with ``delivered`` and ``missing`` from the
receiver's bitmap, every chunk of the message still out is forgotten (nothing more of it
leaves), and STOP_OK goes back naming the PSN range the message used. A STOP for a
message not being sent is answered too: if it names a bounded message this end has not
posted yet (the receiver's deadline fired before anything was sent), it is remembered,
and a later ``post`` of that id, *bounded and of that length*, completes at once with
nothing delivered; a reliable post or another length ignores it (a reliable message
never completes undelivered). Such early STOPs are kept at most ``MAX_EARLY_STOPS``. A
STOP of a message posted reliably (the ends disagree on its bound) completes it with
ok=False and the error, never as a success. The chunks still on the wire when the STOP
comes (a round that closed at its needed chunk leaves up to a window of them behind,
which the receiver drops as late) are in the network all the same: their bytes stay
counted in flight (``Flight.hold``) until they would have been acknowledged (the latest
one's send time + the smoothed RTT), so the next round's first window does not land on
top of them and overflow the queues they sit in."""

from __future__ import annotations

from collections import Counter, deque
from typing import TYPE_CHECKING

from transports.core import wire
from transports.core.api import Completion, Tx
from transports.core.message import CompletionSink, OutMsg
from transports.core.mrc.config import MrcConfig
from transports.core.mrc.flight import Flight, SentPacket
from transports.core.mrc.pathsel import NACK
from transports.core.mrc.timeouts import Timeouts
from transports.core.wire import ACK, FLAG_STOP_OK, HEADER_LEN, pack_header

if TYPE_CHECKING:
    from transports.core.bound import LossBound
    from transports.core.mrc.lossdetect import LossDetector
    from transports.core.mrc.sender import Sender

INF = float("inf")
MAX_EARLY_STOPS = 256  # STOPs for messages not posted yet (a deadline before any chunk)
MAX_STOPPED = 64  # stopped messages past which those the cum ack passed are forgotten ...
MAX_STOPPED_HARD = 4096  # ... and the most kept whatever (the oldest go)


def _bit(bitmap: bytes | memoryview, i: int) -> bool:
    return bool(bitmap[i >> 3] >> (i & 7) & 1)


class _Tx:
    """Sender state of one message."""

    __slots__ = ("om", "needed", "reliable", "pkts", "parked", "park_check", "park_acked",
                 "force")

    def __init__(self, om: OutMsg, needed: int, reliable: bool) -> None:
        self.om = om
        self.needed = needed
        self.reliable = reliable  # posted without a bound: never complete undelivered
        self.pkts: list[SentPacket] = []  # in PSN order, from the first transmission
        self.parked: list[int] = []  # PSNs of lost chunks not resent (not needed)
        # Liveness: if no chunk is acked for one RTO while chunks are parked, the ones
        # counted "in flight" are presumed lost too and the parked ones go out again.
        self.park_check = INF
        self.park_acked = 0
        self.force = False  # resend lost chunks regardless, until an ack shows progress


class BoundedSender:
    """The sending half of DBLP over one MRC core's sender ``snd``, its ``flight``, its
    ``timeouts`` and its loss detector ``loss`` (connection ``conn``; finished messages go
    to ``done``)."""

    def __init__(self, conn: int, cfg: MrcConfig, stats: Counter[str], done: CompletionSink,
                 snd: Sender, flight: Flight, timeouts: Timeouts, loss: LossDetector) -> None:
        self.conn, self.cfg, self.stats, self.done = conn, cfg, stats, done
        self.snd, self.flight, self.timeouts, self.loss = snd, flight, timeouts, loss
        self.tx: dict[int, _Tx] = {}
        self.stopped: dict[int, tuple[int, int, int]] = {}  # msg -> (psn lo, hi, len)
        self.early: dict[int, int] = {}  # msg -> length: STOPs before the message was posted
        self._need_cache: dict[int, list[int]] = {}
        self._pump_now = 0.0
        # bounded chunks' loss detection (RACK-like across EVs, and a tail timer)
        self.bq: deque[tuple[int, int]] = deque()  # (seq, psn) of bounded chunks sent
        self.rack_seq = 0  # the latest-sent bounded chunk acked (first transmission) ...
        self.rack_rtt = 0.0  # ... and its RTT: what a healthy path takes right now
        self.tail_progress = -INF  # the last time a bounded chunk was acked
        self.tail_backoff = 0  # tail timer doublings without progress
        # bytes of stopped messages' chunks still on the wire: (out of it at, bytes)
        self.held: deque[tuple[float, int]] = deque()

    def __repr__(self) -> str:
        return f"BoundedSender(sending={sorted(self.tx)}, bq={len(self.bq)})"

    def state_sizes(self) -> dict[str, int]:
        """Its containers a soak watches (transports/io/footprint.py)."""
        return {"dblp_tx": len(self.tx)}

    def post(self, om: OutMsg, now: float, bound: LossBound | None) -> bool:
        """Register message ``om``; False if it completed at once (the receiver closed
        this bounded round before anything was sent)."""
        early = self.early.pop(om.msg, None)
        if early is not None and bound is not None and not bound.reliable \
                and early == om.nbytes:
            self.done.append(Completion(om.msg, "send", True, 0, now, None, 0.0,
                                        tuple(range(om.npkts)), True))
            return False
        if early is not None:
            self.stats["stop_early_ignored"] += 1  # not that round: a reliable post or length
        reliable = bound is None or bound.reliable
        needed = om.npkts if bound is None else bound.needed(om.npkts)
        self.tx[om.msg] = _Tx(om, needed, reliable)
        return True

    # ---- SendPolicy (transports/core/mrc/sender.py) -----------------------------------------

    def _need(self, st: _Tx) -> list[int]:
        """[acked, in flight + not yet sent] of a message (cached for one pump)."""
        c = self._need_cache.get(st.om.msg)
        if c is None:
            get = self.flight.get
            out = sum(1 for p in st.pkts if not p.lost and get(p.psn) is p)
            c = [st.om.acked, out + st.om.npkts - len(st.pkts)]
            self._need_cache[st.om.msg] = c
        return c

    def may_retransmit(self, p: SentPacket) -> bool:
        st = self.tx.get(p.om.msg)
        if st is None or st.needed >= st.om.npkts or st.force:
            return True  # reliable, or unstuck after a stall
        c = self._need(st)
        if c[0] + c[1] < st.needed:
            c[1] += 1
            return True
        st.parked.append(p.psn)
        self.stats["retx_parked"] += 1
        if st.park_check == INF:
            st.park_check = self._pump_now + self.timeouts.rto_any()
            st.park_acked = st.om.acked
        return False

    def before_pump(self, now: float) -> None:
        """Bring parked chunks back if the bound needs them."""
        self._pump_now = now
        self._need_cache.clear()
        requeue_front = self.flight.requeue_front
        for st in self.tx.values():
            if st.parked:
                acked, flying = self._need(st)
                k = st.needed - acked - flying
                while k > 0 and st.parked:
                    if requeue_front(st.parked.pop()):
                        k -= 1

    def on_transmit(self, p: SentPacket, first: bool) -> None:
        st = self.tx.get(p.om.msg)
        if st is None:
            return
        if first:
            st.pkts.append(p)
        if st.needed < st.om.npkts:
            self.bq.append((p.seq, p.psn))

    def on_acked(self, p: SentPacket, now: float) -> None:
        om = p.om
        st = self.tx.get(om.msg)
        if st is None:
            return
        if st.needed < om.npkts:
            self.tail_progress, self.tail_backoff = now, 0
            if not p.retx and p.seq > self.rack_seq:
                self.rack_seq, self.rack_rtt = p.seq, now - p.sent
        if st.force and om.acked > st.park_acked:
            st.force = False  # progress again: back to "only what the bound needs"
        if om.done and om.acked == om.npkts:  # every chunk acked: MRC's completion
            del self.tx[om.msg]

    # ---- the tail timer --------------------------------------------------------------------

    def _pto(self) -> float:
        cfg = self.cfg
        ref = max(self.rack_rtt, self.timeouts.srtt.srtt) or cfg.rto_init
        reo = max(cfg.reorder_min, cfg.reorder_frac * self.rack_rtt)
        return min(cfg.rto_max, (2 * ref + reo) * (1 << self.tail_backoff))

    def _tail_deadline(self) -> float:
        """Nothing acked for a PTO (2 healthy RTTs, doubling while nothing is acked) after
        the oldest bounded chunk out was sent: the ones older than a PTO are lost."""
        p = self.flight.live_head(self.bq)
        if p is None:
            return INF
        return max(p.sent, self.tail_progress) + self._pto()

    def _tail_fire(self, now: float) -> None:
        lim = now - self._pto()
        self.tail_backoff += 1
        while (p := self.flight.live_head(self.bq)) is not None and p.sent <= lim:
            self.bq.popleft()
            self.loss.lose(p, now, NACK, "loss_dblp_tail")
        self.stats["dblp_tail_fired"] += 1

    def on_timer(self, now: float) -> bool:
        """The tail timer, park checks and held bytes due; True if lost chunks wait to be
        sent."""
        held = self.held
        while held and held[0][0] <= now:
            self.flight.release(held.popleft()[1])
        if self._tail_deadline() <= now:
            self._tail_fire(now)
        stalled = False
        requeue_front = self.flight.requeue_front
        for st in self.tx.values():
            if st.park_check > now:
                continue
            if st.parked and st.om.acked == st.park_acked:  # no progress for an RTO
                self.stats["retx_unparked_stall"] += len(st.parked)
                while st.parked:
                    requeue_front(st.parked.pop())
                st.park_check = INF
                st.force = True
                stalled = True
            elif st.parked:
                st.park_check, st.park_acked = now + self.timeouts.rto_any(), st.om.acked
            else:
                st.park_check = INF
        return stalled or self.flight.waiting()

    def next_deadline(self) -> float:
        e = min((st.park_check for st in self.tx.values()), default=INF)
        if self.held:
            e = min(e, self.held[0][0])
        return min(e, self._tail_deadline())

    # ---- STOP ------------------------------------------------------------------------------

    def _stop_ok(self, msg: int, lo: int, hi: int, msg_len: int, ev: int, now: float) -> Tx:
        buf = bytearray(HEADER_LEN)
        pack_header(buf, ACK, FLAG_STOP_OK, self.conn, lo, msg, hi, msg_len, ev, 0,
                    _ns(now))
        return (ev, buf)

    def on_stop(self, h: wire.Header, data: bytes | memoryview, now: float,
                out: list[Tx]) -> None:
        """The receiver closed message ``h.msg``: complete it with what it got."""
        msg = h.msg
        st = self.tx.get(msg)
        if st is None:
            prev = self.stopped.get(msg)
            if prev is not None:
                self.stats["stop_dup"] += 1
                out.append(self._stop_ok(msg, prev[0], prev[1], prev[2], h.ev, now))
                return
            self.stats["stop_unknown"] += 1  # not posted yet: the round ends when it is
            self.early[msg] = h.msg_len
            while len(self.early) > MAX_EARLY_STOPS:
                del self.early[next(iter(self.early))]
            out.append(self._stop_ok(msg, 0, 0, h.msg_len, h.ev, now))
            return
        om = st.om
        nch = om.npkts
        if h.msg_len != om.nbytes or h.length != (nch + 7) // 8:
            self.stats["stop_bad"] += 1
            return
        bitmap = memoryview(data)[HEADER_LEN:HEADER_LEN + h.length]
        snd = self.snd
        flight = self.flight
        on_wire, out_at = 0, now
        for p in st.pkts:  # forget every chunk still out (delivered or not) ...
            if flight.get(p.psn) is p and not p.lost:
                on_wire += HEADER_LEN + p.length
                out_at = max(out_at, p.sent + self.timeouts.srtt.srtt)
            flight.forget(p)
        if on_wire and out_at > now:  # ... but not the bytes still on the wire
            flight.hold(on_wire)
            self.held.append((out_at, on_wire))
        snd.stop(om)
        del self.tx[msg]
        lo = st.pkts[0].psn if st.pkts else 0
        hi = lo + len(st.pkts)
        stopped = self.stopped
        stopped[msg] = (lo, hi, om.nbytes)
        if len(stopped) > MAX_STOPPED:  # forget those the receiver's cum ack has passed
            una = snd.snd_una
            for k in [k for k, v in stopped.items() if v[1] <= una]:
                del stopped[k]
            while len(stopped) > MAX_STOPPED_HARD:
                del stopped[next(iter(stopped))]
        mtu = self.cfg.mtu_payload
        got = [i for i in range(nch) if _bit(bitmap, i)]
        missing = tuple(i for i in range(nch) if not _bit(bitmap, i))
        nbytes = sum(min(mtu, om.nbytes - i * mtu) for i in got)
        if st.reliable and missing:  # posted without a bound: it failed, it did not succeed
            self.stats["stop_reliable"] += 1
            self.done.append(Completion(
                msg, "send", False, nbytes, now,
                f"the receiver closed message {msg} with {len(missing)} of {nch} chunks "
                "missing, but it was posted reliably (both ends must use the same bound)",
                len(got) / nch, missing, bool(h.offset)))
        else:
            self.done.append(Completion(msg, "send", True, nbytes, now, None, len(got) / nch,
                                        missing, bool(h.offset)))
        self.stats["rx_stop"] += 1
        out.append(self._stop_ok(msg, lo, hi, om.nbytes, h.ev, now))

    def fail(self) -> None:
        self.tx.clear()
        self.bq.clear()
        self.held.clear()  # (the flight is cleared with them)


def _ns(now: float) -> int:
    return int(now * 1e9) & 0xFFFFFFFFFFFFFFFF
