"""DBLP: a bounded-loss mode of the MRC connection (sans-I/O), per message.

``DblpCore`` is an ``MrcCore`` (same spraying, path states, loss detection and
window) whose ``post_send`` / ``post_recv`` take an optional ``LossBound``. A
message is one training round; its chunks are its packets (chunk ``i`` is the
payload at offset ``i * mtu_payload``). ``bound=None``, or a tolerance of 0
without a deadline, is MRC's reliable behaviour, byte for byte.

Receiver. A bounded message completes (ok=True) as soon as
``needed = ceil((1 - tolerance) * chunks)`` chunks are placed, or when its
deadline fires, **measured from ``post_recv``** (the moment the receiver's round
starts: a round never waits longer than the deadline, even for a peer that never
sends), whichever comes first; with enough chunks but the sender's last chunk
(FLAG_LAST) not placed, it lingers until the first pass should be over at the
arrival rate seen so far (first chunk's arrival + elapsed * chunks / placed), at
most an RTO (``linger_s`` fixes the linger instead). The Completion says
``delivered`` (the exact fraction of chunks placed), ``missing`` (chunk indices never placed) and
``deadline``. Then the receiver tells the sender to stop: an ACK with
``FLAG_STOP`` naming the message and carrying the bitmap of the chunks it
placed; it resends the STOP when DATA of that message still arrives and on a
timer (``rto_init`` doubling to ``rto_max``, at most ``max_retries + 1`` times)
until the sender answers ``FLAG_STOP_OK``. DATA of a closed message is counted
(``late_data``) and never placed. The STOP_OK names the PSN range the sender will
never send again; only then does the receiver mark those PSNs received, so its
cumulative ACK moves past the abandoned packets (before that, the sender would read
them as delivered).

Sender. Every chunk is sprayed once, as MRC. A lost chunk is retransmitted only
while ``acked + in flight + not yet sent < needed`` (for the sender's bound): a
loss spike does not turn into a retransmission storm; the other lost chunks are
parked and come back only if packets thought in flight are lost too (when the
bound needs them: ``_pump``; or after an RTO without progress: the park check).

Tail timer (bounded messages only). MRC learns that a silent path (a burst takes
everything it carries) lost a chunk only by its RTO, which grew with that path's
queue; a round's last chunks have nothing after them either. DBLP therefore
declares lost, when no bounded chunk was acked for a PTO (2 RTTs of the latest
chunk acked, or the connection's srtt, + a reordering window; doubling while
nothing is acked) after the oldest one out was sent, every bounded chunk out
longer than a PTO (``loss_dblp_tail``). That only takes them out of flight (the
window is not cut); the bound rule above resends as many as it needs, on GOOD
paths, so the round closes about one RTT after the last needed resend instead
of an RTO later. Messages at tolerance 0 never use it (MRC byte for byte).

Stop. On STOP the send completes (ok=True) with ``delivered`` and ``missing`` from the receiver's
bitmap (exact: what error feedback needs), everything of the message still out
is forgotten, and STOP_OK goes back. When every chunk is acked it completes as
MRC does. Both ends must use the same bound for a message (the tolerance policy
runs identically on every rank): a sender more tolerant than its receiver can
park chunks the receiver waits for, which only the receiver's deadline resolves.

Congestion window. DBLP calls the NSCC window exactly where MRC does (ACK delay
samples, and ``on_timeout`` on an RTO blamed on a path) and nowhere else: parked
chunks arm no RTO and abandoned chunks are not losses, so a burst cuts the window at
most as MRC's for the same losses, usually less (fewer RTOs since fewer chunks are
resent into the burst); tail-timer losses do not touch it. Abandoned bytes leave
``bytes_in_flight`` at once.

Blame and spurious retransmissions are MRC's (transports/mrcloss.py): a tail-timer
loss retires its EV only when a chunk sent after it got through (``loss_unblamed``
otherwise), and duplicates are counted (``tx_retx_spurious``, ``dup_data``).

Checks. Every DATA chunk must carry a CRC32 (``wire.crc32``); a bad one is counted
(``crc_bad``) and dropped before placement, so the buffer keeps its old bytes there
(the chunk counts as lost). A DATA packet whose offset/length is not exactly a
chunk is counted (``bad_chunk``) and dropped; wrong connection, malformed headers
and offsets beyond the message are MRC's counters (``wrong_conn``,
``malformed_bounds``, ...). Bounded messages carry their chunk bitmap in one
datagram, so they are limited to ``8 * MAX_PAYLOAD`` chunks (~565 MB at 8000 B).

Message ids must not be reused on a connection before the previous use completed
on both ends (round numbers are a good choice).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from transports import wire
from transports.api import Completion, Tx
from transports.fill import DEFAULT_FILL, check_fill
from transports.message import OutMsg, SentPacket, npackets
from transports.mrc import INF, MrcConfig, MrcCore, _ns
from transports.pathsel import NACK
from transports.wire import ACK, FLAG_LAST, FLAG_STOP, FLAG_STOP_OK, HEADER_LEN, pack_header

MAX_CHUNKS = 8 * wire.MAX_PAYLOAD  # the STOP bitmap is one datagram


@dataclass(frozen=True)
class LossBound:
    """How much of a message may be lost: ``tolerance`` of its chunks, or what the
    ``deadline_s`` (seconds after ``post_recv``) leaves; ``fill`` names the policy the
    caller applies to the missing chunks (transports/fill.py; the transport only
    reports them)."""

    tolerance: float = 0.0
    deadline_s: float | None = None
    fill: str = DEFAULT_FILL

    def __post_init__(self) -> None:
        t = self.tolerance
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0.0 <= t < 1.0:
            raise ValueError(f"LossBound.tolerance={t!r} must be a number in [0, 1)")
        d = self.deadline_s
        if d is not None and (isinstance(d, bool) or not isinstance(d, int | float)
                              or not 0.0 < d < INF):
            raise ValueError(f"LossBound.deadline_s={d!r} must be a number of seconds > 0 "
                             "(or None: no deadline)")
        check_fill(self.fill)

    @property
    def reliable(self) -> bool:
        return self.tolerance == 0.0 and self.deadline_s is None

    def needed(self, nchunks: int) -> int:
        """Chunks that must arrive: ceil((1 - tolerance) * nchunks), at least 1."""
        return max(1, nchunks - math.floor(self.tolerance * nchunks + 1e-9))


def _bit(bitmap: bytes | memoryview, i: int) -> bool:
    return bool(bitmap[i >> 3] >> (i & 7) & 1)


class _Tx:
    """Sender state of one message."""

    __slots__ = ("om", "needed", "pkts", "parked", "park_check", "park_acked", "force")

    def __init__(self, om: OutMsg, needed: int) -> None:
        self.om = om
        self.needed = needed
        self.pkts: list[SentPacket] = []  # in PSN order, from the first transmission
        self.parked: list[int] = []  # PSNs of lost chunks not resent (not needed)
        # Liveness: if no chunk is acked for one RTO while chunks are parked, the ones
        # counted "in flight" are presumed lost too and the parked ones go out again.
        self.park_check = INF
        self.park_acked = 0
        self.force = False  # resend lost chunks regardless, until an ack shows progress


class _Rx:
    """Receiver state of one bounded, posted message."""

    __slots__ = ("needed", "nchunks", "deadline_at", "linger_at", "first_at")

    def __init__(self, needed: int, nchunks: int, deadline_at: float) -> None:
        self.needed, self.nchunks, self.deadline_at = needed, nchunks, deadline_at
        self.linger_at = INF  # enough chunks, but the last one of the first pass not seen
        self.first_at = INF  # when its first chunk was placed


class _Closed:
    """A message the receiver completed early: its STOP until STOP_OK arrives."""

    __slots__ = ("msg", "msg_len", "bitmap", "deadline", "tries", "resend_at", "backoff")

    def __init__(self, msg: int, msg_len: int, bitmap: bytes, deadline: bool) -> None:
        self.msg, self.msg_len, self.bitmap, self.deadline = msg, msg_len, bitmap, deadline
        self.tries = 0
        self.resend_at = INF
        self.backoff = 0.0


class DblpCore(MrcCore):
    """One end of a DBLP connection (MRC with per-message loss bounds)."""

    def __init__(self, conn: int, evs: int, config: MrcConfig | None = None,
                 rng_seed: int = 0, linger_s: float | None = None,
                 nics: Sequence[int] | None = None) -> None:
        cfg = config or MrcConfig()
        if linger_s is not None and not linger_s >= 0:
            raise ValueError(f"linger_s={linger_s!r} must be >= 0 seconds (or None: an RTO)")
        self.linger_s = linger_s
        if not cfg.use_crc:
            raise ValueError("DBLP needs MrcConfig.use_crc=True: every chunk carries a CRC32")
        super().__init__(conn, evs, cfg, rng_seed, nics)
        self.tx: dict[int, _Tx] = {}
        self.tx_stopped: dict[int, tuple[int, int, int]] = {}  # msg -> (psn lo, hi, len)
        self.rx: dict[int, _Rx] = {}
        self.rx_chunks: dict[int, set[int]] = {}
        self.rx_last: set[int] = set()  # messages whose FLAG_LAST chunk was placed
        self.closed: dict[int, _Closed] = {}
        self._need_cache: dict[int, list[int]] = {}
        self._pump_now = 0.0
        # bounded chunks' loss detection (RACK-like across EVs, and a tail timer)
        self.bq: deque[tuple[int, int]] = deque()  # (seq, psn) of bounded chunks sent
        self.rack_seq = 0  # the latest-sent bounded chunk acked (first transmission) ...
        self.rack_rtt = 0.0  # ... and its RTT: what a healthy path takes right now
        self.tail_progress = -INF  # the last time a bounded chunk was acked
        self.tail_backoff = 0  # tail timer doublings without progress

    # ---- the Core interface ---------------------------------------------------------------

    def post_send(self, msg: int, data: bytes | memoryview, now: float,
                  bound: LossBound | None = None) -> list[Tx]:
        _check_bound(bound)
        if self.failed or msg in self.out_msgs:
            return super().post_send(msg, data, now)  # MRC's failure completions
        om = OutMsg(msg, data, self.cfg.mtu_payload, now)
        pre = self.tx_stopped.get(msg)
        if pre is not None and pre[0] == pre[1]:
            # the receiver closed this round (deadline) before we sent anything
            del self.tx_stopped[msg]
            self._done.append(Completion(msg, "send", True, 0, now, None, 0.0,
                                         tuple(range(om.npkts)), True))
            return []
        self.out_msgs[msg] = om
        self.sendq.append(om)
        needed = om.npkts if bound is None else bound.needed(om.npkts)
        self.tx[msg] = _Tx(om, needed)
        out: list[Tx] = []
        self._pump(now, out)
        return out

    def post_recv(self, msg: int, buf: bytearray | memoryview, now: float,
                  bound: LossBound | None = None) -> list[Tx]:
        _check_bound(bound)
        if self.failed:
            return super().post_recv(msg, buf, now)
        view = memoryview(buf)
        nbytes = view.nbytes
        nchunks = npackets(nbytes, self.cfg.mtu_payload)
        if bound is not None and not bound.reliable and nchunks > MAX_CHUNKS:
            self._done.append(Completion(msg, "recv", False, 0, now,
                                         f"a bounded message has at most {MAX_CHUNKS} chunks, "
                                         f"not {nchunks}"))
            return []
        before = self.reasm.msgs.get(msg)
        super().post_recv(msg, buf, now)
        m = self.reasm.msgs.get(msg)
        out: list[Tx] = []
        if m is None:  # completed at once (all data was there) or refused
            self.rx_chunks.pop(msg, None)
            self.rx_last.discard(msg)
            return out
        if before is not None and before.posted or not m.posted:
            return out  # refused (already posted)
        if bound is not None and not bound.reliable:
            dl = now + bound.deadline_s if bound.deadline_s is not None else INF
            self.rx[msg] = _Rx(bound.needed(nchunks), nchunks, dl)
            self._check(msg, now, out)
        return out

    def _check(self, msg: int, now: float, out: list[Tx]) -> None:
        """Close ``msg`` if it has its needed chunks and the sender's first pass is over
        (its last chunk placed), or ``linger`` after it had them."""
        r = self.rx[msg]
        if len(self.rx_chunks.get(msg, ())) < r.needed:
            return
        if msg in self.rx_last or now >= r.linger_at:
            self._close(msg, now, False, out)
        elif r.linger_at == INF:
            if self.linger_s is not None:
                r.linger_at = now + self.linger_s
            else:  # until the first pass should be over at the arrival rate seen, <= an RTO
                n = len(self.rx_chunks[msg])
                end = r.first_at + (now - r.first_at) * r.nchunks / n if r.first_at < now \
                    else INF  # (chunks placed before post_recv: no rate to go by)
                r.linger_at = min(now + self._rto_any(), end)
                if r.linger_at <= now:
                    self._close(msg, now, False, out)

    def on_timer(self, now: float) -> list[Tx]:
        out = super().on_timer(now)
        if self.failed:
            return out
        for msg in [k for k, r in self.rx.items() if r.deadline_at <= now]:
            self.stats["deadline_fired"] += 1
            self._close(msg, now, True, out)
        for msg in [k for k, r in self.rx.items() if r.linger_at <= now]:
            self._close(msg, now, False, out)
        for cl in list(self.closed.values()):
            if cl.resend_at <= now:
                self._send_stop(cl, now, out, timer=True)
        if self._tail_deadline() <= now:
            self._tail_fire(now)
        stalled = False
        for st in self.tx.values():
            if st.park_check > now:
                continue
            if st.parked and st.om.acked == st.park_acked:  # no progress for an RTO
                self.stats["retx_unparked_stall"] += len(st.parked)
                while st.parked:
                    psn = st.parked.pop()
                    p = self.inflight.get(psn)
                    if p is not None and p.lost:
                        self.retxq.appendleft(psn)
                st.park_check = INF
                st.force = True
                stalled = True
            elif st.parked:
                st.park_check, st.park_acked = now + self._rto_any(), st.om.acked
            else:
                st.park_check = INF
        if stalled or self.retxq:
            self._pump(now, out)
        return out

    def next_deadline(self) -> float | None:
        d = super().next_deadline()
        e = min((min(r.deadline_at, r.linger_at) for r in self.rx.values()), default=INF)
        e = min(e, min((c.resend_at for c in self.closed.values()), default=INF))
        e = min(e, min((st.park_check for st in self.tx.values()), default=INF))
        e = min(e, self._tail_deadline())
        if d is None:
            return None if e == INF else e
        return min(d, e)

    # ---- receiver ---------------------------------------------------------------------------

    def _on_data(self, h: wire.Header, data: bytes | memoryview, now: float,
                 out: list[Tx]) -> None:
        n = h.length
        if n:
            payload = memoryview(data)[HEADER_LEN:HEADER_LEN + n]
            if not h.crc or wire.crc32(payload) != h.crc:
                self.stats["crc_bad"] += 1
                return
        mtu = self.cfg.mtu_payload
        if h.offset % mtu or n != min(mtu, h.msg_len - h.offset):
            self.stats["bad_chunk"] += 1
            return
        msg = h.msg
        cl = self.closed.get(msg)
        if cl is not None:
            self.stats["late_data"] += 1
            self._send_stop(cl, now, out, timer=False, ev=h.ev)
            return
        placed = self.stats["rx_data_pkts"]
        super()._on_data(h, data, now, out)
        if self.stats["rx_data_pkts"] == placed:
            return
        if msg not in self.reasm.msgs:  # completed (every byte): reliable completion
            self.rx_chunks.pop(msg, None)
            self.rx_last.discard(msg)
            self.rx.pop(msg, None)
            return
        chunks = self.rx_chunks.get(msg)
        if chunks is None:
            chunks = self.rx_chunks[msg] = set()
        chunks.add(h.offset // mtu)
        if h.flags & FLAG_LAST:
            self.rx_last.add(msg)
        r = self.rx.get(msg)
        if r is not None:
            if r.first_at == INF:
                r.first_at = now
            self._check(msg, now, out)

    def _close(self, msg: int, now: float, deadline: bool, out: list[Tx]) -> None:
        """Complete bounded message ``msg`` with what it has; STOP the sender."""
        r = self.rx.pop(msg)
        m = self.reasm.msgs.pop(msg)
        chunks = self.rx_chunks.pop(msg, set())
        self.rx_last.discard(msg)
        nch = r.nchunks
        missing = tuple(i for i in range(nch) if i not in chunks)
        self._done.append(Completion(msg, "recv", True, m.nbytes, now, None,
                                     len(chunks) / nch, missing, deadline))
        self.stats["rx_bounded_done"] += 1
        if not missing:
            return
        bitmap = bytearray((nch + 7) // 8)
        for i in chunks:
            bitmap[i >> 3] |= 1 << (i & 7)
        cl = _Closed(msg, m.msg_len, bytes(bitmap), deadline)
        cl.backoff = self._rto_any()
        self.closed[msg] = cl
        self._send_stop(cl, now, out, timer=False)

    def _send_stop(self, cl: _Closed, now: float, out: list[Tx], timer: bool,
                   ev: int | None = None) -> None:
        cfg = self.cfg
        if timer:
            if cl.tries > cfg.max_retries:
                cl.resend_at = INF
                self.stats["stop_given_up"] += 1
                return
            cl.backoff = min(cfg.rto_max, 2 * cl.backoff)
        cl.tries += 1
        cl.resend_at = now + cl.backoff
        if ev is None:
            ev = (self.rcv.last_ev + cl.tries - 1) % self.evs  # another path on each retry
        payload = cl.bitmap
        buf = bytearray(HEADER_LEN + len(payload))
        pack_header(buf, ACK, FLAG_STOP, self.conn, 0, cl.msg, int(cl.deadline), cl.msg_len,
                    ev, len(payload), _ns(now))
        buf[HEADER_LEN:] = payload
        self.stats["tx_stop"] += 1
        out.append((ev, buf))

    def _on_stop_ok(self, h: wire.Header, now: float, out: list[Tx]) -> None:
        cl = self.closed.get(h.msg)
        if cl is None:
            self.stats["stop_ok_stale"] += 1
            return
        lo, hi = h.psn, h.offset
        if not 0 <= hi - lo <= npackets(cl.msg_len, self.cfg.mtu_payload) \
                or hi > self.rcv.rcv_nxt + self.cfg.window_pkts:
            self.stats["stop_ok_bad"] += 1
            return
        del self.closed[h.msg]
        self.stats["rx_stop_ok"] += 1
        rx = self.rcv
        a = max(lo, rx.rcv_nxt)
        if hi > a:  # the sender will never send these PSNs: count them as received
            rx.ooo.add(a, hi)
            rx.rcv_nxt = rx.ooo.pop_front_from(rx.rcv_nxt)
            out.append(rx.make_ack(now))

    # ---- sender -----------------------------------------------------------------------------

    def _on_ack(self, h: wire.Header, data: bytes | memoryview, now: float,
                out: list[Tx]) -> None:
        if h.flags & FLAG_STOP:
            self._on_stop(h, data, now, out)
        elif h.flags & FLAG_STOP_OK:
            self._on_stop_ok(h, now, out)
        else:
            super()._on_ack(h, data, now, out)

    def _stop_ok(self, msg: int, lo: int, hi: int, msg_len: int, ev: int, now: float) -> Tx:
        buf = bytearray(HEADER_LEN)
        pack_header(buf, ACK, FLAG_STOP_OK, self.conn, lo, msg, hi, msg_len, ev, 0, _ns(now))
        return (ev, buf)

    def _on_stop(self, h: wire.Header, data: bytes | memoryview, now: float,
                 out: list[Tx]) -> None:
        msg = h.msg
        st = self.tx.get(msg)
        if st is None:
            prev = self.tx_stopped.get(msg)
            if prev is None:  # never sent: remember, so a later post_send ends at once
                self.stats["stop_unknown"] += 1
                prev = self.tx_stopped[msg] = (0, 0, h.msg_len)
            else:
                self.stats["stop_dup"] += 1
            out.append(self._stop_ok(msg, prev[0], prev[1], prev[2], h.ev, now))
            return
        om = st.om
        nch = om.npkts
        if h.msg_len != om.nbytes or h.length != (nch + 7) // 8:
            self.stats["stop_bad"] += 1
            return
        bitmap = memoryview(data)[HEADER_LEN:HEADER_LEN + h.length]
        inflight = self.inflight
        for p in st.pkts:  # forget every chunk still out (delivered or not)
            q = inflight.get(p.psn)
            if q is p:
                del inflight[p.psn]
                if not p.lost:
                    self.bytes_in_flight -= HEADER_LEN + p.length
        if om in self.sendq:
            self.sendq.remove(om)
        om.done = True
        del self.out_msgs[msg]
        del self.tx[msg]
        lo = st.pkts[0].psn if st.pkts else 0
        hi = lo + len(st.pkts)
        self.tx_stopped[msg] = (lo, hi, om.nbytes)
        if len(self.tx_stopped) > 64:  # forget those the receiver's cum ack has passed
            for k in [k for k, v in self.tx_stopped.items() if v[1] <= self.snd_una and v[1]]:
                del self.tx_stopped[k]
        mtu = self.cfg.mtu_payload
        got = [i for i in range(nch) if _bit(bitmap, i)]
        missing = tuple(i for i in range(nch) if not _bit(bitmap, i))
        nbytes = sum(min(mtu, om.nbytes - i * mtu) for i in got)
        self._done.append(Completion(msg, "send", True, nbytes, now, None, len(got) / nch,
                                     missing, bool(h.offset)))
        self.stats["rx_stop"] += 1
        out.append(self._stop_ok(msg, lo, hi, om.nbytes, h.ev, now))
        self._pump(now, out)

    def _acked(self, p: SentPacket, now: float, touched: set[int]) -> int:
        size = super()._acked(p, now, touched)
        om = p.om
        st = self.tx.get(om.msg)
        if st is not None and st.needed < om.npkts:
            self.tail_progress, self.tail_backoff = now, 0
            if not p.retx and p.seq > self.rack_seq:
                self.rack_seq, self.rack_rtt = p.seq, now - p.sent
        if st is not None and st.force and om.acked > st.park_acked:
            st.force = False  # progress again: back to "only what the bound needs"
        if om.done and om.acked == om.npkts:  # every chunk acked: MRC's completion
            self.tx.pop(om.msg, None)
        return size

    def _transmit(self, p: SentPacket, ev: int, now: float, out: list[Tx], flags: int) -> bytearray:
        st = self.tx.get(p.om.msg)
        if st is not None and not flags:  # first transmission
            st.pkts.append(p)
        buf = super()._transmit(p, ev, now, out, flags)
        if st is not None and st.needed < st.om.npkts:
            self.bq.append((p.seq, p.psn))
        return buf

    # ---- sender: loss detection of bounded chunks --------------------------------------------
    #
    # MRC learns a loss on a path the burst silenced only by its RTO (nothing later on that
    # path is acknowledged), and that path's RTO has grown with the queue. A bounded
    # chunk is judged against what a *healthy* path takes now instead: the RTT of the
    # latest-sent chunk acknowledged (``rack_rtt``, as RACK). Declaring a chunk lost only
    # takes it out of flight (the window is not cut: no ``cc`` call); whether it is
    # resent is ``_may_retransmit``'s decision (only what the bound needs).

    def _reo(self) -> float:
        cfg = self.cfg
        return max(cfg.reorder_min, cfg.reorder_frac * self.rack_rtt)

    def _live_bq(self) -> SentPacket | None:
        return self._live_head(self.bq)

    def _pto(self) -> float:
        ref = max(self.rack_rtt, self.srtt.srtt) or self.cfg.rto_init
        return min(self.cfg.rto_max, (2 * ref + self._reo()) * (1 << self.tail_backoff))

    def _tail_deadline(self) -> float:
        """B (tail): nothing acked for a PTO (2 healthy RTTs, doubling while nothing is
        acked) after the oldest bounded chunk out was sent: the ones older than a PTO are
        lost (the end of a round, or every path silent: no later chunk can reveal them)."""
        p = self._live_bq()
        if p is None:
            return INF
        return max(p.sent, self.tail_progress) + self._pto()

    def _tail_fire(self, now: float) -> None:
        lim = now - self._pto()
        self.tail_backoff += 1
        while (p := self._live_bq()) is not None and p.sent <= lim:
            self.bq.popleft()
            self._lose(p, now, NACK, "loss_dblp_tail")
        self.stats["dblp_tail_fired"] += 1

    def _need(self, st: _Tx) -> list[int]:
        """[acked, in flight + not yet sent] of a message (cached for one pump)."""
        c = self._need_cache.get(st.om.msg)
        if c is None:
            inflight = self.inflight
            out = sum(1 for p in st.pkts if not p.lost and inflight.get(p.psn) is p)
            c = [st.om.acked, out + st.om.npkts - len(st.pkts)]
            self._need_cache[st.om.msg] = c
        return c

    def _may_retransmit(self, p: SentPacket) -> bool:
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
            st.park_check = self._pump_now + self._rto_any()
            st.park_acked = st.om.acked
        return False

    def _pump(self, now: float, out: list[Tx]) -> None:
        self._pump_now = now
        self._need_cache.clear()
        for st in self.tx.values():  # bring parked chunks back if the bound needs them
            if st.parked:
                acked, flying = self._need(st)
                k = st.needed - acked - flying
                while k > 0 and st.parked:
                    psn = st.parked.pop()
                    p = self.inflight.get(psn)
                    if p is not None and p.lost:
                        self.retxq.appendleft(psn)
                        k -= 1
        super()._pump(now, out)
        self._need_cache.clear()

    def _fail(self, now: float, error: str) -> None:
        super()._fail(now, error)
        self.tx.clear()
        self.rx.clear()
        self.rx_chunks.clear()
        self.rx_last.clear()
        self.closed.clear()


def _check_bound(bound: object) -> None:
    if bound is not None and not isinstance(bound, LossBound):
        raise TypeError(f"bound must be a LossBound or None, not {type(bound).__name__}")
