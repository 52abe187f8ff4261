"""The one event loop that runs a host's transport cores on its sockets.

Both the driver process (driver.py) and a training worker's engine thread (endpoint.py)
run this loop; each turn:

1. wait (``select``) for a datagram, one of the owner's descriptors (the driver's stdin,
   the engine's wake-up pipe), or the earliest timer of the cores, at most ``idle_s``
   (and never past ``until``);
2. measure how late a timer wake-up ran (the host's scheduling delay, which the cores
   add to their RTO floor: sockets.py ``HostSockets.woke``);
3. let the owner act on its descriptors (``on_ready``: new messages to post, a stop);
4. feed the datagrams waiting to their cores, whether or not ``select`` saw them (this
   process may have waited for the CPU since ``select`` returned, and an ACK that
   arrived meanwhile must reach its core before that core's timers are looked at);
5. run every core's timers due and hand each completion to the owner (``on_completion``).

Nothing here knows what the owner does with a completion; the loop reads the clock
(CLOCK_MONOTONIC) and passes ``now`` to the cores, which never read one.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from transports.core.api import Completion
from transports.io.sockets import Conn, HostSockets

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

INF = float("inf")

OnCompletion = Callable[[Conn, Completion], None]
OnReady = Callable[[list["FileDescriptorLike"], float], None]


class EventLoop:
    """A host's cores (``conns``) on its sockets (``socks``); completions go to
    ``on_completion``; without a timer armed, a turn waits at most ``idle_s``."""

    def __init__(self, socks: HostSockets, conns: dict[int, Conn],
                 on_completion: OnCompletion, idle_s: float) -> None:
        if not idle_s > 0:
            raise ValueError(f"EventLoop idle_s={idle_s!r} must be > 0 seconds")
        self.socks, self.conns = socks, conns
        self.on_completion = on_completion
        self.idle_s = idle_s
        self.wakeups = 0  # turns taken
        self.unknown = 0  # datagrams that named no connection of this host

    def __repr__(self) -> str:
        return (f"EventLoop(conns={sorted(self.conns)}, wakeups={self.wakeups}, "
                f"unknown={self.unknown})")

    def turn(self, fds: Sequence[FileDescriptorLike] = (), until: float = INF,
             on_ready: OnReady | None = None) -> float:
        """One turn (module docstring): ``fds`` are the owner's descriptors to watch,
        ``on_ready(readable, now)`` sees which of them are readable. Returns the time at
        which the timers were run."""
        socks, conns = self.socks, self.conns
        now = time.monotonic()
        wake = socks.next_wake(conns, now + self.idle_s)
        ready = select.select([socks.rx, *fds], [], [], max(0.0, min(wake, until) - now))[0]
        self.wakeups += 1
        now = time.monotonic()
        socks.woke(wake, now, conns)
        if on_ready is not None:
            on_ready(ready, now)
        self.unknown += socks.receive(conns)
        now = time.monotonic()
        send, done = socks.send, self.on_completion
        for conn in conns.values():
            core = conn.core
            d = core.next_deadline()
            if d is not None and d <= now:
                send(conn, core.on_timer(now))
            for comp in core.completions():
                done(conn, comp)
        return now
