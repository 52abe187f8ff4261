"""A host's transport engine inside a long-running process (a training worker).

``Endpoint`` runs the sans-I/O cores of one host (one per connection, built as
the drivers build them) in a background thread that owns the UDP sockets, like
a NIC: it keeps acknowledging, retransmitting and probing while the process's
main thread computes. The main thread posts messages with ``post_send`` /
``post_recv`` and a callback; callbacks run in the engine thread once the
message's ``Completion`` is there, and must be quick.

Commands cross threads through a deque plus a wake-up pipe, so the engine never
polls; the cores are only ever touched by the engine thread.

    ep = Endpoint("mrc", conns=[conn_spec(spec, "mrc", "h0", "h1", 1)], config={...})
    ep.start()
    ep.post_recv(1, 7, buf, on_done)      # connection 1, message 7
    ep.close()
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from transports.core.api import Completion
from transports.io.loop import EventLoop
from transports.io.sockets import Conn, HostSockets
from transports.planrecord import ConnPlan
from transports.registry import make_core

OnDone = Callable[[Completion], None]


class EndpointError(RuntimeError):
    """The engine thread died (its exception is the cause) or was closed."""


class Endpoint:
    """One host's connections, sockets and engine thread."""

    def __init__(self, transport: str, conns: Sequence[ConnPlan], config: Any = None,
                 seed: int = 0, realtime: bool = True) -> None:
        self.transport = transport
        # The engine thread asks for the lowest SCHED_FIFO priority, as a NIC does not wait
        # for the CPU: an ACK then waits for the GIL, not behind the training's threads.
        # Whether it got it is reported (``realtime``, ``realtime_error``).
        self.want_realtime = realtime
        self.realtime = False
        self.realtime_error: str | None = None
        self.socks = HostSockets()
        self.conns: dict[int, Conn] = {}
        for c in conns:
            core = make_core(transport, c.conn, c.evs, config or {}, seed * 1000 + c.conn,
                             c.nics)
            self.conns[c.conn] = self.socks.conn(c, core)
        self.loop: EventLoop | None = None  # made by the engine thread
        self._cmds: deque[tuple] = deque()
        self._cb: dict[tuple[int, str, int], OnDone] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._stop = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="endpoint", daemon=True)

    # --- main thread ------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def post_send(self, conn: int, msg: int, data: bytes | memoryview, on_done: OnDone,
                  bound: Any = None) -> None:
        """Send ``data`` as message ``msg`` on ``conn``; ``on_done(completion)`` when acked."""
        self._post(("send", conn, msg, data, bound, on_done))

    def post_recv(self, conn: int, msg: int, buf: memoryview, on_done: OnDone,
                  bound: Any = None) -> None:
        """Place message ``msg`` of ``conn`` into ``buf``; ``on_done`` once it is complete."""
        self._post(("recv", conn, msg, buf, bound, on_done))

    def alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def stats(self) -> dict[int, dict]:
        """Each connection's core counters (a snapshot; read while the engine runs)."""
        return {c: dict(getattr(conn.core, "stats", {})) for c, conn in self.conns.items()}

    def describe(self) -> str:
        """Each connection's core state in one line (diagnostics; read while running)."""
        return "; ".join(f"{c}: {conn.core!r}" for c, conn in self.conns.items())

    def sent_per_ev(self) -> dict[int, list[int]]:
        return {c: list(conn.sent_per_ev) for c, conn in self.conns.items()}

    def close(self) -> None:
        """Stop the engine thread and close the sockets (messages in flight are dropped)."""
        self._stop = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self.socks.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _post(self, cmd: tuple) -> None:
        if not self.alive() and self._thread.ident is not None:
            raise EndpointError("the transport engine is not running") from self.error
        if cmd[1] not in self.conns:
            raise ValueError(f"connection {cmd[1]} does not exist: have {sorted(self.conns)}")
        self._cmds.append(cmd)
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (already woken) or closed

    # --- engine thread ------------------------------------------------------------------

    def _run(self) -> None:
        if self.want_realtime:
            try:  # this thread only (pid 0): the NIC's part of the process
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
                self.realtime = True
            except OSError as e:
                self.realtime_error = e.strerror
        try:
            self._loop()
        except BaseException as e:  # noqa: BLE001 - surfaced to the main thread by _post/alive
            self.error = e

    def _loop(self) -> None:
        self.loop = loop = EventLoop(self.socks, self.conns, self._completed, idle_s=0.5)
        wake = [self._wake_r]
        while not self._stop:
            loop.turn(wake, on_ready=self._commands)

    @property
    def unknown_conn(self) -> int:
        """Datagrams that named no connection of this host."""
        return self.loop.unknown if self.loop is not None else 0

    def _commands(self, readable: list, now: float) -> None:
        """The main thread's posts, taken with ``now`` (the wake-up pipe drained)."""
        if self._wake_r in readable:
            try:
                os.read(self._wake_r, 4096)
            except BlockingIOError:
                pass
        conns, send = self.conns, self.socks.send
        while self._cmds:
            kind, c, msg, data, bound, on_done = self._cmds.popleft()
            conn = conns[c]
            self._cb[(c, kind, msg)] = on_done
            extra = {"bound": bound} if bound is not None else {}
            if kind == "send":
                send(conn, conn.core.post_send(msg, data, now, **extra))
            else:
                send(conn, conn.core.post_recv(msg, data, now, **extra))

    def _completed(self, conn: Conn, comp: Completion) -> None:
        cb = self._cb.pop((conn.core.conn, comp.kind, comp.msg), None)
        if cb is not None:
            cb(comp)
