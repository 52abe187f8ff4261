"""Microbursts: short line-rate incasts that overflow one switch egress FIFO for real.

    spec = MicroburstSpec("p0l0:h1", sources=("h0", "h2", "h4"), on_ms=20, every_ms=100,
                          duration_s=2.0)
    with Microburst(fab, spec) as mb:    # arm, count, fire at now + START_LEAD_S
        time.sleep(2.2)
    mb.report()["target"]["drops"]       # measured at the target's FIFO, never assumed

Several bursts on one instant, their senders started before the run::

    bursts = [Microburst(fab, s) for s in specs]
    arm_all(bursts)                      # sender processes up and ready; nothing sent yet
    ...                                  # the run starts
    t0 = fire_all(bursts, t0)            # every sender starts its pattern at t0
    for b in bursts:
        b.count("paths")                 # snapshot the FIFOs the bursts cross
    ...
    for b in bursts:
        b.stop()

The parts: ``emu.burst_spec`` (the description, ``MicroburstSpec``),
``emu.burst_routes`` (a path through the target for every source),
``emu.burst_geometry`` (excess over the buffer, sizing a burst that drops),
``emu.burst_sender`` (the child process) and this module, which runs them: one
sender process per source, started by ``emu.launch`` with ``nsenter`` in its
namespace. ``arm()`` starts them and waits until each says ``ready``; ``fire(t0)``
hands them the common absolute CLOCK_MONOTONIC instant at which the pattern starts
(cheap: one record per sender, so bursts on several targets fire together); each
sender tells when its first
datagram left (``started_offsets``). An instant already past when handed over still
anchors the pattern: windows that passed are skipped, the current one is cut short,
and the offsets say how late each sender began.

Step-locked bursts (``MicroburstSpec.every_steps``) have no pattern of their own: a
training run opens each window with ``next_window(t)`` as it reaches the step
boundary the window belongs to (emu.timeline_runner); the first one fires the senders.

Destinations: each destination host gets a sink socket (opened by this
process in that namespace) that is never read. Its receive buffer fills and
the kernel drops the rest silently; a closed port would instead make the
destination send ICMPv6 port-unreachables back across the fabric (traffic
that is not the burst) and fail the sources' connected sockets.

Counting: ``count("all")`` snapshots every egress FIFO of the fabric (~25 ms for
32 nodes, more on a busy machine), ``count("paths")`` only those on the nodes the
bursts cross, the target's node first (a few ms): what a burst fired mid-run
can afford without delaying the next one. ``stop()`` snapshots the same set again
after the queues drained; ``report()`` gives the difference.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from emu.burst_geometry import BurstGeometry, check_mode, geometry
from emu.burst_report import Counts, build_report, start_offset_ms
from emu.burst_routes import (
    BurstRoute,
    Egress,
    frame_bytes,
    parse_target,
    plan_routes,
    shared_upstream,
)
from emu.burst_sender import HEADER, WINDOW
from emu.burst_spec import MicroburstError, MicroburstSpec
from emu.childproto import START
from emu.errors import EmuError
from emu.launch import Child
from emu.timeouts import scaled

if TYPE_CHECKING:
    from emu.counters import QueueStats
    from emu.fabric import Fabric

__all__ = ["HEADER", "START_LEAD_S", "BurstRoute", "Egress", "Microburst", "MicroburstError",
           "MicroburstSpec", "arm_all", "fire_all", "frame_bytes", "parse_target",
           "plan_routes", "shared_upstream", "start_all"]

START_LEAD_S = 0.05  # default: from handing over the start instant to the instant
READY_TIMEOUT_S = 15.0  # for every sender of an arm to say ready
STOP_TIMEOUT_S = 5.0  # for a stopped sender to report; then SIGKILL
SCOPES = ("all", "paths")


class Microburst:
    """Bursts of ``spec`` on a running fabric: ``arm()``, ``fire(t0)``, ``stop()``, or
    ``start()`` (all three but stop at once) / a ``with`` block.

    ``realtime`` runs the senders at the lowest SCHED_FIFO priority (if the
    kernel allows it; each source's report says): on a busy machine a burst
    then starts within ~0.3 ms of its schedule instead of a few ms. A sender
    blocks while its NIC queue is full and sleeps between bursts, so it holds
    a CPU for at most its on-periods. ``rtt_ms`` (optional): an RTT of the traffic
    through the target, to express the on-time in RTTs. A spec whose ``mode`` its
    geometry on this fabric cannot honour is refused here (MicroburstError).
    """

    def __init__(self, fab: Fabric, spec: MicroburstSpec, realtime: bool = True,
                 rtt_ms: float | None = None) -> None:
        self.fab = fab
        self.spec = spec
        self.realtime = realtime
        self.target = parse_target(fab.spec, spec.target)
        self.routes = plan_routes(fab.spec, spec)
        self.geometry: BurstGeometry = geometry(fab.spec, spec, self.routes, rtt_ms)
        check_mode(spec, self.geometry)
        self.t0: float | None = None  # absolute CLOCK_MONOTONIC start of the pattern
        self.t_fired: float | None = None  # when handing t0 to the senders began
        self.scope: str | None = None  # which FIFOs were counted
        self._senders: dict[str, Child] = {}
        self._started: dict[str, tuple[int, float]] = {}  # source -> (burst, lag s)
        self._sinks: list[socket.socket] = []
        self._before: dict[Egress, QueueStats] | None = None
        self._after: dict[Egress, QueueStats] | None = None
        self._results: dict[str, dict[str, Any] | None] = {}
        self._stderr: dict[str, str] = {}
        self._armed = False
        self._t_stop: float | None = None
        self.handed: list[float] = []  # step-locked: each window's opening, as handed out

    def __repr__(self) -> str:
        state = ("stopped" if self._t_stop is not None else "fired" if self.t0 is not None
                 else "armed" if self._armed else "new")
        every = (f"every_steps={self.spec.every_steps}" if self.spec.step_locked
                 else f"every_ms={self.spec.every_ms:g}")
        return (f"Microburst({self.spec.target}, sources={list(self.spec.sources)}, "
                f"on_ms={self.spec.on_ms:g}, {every}, {state})")

    def __enter__(self) -> Microburst:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pids(self) -> dict[str, int]:
        """The sender process of every source."""
        return {s: p.proc.pid for s, p in self._senders.items()}

    @property
    def results(self) -> dict[str, dict[str, Any] | None]:
        """What each sender reported when it ended (after ``stop()``; None: nothing)."""
        return dict(self._results)

    @property
    def armed(self) -> bool:
        """The senders are up and waiting for their start instant (or running)."""
        return self._armed and self._t_stop is None

    def windows(self, limit_s: float | None = None) -> list[tuple[float, float]]:
        """Scheduled burst windows in absolute CLOCK_MONOTONIC seconds (after fire();
        step-locked: the windows handed out so far)."""
        if self.t0 is None:
            raise EmuError("the microburst has not started")
        if self.spec.step_locked:
            on = self.spec.on_ms / 1000
            return [(a, a + on) for a in self.handed if limit_s is None or a < self.t0 + limit_s]
        return [(self.t0 + a, self.t0 + b) for a, b in self.spec.windows(limit_s)]

    # -- arming, counting, firing ----------------------------------------------------------

    def start(self) -> None:
        """Arm, snapshot every FIFO of the fabric, fire at now + START_LEAD_S."""
        start_all([self])

    def arm(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Start the sender processes and wait until each is ready (nothing is sent yet)."""
        arm_all([self], timeout)

    def _spawn(self) -> None:
        from emu.netns import entered
        from emu.srv6 import srh_option

        if self._armed or self._t_stop is not None:
            raise EmuError("this microburst was already armed; make a new Microburst")
        if not self.fab.kernels:
            raise EmuError("the fabric is not running: start it first")
        self._armed = True
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
        windows = json.dumps(self.spec.sender_windows())
        # Real-time from exec on: the interpreter then starts in ~60 ms rather than 100-200
        # on a loaded machine (the sender asks for SCHED_FIFO itself too, as a fallback).
        rt = ["chrt", "-f", "1"] if self.realtime and _realtime_allowed() else []
        for i, r in enumerate(self.routes):
            args = rt + self.fab.in_netns(
                r.source, sys.executable, "-m", "emu.burst_sender",
                "--index", str(i),
                "--src", str(topo.address(r.source)), "--dst", str(topo.address(r.dst)),
                "--port", str(ports[r.dst]), "--srh", srh_option(r.path).hex(),
                "--payload", str(self.spec.payload),
                "--rate-mbit", str(self.spec.rate_mbit or 0.0), "--windows", windows)
            if self.realtime:
                args.append("--realtime")
            self._senders[r.source] = Child(f"the burst sender of {r.source}", args)

    def _await_ready(self, deadline: float) -> None:
        for s in self._senders.values():
            s.wait_ready(deadline - time.monotonic())

    def count(self, scope: str = "all") -> None:
        """Snapshot the FIFO counters the report is measured from (once; before the bursts
        reach the target, or soon after): ``"all"`` egresses of the fabric, or ``"paths"``:
        only the nodes the bursts cross, the target's first."""
        if scope not in SCOPES:
            raise EmuError(f"scope={scope!r} is invalid: must be 'all' or 'paths'")
        if self._before is None:
            self._before, self.scope = self._queues(self._nodes(scope)), scope

    def _nodes(self, scope: str) -> list[str]:
        if scope == "all":
            return list(self.fab.kernels)
        crossed = [node for r in self.routes for node, _ in r.egresses]
        return list(dict.fromkeys([self.target[0], *crossed]))

    def fire(self, t0: float | None = None) -> float:
        """Hand every sender the instant ``t0`` (CLOCK_MONOTONIC; default now +
        START_LEAD_S) at which the pattern starts; returns it. Needs ``arm()``."""
        if not self.armed:
            raise EmuError("fire() needs an armed microburst: call arm() first")
        if self.t0 is not None:
            raise EmuError(f"this microburst already fired (t0={self.t0!r})")
        t0 = time.monotonic() + START_LEAD_S if t0 is None else float(t0)
        self.t_fired = time.monotonic()  # no sender can start before this
        for s in self._senders.values():
            s.send(START, t0=t0)
        self.t0 = t0
        if self.spec.step_locked:
            self.handed.append(t0)
        return t0

    def next_window(self, t: float) -> int:
        """Step-locked bursts: open the next window at ``t`` (CLOCK_MONOTONIC; the first
        one fires the senders); returns its number."""
        if not self.spec.step_locked:
            raise EmuError(f"{self!r} has a schedule of its own: next_window() is for "
                           "step-locked bursts (every_steps)")
        if self.t0 is None:
            self.fire(t)
            return 0
        if self._t_stop is not None:
            raise EmuError(f"{self!r} was stopped: it opens no more windows")
        k = len(self.handed)
        for s in self._senders.values():
            s.send(WINDOW, k=k, t=t)
        self.handed.append(t)
        return k

    def started_offsets(self, timeout: float = 0.0) -> dict[str, float | None]:
        """Per source, how late its first datagram left after the pattern's first scheduled
        burst (ms; None: not yet), waiting up to ``timeout`` s for the missing ones."""
        if self.t0 is None:
            raise EmuError("started_offsets() needs a microburst that fired")
        deadline = time.monotonic() + timeout
        out: dict[str, float | None] = {}
        for src, s in self._senders.items():
            if src not in self._started:
                rec = s.record("started", max(0.0, deadline - time.monotonic()))
                if rec is not None:
                    self._started[src] = (int(rec["burst"]), float(rec["lag"]))
            k_lag = self._started.get(src)
            out[src] = None if k_lag is None else start_offset_ms(self.spec, *k_lag)
        return out

    # -- stopping and reporting -------------------------------------------------------------

    def stop(self) -> None:
        """Stop every sender (armed or running; SIGKILL after 5 s), collect what each
        reports, and snapshot the counted FIFOs again once the burst paths drained."""
        if self._t_stop is not None:
            return
        self._t_stop = time.monotonic()
        for c in self._senders.values():
            c.close_stdin()  # an armed sender waits for its start record: end of file ends it
            if c.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for src, c in self._senders.items():
            c.terminate(max(0.0, deadline - time.monotonic()))
            self._stderr[src] = c.stderr_tail
            self._results[src] = c.record("result", 0.0)
        if self._before is not None and self.fab.kernels:
            self._drain()
            self._after = self._queues(self._nodes(self.scope or "all"))
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

    def _queues(self, nodes: list[str]) -> dict[Egress, QueueStats]:
        from emu.counters import queue_stats, with_port_drops

        fifo = {(node, ifname): q for node in nodes
                for ifname, q in queue_stats(self.fab.kernels[node]).items()}
        return with_port_drops(fifo, self.fab.signal_stats())  # the ports' program drops too

    def report(self) -> dict[str, Any]:
        """Per-source counts and timing, the geometry, and the FIFO drops measured between
        the count and the stop (see ``emu.burst_report``)."""
        if self._t_stop is None or self.t0 is None or self.t_fired is None:
            raise EmuError("report() needs a microburst that was fired and stopped")
        return build_report(self.spec, self.routes, self.geometry, Counts(
            self.scope, self._before, self._after), self._results, self._stderr,
            fired_late_s=self.t_fired - self.t0, duration_s=self._t_stop - self.t0,
            handed_out=len(self.handed))


def _realtime_allowed() -> bool:
    """Whether a child may be started at SCHED_FIFO priority 1 (CAP_SYS_NICE and an RT
    budget in this cgroup): a ~2 ms probe."""
    if shutil.which("chrt") is None:
        return False
    return subprocess.run(["chrt", "-f", "1", "true"], capture_output=True).returncode == 0


def arm_all(bursts: Sequence[Microburst], timeout: float = READY_TIMEOUT_S) -> None:
    """Arm several bursts at once: every sender process starts, then all are awaited."""
    try:
        for b in bursts:
            b._spawn()
        deadline = time.monotonic() + scaled(timeout)
        for b in bursts:
            b._await_ready(deadline)
    except BaseException:
        for b in bursts:
            b.stop()
        raise


def fire_all(bursts: Sequence[Microburst], t0: float | None = None) -> float:
    """Fire armed bursts on one instant ``t0`` (default now + START_LEAD_S); returns it."""
    t0 = time.monotonic() + START_LEAD_S if t0 is None else float(t0)
    for b in bursts:
        b.fire(t0)
    return t0


def start_all(bursts: Sequence[Microburst], t0: float | None = None) -> float:
    """Arm several bursts, snapshot every FIFO of the fabric once for all of them, and fire
    them on one instant (default: START_LEAD_S after the snapshot); returns it."""
    arm_all(bursts)
    try:
        if bursts:
            bursts[0].count("all")
            for b in bursts[1:]:
                b._before, b.scope = bursts[0]._before, "all"
        return fire_all(bursts, t0)
    except BaseException:
        for b in bursts:
            b.stop()
        raise
