"""Collectives on N ranks over the fake network (``transports.testing.fakenet``), in virtual time.

``FakeCluster(transport, size)`` joins every pair of ranks with one connection of
the chosen sans-I/O core ("mrc", "rc" or "dblp", built by
``transports.registry.make_core`` as the real driver builds them), ``evs`` paths
per connection, each direction of each path a ``PathSpec`` (loss, reordering,
duplication, delay, rate) so tests can impair any pair of ranks. Each rank gets
a ``FakeComm`` (the ``Comm`` protocol of ``workloads.collectives.comm``).

``run(make_gen)`` runs one collective generator per rank (``make_gen(comm)``),
interleaved: a rank is resumed as soon as every handle it waits on is done;
when no rank can go on, the network runs until the next completion. It is
deterministic (seeded network and cores; ranks resumed in rank order). A
failed message raises ``CommError``; a collective that stops making progress
raises ``CollectiveStuck`` naming the ranks still waiting and on what, either at
once (nothing is left in flight or armed: the schedules deadlock) or at the
virtual-time limit.

    results = run_collective("dblp", 4, lambda c: ring_allreduce(c, bufs[c.rank]))
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, cast

from transports import registry
from transports.core.api import Completion
from transports.core.bound import LossBound
from transports.registry import make_core
from transports.testing.fakenet import FakeNet, PathSpec
from workloads.collectives.comm import CommError, Handle

# The transports with a userspace core (transports/registry.py): those a fake cluster runs
TRANSPORTS = registry.names(lambda t: t.core is not None)

# Timers scaled to the fake network's 10 us paths, so that recovering a lost packet costs
# virtual milliseconds, not the production defaults' tens of milliseconds (the tests of
# the cores use the same figures).
FAST_CONFIG: dict[str, dict[str, Any]] = {
    "mrc": {"rto_min": 200e-6, "rto_init": 1e-3, "probe_min": 200e-6, "probe_max": 5e-3},
    "dblp": {"rto_min": 200e-6, "rto_init": 1e-3, "probe_min": 200e-6, "probe_max": 5e-3},
    "rc": {"rto_min": 200e-6, "rto_init": 1e-3},
}

PathSpecs = PathSpec | Callable[[int, int], PathSpec]


class CollectiveStuck(RuntimeError):
    """No rank can go on: the schedules deadlock, or the virtual-time limit passed."""


class FakeComm:
    """One rank's ``Comm`` on a ``FakeCluster``.

    Messages are numbered per peer and direction from 1 (the message ids of the
    connection's core, so they are unique in each direction, as DBLP needs): the n-th
    ``isend`` to a peer is the peer's n-th ``irecv`` from this rank.
    """

    def __init__(self, cluster: FakeCluster, rank: int) -> None:
        self.cluster = cluster
        self.rank = rank
        self.size = cluster.size
        self.mtu_payload: int = cluster.mtu_payload
        self._next: dict[tuple[str, int], int] = {}

    def __repr__(self) -> str:
        return f"FakeComm(rank={self.rank}, size={self.size}, {self.cluster.transport})"

    def _check(self, peer: object, bound: object) -> None:
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < self.size:
            raise ValueError(f"peer={peer!r} must be a rank in 0..{self.size - 1}")
        if peer == self.rank:
            raise ValueError(f"peer={peer} is this rank: no connection to itself")
        if bound is None:
            return
        if not isinstance(bound, LossBound):
            raise TypeError(f"bound must be a LossBound or None, not {type(bound).__name__}")
        if not bound.reliable and not self.cluster.bounded:
            use = " or ".join(repr(n) for n in registry.names(lambda t: t.caps.bounded))
            raise CommError(f"transport {self.cluster.transport!r} has no bounded-loss "
                            f"messages (bound={bound}): use {use}")

    def _post(self, kind: str, peer: int, buf: bytes | memoryview,
              bound: LossBound | None) -> Handle:
        key = (kind, peer)
        msg = self._next.get(key, 1)
        self._next[key] = msg + 1
        cl = self.cluster
        net = cl.net
        name = cl.name(self.rank, peer)
        core = net.cores[name]
        h = Handle(peer, kind, memoryview(buf).nbytes, net.now)
        cl.pending[(name, kind, msg)] = h
        # a reliable bound is plain reliable messaging: only DBLP's cores take the argument
        kw = {"bound": bound} if bound is not None and cl.bounded else {}
        if kind == "send":
            txs = core.post_send(msg, buf, net.now, **kw)
        else:
            # only irecv posts "recv", and its buffer is a writable memoryview
            txs = core.post_recv(msg, cast(memoryview, buf), net.now, **kw)
        net.send(name, txs)
        net.done[name].extend(core.completions())  # one may be final already
        cl.dispatch()
        return h

    def isend(self, peer: int, data: bytes | memoryview, bound: LossBound | None = None
              ) -> Handle:
        """Send ``data`` (kept unchanged until the handle is done) as the next message."""
        self._check(peer, bound)
        return self._post("send", peer, data, bound)

    def irecv(self, peer: int, buf: memoryview, bound: LossBound | None = None) -> Handle:
        """Place the next message from ``peer`` into ``buf``."""
        self._check(peer, bound)
        return self._post("recv", peer, buf, bound)

    def wait(self, handles: list[Handle]) -> None:
        """Run the network until every handle is done (the other ranks' generators are not
        resumed: for one rank alone, or for messages the peers already posted)."""
        cl = self.cluster
        until = cl.net.now + cl.time_limit
        while not all(h.done for h in handles):
            cl.advance(until, {self.rank: handles})


class FakeCluster:
    """``size`` ranks over one ``FakeNet``, a connection of ``transport`` per pair.

    ``path`` is every path's ``PathSpec``, or ``path(src, dst)`` gives the spec of the
    direction src -> dst of every EV between two ranks. ``config`` overrides
    ``FAST_CONFIG[transport]`` (the core's config dataclass fields, e.g. ``mtu_payload``).
    ``time_limit``: virtual seconds a ``run`` (or ``wait``) may take.
    """

    def __init__(self, transport: str, size: int, *, evs: int = 4,
                 path: PathSpecs | None = None, config: dict[str, Any] | None = None,
                 seed: int = 0, time_limit: float = 10.0) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"transport={transport!r}: valid are {', '.join(TRANSPORTS)}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size={size!r} must be an int >= 1 (ranks)")
        if isinstance(evs, bool) or not isinstance(evs, int) or evs < 1:
            raise ValueError(f"evs={evs!r} must be an int >= 1 (paths per connection)")
        if not time_limit > 0:
            raise ValueError(f"time_limit={time_limit!r} must be > 0 virtual seconds")
        spec = PathSpec() if path is None else path
        if not isinstance(spec, PathSpec) and not callable(spec):
            raise TypeError(f"path must be a PathSpec or a function (src, dst) -> PathSpec, "
                            f"not {type(spec).__name__}")
        self.transport = transport
        self.bounded = registry.get(transport).caps.bounded  # its cores take loss bounds
        self.size = size
        self.evs = evs
        self.time_limit = time_limit
        self.config = {**FAST_CONFIG[transport], **(config or {})}
        self.net = FakeNet(seed)
        self.pending: dict[tuple[str, str, int], Handle] = {}
        self._seen: dict[str, int] = {}
        self._who: dict[str, tuple[int, int]] = {}
        self.mtu_payload = 0
        conn = 0
        for a in range(size):
            for b in range(a + 1, size):
                conn += 1
                # distinct, seed-derived core seeds: same seed, same run
                ca = make_core(transport, conn, evs, self.config, seed * 100_003 + 2 * conn)
                cb = make_core(transport, conn, evs, self.config, seed * 100_003 + 2 * conn + 1)
                fwd = [self._spec(spec, a, b)] * evs
                back = [self._spec(spec, b, a)] * evs
                self.net.connect(self.name(a, b), ca, self.name(b, a), cb, fwd, back)
                for x, y in ((a, b), (b, a)):
                    self._who[self.name(x, y)] = (x, y)
                    self._seen[self.name(x, y)] = 0
                self.mtu_payload = ca.cfg.mtu_payload  # type: ignore[attr-defined]
        if not self.mtu_payload:  # one rank: no core, but comm.mtu_payload must be real
            self.mtu_payload = int(self.config.get("mtu_payload", 8000))
        self.comms = [FakeComm(self, r) for r in range(size)]

    @staticmethod
    def _spec(spec: PathSpecs, src: int, dst: int) -> PathSpec:
        s = spec if isinstance(spec, PathSpec) else spec(src, dst)
        if not isinstance(s, PathSpec):
            raise TypeError(f"path({src}, {dst}) gave {s!r}, not a PathSpec")
        return s

    @staticmethod
    def name(rank: int, peer: int) -> str:
        """The fake network's name of ``rank``'s end of its connection to ``peer``."""
        return f"r{rank}>r{peer}"

    # ---- completions ------------------------------------------------------------------------

    def _completed(self) -> int:
        return sum(map(len, self.net.done.values()))

    def dispatch(self) -> None:
        """Hand the network's new completions to their handles; CommError on a failed one."""
        for name, done in self.net.done.items():
            i = self._seen[name]
            if i == len(done):
                continue
            self._seen[name] = len(done)
            for c in done[i:]:
                self._complete(name, c)

    def _complete(self, name: str, c: Completion) -> None:
        rank, peer = self._who[name]
        h = self.pending.pop((name, c.kind, c.msg), None)
        if h is None:
            raise RuntimeError(f"rank {rank}: the core to rank {peer} completed {c.kind} "
                               f"message {c.msg}, which nobody posted")
        h.completion = c
        if not c.ok:
            way = "to" if c.kind == "send" else "from"
            raise CommError(f"rank {rank}: {c.kind} of message {c.msg} {way} rank {peer} "
                            f"failed at t={c.t:.6f}s: {c.error}")

    def advance(self, until: float, waiting: dict[int, list[Handle]]) -> None:
        """Run the network until the next completion; CollectiveStuck if none comes by
        ``until`` (``waiting``: what each blocked rank waits on, for the message)."""
        net = self.net
        dones = list(net.done.values())  # the lists grow in place
        before = self._completed()
        net.run(until, stop=lambda: sum(map(len, dones)) != before)
        self.dispatch()
        if self._completed() != before:
            return
        busy = (any(c.next_deadline() is not None for c in net.cores.values())
                or any(rec.fate == "in_flight" for rec in net.log))
        why = ("the time limit passed" if busy
               else "nothing is in flight or armed: the schedules deadlock")
        detail = "; ".join(f"rank {r} waits on {[h for h in hs if not h.done]}"
                           for r, hs in sorted(waiting.items()))
        raise CollectiveStuck(f"no progress by t={net.now:.6f}s (virtual), {why}: {detail}")

    # ---- running collectives ----------------------------------------------------------------

    def run(self, make_gen: Callable[[FakeComm], Generator[list[Handle], None, Any]]
            ) -> list[Any]:
        """Run ``make_gen(comm)`` on every rank to its end; their values, by rank."""
        gens = []
        for comm in self.comms:
            g = make_gen(comm)
            if not isinstance(g, Generator):
                raise TypeError(f"make_gen gave {type(g).__name__} for rank {comm.rank}: "
                                "a generator (a collective) expected")
            gens.append(g)
        results: list[Any] = [None] * self.size
        waits: dict[int, list[Handle]] = {r: [] for r in range(self.size)}
        until = self.net.now + self.time_limit
        while True:
            ready = [r for r, hs in waits.items() if all(h.done for h in hs)]
            while ready:
                for r in ready:
                    self._resume(r, gens[r], waits, results)
                ready = [r for r, hs in waits.items() if all(h.done for h in hs)]
            if not waits:
                return results
            self.advance(until, waits)

    @staticmethod
    def _resume(r: int, gen: Generator[list[Handle], None, Any],
                waits: dict[int, list[Handle]], results: list[Any]) -> None:
        try:
            hs = gen.send(None)
        except StopIteration as stop:
            results[r] = stop.value
            del waits[r]
            return
        except Exception as e:
            e.add_note(f"(in rank {r}'s collective)")
            raise
        if not isinstance(hs, list) or not all(isinstance(h, Handle) for h in hs):
            raise TypeError(f"rank {r}'s collective yielded {hs!r}: a list of Handles expected")
        waits[r] = hs


def run_collective(transport: str, size: int,
                   make_gen: Callable[[FakeComm], Generator[list[Handle], None, Any]],
                   **options: Any) -> list[Any]:
    """Run one collective on ``size`` ranks over a new ``FakeCluster(transport, size,
    **options)``; the generators' values, by rank."""
    return FakeCluster(transport, size, **options).run(make_gen)
