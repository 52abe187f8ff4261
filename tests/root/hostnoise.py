"""The host's own timekeeping, sampled while a root test measures time: on two shared
vCPUs the hypervisor now and then takes a core away for milliseconds, which nothing
on the host can beat. Tests of timing compare against it (``HostWakeups``) and measure
again when the host itself was disturbed (``measure_undisturbed``); tests of rate
measure again when the host held back the sender or receiver (``goodput_at_ceiling``)."""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from emu.delayline import DEFAULT_RT_PRIORITY, DEFAULT_SPIN_S
from emu.traffic import FlowResult


@dataclass
class Summary:
    """Count, median, p99 and minimum of a list of durations (seconds)."""

    n: int
    median: float
    p99: float
    lo: float

    @classmethod
    def of(cls, xs: list[float]) -> Summary:
        s = sorted(xs)
        return cls(len(s), statistics.median(s), s[min(len(s) - 1, int(0.99 * len(s)))], s[0])

    def __str__(self) -> str:
        return (f"n={self.n} median={self.median * 1e3:.3f} ms p99={self.p99 * 1e3:.3f} ms "
                f"min={self.lo * 1e3:.3f} ms")


WAKER = r"""
import ctypes, os, select, sys, time
wait, gap, spin, prio = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK: 1 ns, as the relay
if prio:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
    except OSError:
        pass
mono, stdin, out = time.monotonic, [sys.stdin], []
while True:
    t0 = mono()
    if select.select(stdin, [], [], gap)[0]:
        break
    idle_late = mono() - t0 - gap  # waking from idle, as the relay when a frame comes
    due = mono() + wait
    t = due - mono() - spin
    if t > 0:
        select.select([], [], [], t)
    while mono() < due:  # poll the last stretch, as the relay
        pass
    out.append(idle_late + mono() - due)
print(" ".join(f"{x:.9f}" for x in out), flush=True)
"""


class HostWakeups:
    """Samples the host's wake-up lateness while a measurement runs: a separate process,
    scheduled like the relay (SCHED_FIFO, 1 ns timer slack), wakes from idle and then
    waits ``wait`` seconds the relay's way (timer, then polling). Each sample is the sum
    of both wake-ups' lateness, the two a relayed frame goes through; how long the
    waits are matters little (a timer's lateness does not grow with its length), so
    they are short, for many samples."""

    def __init__(self, wait: float = 0.001, gap: float = 0.001) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WAKER, str(wait), str(gap), str(DEFAULT_SPIN_S),
             str(DEFAULT_RT_PRIORITY)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.samples: list[float] = []

    def __enter__(self) -> HostWakeups:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.stop()
        if kind is None:  # (else the measurement's own error is the one to see)
            assert self.samples, "the host wake-up sampler recorded nothing"

    def stop(self) -> None:
        """End the sampling (if still running) and keep its samples."""
        if self.proc.returncode is not None:
            return
        out = ""
        try:
            out, _ = self.proc.communicate("stop\n", timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.samples = [float(x) for x in out.split()]

    def summary(self) -> Summary:
        return Summary.of(self.samples)


class HeldBack(AssertionError):
    """A check missed while the measurement's own record shows the host held it back by
    more than the check allows (say, a load generator kept off the CPU): the miss says
    nothing about the emulator, so ``measure_undisturbed`` measures again."""


def measure_undisturbed(attempt: Callable[[HostWakeups], None], guard: float,
                        tries: int = 3) -> None:
    """Run ``attempt`` (a measurement and its checks, the host sampled meanwhile by the
    ``HostWakeups`` it is given) until it passes. A failed check is measured again only
    when the host itself was disturbed then: its own wake-ups later than ``guard``
    (seconds, the timing tolerance of the checks) at p99, which nothing on it could
    have met, or the attempt's own record of being held back (``HeldBack``). On a host
    that kept time a failure is final. When every try was disturbed, the test is
    skipped as inconclusive, with the figures."""
    for i in range(tries):
        host = HostWakeups()
        try:
            attempt(host)
            return
        except AssertionError as e:
            host.stop()  # (if the attempt failed before its sampling ended)
            p99 = host.summary().p99 if host.samples else 0.0
            why = str(e).splitlines()[0][:200] if str(e) else "a check failed"
            if isinstance(e, HeldBack):
                what = "the measurement was held back"
            elif p99 > guard:
                what = (f"the host's own wake-ups were {p99 * 1e3:.2f} ms late at p99, "
                        f"beyond the {guard * 1e3:.2f} ms the checks allow")
            else:
                raise
            if i == tries - 1:
                pytest.skip(f"inconclusive: in each of {tries} tries a check failed while "
                            f"the host was disturbed; in the last {what} ({why})")
            print(f"  try {i + 1} failed while {what}: measuring again ({why})")
        finally:
            host.stop()


def goodput_at_ceiling(run: Callable[[], FlowResult], link_mbit: float, seconds: float,
                       tolerance: float = 0.1, tries: int = 3) -> FlowResult:
    """Run one saturating flow (``run``, measured over ``seconds``) until its goodput is
    within ``tolerance`` of what a ``link_mbit`` bottleneck lets through. A miss is
    measured again only when the host held the measurement itself back by more than
    the tolerance: the sender did not even offer the link's rate (less the tolerance)
    during the window, or fell behind its schedule for more than ``tolerance`` of the
    window at once, or the receiving thread was held up that long. When the fabric
    had its chance a miss is final; when every try was held back, the test is skipped
    as inconclusive, with the figures."""
    for i in range(tries):
        r = run()
        ceiling = r.ceiling_mbit(link_mbit)
        if abs(r.goodput_mbit - ceiling) <= tolerance * ceiling:
            return r
        held = [why for why, bad in (
            (f"the sender offered {r.offered_mbit:.1f} Mbit/s",
             r.offered_mbit < (1 - tolerance) * link_mbit),
            (f"the sender fell {r.tx_stall_s * 1e3:.0f} ms behind its schedule",
             r.tx_stall_s > tolerance * seconds),
            (f"the receiver was held up for {r.rx_stall_s * 1e3:.0f} ms",
             r.rx_stall_s > tolerance * seconds)) if bad]
        miss = f"goodput {r.goodput_mbit:.1f} Mbit/s, ceiling {ceiling:.1f}"
        if not held:
            raise AssertionError(f"{miss} while the host kept up: {r}")
        if i == tries - 1:
            pytest.skip(f"inconclusive: the host held the measurement back in each of "
                        f"{tries} tries ({miss}; {', '.join(held)})")
        print(f"  try {i + 1}: {miss}, but {', '.join(held)}: measuring again")
    raise AssertionError("tries must be >= 1")
