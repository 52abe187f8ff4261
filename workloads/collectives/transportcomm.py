"""``Comm`` over this project's UDP transports (MRC, RC, DBLP) in a worker process.

The group's connections are planned by the parent (``plan_conns``: one MRC/DBLP
connection per rank pair over every SRv6 path of the pair; RC: one QP per
plane, as RoCE on a multi-plane NIC) and handed to each worker, which builds
its ``Endpoint`` from them. ``TransportComm`` numbers messages per peer and
direction (so matching schedules pair up), stripes RC messages over the planes'
QPs, and blocks in ``wait`` on a condition the engine thread signals.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from transports import registry
from transports.core.api import Completion
from transports.io.endpoint import Endpoint
from transports.plan import conn_spec
from transports.planrecord import ConnPlan
from workloads.collectives.comm import CommError, Handle

# The transports a Comm runs on: those with a userspace core (transports/registry.py)
UDP_TRANSPORTS = registry.names(lambda t: t.core is not None)


def conn_id(a: int, b: int, size: int, lane: int = 0) -> int:
    """The connection id of the rank pair {a, b} on ``lane`` (the same on both ends)."""
    lo, hi = min(a, b), max(a, b)
    return 1 + lane * size * size + lo * size + hi


def plan_conns(spec, transport: str, hosts: list[str]) -> list[dict[int, list[ConnPlan]]]:
    """Per rank: peer rank -> its connections' plan entries (one per lane)."""
    if transport not in UDP_TRANSPORTS:
        raise ValueError(f"transport={transport!r}: a Comm needs one of {UDP_TRANSPORTS}")
    lanes = spec.planes if registry.get(transport).caps.per_plane else 1
    size = len(hosts)
    return [{peer: [conn_spec(spec, transport, hosts[r], hosts[peer],
                              conn_id(r, peer, size, lane), lane) for lane in range(lanes)]
             for peer in range(size) if peer != r} for r in range(size)]


class TransportComm:
    """One rank's ``Comm`` on an ``Endpoint`` (see the module docstring)."""

    def __init__(self, transport: str, rank: int, size: int,
                 conns: Mapping[int, Sequence[ConnPlan]],
                 config: Any = None, seed: int = 0, stall_s: float = 120.0) -> None:
        if not stall_s > 0:
            raise ValueError(f"stall_s={stall_s!r}: must be > 0 seconds")
        self.transport = transport
        decl = registry.get(transport)
        # its settings (a plan's config dict, or settings already): typed from here on
        settings = decl.from_plan(config or {})
        self.bounded = decl.caps.bounded
        # a wait with no completion on this rank for stall_s raises with every connection's
        # state: far beyond any transport's give-up time (RC's give_up_s, MRC's retries)
        self.stall_s = float(stall_s)
        self._progress = time.monotonic()
        # the first failed message of this rank: every later wait raises it at once, as the
        # schedule is broken (a collective waits for its sends only at its end, so a failed
        # send would otherwise leave its peer's receive, and the whole group, waiting)
        self.failure: str | None = None
        self.rank, self.size = rank, size
        self.mtu_payload = int(settings.mtu_payload)
        self.lanes = {p: [c.conn for c in cs] for p, cs in conns.items()}
        self.endpoint = Endpoint(transport, [c for cs in conns.values() for c in cs], settings,
                                 seed)
        self._next = {(p, k): 1 for p in self.lanes for k in ("send", "recv")}
        self._cond = threading.Condition()
        self.bytes_sent = 0
        self.bytes_received = 0
        self.endpoint.start()

    def close(self, linger_s: float = 0.0) -> None:
        """Stop the engine, after ``linger_s`` of still answering the peers (as TCP's
        TIME-WAIT: a peer whose last packet or ACK was lost retransmits, and needs an
        answer to complete its own last message)."""
        if linger_s > 0 and self.endpoint.alive():
            time.sleep(linger_s)
        self.endpoint.close()

    def _check(self, peer: int, bound: Any) -> None:
        if peer not in self.lanes:
            raise ValueError(f"peer={peer!r} is not another rank of 0..{self.size - 1}")
        if bound is not None and not self.bounded:
            bounded = " or ".join(repr(n) for n in registry.names(lambda t: t.caps.bounded))
            raise ValueError(f"a bounded-loss message needs transport {bounded}, not "
                             f"{self.transport!r}")

    def _post(self, kind: str, peer: int, data: memoryview, bound: Any) -> Handle:
        self._check(peer, bound)
        key = (peer, kind)
        msg = self._next[key]
        self._next[key] = msg + 1
        conns = self.lanes[peer]
        h = Handle(peer, kind, len(data), time.monotonic())
        parts: list[Completion] = []
        n = len(data)
        k = len(conns)

        def on_done(comp: Completion) -> None:
            parts.append(comp)
            self._progress = time.monotonic()
            if not comp.ok and self.failure is None:
                with self._cond:
                    self.failure = (f"{kind} {'to' if kind == 'send' else 'from'} rank {peer} "
                                    f"(message {msg}) failed: {comp.error}")
                    self._cond.notify_all()
            if len(parts) == k:
                merged = parts[0] if k == 1 else _merge(parts)
                with self._cond:
                    h.completion = merged
                    self._cond.notify_all()

        post = self.endpoint.post_send if kind == "send" else self.endpoint.post_recv
        off = 0
        for lane, c in enumerate(conns):  # RC: an even stripe per plane's QP
            part = n // k + (1 if lane < n % k else 0)
            post(c, msg, data[off:off + part], on_done, bound)
            off += part
        if kind == "send":
            self.bytes_sent += n
        else:
            self.bytes_received += n
        return h

    def isend(self, peer: int, data: bytes | memoryview, bound: Any = None) -> Handle:
        return self._post("send", peer, memoryview(data).cast("B"), bound)

    def irecv(self, peer: int, buf: memoryview, bound: Any = None) -> Handle:
        view = memoryview(buf).cast("B")
        if view.readonly:
            raise ValueError("irecv needs a writable buffer")
        return self._post("recv", peer, view, bound)

    def wait(self, handles: list[Handle], timeout: float | None = None) -> None:
        """Block until all ``handles`` are done. CommError if any message of this rank
        failed (these or earlier ones), the engine died, ``timeout`` passed, or nothing
        completed for ``stall_s``."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not all(h.done for h in handles):
                if self.failure is not None:
                    raise CommError(f"rank {self.rank}: {self.failure}")
                if not self.endpoint.alive():
                    raise CommError("the transport engine stopped") from self.endpoint.error
                now = time.monotonic()
                left = min(1.0, self.stall_s) if end is None else min(1.0, end - now)
                if left <= 0:
                    waiting = [h for h in handles if not h.done]
                    raise CommError(f"timed out after {timeout} s waiting for {waiting}")
                if now - self._progress > self.stall_s:
                    waiting = [h for h in handles if not h.done]
                    raise CommError(f"rank {self.rank}: no message completed for "
                                    f"{now - self._progress:.0f} s (stall_s={self.stall_s:g}) "
                                    f"waiting for {waiting}; connections: "
                                    f"{self.endpoint.describe()}")
                self._cond.wait(left)
        for h in handles:
            c = h.completion
            if c is not None and not c.ok:
                raise CommError(f"{h.kind} {'to' if h.kind == 'send' else 'from'} rank "
                                f"{h.peer} failed: {c.error}")


def _merge(parts: list[Completion]) -> Completion:
    """One completion for a message striped over several QPs (RC is never bounded)."""
    bad = [p for p in parts if not p.ok]
    return Completion(parts[0].msg, parts[0].kind, not bad, sum(p.nbytes for p in parts),
                      max(p.t for p in parts), bad[0].error if bad else None)
