"""DBLP: a bounded-loss mode of the MRC connection (sans-I/O), per message.

``DblpCore`` is an ``MrcCore`` (same spraying, path states, loss detection and
window) whose ``post_send`` / ``post_recv`` take an optional ``LossBound``. A
message is one training round; its chunks are its packets (chunk ``i`` is the
payload at offset ``i * mtu_payload``). ``bound=None``, or a tolerance of 0
without a deadline, is MRC's reliable behaviour, byte for byte.

DBLP is a policy plugged into the MRC core, not a second protocol engine:

- its receiving half (transports/core/dblp/recv.py ``BoundedReceiver``) decides when a
  bounded round may close (``needed = ceil((1 - tolerance) * chunks)`` placed and the
  sender's first pass over, a linger, or the deadline measured from ``post_recv``),
  completes it with ``delivered`` / ``missing`` / ``deadline``, and STOPs the sender
  until STOP_OK says which PSNs will never come;
- its sending half (transports/core/dblp/send.py ``BoundedSender``) decides what may be
  retransmitted (only what the bound needs; the rest is parked), declares a round's
  silent tail lost by a PTO, and completes a message on STOP with the receiver's
  bitmap.

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
from transports.core.dblp.recv import MAX_CHUNKS, BoundedReceiver
from transports.core.dblp.send import BoundedSender
from transports.core.message import OutMsg
from transports.core.mrc import MrcConfig, MrcCore
from transports.core.wire import FLAG_STOP

__all__ = ["MAX_CHUNKS", "DblpCore", "LossBound"]


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
                 rng_seed: int = 0, linger_s: float | None = None,
                 nics: Sequence[int] | None = None) -> None:
        cfg = config or MrcConfig()
        if linger_s is not None and not linger_s >= 0:
            raise ValueError(f"linger_s={linger_s!r} must be >= 0 seconds (or None: an RTO)")
        if not cfg.use_crc:
            raise ValueError("DBLP needs MrcConfig.use_crc=True: every chunk carries a CRC32")
        super().__init__(conn, evs, cfg, rng_seed, nics)
        self.bsend = BoundedSender(conn, cfg, self.stats, self._done, self.snd, self.flight,
                                   self.timeouts, self.loss)
        self.brecv = BoundedReceiver(conn, evs, cfg, self.stats, self._done, self.rcv,
                                     self.reasm, self.timeouts, linger_s)
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
        if self.failed or self._sending(msg):
            return super().post_send(msg, data, now)  # MRC's failure completions
        om = OutMsg(msg, data, self.cfg.mtu_payload, now)
        if not self.bsend.post(om, now, bound):
            return []
        self.snd.post(om)
        out: list[Tx] = []
        self._pump(now, out)
        return out

    def post_recv(self, msg: int, buf: bytearray | memoryview, now: float,
                  bound: LossBound | None = None) -> list[Tx]:
        """Give ``buf`` to message ``msg``, with loss bound ``bound`` (None: reliable)."""
        _check_bound(bound)
        if self.failed:
            return super().post_recv(msg, buf, now)
        return self.brecv.post(msg, buf, now, bound)


def _check_bound(bound: object) -> None:
    if bound is not None and not isinstance(bound, LossBound):
        raise TypeError(f"bound must be a LossBound or None, not {type(bound).__name__}")
