"""The state a calibration run's phases share, and their repetition loop.

Its one job: a :class:`Session` carries the plan, what has been measured
(workloads/calibration/measured.py), the main fabric's measured pair (host h0 to the
first host of the next rack) and the run's clock, and runs a phase's repetitions
interleaved (repetition 1 of every transport, then repetition 2, ...: slow drifts of
the machine spread over all transports). A failed repetition is noted in its
transport's record and the run goes on; the record is rewritten after every one.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from emu.errors import EmuError
from topologies import MultiPlaneClos
from workloads.calibration.measured import Measured, TransportSamples
from workloads.calibration.plan import Plan


class Session:
    """One calibration run's shared state: ``plan``, ``measured``, the main fabric
    ``spec`` and its measured pair ``src`` -> ``dst``, ``say``, and ``t0`` (when
    measuring started, for the phases' progress lines)."""

    def __init__(self, plan: Plan, measured: Measured, spec: MultiPlaneClos,
                 say: Callable[[str], None]) -> None:
        self.plan, self.measured, self.spec, self.say = plan, measured, spec, say
        self.src, self.dst = spec.hosts[0].name, spec.hosts[spec.hosts_per_leaf].name
        self.t0 = time.monotonic()

    def samples(self, transport: str) -> TransportSamples:
        """``transport``'s samples so far."""
        return self.measured.acc[transport]

    def dci_transports(self) -> tuple[str, ...]:
        """The transports measured over the DCI: not RC, whose per-plane QP addresses are
        not routed across DCs."""
        return tuple(t for t in self.plan.transports if t != "rc")

    def reps(self, phase: str, each: Callable[[int, str], None],
             transports: tuple[str, ...] | None = None) -> None:
        """``each(rep, transport)`` for every repetition of the plan, interleaved over
        ``transports`` (default: the plan's). A transport without a regime (its RTT
        probes all failed, noted there) is skipped after the RTT phase."""
        self.say(f"{phase} ({time.monotonic() - self.t0:.0f} s in)")
        for rep in range(self.plan.reps):
            for t in transports or self.plan.transports:
                a = self.samples(t)
                if not phase.startswith("rtt") and (a.dci_regime if "dci" in phase
                                                    else a.regime) is None:
                    continue  # its RTT probes all failed: noted there
                try:
                    each(rep, t)
                except (EmuError, subprocess.SubprocessError) as e:
                    a.notes.append(f"{phase} rep {rep}: failed: {e}"[:300])
                    self.say(f"  {phase} {t} rep {rep}: FAILED: {e}")
                self.measured.write()
