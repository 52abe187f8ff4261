"""The receiver's port of the fake network (fakenet.py): one FIFO that every datagram of a
direction crosses, whatever its EV, with tail drop and other traffic entering it, and the
congestion signals of a switch port (topologies/signals.py): ECN marking above a backlog
and trimming of what does not fit (``mark_or_trim``)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from transports.core.wire import DATA, FLAG_CE, FLAG_TRIM_OK, FLAG_TRIMMED, HEADER_LEN

_FLAGS = slice(2, 4)  # the wire header's flags (big-endian u16)


def _flags(data: bytes) -> int:
    return int.from_bytes(data[_FLAGS], "big")


def with_flags(data: bytes, add: int) -> bytes:
    """``data`` with header flags ``add`` set."""
    return data[:2] + (_flags(data) | add).to_bytes(2, "big") + data[4:]


def trimmable(data: bytes) -> bool:
    """A DATA packet whose sender allowed a switch to trim it."""
    return len(data) > HEADER_LEN and data[1] == DATA and bool(_flags(data) & FLAG_TRIM_OK)


def trimmed(data: bytes) -> bytes:
    """What a trimming switch forwards of ``data``: its header, with FLAG_TRIMMED."""
    return with_flags(data[:HEADER_LEN], FLAG_TRIMMED)


def marked(data: bytes) -> bytes:
    """``data`` marked CE (as the receiving NIC reports it: FLAG_CE in the header)."""
    return with_flags(data, FLAG_CE)

__all__ = ["Port", "marked", "trimmable", "trimmed", "with_flags"]


@dataclass
class Port:
    """A FIFO shared by every EV of one direction (a receiver's port), tail drop."""

    rate: float  # bytes/s
    buffer: int  # bytes it holds
    delay: float = 0.0  # after it (the last link's propagation)
    frames: int | None = None  # datagrams it holds whatever their size (None: no limit)
    mark: int | None = None  # ECN: DATA entering above this backlog (bytes) is marked CE
    trim: bool = False  # DATA with FLAG_TRIM_OK that does not fit goes on trimmed, ahead
    busy_until: float = 0.0
    dropped: int = 0  # datagrams of the connection dropped here
    marked: int = 0  # ... marked CE here
    trimmed: int = 0  # ... trimmed here
    other_bytes: int = 0  # other traffic that entered ...
    other_dropped: int = 0  # ... and the part of it dropped
    starts: deque[float] = field(default_factory=deque)  # queued datagrams' dequeue times

    def backlog(self, now: float) -> float:
        """Bytes queued at ``now``."""
        return max(0.0, self.busy_until - now) * self.rate

    def enqueue(self, nbytes: int, now: float) -> float | None:
        """``nbytes`` arrive at ``now``: the time they leave, None if they do not fit."""
        if self.backlog(now) + nbytes > self.buffer:
            return None
        start = max(now, self.busy_until)
        if self.frames is not None:
            q = self.starts
            while q and q[0] <= now:  # a datagram leaves the queue when it starts out
                q.popleft()
            if len(q) >= self.frames:
                return None
            q.append(start)
        self.busy_until = start + nbytes / self.rate
        return self.busy_until
