"""The streams of a driver's plan (soak runs): messages kept in flight on a connection
without a record per message.

An entry (transports/planrecord.py ``StreamPlan``: conn, kind "send" | "recv", size, msg0,
seeds, window, bound, until_s) keeps ``window`` messages of ``size`` bytes in flight on
its connection, ids ``msg0``, ``msg0 + 1``, ...; message k carries the bytes of
``seeds[k % len(seeds)]`` (generated once, before the start). :class:`SendStream` posts no message
after ``until_s``; :class:`RecvStream` checks every message against its seed's SHA-256
(bytes missing from a bounded DBLP round aside), then clears and reuses its buffers. Both
count (posted, ok, failed, bytes, ...) and report the ids still open.
"""

from __future__ import annotations

from transports.core.api import Completion
from transports.core.bound import LossBound
from transports.io.sockets import Conn
from transports.plan import message_bytes, placed_exactly
from transports.planrecord import StreamPlan

PAGE = 4096
MAX_STREAM_ERRORS = 5  # error strings a stream keeps (the rest are counted)


def prefault(buf: bytearray) -> None:
    """Touch every page of ``buf`` now: a first write during the run would fault it in and
    charge the fault to the transport's CPU (a training job reuses its buffers)."""
    buf[::PAGE] = bytes(len(range(0, len(buf), PAGE)))


def bound_arg(bound: LossBound | None) -> dict[str, LossBound]:
    """The ``bound=`` argument of a bounded-loss (DBLP) message, if the plan gives one."""
    return {} if bound is None else {"bound": bound}


class SendStream:
    """A send stream of the plan: ``window`` messages in flight until ``until_s``."""

    def __init__(self, spec: StreamPlan, conn: Conn) -> None:
        if spec.until_s is None:  # StreamPlan refuses a send stream without it
            raise ValueError(f"send stream {spec.conn}: until_s is required")
        self.conn = conn
        self.msg0, self.size = spec.msg0, spec.size
        self.window = spec.window
        self.until_s = spec.until_s
        self.bound = bound_arg(spec.bound)
        self.payloads = [message_bytes(seed, self.size) for seed in spec.seeds]
        self.next = 0  # messages posted
        self.posted_at: dict[int, float] = {}  # in flight: at most ``window``
        self.ok = self.failed = self.bytes = 0
        self.slowest_s = 0.0  # longest time a message took (post to completion)
        self.errors: list[str] = []
        self.finished = False

    def owns(self, msg: int) -> bool:
        return self.msg0 <= msg < self.msg0 + self.next

    def fill(self, now: float, t0: float, send) -> None:
        """Post messages while the window has room and ``until_s`` has not passed (nor
        a message failed: a failed connection would fail every later one at once)."""
        if self.failed or now - t0 >= self.until_s:
            self.finished = not self.posted_at
            return
        core, n = self.conn.core, len(self.payloads)
        while len(self.posted_at) < self.window:
            msg = self.msg0 + self.next
            self.next += 1
            self.posted_at[msg] = now
            send(self.conn, core.post_send(msg, self.payloads[(msg - self.msg0) % n], now,
                                           **self.bound))

    def complete(self, comp: Completion) -> None:
        self.slowest_s = max(self.slowest_s, comp.t - self.posted_at.pop(comp.msg, comp.t))
        if comp.ok:
            self.ok += 1
            self.bytes += comp.nbytes
        else:
            self.failed += 1
            if len(self.errors) < MAX_STREAM_ERRORS:
                self.errors.append(f"message {comp.msg}: {comp.error}")

    def report(self) -> dict:
        return {"conn": self.conn.core.conn, "kind": "send", "msg0": self.msg0,
                "size": self.size, "posted": self.next, "ok": self.ok,
                "failed": self.failed, "bytes": self.bytes,
                "open": sorted(self.posted_at), "slowest_s": round(self.slowest_s, 4),
                "errors": self.errors}

class RecvStream:
    """A receive stream of the plan: ``window`` receives posted, each checked on
    completion against the SHA-256 of its seed's bytes, its buffer then cleared and
    reused."""

    def __init__(self, spec: StreamPlan, conn: Conn, chunk: int) -> None:
        self.conn = conn
        self.msg0, self.size = spec.msg0, spec.size
        self.bound = bound_arg(spec.bound)
        self.tolerance = spec.bound.tolerance if spec.bound is not None else 0.0
        self.chunk = chunk
        self.refs = [message_bytes(seed, self.size) for seed in spec.seeds]
        self.zeros = bytes(self.size)
        self.free = [bytearray(self.size) for _ in range(spec.window)]
        for buf in self.free:  # faulted in now, not during the run
            prefault(buf)
        self.posted: dict[int, bytearray] = {}
        self.next = 0
        self.ok = self.failed = self.bytes = self.not_exact = 0
        self.missing_chunks = self.deadline_rounds = self.outside_bound = 0
        self.delivered_min = 1.0
        self.errors: list[str] = []

    def owns(self, msg: int) -> bool:
        return self.msg0 <= msg < self.msg0 + self.next

    def fill(self, now: float, send) -> None:
        """Post a receive into every free buffer (none once a receive failed)."""
        core = self.conn.core
        while self.free and not self.failed:
            buf = self.free.pop()
            msg = self.msg0 + self.next
            self.next += 1
            self.posted[msg] = buf
            send(self.conn, core.post_recv(msg, buf, now, **self.bound))

    def complete(self, comp: Completion) -> None:
        """Count and check one completed receive; its buffer is free again."""
        buf = self.posted.pop(comp.msg, None)
        if buf is None:  # a second completion of one message: a core's bug, not a loss
            self.failed += 1
            if len(self.errors) < MAX_STREAM_ERRORS:
                self.errors.append(f"message {comp.msg}: completed twice")
            return
        if not comp.ok:
            self.failed += 1
            if len(self.errors) < MAX_STREAM_ERRORS:
                self.errors.append(f"message {comp.msg}: {comp.error}")
        else:
            self.ok += 1
            self.bytes += comp.nbytes
            k = (comp.msg - self.msg0) % len(self.refs)
            missing = getattr(comp, "missing", ()) or ()
            self.missing_chunks += len(missing)
            exact = placed_exactly(buf, self.refs[k], missing, self.chunk)
            if not exact:
                self.not_exact += 1
                if len(self.errors) < MAX_STREAM_ERRORS:
                    self.errors.append(f"message {comp.msg}: bytes differ")
            delivered = getattr(comp, "delivered", 1.0)
            self.delivered_min = min(self.delivered_min, delivered)
            deadline = bool(getattr(comp, "deadline", False))
            self.deadline_rounds += deadline
            if delivered < 1.0 - self.tolerance - 1e-9 and not deadline:
                self.outside_bound += 1
        buf[:] = self.zeros
        self.free.append(buf)

    def _placed_exact(self, buf: bytearray, ref: bytes, missing: set[int]) -> bool:
        """Every chunk that was placed (all but ``missing``) equals the reference."""
        got, want, c = memoryview(buf), memoryview(ref), self.chunk
        return all(got[i:i + c] == want[i:i + c]
                   for i in range(0, self.size, c) if i // c not in missing)

    def report(self) -> dict:
        return {"conn": self.conn.core.conn, "kind": "recv", "msg0": self.msg0,
                "size": self.size, "posted": self.next, "ok": self.ok,
                "failed": self.failed, "bytes": self.bytes, "not_exact": self.not_exact,
                "missing_chunks": self.missing_chunks, "deadline_rounds": self.deadline_rounds,
                "outside_bound": self.outside_bound,
                "delivered_min": round(self.delivered_min, 6), "open": sorted(self.posted),
                "errors": self.errors}
