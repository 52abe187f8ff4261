"""DBLP: a bounded-loss mode of the MRC connection (sans-I/O), per message.

``DblpCore`` is an ``MrcCore`` (same spraying, path states, loss detection and
window) whose ``post_send`` / ``post_recv`` take an optional ``LossBound``. A
message is one training round; its chunks are its packets (chunk ``i`` is the
payload at offset ``i * mtu_payload``). ``bound=None``, or a tolerance of 0
without a deadline, is MRC's reliable behaviour, byte for byte.

DBLP is a policy plugged into the MRC core, not a second protocol engine:

- its receiving half (transports/core/dblp/recv.py ``BoundedReceiver``) decides when a
  bounded round may close (``needed = ceil((1 - tolerance) * chunks)`` placed: at once
  with ``close = "needed"``, the default and the DBLP prototype's rule, even before the
  sender's first pass is over; with ``close = "first_pass"`` once that pass is over too,
  or a linger after; or the deadline measured from ``post_recv``), completes it with
  ``delivered`` / ``missing`` / ``deadline``, and STOPs the sender until STOP_OK says
  which PSNs will never come;
- its sending half (transports/core/dblp/send.py ``BoundedSender``) decides what may be
  retransmitted (only what the bound needs; the rest is parked), declares a round's
  silent tail lost by a PTO, and completes a message on STOP with the receiver's
  bitmap: what was not sent yet never leaves (the sender stops sending what is no
  longer needed).

Send order. With ``close = "needed"`` a round closes as soon as its needed chunks are
in, so in a round without loss the last chunks of the first pass are the ones left
out. Sent by offset, those would be the same chunks every round (with error feedback
their values would never be delivered). A bounded round's first pass therefore starts
at a chunk drawn from its message id (``first_chunk``: a multiplicative hash) and wraps
around (``OutMsg.order``), so the chunks a round leaves out move from round to round.
Reliable messages, and ``close = "first_pass"``, go by offset (MRC byte for byte).

Congestion window. DBLP calls the NSCC window exactly where MRC does (ACK delay
samples, and ``on_timeout`` on an RTO blamed on a path) and nowhere else: parked
chunks arm no RTO and abandoned chunks are not losses, so a burst cuts the window at
most as MRC's for the same losses; tail-timer losses do not touch it. Abandoned bytes
leave ``bytes_in_flight`` at once. Blame and spurious retransmissions are MRC's
(transports/core/mrc/lossdetect.py).

Checks. Every DATA chunk must carry a CRC32 (``wire.crc32``); a bad one is counted
(``crc_bad``) and dropped before placement. Bounded messages carry their chunk bitmap
in one datagram, so they are limited to ``8 * MAX_PAYLOAD`` chunks (~565 MB at
8000 B). Both ends must use the same bound for a message (the tolerance policy runs
identically on every rank). Message ids must not be reused on a connection before the
previous use completed on both ends (round numbers are a good choice).
"""

from __future__ import annotations

from collections.abc import Sequence

from transports.core import wire
from transports.core.api import Tx
from transports.core.bound import LossBound
from transports.core.dblp.config import CLOSES
from transports.core.dblp.recv import MAX_CHUNKS, BoundedReceiver
from transports.core.dblp.send import BoundedSender
from transports.core.message import OutMsg
from transports.core.mrc import MrcConfig, MrcCore
from transports.core.wire import FLAG_STOP

__all__ = ["CLOSES", "MAX_CHUNKS", "DblpCore", "LossBound", "first_chunk", "rotated"]

_HASH = 2654435761  # Knuth's multiplicative hash (2^32 / the golden ratio)


def first_chunk(msg: int, nchunks: int) -> int:
    """The chunk a bounded round's first pass starts at: message ids that follow each
    other (rounds) start far apart."""
    return (msg * _HASH) % nchunks if nchunks > 1 else 0


def rotated(start: int, nchunks: int) -> range | list[int]:
    """Chunks ``start .. nchunks - 1`` then ``0 .. start - 1``."""
    if start == 0:
        return range(nchunks)
    return [*range(start, nchunks), *range(start)]


class DblpPolicy:
    """The two halves of DBLP as the core's policy (``MrcCore.policy``)."""

    def __init__(self, send: BoundedSender, recv: BoundedReceiver) -> None:
        self.send, self.recv = send, recv

    def on_data(self, h: wire.Header, data: bytes | memoryview, now: float,
                out: list[Tx]) -> None:
        self.recv.on_data(h, data, now, out)

    def on_control(self, h: wire.Header, data: bytes | memoryview, now: float,
                   out: list[Tx]) -> None:
        if h.flags & FLAG_STOP:
            self.send.on_stop(h, data, now, out)
        else:
            self.recv.on_stop_ok(h, now, out)

    def on_timer(self, now: float, out: list[Tx]) -> str | None:
        error = self.recv.on_timer(now, out)
        self.send.on_timer(now)  # lost chunks it queued leave with the core's pump
        return error

    def next_deadline(self) -> float:
        return min(self.send.next_deadline(), self.recv.next_deadline())

    def fail(self) -> None:
        self.send.fail()
        self.recv.fail()


class DblpCore(MrcCore):
    """One end of a DBLP connection (MRC with per-message loss bounds)."""

    def __init__(self, conn: int, evs: int, config: MrcConfig | None = None,
                 rng_seed: int = 0, linger_s: float | None = None, close: str = "needed",
                 nics: Sequence[int] | None = None) -> None:
        cfg = config or MrcConfig()
        if linger_s is not None and not linger_s >= 0:
            raise ValueError(f"linger_s={linger_s!r} must be >= 0 seconds (or None: an RTO)")
        if close not in CLOSES:
            raise ValueError(f"close={close!r} is invalid: must be one of "
                             f"{', '.join(repr(c) for c in CLOSES)}")
        if not cfg.use_crc:
            raise ValueError("DBLP needs MrcConfig.use_crc=True: every chunk carries a CRC32")
        super().__init__(conn, evs, cfg, rng_seed, nics)
        self.bsend = BoundedSender(conn, cfg, self.stats, self._done, self.snd, self.flight,
                                   self.timeouts, self.loss)
        self.brecv = BoundedReceiver(conn, evs, cfg, self.stats, self._done, self.rcv,
                                     self.reasm, self.timeouts, linger_s, close)
        self.close = close
        self.snd.use_policy(self.bsend)
        self.policy = DblpPolicy(self.bsend, self.brecv)

    def state_sizes(self) -> dict[str, int]:
        """MRC's containers a soak watches, and DBLP's (transports/io/footprint.py)."""
        sizes = super().state_sizes()
        sizes.update(self.bsend.state_sizes())
        sizes.update(self.brecv.state_sizes())
        return sizes

    def post_send(self, msg: int, data: bytes | memoryview, now: float,
                  bound: LossBound | None = None) -> list[Tx]:
        """Queue message ``msg`` with loss bound ``bound`` (None: reliable)."""
        _check_bound(bound)
        self._deadline_ok = False
        if self.failed or self._sending(msg):
            return super().post_send(msg, data, now)  # MRC's failure completions
        om = OutMsg(msg, data, self.cfg.mtu_payload, now)
        if not self.bsend.post(om, now, bound):
            return []
        if bound is not None and not bound.reliable and self.close == "needed":
            om.order = rotated(first_chunk(msg, om.npkts), om.npkts)
        self.snd.post(om)
        out: list[Tx] = []
        self._pump(now, out)
        return out

    def post_recv(self, msg: int, buf: bytearray | memoryview, now: float,
                  bound: LossBound | None = None) -> list[Tx]:
        """Give ``buf`` to message ``msg``, with loss bound ``bound`` (None: reliable)."""
        _check_bound(bound)
        self._deadline_ok = False
        if self.failed:
            return super().post_recv(msg, buf, now)
        return self.brecv.post(msg, buf, now, bound)


def _check_bound(bound: object) -> None:
    if bound is not None and not isinstance(bound, LossBound):
        raise TypeError(f"bound must be a LossBound or None, not {type(bound).__name__}")
