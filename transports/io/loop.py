"""The one event loop that runs hosts' transport cores on their sockets, in batches.

The driver process serves many hosts with it (transports/io/driver.py: one engine per
core of the machine), a training worker's engine thread one (transports/io/endpoint.py).
Each turn:

1. send what the owner queued since the last turn (posts, stream refills);
2. wait: never sooner than one tick after the last wake-up (``Coalescing``, tick.py:
   a NIC's interrupt moderation), then until a datagram arrives for any host, one of
   the owner's descriptors is readable, or the earliest timer of any core is due, at
   most ``idle_s`` (and never past ``until``);
3. let the owner act on its descriptors (``on_ready``: new messages to post, a stop);
4. serve each host in turn, the first one rotating from turn to turn (fairness):
   measure how late a timer wake-up ran (the host's scheduling delay: sockets.py
   ``HostSockets.woke``); feed its waiting datagrams to their cores in ``recvmmsg``
   batches, each with its kernel arrival time (a bounded number of batches, then the
   next host); end the wake-up for every core fed (``flush``: its coalesced ACK); run
   its cores' timers due; send everything queued in ``sendmmsg`` batches; then hand
   each completion to the owner (``on_completion``) and send what that queued.

A host's state is its own as if it ran in a process of its own: its sockets (made in its
namespace), cores, host delay, counters and internal errors. Nothing here knows what the
owner does with a completion; the loop reads the clock (CLOCK_MONOTONIC) and passes
``now`` to the cores, which never read one.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transports.core.api import Completion
from transports.io.sockets import Conn, HostSockets
from transports.io.tick import TICK_S, Coalescing

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

INF = float("inf")

OnCompletion = Callable[[Conn, Completion], None]
OnReady = Callable[[list["FileDescriptorLike"], float], None]


@dataclass
class Host:
    """One host served by the loop: its sockets, its connections and where its
    completions go."""

    socks: HostSockets
    conns: dict[int, Conn]
    on_completion: OnCompletion
    unknown: int = 0  # datagrams that named no connection of this host


class EventLoop:
    """Hosts' cores on their sockets; without a timer armed, a turn waits at most
    ``idle_s``; two wake-ups are at least ``tick_s`` apart. The first host may be given
    here (``socks``, ``conns``, ``on_completion``), more with ``add``."""

    def __init__(self, socks: HostSockets | None = None, conns: dict[int, Conn] | None = None,
                 on_completion: OnCompletion | None = None, idle_s: float = 0.05,
                 tick_s: float = TICK_S) -> None:
        if not idle_s > 0:
            raise ValueError(f"EventLoop idle_s={idle_s!r} must be > 0 seconds")
        self.idle_s = idle_s
        self.coalescing = Coalescing(tick_s)
        self.hosts: list[Host] = []
        self.wakeups = 0  # turns taken
        self.last = -INF  # when the last turn woke
        if socks is not None:
            if conns is None or on_completion is None:
                raise ValueError("EventLoop: a host needs its conns and on_completion")
            self.add(socks, conns, on_completion)

    def __repr__(self) -> str:
        return (f"EventLoop(hosts={len(self.hosts)}, tick_s={self.coalescing.tick_s}, "
                f"wakeups={self.wakeups}, unknown={self.unknown})")

    def add(self, socks: HostSockets, conns: dict[int, Conn],
            on_completion: OnCompletion) -> Host:
        """Serve one more host."""
        host = Host(socks, conns, on_completion)
        self.hosts.append(host)
        return host

    @property
    def socks(self) -> HostSockets:
        """The first host's sockets (a loop serving one host)."""
        return self.hosts[0].socks

    @property
    def unknown(self) -> int:
        """Datagrams that named no connection of their host, every host together."""
        return sum(h.unknown for h in self.hosts)

    def next_wake(self, default: float) -> float:
        """The earliest timer of every core of every host (``default``: none armed)."""
        return min((h.socks.next_wake(h.conns, default) for h in self.hosts), default=default)

    def turn(self, fds: Sequence[FileDescriptorLike] = (), until: float = INF,
             on_ready: OnReady | None = None) -> float:
        """One turn (module docstring): ``fds`` are the owner's descriptors to watch,
        ``on_ready(readable, now)`` sees which of them are readable. Returns the time at
        which the turn woke."""
        hosts = self.hosts
        for h in hosts:
            h.socks.flush()
        now = time.monotonic()
        gap_end = self.coalescing.earliest(self.last)
        if now < gap_end:  # interrupt moderation: what arrives meanwhile waits for the tick
            time.sleep(max(0.0, min(gap_end, until) - now))
            now = time.monotonic()
        wake = self.next_wake(now + self.idle_s)
        rxs = [h.socks.rx for h in hosts]
        ready = select.select([*rxs, *fds], [], [], max(0.0, min(wake, until) - now))[0]
        self.wakeups += 1
        now = self.last = time.monotonic()
        if on_ready is not None:
            on_ready([fd for fd in ready if fd in fds], now)
        n = len(hosts)
        first = self.wakeups % n if n else 0
        for i in range(n):
            h = hosts[(first + i) % n]
            self._serve(h, h.socks.rx in ready, wake, now)
        return now

    def _serve(self, h: Host, readable: bool, wake: float, now: float) -> None:
        """One host's part of a turn (module docstring, step 4)."""
        socks, conns, done = h.socks, h.conns, h.on_completion
        socks.woke(wake, now, conns)
        send = socks.send
        due = False
        if not readable:  # an ACK may have come since the wait: read it before any timer
            for conn in conns.values():
                d = conn.core.next_deadline()
                if d is not None and d <= now:
                    due = True
                    break
        if readable or due:
            touched: set[int] = set()
            h.unknown += socks.receive(conns, now, touched)
            for cid in touched:
                conn = conns[cid]
                send(conn, conn.core.flush(now))
        for conn in conns.values():
            core = conn.core
            d = core.next_deadline()
            if d is not None and d <= now:
                send(conn, core.on_timer(now))
        # out before the owner acts on completions: checking a received message takes
        # milliseconds, and the ACK that completes its sender must not wait for it (it did:
        # the sender's RTO fired and probed at the end of every transfer)
        socks.flush()
        for conn in conns.values():
            for comp in conn.core.completions():
                done(conn, comp)
        socks.flush()
