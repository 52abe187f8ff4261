"""Microbursts: short line-rate incasts that overflow one switch egress FIFO for real.

    spec = MicroburstSpec("p0l0:h1", sources=("h0", "h2", "h4"), on_ms=20, every_ms=100,
                          rate_mbit=None, duration_s=2.0)
    with Microburst(fab, spec) as mb:
        time.sleep(2.2)
    mb.report()["target"]["drops"]       # measured at the target's FIFO, never assumed

Routing: every source gets a destination host and an SRv6 path whose hops
cross the target egress (``plan_routes``, pure). Upstream of the target the
paths are spread so that, where the topology allows it, no other egress is
shared by two sources: the target is then the first queue where the bursts
meet, and the only one that can overflow.

Sending: one process per source (``python -m emu.microburst``, started with
``nsenter`` in the source host's namespace), so burst timing shares no GIL
with anything. The process opens its socket (bound to the host loopback,
SRH pinned, connected to the destination), says ``ready``, reads the common
absolute CLOCK_MONOTONIC start time from stdin, and then, per burst, sleeps
until the burst start (the last 0.5 ms spinning), sends the pre-built datagram
as fast as its NIC queue takes it during the on-period (non-blocking; on
EAGAIN it counts it and polls for write space, so it does not spin) and sleeps
through the off-period; it runs at the lowest SCHED_FIFO priority when allowed
(``realtime``), so bursts start on time on a busy machine. Its send buffer
holds only a few datagrams, so the
source's own NIC queue never overflows and a burst ends on the wire within a
few frame times of its scheduled end. On SIGTERM, or at the end of a finite
schedule, it prints its counts as JSON and exits; it also exits when its
parent dies. Fabric teardown kills it like any process in our namespaces.

Destinations: each destination host gets a sink socket (opened by this
process in that namespace) that is never read. Its receive buffer fills and
the kernel drops the rest silently; a closed port would instead make the
destination send ICMPv6 port-unreachables back across the fabric (traffic
that is not the burst) and fail the sources' connected sockets.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from emu.errors import EmuError

if TYPE_CHECKING:
    from emu.counters import QueueStats
    from emu.fabric import Fabric
    from topologies import MultiPlaneClos, Path

ETH_IPV6_UDP = 14 + 40 + 8
IPV6_RTHDR = 57
HEADER = struct.Struct("!IHHI")  # magic, source index, burst number (mod 2**16), seq in burst
MAGIC = 0x4D425354  # "MBST"
NIC_INFLIGHT = 3  # datagrams a source may have queued at its own NIC
START_LEAD_S = 0.05  # from the start command to the common t0
SPIN_S = 0.0005  # the last part of a wait before a burst is spun, not slept
CHUNK_S = 0.02  # longest single sleep: bounds the reaction to SIGTERM / parent death
MAX_RECORDS = 20000  # per-burst timing records a source keeps (the latest ones)
Egress = tuple[str, str]


class MicroburstError(EmuError, ValueError):
    """An invalid microburst description, or one the fabric cannot carry."""


# -- the description -----------------------------------------------------------------------


def _number(name: str, value: object, lo: float, *, lo_open: bool = True,
            hi: float | None = None) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)
    if not ok:
        low = f"> {lo:g}" if lo_open else f">= {lo:g}"
        rng = low if hi is None else f"{low} and <= {hi:g}"
        raise MicroburstError(f"{name}={value!r} is invalid: must be a finite number {rng}")
    return float(value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class MicroburstSpec:
    """What to burst, from where, and when.

    ``target`` is a switch egress ``"node:ifname"`` (``"p0l3:h13"``: leaf
    p0l3's port to host h13; ``"p0s1:l3"``: spine p0s1's port to leaf 3;
    ``"p0l3:s1"``: leaf p0l3's uplink to spine 1). Every ``every_ms`` from
    ``start_s`` (seconds after start) each source sends for ``on_ms`` at
    ``rate_mbit`` (wire rate; None: as fast as its NIC takes, i.e. line rate),
    until ``duration_s`` (None: until stopped). ``schedule``, if given,
    replaces the periodic pattern with explicit ``(start_s, duration_ms)``
    bursts (sorted, not overlapping); ``start_s`` and ``duration_s`` must then
    keep their defaults. ``seed`` breaks ties between equally good paths.
    """

    target: str
    sources: tuple[str, ...]
    on_ms: float
    every_ms: float
    rate_mbit: float | None = None
    start_s: float = 0.0
    duration_s: float | None = None
    schedule: tuple[tuple[float, float], ...] | None = None
    payload: int = 8000
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or self.target.count(":") != 1:
            raise MicroburstError(f"target={self.target!r} is invalid: must be 'node:ifname', "
                                  "e.g. 'p0l3:h13' (leaf p0l3's port to host h13)")
        if not isinstance(self.sources, tuple) or not self.sources:
            raise MicroburstError(f"sources={self.sources!r} is invalid: must be a non-empty "
                                  "tuple of host names")
        dup = sorted(n for n, c in Counter(self.sources).items() if c > 1)
        if dup:
            raise MicroburstError(f"sources={self.sources!r} is invalid: {dup} listed twice")
        on = _number("on_ms", self.on_ms, 0.0)
        every = _number("every_ms", self.every_ms, 0.0)
        if every <= on:
            raise MicroburstError(f"every_ms={self.every_ms!r} is invalid: must be > "
                                  f"on_ms={self.on_ms!r} (a burst period longer than the burst)")
        if self.rate_mbit is not None:
            _number("rate_mbit", self.rate_mbit, 0.0)
        _number("start_s", self.start_s, 0.0, lo_open=False)
        if self.duration_s is not None:
            _number("duration_s", self.duration_s, 0.0)
        if type(self.payload) is not int or not HEADER.size <= self.payload <= 9000 - 112:
            raise MicroburstError(f"payload={self.payload!r} is invalid: must be an integer "
                                  f"in [{HEADER.size}, {9000 - 112}] (and fit the fabric MTU)")
        if type(self.seed) is not int:
            raise MicroburstError(f"seed={self.seed!r} is invalid: must be an integer")
        if self.schedule is not None:
            self._check_schedule()

    def _check_schedule(self) -> None:
        sched = self.schedule
        if not isinstance(sched, tuple) or not sched:
            raise MicroburstError(f"schedule={sched!r} is invalid: must be a non-empty tuple "
                                  "of (start_s, duration_ms) pairs, or None")
        if self.start_s != 0.0 or self.duration_s is not None:
            raise MicroburstError(
                f"start_s={self.start_s!r} and duration_s={self.duration_s!r} are invalid with "
                "a schedule: the schedule's own start times apply (keep 0.0 and None)")
        end = -1.0
        for i, item in enumerate(sched):
            if not isinstance(item, tuple) or len(item) != 2:
                raise MicroburstError(f"schedule[{i}]={item!r} is invalid: must be a "
                                      "(start_s, duration_ms) pair")
            s = _number(f"schedule[{i}] start_s", item[0], 0.0, lo_open=False)
            d = _number(f"schedule[{i}] duration_ms", item[1], 0.0)
            if s < end:
                raise MicroburstError(
                    f"schedule[{i}]={item!r} is invalid: starts at {s:g} s, before the previous "
                    f"burst ends at {end:g} s (bursts must be sorted and not overlap)")
            end = s + d / 1000

    def windows(self, limit_s: float | None = None) -> list[tuple[float, float]]:
        """Burst windows ``(start_s, end_s)`` relative to the start, up to ``limit_s``.

        A periodic burst cut by ``duration_s`` ends there. An unbounded
        pattern needs ``limit_s``.
        """
        if self.schedule is not None:
            out = [(s, s + d / 1000) for s, d in self.schedule]
        else:
            until = self.start_s + self.duration_s if self.duration_s is not None else math.inf
            if limit_s is None and math.isinf(until):
                raise MicroburstError("windows() of an unbounded burst pattern needs limit_s")
            out, k = [], 0
            while True:
                a = self.start_s + k * self.every_ms / 1000
                if a >= until or (limit_s is not None and a >= limit_s):
                    break
                out.append((a, min(a + self.on_ms / 1000, until)))
                k += 1
        if limit_s is not None:
            out = [(a, min(b, limit_s)) for a, b in out if a < limit_s]
        return out


# -- routing the bursts onto the target (pure) -------------------------------------------


@dataclass(frozen=True)
class BurstRoute:
    """One source's burst: its destination and the SRv6 path that crosses the target."""

    source: str
    path: Path

    @property
    def dst(self) -> str:
        return self.path.dst

    @property
    def egresses(self) -> tuple[Egress, ...]:
        return tuple((h.node, h.out_ifname) for h in self.path.hops)


def parse_target(topo: MultiPlaneClos, target: str) -> Egress:
    """``"node:ifname"`` -> (node, ifname), checked against the topology."""
    from topologies import Role, TopologyError

    node_name, _, ifname = target.partition(":")
    try:
        node = topo.node(node_name)
    except TopologyError as e:
        raise MicroburstError(f"target={target!r}: {e}") from None
    if node.role is Role.HOST:
        raise MicroburstError(
            f"target={target!r} is invalid: {node_name} is a host; a microburst targets a "
            "switch egress (a leaf or spine port), e.g. 'p0l0:h1' or 'p0s0:l1'")
    ports = [p.ifname for p in topo.ports(node_name)]
    if ifname not in ports:
        raise MicroburstError(f"target={target!r} is invalid: {node_name} has no port "
                              f"{ifname!r}; valid ports are {', '.join(ports)}")
    return node_name, ifname


def plan_routes(topo: MultiPlaneClos, spec: MicroburstSpec) -> tuple[BurstRoute, ...]:
    """A destination and a path through the target egress for every source, in source order.

    Sources with the fewest choices are placed first; each takes the path that
    least loads the egresses it crosses before the target (then: a destination
    used least, the least loaded egresses after the target, ``seed`` order).
    """
    from topologies import Role, TopologyError

    target = parse_target(topo, spec.target)
    host_names = [h.name for h in topo.hosts]
    if spec.rate_mbit is not None and spec.rate_mbit > topo.host_link.rate_mbit:
        raise MicroburstError(f"rate_mbit={spec.rate_mbit!r} is invalid: must be in (0, "
                              f"{topo.host_link.rate_mbit:g}] (the sources' NIC line rate), "
                              "or None for line rate")
    if spec.payload > topo.mtu - 112:
        raise MicroburstError(f"payload={spec.payload} is invalid: must be in "
                              f"[{HEADER.size}, {topo.mtu - 112}] for MTU {topo.mtu}")
    candidates: dict[str, list[Path]] = {}
    for src in spec.sources:
        try:
            node = topo.node(src)
        except TopologyError as e:
            raise MicroburstError(f"sources: {e}") from None
        if node.role is not Role.HOST:
            raise MicroburstError(f"sources: {src!r} is a {node.role.value}, not a host; "
                                  f"hosts are {', '.join(host_names[:8])}"
                                  + (f", ... ({len(host_names)} in total)"
                                     if len(host_names) > 8 else ""))
        cands = [p for dst in host_names if dst != src for p in topo.paths(src, dst)
                 if any((h.node, h.out_ifname) == target for h in p.hops)]
        if not cands:
            able = [h for h in host_names if _reaches(topo, h, target)]
            raise MicroburstError(
                f"source {src!r} has no path through target {spec.target!r}; hosts that have "
                f"one: {', '.join(able[:8]) or 'none'}" + (" ..." if len(able) > 8 else ""))
        random.Random(f"{spec.seed}:{src}").shuffle(cands)
        candidates[src] = cands
    up: Counter[Egress] = Counter()
    down: Counter[Egress] = Counter()
    dsts: Counter[str] = Counter()
    chosen: dict[str, Path] = {}
    order = sorted(spec.sources, key=lambda s: len(candidates[s]))  # stable: ties keep order

    def cost(p: Path) -> tuple[int, int, int, int]:
        keys = [(h.node, h.out_ifname) for h in p.hops]
        i = keys.index(target)
        before, after = keys[:i], keys[i + 1:]
        return (max((up[k] for k in before), default=0), dsts[p.dst],
                sum(down[k] for k in after), sum(up[k] for k in before))

    for src in order:
        best = min(candidates[src], key=cost)
        keys = [(h.node, h.out_ifname) for h in best.hops]
        i = keys.index(target)
        up.update(keys[:i])
        down.update(keys[i + 1:])
        dsts[best.dst] += 1
        chosen[src] = best
    return tuple(BurstRoute(s, chosen[s]) for s in spec.sources)


def _reaches(topo: MultiPlaneClos, host: str, target: Egress) -> bool:
    return any((h.node, h.out_ifname) == target for dst in topo.hosts if dst.name != host
               for p in topo.paths(host, dst.name) for h in p.hops)


def shared_upstream(routes: tuple[BurstRoute, ...], target: Egress) -> dict[Egress, int]:
    """Egresses before the target that more than one burst crosses (they may drop too)."""
    load: Counter[Egress] = Counter()
    for r in routes:
        keys = r.egresses
        load.update(keys[:keys.index(target)])
    return {k: n for k, n in load.items() if n > 1}


def frame_bytes(payload: int, srh_len: int) -> int:
    """Ethernet + IPv6 + SRH + UDP + payload of one burst datagram (what HTB counts)."""
    return ETH_IPV6_UDP + srh_len + payload


# -- the running burst (root) --------------------------------------------------------------


class Microburst:
    """Bursts of ``spec`` on a running fabric; ``start()``/``stop()`` or a ``with`` block.

    ``realtime`` runs the senders at the lowest SCHED_FIFO priority (if the
    kernel allows it; each source's report says): on a busy machine a burst
    then starts within ~0.3 ms of its schedule instead of a few ms. A sender
    blocks while its NIC queue is full and sleeps between bursts, so it holds
    a CPU for at most its on-periods.
    """

    def __init__(self, fab: Fabric, spec: MicroburstSpec, realtime: bool = True) -> None:
        self.fab = fab
        self.spec = spec
        self.realtime = realtime
        self.target = parse_target(fab.spec, spec.target)
        self.routes = plan_routes(fab.spec, spec)
        self.t0: float | None = None  # absolute CLOCK_MONOTONIC start of the pattern
        self._procs: dict[str, subprocess.Popen[str]] = {}
        self._sinks: list[socket.socket] = []
        self._before: dict[Egress, QueueStats] | None = None
        self._after: dict[Egress, QueueStats] | None = None
        self._results: dict[str, dict[str, Any] | None] = {}
        self._stderr: dict[str, str] = {}
        self._t_stop: float | None = None

    def __enter__(self) -> Microburst:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pids(self) -> dict[str, int]:
        """The sender process of every source."""
        return {s: p.pid for s, p in self._procs.items()}

    def windows(self, limit_s: float | None = None) -> list[tuple[float, float]]:
        """Scheduled burst windows in absolute CLOCK_MONOTONIC seconds (after start())."""
        if self.t0 is None:
            raise EmuError("the microburst has not started")
        return [(self.t0 + a, self.t0 + b) for a, b in self.spec.windows(limit_s)]

    def start(self) -> None:
        """Spawn the senders, wait until all are ready, snapshot the queues, release them."""
        if self._procs or self._t_stop is not None:
            raise EmuError("this microburst already ran; make a new Microburst")
        if not self.fab.kernels:
            raise EmuError("the fabric is not running: start it first")
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        from emu.netns import entered
        from emu.srv6 import srh_option

        topo = self.fab.spec
        ports: dict[str, int] = {}
        for r in self.routes:
            if r.dst in ports:
                continue
            with entered(self.fab.node_kernel(r.dst).fd):
                sink = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            self._sinks.append(sink)
            sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sink.bind((str(topo.address(r.dst)), 0))
            ports[r.dst] = sink.getsockname()[1]
        env = dict(os.environ)
        root = str(FsPath(__file__).resolve().parents[1])  # the children run this very code
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        for i, r in enumerate(self.routes):
            args = self.fab.in_netns(
                r.source, sys.executable, "-m", "emu.microburst",
                "--index", str(i), "--parent", str(os.getpid()),
                "--src", str(topo.address(r.source)), "--dst", str(topo.address(r.dst)),
                "--port", str(ports[r.dst]), "--srh", srh_option(r.path).hex(),
                "--payload", str(self.spec.payload),
                "--rate-mbit", str(self.spec.rate_mbit or 0.0))
            args += ["--windows", json.dumps(self._child_windows())]
            if self.realtime:
                args.append("--realtime")
            self._procs[r.source] = subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env=env)
        deadline = time.monotonic() + 15.0
        for src, p in self._procs.items():
            assert p.stdout is not None
            left = deadline - time.monotonic()
            ready, _, _ = select.select([p.stdout], [], [], max(left, 0.0))
            line = p.stdout.readline() if ready else ""
            if line.strip() != "ready":
                p.kill()
                _, err = p.communicate(timeout=5)
                raise EmuError(f"the burst sender of {src} did not start: "
                               f"{(line + err).strip()[-800:] or 'timed out'}")
        self._before = self._queues()
        self.t0 = time.monotonic() + START_LEAD_S
        for p in self._procs.values():
            assert p.stdin is not None
            p.stdin.write(f"{self.t0!r}\n")
            p.stdin.flush()

    def _child_windows(self) -> dict[str, Any]:
        s = self.spec
        if s.schedule is not None:
            return {"schedule": [[a, b] for a, b in s.windows()]}
        until = s.start_s + s.duration_s if s.duration_s is not None else None
        return {"start": s.start_s, "on": s.on_ms / 1000, "every": s.every_ms / 1000,
                "until": until}

    def stop(self) -> None:
        """Stop every sender (SIGTERM; SIGKILL after 5 s), reap it, and snapshot the queues."""
        if self._t_stop is not None:
            return
        self._t_stop = time.monotonic()
        for p in self._procs.values():
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        for src, p in self._procs.items():
            try:
                out, err = p.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            self._stderr[src] = err
            try:
                self._results[src] = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                self._results[src] = None
        if self._before is not None and self.fab.kernels:
            self._drain()
            self._after = self._queues()
        for sink in self._sinks:
            sink.close()
        self._sinks.clear()

    def _drain(self, timeout: float = 2.0) -> None:
        """Wait (bounded) until the burst paths' queues are empty: their fate is then counted."""
        from emu.counters import queue_stats

        crossed = {k for r in self.routes for k in r.egresses}
        nodes = sorted({node for node, _ in crossed})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(q.backlog == 0 for n in nodes
                   for i, q in queue_stats(self.fab.kernels[n]).items() if (n, i) in crossed):
                return
            time.sleep(0.005)

    def _queues(self) -> dict[Egress, QueueStats]:
        from emu.counters import queue_stats

        return {(node, ifname): q for node, k in self.fab.kernels.items()
                for ifname, q in queue_stats(k).items()}

    def report(self) -> dict[str, Any]:
        """Per-source counts and timing, and the FIFO drops measured between start and stop."""
        if self._t_stop is None or self.t0 is None:
            raise EmuError("report() needs a microburst that was started and stopped")
        crossed = {k for r in self.routes for k in r.egresses}
        drops: dict[Egress, int] = {}
        sent: dict[Egress, int] = {}
        if self._before is not None and self._after is not None:
            for k, a in self._after.items():
                b = self._before.get(k)
                if b is not None:
                    drops[k] = a.drops - b.drops
                    sent[k] = a.packets - b.packets
        name = ":".join
        limit = self._t_stop - self.t0
        scheduled = self.spec.windows(limit)
        sources = {}
        for r in self.routes:
            res = self._results.get(r.source)
            entry: dict[str, Any] = {
                "dst": r.dst, "plane": r.path.plane, "spine": r.path.spine,
                "hops": [name(k) for k in r.egresses]}
            if res is None:
                entry["error"] = (self._stderr.get(r.source) or "no result")[-800:]
            else:
                entry.update({k: res[k] for k in ("bursts", "datagrams", "eagain", "errors",
                                                   "late_skipped", "cpu_s", "wall_s",
                                                   "realtime")})
                entry["timing_ms"] = _timing(res["records"])
            sources[r.source] = entry
        target = self.target
        return {
            "target": {"egress": name(target), "drops": drops.get(target),
                       "packets": sent.get(target)},
            "scheduled_bursts": len(scheduled),
            "duration_s": limit,
            "sources": sources,
            "alignment_ms": _alignment(self._results),
            "shared_upstream": {name(k): n for k, n in
                                shared_upstream(self.routes, target).items()},
            "crossed": {name(k): {"packets": sent.get(k), "drops": drops.get(k)}
                        for k in sorted(crossed)},
            "drops_on_burst_paths": {name(k): v for k, v in drops.items()
                                     if v and k in crossed and k != target},
            "drops_elsewhere": {name(k): v for k, v in drops.items()
                                if v and k not in crossed},
            "drops_other_total": sum(v for k, v in drops.items() if k != target),
        }


def _stats(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    xs = sorted(xs)
    return {"mean": sum(xs) / len(xs), "p50": xs[len(xs) // 2],
            "p99": xs[min(len(xs) - 1, int(0.99 * len(xs)))], "max": xs[-1]}


def _timing(records: list[list[float]]) -> dict[str, Any]:
    """Start lag (first send - scheduled start) and end offset (last send - scheduled end)."""
    return {"start_lag": _stats([r[1] * 1000 for r in records]),
            "end_offset": _stats([r[2] * 1000 for r in records])}


def _alignment(results: dict[str, dict[str, Any] | None]) -> dict[str, float] | None:
    """Per burst, the spread of the sources' first sends (ms)."""
    firsts: dict[int, list[float]] = {}
    for res in results.values():
        if res is None:
            continue
        for k, lag, _end, _n in res["records"]:
            firsts.setdefault(int(k), []).append(lag)
    spreads = [(max(v) - min(v)) * 1000 for v in firsts.values() if len(v) > 1]
    return _stats(spreads)


# -- the sender process ----------------------------------------------------------------------


class _Sender:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.stopping = False
        self.bursts = self.datagrams = self.eagain = self.errors = self.late = 0
        self.records: list[list[float]] = []
        srh = bytes.fromhex(a.srh)
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        self.sock.bind((a.src, 0))
        if srh:
            self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RTHDR, srh)
        frame = frame_bytes(a.payload, len(srh))
        # A few datagrams in flight: the NIC queue never overflows and a burst stops
        # within a few frame times of its end. The kernel doubles what is asked.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, NIC_INFLIGHT * frame // 2)
        self.sock.connect((a.dst, a.port))
        self.sock.setblocking(False)
        self.buf = bytearray(os.urandom(a.payload))
        self.gap = frame * 8 / (a.rate_mbit * 1e6) if a.rate_mbit > 0 else 0.0
        self.poll = select.poll()
        self.poll.register(self.sock.fileno(), select.POLLOUT)

    def alive(self) -> bool:
        return not self.stopping and os.getppid() == self.a.parent

    def wait_until(self, t: float) -> bool:
        while self.alive():
            left = t - time.monotonic()
            if left <= 0:
                return True
            if left > SPIN_S:
                time.sleep(min(left - SPIN_S, CHUNK_S))
        return False

    def burst(self, k: int, a: float, b: float) -> None:
        buf, sock, gap, poll = self.buf, self.sock, self.gap, self.poll
        n = eagain = errors = 0
        first = last = 0.0
        due = a
        while not self.stopping:
            now = time.monotonic()
            if now >= b:
                break
            if gap and now < due:
                time.sleep(min(due - now, b - now, CHUNK_S))
                continue
            HEADER.pack_into(buf, 0, MAGIC, self.a.index, k & 0xFFFF, n)
            try:
                sock.send(buf)
            except BlockingIOError:
                eagain += 1
                poll.poll(min(b - now, CHUNK_S) * 1000)
                continue
            except OSError:
                errors += 1
                time.sleep(0.0001)
                continue
            if n == 0:
                first = now
            last = now
            n += 1
            if gap:
                due = max(due + gap, now - gap)  # no catching up with a lost slot
        self.datagrams += n
        self.eagain += eagain
        self.errors += errors
        if n:
            self.bursts += 1
            self.records.append([k, first - a, last - b, n])
            if len(self.records) > MAX_RECORDS:
                del self.records[: len(self.records) - MAX_RECORDS]

    def run(self, t0: float, windows: dict[str, Any]) -> None:
        if "schedule" in windows:
            it = ((t0 + a, t0 + b) for a, b in windows["schedule"])
        else:
            it = _periodic(t0, windows)
        for k, (a, b) in enumerate(it):
            if not self.wait_until(a):
                return
            if time.monotonic() >= b:
                self.late += 1  # the whole window passed while we were away
                continue
            self.burst(k, a, b)
            if not self.alive():
                return


def _periodic(t0: float, w: dict[str, Any]):
    until = t0 + w["until"] if w["until"] is not None else math.inf
    k = 0
    while True:
        a = t0 + w["start"] + k * w["every"]
        if a >= until:
            return
        yield a, min(a + w["on"], until)
        k += 1


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m emu.microburst",
                                description="one microburst sender (started by Microburst)")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--parent", type=int, required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--srh", default="")
    p.add_argument("--payload", type=int, default=8000)
    p.add_argument("--rate-mbit", type=float, default=0.0)
    p.add_argument("--windows", type=json.loads, required=True)
    p.add_argument("--realtime", action="store_true")
    return p.parse_args(argv)


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    realtime = False
    if a.realtime:
        try:  # the lowest real-time priority: wakes on time on a busy machine
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            realtime = True
        except OSError:
            pass
    sender = _Sender(a)

    def on_term(signum: int, frame: object) -> None:
        sender.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    print("ready", flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        return 1  # the parent went away before the start
    t0 = float(line)
    w0, c0 = time.monotonic(), _cpu()
    try:
        sender.run(t0, a.windows)
    finally:
        print(json.dumps({
            "bursts": sender.bursts, "datagrams": sender.datagrams, "eagain": sender.eagain,
            "errors": sender.errors, "late_skipped": sender.late, "realtime": realtime,
            "cpu_s": _cpu() - c0,
            "wall_s": time.monotonic() - w0,
            "records": sender.records}), flush=True)
        sender.sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
