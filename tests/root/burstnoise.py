"""The host's part in a microburst test: on two shared vCPUs the hypervisor now and then
takes a core away (10 ms to 1 s), which nothing on the host can beat. A burst test's
checks are about instants and short windows, so the host is sampled per CPU and per
instant (``CpuWakeups``), and a failed check is measured again only when the host was
disturbed in the span the check is about, by more than the check allows, or when the
test's own record says it acted too late for its measurement to mean anything
(``Inconclusive``). When the host kept time, a failure is final; when every try was
disturbed, the test is skipped as inconclusive, with the figures (``conclusive``)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import pytest

from emu.delayline import DEFAULT_RT_PRIORITY

T = TypeVar("T")
TRIES = 3

# One per CPU, pinned to it, at the relay's real-time priority above the senders': it
# sleeps PERIOD_S at a time on a 1 ns timer slack and prints when each wake-up came. An
# iteration longer than PERIOD_S is time the CPU was taken from it; a stall of S shows
# as at least S - PERIOD_S (a sleep already under way when the CPU went away).
PERIOD_S = 0.0005
WAKER = r"""
import ctypes, os, select, sys, time
cpu, gap, prio = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK: 1 ns
os.sched_setaffinity(0, {cpu})
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
except OSError:
    pass
mono, stdin, out = time.monotonic, [sys.stdin], [time.monotonic()]
print("ready", flush=True)
while not select.select(stdin, [], [], gap)[0]:
    out.append(mono())
print(" ".join(f"{x:.9f}" for x in out), flush=True)
"""


class Inconclusive(Exception):
    """A measurement whose checks say nothing: the host (or the test itself, by its own
    record) was held back beyond what the checks allow. Measure again."""


class CpuWakeups:
    """When each CPU's sampler woke, from start to ``stop()``: ``worst(a, b)`` is the
    longest any CPU was taken away in the span [a, b] (CLOCK_MONOTONIC), ``held(a, b)``
    the most time one CPU lost in it in all (beyond its usual wake-up lateness)."""

    def __init__(self) -> None:
        self.procs = [subprocess.Popen(
            [sys.executable, "-c", WAKER, str(cpu), str(PERIOD_S), str(DEFAULT_RT_PRIORITY)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for cpu in sorted(os.sched_getaffinity(0))]
        # spans measured before every sampler runs would read as undisturbed
        for p in self.procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        self.wakes: list[list[float]] = []

    def __enter__(self) -> CpuWakeups:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """End the sampling (if still running) and keep the wake-ups."""
        if self.wakes or not self.procs:
            return
        for p in self.procs:
            out = ""
            try:
                out, _ = p.communicate("stop\n", timeout=10)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            self.wakes.append([float(x) for x in out.split()])
        self.procs = []

    def _lateness(self, a: float, b: float) -> list[tuple[list[float], float]]:
        """Per CPU, the lateness of every sample overlapping [a, b] and its median
        lateness over the whole sampling."""
        self.stop()
        out = []
        for w in self.wakes:
            late = [(t0, t1, t1 - t0 - PERIOD_S) for t0, t1 in zip(w, w[1:], strict=False)]
            out.append(([x for t0, t1, x in late if t1 >= a and t0 <= b],
                        statistics.median([x for _, _, x in late] or [0.0])))
        return out

    def worst(self, a: float, b: float) -> float:
        """The longest any CPU was taken away in [a, b] (s)."""
        return max((max(xs, default=0.0) for xs, _ in self._lateness(a, b)), default=0.0)

    def held(self, a: float, b: float) -> float:
        """The most time one CPU lost in [a, b] in all (s): each sample's lateness beyond
        its CPU's usual (median) one, summed."""
        return max((sum(max(0.0, x - base) for x in xs) for xs, base in self._lateness(a, b)),
                   default=0.0)

    def check_worst(self, a: float, b: float, slack: float, what: str = "") -> Callable[
            [], str | None]:
        """An excuse for ``excused``: the host took a CPU away for longer than ``slack``
        (s) in [a, b]."""
        return _beyond(lambda: self.worst(a, b), slack, f"a CPU was taken away for {{}} {what}")

    def check_held(self, a: float, b: float, slack: float, what: str = "") -> Callable[
            [], str | None]:
        """An excuse for ``excused``: the host took more than ``slack`` (s) in all from one
        CPU in [a, b]."""
        return _beyond(lambda: self.held(a, b), slack, f"a CPU lost {{}} in all {what}")


def _beyond(measure: Callable[[], float], slack: float, said: str) -> Callable[[], str | None]:
    """An excuse that holds when ``measure()`` (s) exceeds ``slack``; ``said`` puts the
    figure in its ``{}``."""
    def why() -> str | None:
        x = measure()
        if x <= slack:
            return None
        return (f"{said.format(f'{x * 1e3:.1f} ms')}, beyond the {slack * 1e3:.1f} ms the "
                f"check allows")
    return why

Excuse = Callable[[], "str | None"] | str | None


@contextmanager
def excused(*excuses: Excuse) -> Iterator[None]:
    """Checks inside fail for good unless one of ``excuses`` (a reason, or a callable
    giving one or None) holds: then the measurement was inconclusive."""
    try:
        yield
    except AssertionError as e:
        for x in excuses:
            why = x() if callable(x) else x
            if why:
                first = (str(e).splitlines() or ["a check failed"])[0][:200]
                raise Inconclusive(f"{first} ({why})") from e
        raise


def conclusive(attempt: Callable[[int], T], tries: int = TRIES) -> T:
    """Run ``attempt`` (try number from 0: a measurement and its checks) until it is
    conclusive: its checks either pass, or fail while the host kept time (final). When
    every try was inconclusive the test is skipped, with the figures."""
    why: list[str] = []
    for i in range(tries):
        try:
            return attempt(i)
        except Inconclusive as e:
            why.append(str(e))
            print(f"  try {i + 1} inconclusive: {e}: measuring again")
    pytest.skip(f"inconclusive: the host held the measurement back in each of {tries} "
                f"tries: {'; '.join(why)}")


def held_back(t_late: float, t_due: float, what: str) -> str | None:
    """The test's own record: an excuse when it did ``what`` at ``t_late``, after
    ``t_due`` (CLOCK_MONOTONIC), the last instant at which it meant anything."""
    if t_late <= t_due:
        return None
    return f"the test {what} {(t_late - t_due) * 1e3:.1f} ms too late"
