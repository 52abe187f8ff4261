"""The receiver's port of the fake network (fakenet.py): one FIFO that every datagram of a
direction crosses, whatever its EV, with tail drop and other traffic entering it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["Port"]


@dataclass
class Port:
    """A FIFO shared by every EV of one direction (a receiver's port), tail drop."""

    rate: float  # bytes/s
    buffer: int  # bytes it holds
    delay: float = 0.0  # after it (the last link's propagation)
    frames: int | None = None  # datagrams it holds whatever their size (None: no limit)
    busy_until: float = 0.0
    dropped: int = 0  # datagrams of the connection dropped here
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
