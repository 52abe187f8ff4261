"""The fake network's cores woken as the engine wakes them (``FakeNet(tick_s=...)``).

The engine (transports/io/loop.py) never wakes sooner than one tick after its last
wake-up (transports/io/tick.py ``Coalescing``); a wake-up hands every datagram that
arrived since to its core with its arrival time (the kernel's receive timestamp), ends
the wake-up (``flush``: the coalesced ACK) and then runs the timers due. ``TickDrive``
does the same to the fake network's cores in virtual time, and keeps what a test checks:
each core's wake-ups, the datagrams each one carried, and how late each timer fired.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from transports.io.tick import Coalescing

if TYPE_CHECKING:
    from transports.testing.fakenet import FakeNet

INF = float("inf")


class TickDrive:
    """Wake-ups of ``net``'s cores at least ``tick_s`` apart."""

    def __init__(self, net: FakeNet, tick_s: float) -> None:
        self.net = net
        self.rule = Coalescing(tick_s)
        self.last: dict[str, float] = {}  # each core's last wake-up
        self.inbox: dict[str, list[tuple[bytes, float]]] = {}  # arrived, not yet handed over
        self.scheduled: dict[str, float] = {}  # each core's next wake-up for its inbox
        self.wakeups: Counter[str] = Counter()
        self.batches: list[int] = []  # datagrams handed over per wake-up that had any
        self.late: list[float] = []  # how late each timer fired (seconds)

    def __repr__(self) -> str:
        return (f"TickDrive(tick_s={self.rule.tick_s}, wakeups={sum(self.wakeups.values())}, "
                f"late_max={max(self.late, default=0.0):.6f})")

    def timer_at(self, name: str, deadline: float) -> float:
        """When core ``name`` wakes for its timer due at ``deadline``."""
        return self.rule.wake_at(self.last.get(name, -INF), deadline)

    def arrive(self, name: str, data: bytes, t: float) -> None:
        """A datagram reached core ``name``'s host at ``t``: it waits for the next wake-up."""
        self.inbox.setdefault(name, []).append((data, t))
        at = self.rule.wake_at(self.last.get(name, -INF), t)
        if self.scheduled.get(name, INF) > at:
            self.scheduled[name] = at
            self.net.at(at, lambda: self._due(name, at))

    def _due(self, name: str, at: float) -> None:
        if self.scheduled.get(name) == at:  # not taken by an earlier wake-up
            self.wake(name, at)

    def wake(self, name: str, t: float) -> None:
        """Core ``name`` wakes at ``t``: datagrams, the wake-up's ACK, then timers."""
        net, core = self.net, self.net.cores[name]
        self.scheduled.pop(name, None)
        self.last[name] = t
        self.wakeups[name] += 1
        box = self.inbox.pop(name, None)
        if box:
            self.batches.append(len(box))
            for data, arrived in box:
                net.send(name, core.on_packet(data, t, arrived))
            net.send(name, core.flush(t))
        d = core.next_deadline()
        if d is not None and d <= t:
            self.late.append(t - d)
            net.send(name, core.on_timer(t))
        net.collect(name)
