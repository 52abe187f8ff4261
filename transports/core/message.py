"""Message bookkeeping shared by the transport cores: segmentation and direct placement.

Sender side: a message of ``n`` bytes becomes packets of at most ``mtu_payload``
bytes, each naming (msg, offset, length); a 0-byte message is one empty packet.
``OutMsg`` counts acknowledged packets and completes when all are acknowledged.

Receiver side (``Reassembly``): every DATA payload is copied straight into the
message's buffer at its offset (memoryview slice assignment, no reorder buffer).
Each message keeps an exact set of received byte ranges (``IntervalSet``), so a
byte is counted once however often (or however overlapped) it arrives, and the
message completes when every byte has been placed.

Data for a message that was not posted yet: the bytes go into a bytearray of the
message's length allocated on first arrival, as long as the core's total of such
unposted bytes, each message also charged ``UNPOSTED_MSG_COST`` for its
bookkeeping, stays within ``unposted_limit`` (beyond it the packet is dropped,
counted as ``unposted_limit``, and *not acknowledged*, so the sender retransmits
it later). When ``post_recv`` comes, what was received is **copied** into the
posted buffer and placement continues there; a message that completed before it
was posted completes at ``post_recv`` time. Completions therefore always refer to
the caller's buffer.

The payload handed to ``place`` may be a view of the driver's receive buffer:
it is copied before ``place`` returns and never retained.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from transports.core import wire
from transports.core.api import Completion, Tx
from transports.native.packet import IntervalSet as IntervalSet  # re-exported

# place() results
PLACED, DUPLICATE, DROPPED = 0, 1, 2
# What an unposted message costs against ``unposted_limit`` besides its bytes: its
# bookkeeping (~700 B measured), so a peer cannot grow it with 0-byte messages for free
UNPOSTED_MSG_COST = 768


# ``IntervalSet`` (disjoint half-open integer ranges, merged on insertion: byte offsets or
# PSNs) is compiled (transports/native/packet.pyx): every DATA packet and SACK block goes
# through one. ``add(a, b)`` returns the sub-ranges not covered before; ``starts`` and
# ``ends`` are plain lists; ``ranges()``, ``covered()``, ``in``, ``pop_front_from(x)``,
# ``discard_below(x)``.


def segments(nbytes: int, mtu_payload: int) -> list[tuple[int, int]]:
    """(offset, length) of each packet of a message; a 0-byte message is one empty packet."""
    if nbytes == 0:
        return [(0, 0)]
    return [(off, min(mtu_payload, nbytes - off)) for off in range(0, nbytes, mtu_payload)]


def npackets(nbytes: int, mtu_payload: int) -> int:
    return max(1, -(-nbytes // mtu_payload))


class OutMsg:
    """A message being sent: its bytes (not copied: the caller keeps them until completion).

    ``order``, if set, is the order its packets first leave in (chunk indices, each once:
    a bounded-loss round's own order, transports/core/dblp/connection.py); None: by
    offset. ``nsent`` counts those first transmissions."""

    __slots__ = ("msg", "data", "nbytes", "npkts", "acked", "next_off", "done", "t_post",
                 "order", "nsent")

    def __init__(self, msg: int, data: bytes | memoryview, mtu_payload: int, now: float) -> None:
        self.msg = msg
        view = memoryview(data)
        self.data = view if view.ndim == 1 and view.itemsize == 1 else view.cast("B")
        self.nbytes = len(self.data)
        self.npkts = npackets(self.nbytes, mtu_payload)
        self.acked = 0  # packets acknowledged
        self.next_off = 0  # next byte to packetise
        self.done = False
        self.t_post = now
        self.order: Sequence[int] | None = None
        self.nsent = 0

    def __repr__(self) -> str:
        return f"OutMsg(msg={self.msg}, nbytes={self.nbytes}, acked={self.acked}/{self.npkts})"


class RecvMsg:
    """A message being received: where its bytes go and which ranges have arrived."""

    __slots__ = ("msg", "buf", "msg_len", "got", "nbytes", "seen", "posted", "own")

    def __init__(self, msg: int, buf: memoryview, msg_len: int, posted: bool,
                 own: bytearray | None) -> None:
        self.msg = msg
        self.buf = buf
        self.msg_len = msg_len
        self.got = IntervalSet()
        self.nbytes = 0
        self.seen = False  # any packet (0-byte messages complete on their one packet)
        self.posted = posted
        self.own = own  # our bytearray while unposted

    def complete(self) -> bool:
        return self.seen and self.nbytes == self.msg_len


class CompletionSink(Protocol):
    """Where a part of a core reports finished messages (``Completions``, or a list)."""

    def append(self, c: Completion, /) -> None: ...


class Completions:
    """The messages a core finished since its owner last asked: each part of the core
    reports to it (``append``), the core's ``completions()`` drains it."""

    __slots__ = ("_done",)

    def __init__(self) -> None:
        self._done: list[Completion] = []

    def __len__(self) -> int:
        return len(self._done)

    def __repr__(self) -> str:
        return f"Completions({len(self._done)} waiting)"

    def append(self, c: Completion) -> None:
        """One more finished message."""
        self._done.append(c)

    def drain(self) -> list[Completion]:
        """Every finished message not yet drained, oldest first."""
        done = self._done
        self._done = []
        return done


class Reassembly:
    """Receive-side placement for one core (one connection direction)."""

    def __init__(self, unposted_limit: int, stats: dict[str, int],
                 completions: CompletionSink) -> None:
        self.unposted_limit = unposted_limit
        self.unposted_bytes = 0
        self.stats = stats
        self.out = completions
        self.msgs: dict[int, RecvMsg] = {}
        stats.setdefault("rx_data_bytes", 0)

    def __len__(self) -> int:
        return len(self.msgs)

    def __contains__(self, msg: int) -> bool:
        return msg in self.msgs

    def get(self, msg: int) -> RecvMsg | None:
        """Message ``msg`` being received (posted or not), None if none is."""
        return self.msgs.get(msg)

    def take(self, msg: int) -> RecvMsg:
        """Stop receiving message ``msg`` (its owner completes it): its state."""
        return self.msgs.pop(msg)

    def _count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    def post(self, msg: int, buf: bytearray | memoryview, now: float) -> None:
        """The caller's buffer for ``msg``; its length is the message's."""
        view = memoryview(buf)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        if view.readonly:
            self.out.append(Completion(msg, "recv", False, 0, now, "buffer is read-only"))
            return
        m = self.msgs.get(msg)
        if m is None:
            self.msgs[msg] = RecvMsg(msg, view, len(view), True, None)
            return
        if m.posted:
            self.out.append(Completion(msg, "recv", False, 0, now,
                                       f"message {msg} already posted"))
            return
        if m.msg_len != len(view):
            self.out.append(Completion(msg, "recv", False, 0, now,
                                       f"buffer of {len(view)} bytes for a message of "
                                       f"{m.msg_len} bytes"))
            return
        for s, e in m.got.ranges():  # copy what arrived before the post
            view[s:e] = m.buf[s:e]
        self.unposted_bytes -= m.msg_len + UNPOSTED_MSG_COST
        m.buf, m.own, m.posted = view, None, True
        if m.complete():
            del self.msgs[msg]
            self.out.append(Completion(msg, "recv", True, m.msg_len, now))

    def place(self, msg: int, offset: int, payload: memoryview, msg_len: int, now: float) -> int:
        """Copy one packet's payload into its message; PLACED, DUPLICATE or DROPPED."""
        m = self.msgs.get(msg)
        if m is None:
            cost = msg_len + UNPOSTED_MSG_COST
            if self.unposted_bytes + cost > self.unposted_limit:
                self._count("unposted_limit")
                return DROPPED
            own = bytearray(msg_len)
            m = RecvMsg(msg, memoryview(own), msg_len, False, own)
            self.msgs[msg] = m
            self.unposted_bytes += cost
        elif m.msg_len != msg_len:
            self._count("msg_len_mismatch")
            return DROPPED
        n = len(payload)
        end = offset + n
        if end > m.msg_len:  # wire.parse checks this against the header, but be exact
            self._count("bounds")
            return DROPPED
        first = not m.seen
        m.seen = True
        new = m.got.add(offset, end)
        if not new and not (first and n == 0):
            self._count("dup_bytes_pkt")
            return DUPLICATE
        buf = m.buf
        for s, e in new:
            buf[s:e] = payload[s - offset:e - offset]
            m.nbytes += e - s
        self.stats["rx_data_bytes"] += sum(e - s for s, e in new)
        if m.posted and m.complete():
            del self.msgs[msg]
            self.out.append(Completion(msg, "recv", True, m.msg_len, now))
        return PLACED

    def fail_all(self, error: str, now: float) -> None:
        """Fail every posted message (the connection is dead)."""
        for msg, m in list(self.msgs.items()):
            if m.posted:
                self.out.append(Completion(msg, "recv", False, m.nbytes, now, error))
                del self.msgs[msg]


class _MessageConfig(Protocol):
    @property
    def mtu_payload(self) -> int: ...


class MessageCore:
    """What MRC and RC share: posting messages and admitting datagrams.

    Subclasses provide ``conn``, ``cfg.mtu_payload``, ``failed`` (None or the
    error), ``reasm``, ``stats``, ``_done`` and the three methods below that
    raise NotImplementedError here.
    """

    # set by the subclass's __init__ (declarations only: no class attributes)
    conn: int
    cfg: _MessageConfig
    failed: str | None
    reasm: Reassembly
    stats: Counter[str]
    _done: Completions

    def _pump(self, now: float, out: list[Tx]) -> None:
        """Send what the window allows (provided by the subclass)."""
        raise NotImplementedError

    def _sending(self, msg: int) -> bool:
        """Whether message ``msg`` is being sent (provided by the subclass)."""
        raise NotImplementedError

    def _queue(self, om: OutMsg) -> None:
        """Queue ``om`` behind the messages being sent (provided by the subclass)."""
        raise NotImplementedError

    def completions(self) -> list[Completion]:
        """Messages finished since the last call (drained)."""
        return self._done.drain()

    def post_send(self, msg: int, data: bytes | memoryview, now: float) -> list[Tx]:
        """Queue message ``msg``; returns the datagrams that may leave at once."""
        if self.failed or self._sending(msg):
            err = self.failed or f"message {msg} is already being sent"
            self._done.append(Completion(msg, "send", False, 0, now, err))
            return []
        self._queue(OutMsg(msg, data, self.cfg.mtu_payload, now))
        out: list[Tx] = []
        self._pump(now, out)
        return out

    def post_recv(self, msg: int, buf: bytearray | memoryview, now: float) -> list[Tx]:
        """Give ``buf`` to message ``msg``: its bytes are placed there by offset."""
        if self.failed:
            self._done.append(Completion(msg, "recv", False, 0, now, self.failed))
            return []
        self.reasm.post(msg, buf, now)
        return []

    def _admit(self, data: bytes | memoryview) -> wire.Header | None:
        """The header of a datagram of this connection; None (counted) otherwise."""
        try:
            h = wire.parse(data)
        except wire.Malformed as e:
            self.stats["malformed_" + e.reason] += 1
            return None
        if h.conn != self.conn:
            self.stats["wrong_conn"] += 1
            return None
        return h
