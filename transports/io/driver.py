"""The UDP driver: one engine process that runs the transport cores of many hosts.

One driver process per core of the machine serves every host given to it (an *engine*,
as a NIC's firmware serves its queues): each host's sockets are made inside that host's
network namespace (``setns``, emu/netns.py) and then used from this one process, so that
one wake-up carries the datagrams of tens of packets of many hosts, in batched syscalls
(transports/io/loop.py, sockets.py). A host's state stays its own, as if it ran in a
process of its own (transports/io/hostrun.py). Started with a single host's plan, it runs
that host in the namespace it was started in (the soak's drivers, a host's own process).

The plan (JSON on stdin), either one host's::

    {"host", "addr", "transport", "config", "seed", "deadline_s", "conns", "sends",
     "recvs", "streams", "timeline_s", "tick_s"}

or an engine's: ``{"engine": i, "tick_s", "hosts": [plan, ...], "netns": {host: path}}``
(each path a namespace file, /run/netns/NAME). Connections, messages and for MRC the
transit segments of every path (EV) to each peer are as transports/plan.py makes them.
Message bytes are generated from a seed on both ends, so the receiver verifies them by
SHA-256 without the harness shipping data. A progress line per completed message goes to
stderr.

It speaks the emulator's child protocol (emu.childproto): line 1 of stdin is the plan;
the driver sets up, says ``ready``, reads the ``start`` record (the CLOCK_MONOTONIC
instant at which all drivers post their sends) and ends with one ``result`` record on
stdout: one host's result, or an engine's ``{"engine": {...}, "hosts": {host: result}}``.

**Streams** (``plan["streams"]``, for soak runs): instead of listing every message,
an entry ``{"conn", "kind": "send" | "recv", "size", "msg0", "seeds", "window",
"bound", "until_s"}`` keeps ``window`` messages of ``size`` bytes in flight on its
connection, ids ``msg0``, ``msg0 + 1``, ...; message k carries the bytes of
``seeds[k % len(seeds)]`` (generated once, before the start; the receiver keeps
their SHA-256 and checks every message, bytes missing from a bounded DBLP round
aside, then clears and reuses its ``window`` buffers: nothing grows with the number
of messages). A send stream posts no message after ``until_s`` from the start, says
``{"type": "sent", "host"}`` once its last one completed, and is done; receive streams
keep a receive posted until the parent closes the driver's stdin (it does once
every sender said ``sent``). Each stream reports counts (posted, ok, failed, bytes,
bytes not exact, rounds outside their loss bound, ...) and the ids still open at
the end, never a record per message. ``plan["timeline_s"]`` sets the goodput
timeline's sampling period (default 0.01 s; a soak of minutes wants seconds).

CPU: the process's own (user and system) from the start on, less checking the received
bytes; an engine reports it as a whole (``engine``) and each host an equal share of it.

    python -m transports.io.driver   (started by emu.launch; plan on stdin)
"""

from __future__ import annotations

import os
import resource
import sys
import time

from emu import childproto
from emu.netns import entered
from transports import registry
from transports.io.footprint import RssSampler
from transports.io.hostrun import SENT, TIMELINE_S, HostRun
from transports.io.loop import EventLoop
from transports.io.sockets import HostSockets
from transports.io.tick import TICK_S
from transports.plan import message_bytes

__all__ = ["SENT", "TIMELINE_S", "Driver", "main", "wait_for_start"]


class Driver:
    """Hosts' plans run on one event loop: every host's sockets (each made in its
    namespace when ``netns`` names one), then the loop until all are done."""

    def __init__(self, plans: list[dict], netns: dict[str, str] | None = None,
                 tick_s: float = TICK_S, engine: int | None = None) -> None:
        if not plans:
            raise SystemExit("a driver needs at least one host's plan")
        self.engine = engine
        self.loop = EventLoop(idle_s=0.05, tick_s=tick_s)
        self.hosts: list[HostRun] = []
        for plan in plans:
            path = (netns or {}).get(plan["host"])
            run = _host_in(path, plan) if path else HostRun(plan, HostSockets())
            self.loop.add(run.socks, run.conns, run.completed)
            self.hosts.append(run)
        self.deadline_s = max(p.get("deadline_s", 60.0) for p in plans)

    def run(self) -> dict:
        """Every host's plan from the common start until all are done or the deadline;
        the result record (one host's, or the engine's)."""
        loop, hosts = self.loop, self.hosts
        rss = RssSampler()
        t0 = wait_for_start()
        deadline = t0 + self.deadline_s
        # The transport's CPU: the loop from the start on, less checking the received
        # bytes (generating messages is before it).
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        for h in hosts:
            h.begin(t0)
        # Receive streams end when the parent closes stdin: watched with the sockets.
        recvs = any(h.recvs for h in hosts)
        stdin = sys.stdin.fileno() if recvs else -1
        stopping = False

        def stdin_ready(ready: list, now: float) -> None:
            nonlocal stopping
            if stdin in ready and _stdin_ended(stdin):
                stopping = True
                for h in hosts:
                    h.stopping = True

        busy = list(hosts)
        while busy and time.monotonic() < deadline:
            watch = [stdin] if recvs and not stopping else []
            now = loop.turn(watch, deadline, stdin_ready)
            for h in busy:
                h.after_turn(now)
            busy = [h for h in busy if h.busy]
            if now >= rss.next:
                rss.sample(now, t0)
                for h in hosts:
                    h.drain_ev_changes()
        rss.sample(time.monotonic(), t0, force=True)  # the last one, always
        for h in hosts:
            h.drain_ev_changes()
        rss.close()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.monotonic() - t0
        verify = sum(h.verify_cpu_s for h in hosts)
        user, sys_ = cpu1.ru_utime - cpu0.ru_utime, cpu1.ru_stime - cpu0.ru_stime
        cpu = max(0.0, user + sys_ - verify)
        n = len(hosts)
        results = {}
        for h, lh in zip(hosts, loop.hosts, strict=True):
            res = h.result(lh.unknown)
            res.update(cpu_s=round(cpu / n, 4), wall_s=round(wall, 4),
                       cpu_user_s=round(user / n, 4), cpu_sys_s=round(sys_ / n, 4),
                       wakeups=round(loop.wakeups / n, 2), rss=rss.samples,
                       rss_every_s=rss.every)
            results[h.host] = res
        if self.engine is None:
            return results[hosts[0].host]
        return {"engine": {"id": self.engine, "hosts": [h.host for h in hosts],
                           "cpu_s": round(cpu, 4), "cpu_user_s": round(user, 4),
                           "cpu_sys_s": round(sys_, 4), "verify_cpu_s": round(verify, 4),
                           "wall_s": round(wall, 4), "wakeups": loop.wakeups,
                           "tick_s": loop.coalescing.tick_s},
                "hosts": results}


def _host_in(path: str, plan: dict) -> HostRun:
    """A host's plan with its sockets made inside the namespace at ``path`` (each socket
    stays bound to the namespace it was made in)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with entered(fd):
            return HostRun(plan, HostSockets())
    finally:
        os.close(fd)


def _stdin_ended(fd: int) -> bool:
    """The parent closed stdin (or wrote a ``stop`` record): streams end."""
    try:
        data = os.read(fd, 4096)
    except BlockingIOError:
        return False
    return not data or b'"stop"' in data


def wait_for_start() -> float:
    """Say ready, read the common start time, sleep until it; return it."""
    start_at = childproto.ready_then_start()
    if start_at is None:
        raise SystemExit("the harness closed stdin before the start instant")
    # The common instant itself, not this process's wake-up: every driver then reports
    # times on exactly the same origin (wake-ups differ by scheduling jitter).
    return start_at


def main() -> int:
    childproto.die_with_parent()
    plan = childproto.read_config()
    if "hosts" in plan:  # an engine serving many hosts
        result = Driver(plan["hosts"], plan.get("netns"), plan.get("tick_s", TICK_S),
                        engine=plan.get("engine", 0)).run()
    elif registry.get(plan["transport"]).core is None:  # the kernel's TCP
        from transports.io.tcp import run_tcp

        result = run_tcp(plan, message_bytes, wait_for_start)
    else:
        result = Driver([plan], tick_s=plan.get("tick_s", TICK_S)).run()
    childproto.emit("result", **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
