"""DBLP's receiving side: when a bounded round may close, and the STOP that ends it.

``BoundedReceiver`` is the receiver part of the DBLP policy (connection.py).
A bounded message (posted with a non-reliable ``LossBound``) completes (ok=True) when
``needed`` of its chunks are placed, or when its deadline fires (measured from
``post_recv``), whichever comes first. With ``close = "needed"`` (the default: the DBLP
prototype's rule) it closes at the needed-th chunk, before the sender's first pass is
over if the tolerance allows; with ``close = "first_pass"`` the needed chunks must be
joined by the end of that pass (its FLAG_LAST chunk placed), or ``linger`` after it
had them (until the first pass should be over at the arrival rate seen so far, at
most an RTO; ``linger_s`` fixes it). The Completion says ``delivered``, ``missing``
and ``deadline``.

Then the sender is told to stop: an ACK with FLAG_STOP naming the message, carrying the
bitmap of the chunks placed. It is resent when DATA of that message still arrives (at
most once per smoothed RTT: data the sender had out before the STOP reached it keeps
arriving for an RTT, and says nothing of the STOP's fate) and on a timer (``rto_init``
doubling to ``rto_max``) until FLAG_STOP_OK comes back. STOP_OK names the PSN range the
sender will never send again: only then are those PSNs counted as received
(``Receiver.mark_received``), so the cumulative ACK moves past the abandoned packets. A
STOP never answered after ``max_retries + 1`` sends and ``give_up_s`` fails the
connection (the cumulative ACK could never pass the abandoned PSNs: the connection would
otherwise wedge without a word).

Checks before placement: every chunk carries a CRC32 (``crc_bad`` otherwise) and is
exactly one chunk (``bad_chunk``); DATA of a closed message is ``late_data``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from transports.core import wire
from transports.core.api import Completion, Tx
from transports.core.message import CompletionSink, Reassembly, npackets
from transports.core.mrc.config import MrcConfig
from transports.core.receiver import Receiver
from transports.core.wire import ACK, FLAG_LAST, FLAG_STOP, HEADER_LEN, pack_header

if TYPE_CHECKING:
    from transports.core.bound import LossBound
    from transports.core.mrc.timeouts import Timeouts

INF = float("inf")
MAX_CHUNKS = 8 * wire.MAX_PAYLOAD  # the STOP bitmap is one datagram


class _Rx:
    """Receiver state of one bounded, posted message."""

    __slots__ = ("needed", "nchunks", "deadline_at", "linger_at", "first_at")

    def __init__(self, needed: int, nchunks: int, deadline_at: float) -> None:
        self.needed, self.nchunks, self.deadline_at = needed, nchunks, deadline_at
        self.linger_at = INF  # enough chunks, but the last one of the first pass not seen
        self.first_at = INF  # when its first chunk was placed


class _Closed:
    """A message the receiver completed early: its STOP until STOP_OK arrives."""

    __slots__ = ("msg", "msg_len", "bitmap", "deadline", "tries", "resend_at", "backoff",
                 "first_at", "sent_at")

    def __init__(self, msg: int, msg_len: int, bitmap: bytes, deadline: bool,
                 now: float) -> None:
        self.msg, self.msg_len, self.bitmap, self.deadline = msg, msg_len, bitmap, deadline
        self.tries = 0
        self.resend_at = INF
        self.backoff = 0.0
        self.first_at = now
        self.sent_at = -INF  # the last time the STOP was sent


class BoundedReceiver:
    """The receiving half of DBLP over one MRC core's receiver ``rcv`` and placement
    ``reasm`` (connection ``conn`` over ``evs`` EVs; ``timeouts``: the core's, whose RTO
    times lingers and STOP resends; finished messages go to ``done``)."""

    def __init__(self, conn: int, evs: int, cfg: MrcConfig, stats: Counter[str],
                 done: CompletionSink, rcv: Receiver, reasm: Reassembly, timeouts: Timeouts,
                 linger_s: float | None, close: str = "needed") -> None:
        self.conn, self.evs, self.cfg, self.stats, self.done = conn, evs, cfg, stats, done
        self.rcv, self.reasm, self.timeouts = rcv, reasm, timeouts
        self.linger_s = linger_s
        self.at_needed = close == "needed"  # close at the needed-th chunk (config.CLOSES)
        self.rx: dict[int, _Rx] = {}
        self.rx_chunks: dict[int, set[int]] = {}
        self.rx_last: set[int] = set()  # messages whose FLAG_LAST chunk was placed
        self.closed: dict[int, _Closed] = {}

    def __repr__(self) -> str:
        return f"BoundedReceiver(open={sorted(self.rx)}, closed={sorted(self.closed)})"

    def state_sizes(self) -> dict[str, int]:
        """Its containers a soak watches (transports/io/footprint.py)."""
        return {"dblp_rx": len(self.rx), "dblp_closed": len(self.closed)}

    def post(self, msg: int, buf: bytearray | memoryview, now: float,
             bound: LossBound | None) -> list[Tx]:
        """``post_recv`` with a bound: MRC's placement, plus the round's close rule."""
        nchunks = npackets(memoryview(buf).nbytes, self.cfg.mtu_payload)
        if bound is not None and not bound.reliable and nchunks > MAX_CHUNKS:
            self.done.append(Completion(msg, "recv", False, 0, now,
                                        f"a bounded message has at most {MAX_CHUNKS} chunks, "
                                        f"not {nchunks}"))
            return []
        before = self.reasm.get(msg)
        self.reasm.post(msg, buf, now)
        m = self.reasm.get(msg)
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

    def on_data(self, h: wire.Header, data: bytes | memoryview, now: float,
                out: list[Tx]) -> None:
        """A DATA packet: checked as a chunk, placed by the MRC receiver, then counted."""
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
            if now - cl.sent_at >= (self.timeouts.srtt.srtt or self.cfg.rto_init):
                self._send_stop(cl, now, out, timer=False, ev=h.ev)
            return
        if not self.rcv.on_data(h, data, now, out):
            return
        if msg not in self.reasm:  # completed (every byte): reliable completion
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

    def _check(self, msg: int, now: float, out: list[Tx]) -> None:
        """Close ``msg`` if it has its needed chunks: at once (close = "needed"), or once
        the sender's first pass is over (its last chunk placed) or ``linger`` after."""
        r = self.rx[msg]
        if len(self.rx_chunks.get(msg, ())) < r.needed:
            return
        if self.at_needed or msg in self.rx_last or now >= r.linger_at:
            self._close(msg, now, False, out)
        elif r.linger_at == INF:
            if self.linger_s is not None:
                r.linger_at = now + self.linger_s
            else:  # until the first pass should be over at the arrival rate seen, <= an RTO
                n = len(self.rx_chunks[msg])
                end = r.first_at + (now - r.first_at) * r.nchunks / n if r.first_at < now \
                    else INF  # (chunks placed before post_recv: no rate to go by)
                r.linger_at = min(now + self.timeouts.rto_any(), end)
                if r.linger_at <= now:
                    self._close(msg, now, False, out)

    def _close(self, msg: int, now: float, deadline: bool, out: list[Tx]) -> None:
        """Complete bounded message ``msg`` with what it has; STOP the sender."""
        r = self.rx.pop(msg)
        m = self.reasm.take(msg)
        chunks = self.rx_chunks.pop(msg, set())
        self.rx_last.discard(msg)
        nch = r.nchunks
        missing = tuple(i for i in range(nch) if i not in chunks)
        self.done.append(Completion(msg, "recv", True, m.nbytes, now, None,
                                    len(chunks) / nch, missing, deadline))
        self.stats["rx_bounded_done"] += 1
        if not missing:
            return
        bitmap = bytearray((nch + 7) // 8)
        for i in chunks:
            bitmap[i >> 3] |= 1 << (i & 7)
        cl = _Closed(msg, m.msg_len, bytes(bitmap), deadline, now)
        cl.backoff = self.timeouts.rto_any()
        self.closed[msg] = cl
        self._send_stop(cl, now, out, timer=False)

    def _send_stop(self, cl: _Closed, now: float, out: list[Tx], timer: bool,
                   ev: int | None = None) -> None:
        if timer:
            cl.backoff = min(self.cfg.rto_max, 2 * cl.backoff)
        cl.tries += 1
        cl.resend_at = now + cl.backoff
        cl.sent_at = now
        if ev is None:  # another path on each retry
            ev = (self.rcv.last_ev + cl.tries - 1) % self.evs
        payload = cl.bitmap
        buf = bytearray(HEADER_LEN + len(payload))
        pack_header(buf, ACK, FLAG_STOP, self.conn, 0, cl.msg, int(cl.deadline),
                    cl.msg_len, ev, len(payload), _ns(now))
        buf[HEADER_LEN:] = payload
        self.stats["tx_stop"] += 1
        out.append((ev, buf))

    def on_stop_ok(self, h: wire.Header, now: float, out: list[Tx]) -> None:
        """The sender will never send PSNs [h.psn, h.offset) again: count them received."""
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
        ack = self.rcv.mark_received(lo, hi, now)
        if ack is not None:
            out.append(ack)

    def on_timer(self, now: float, out: list[Tx]) -> str | None:
        """Deadlines, lingers and STOP resends due; the error if the connection must fail
        (a STOP never answered)."""
        for msg in [k for k, r in self.rx.items() if r.deadline_at <= now]:
            self.stats["deadline_fired"] += 1
            self._close(msg, now, True, out)
        for msg in [k for k, r in self.rx.items() if r.linger_at <= now]:
            self._close(msg, now, False, out)
        cfg = self.cfg
        for cl in list(self.closed.values()):
            if cl.resend_at > now:
                continue
            if cl.tries > cfg.max_retries and now - cl.first_at >= cfg.give_up_s:
                self.stats["stop_given_up"] += 1
                return (f"the peer never acknowledged the STOP of message {cl.msg} "
                        f"({cl.tries} sent over {now - cl.first_at:.3g} s)")
            self._send_stop(cl, now, out, timer=True)
        return None

    def next_deadline(self) -> float:
        e = min((min(r.deadline_at, r.linger_at) for r in self.rx.values()), default=INF)
        return min(e, min((c.resend_at for c in self.closed.values()), default=INF))

    def fail(self) -> None:
        self.rx.clear()
        self.rx_chunks.clear()
        self.rx_last.clear()
        self.closed.clear()


def _ns(now: float) -> int:
    return int(now * 1e9) & 0xFFFFFFFFFFFFFFFF
