"""What an `emu calibrate` run measures, how often, and on which fabrics.

Its one job is the plan: :class:`Plan` (the phases, repetitions, message sizes, flow
counts, burst geometry, recovery timing; validated when made), the two plans the command
offers (``QUICK``, ``FULL``), and the default fabrics the measurements run on:
``FABRIC``, 2 planes x 4 spines x 2 racks x 4 hosts, 10 Mbit/s links, 16-packet FIFOs (at
10 Mbit/s the eight Python drivers of a permutation stay far from CPU-bound;
commands/bench/transport.py found 2 cores short at twice the packet rate), and ``DCI_FABRIC``,
2 DCs whose DCI links bind.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.errors import EmuError
from topologies import DciSpec, LinkSpec, MultiPlaneClos, ScaleAcross
from workloads.calibration.schema import TRANSPORTS
from workloads.calibration.stats import RESAMPLES

MEASUREMENTS = ("eta", "load", "tails", "recovery", "dci")
FABRIC = MultiPlaneClos(planes=2, spines=4, leaves=2, hosts_per_leaf=4,
                        host_link=LinkSpec(10.0, 16), fabric_link=LinkSpec(10.0, 16))
DCI_FABRIC = ScaleAcross(
    dcs=tuple(MultiPlaneClos(planes=2, spines=1, leaves=1, hosts_per_leaf=1,
                             host_link=LinkSpec(10.0, 16), fabric_link=LinkSpec(10.0, 16),
                             dc=d) for d in range(2)),
    dci=DciSpec(rate_mbit=5.0, queue_packets=16, delay_ms=5.0))


@dataclass(frozen=True)
class Plan:
    """What one run measures. ``measure`` names the phases (``MEASUREMENTS``)."""

    transports: tuple[str, ...] = TRANSPORTS
    reps: int = 5
    eta_bdp: tuple[float, ...] = (0.5, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
    eta_dci_bdp: tuple[float, ...] = (0.5, 4.0, 16.0, 64.0)
    flows_per_host: tuple[int, ...] = (1, 2, 4)
    rc_qps: tuple[int, ...] = (1, 4)  # RC's queue pairs per plane and connection, measured
    rc_config: tuple[tuple[str, float], ...] = ()  # RC core settings over its defaults
    load_s: float = 0.8
    round_bytes: int = 256 << 10
    rounds: int = 16
    healthy_rounds: int = 10
    burst_rtts: tuple[float, ...] = (4.0, 24.0)
    burst_gap_rounds: float = 3.0
    recovery_s: float = 1.2
    cut_at_s: float = 0.25
    dblp_tolerance: float = 0.1
    measure: tuple[str, ...] = MEASUREMENTS
    seed: int = 0
    resamples: int = RESAMPLES

    def __post_init__(self) -> None:
        bad = [t for t in self.transports if t not in TRANSPORTS]
        if bad or not self.transports:
            raise EmuError(f"transports={','.join(self.transports)!r} is invalid: name some "
                           f"of {', '.join(TRANSPORTS)}")
        bad = [m for m in self.measure if m not in MEASUREMENTS]
        if bad:
            raise EmuError(f"measure={bad} is invalid: must be among {', '.join(MEASUREMENTS)}")
        if self.reps < 3:
            raise EmuError(f"reps={self.reps} is invalid: must be >= 3 (bootstrap intervals)")
        for name in ("eta_bdp", "eta_dci_bdp"):
            sizes = sorted(getattr(self, name))
            if len(set(sizes)) < 3 or sizes[0] <= 0 or sizes[-1] < 10 * sizes[0]:
                raise EmuError(f"{name}={getattr(self, name)} is invalid: need >= 3 distinct "
                               "sizes > 0, the largest >= 10x the smallest")
        if not self.rc_qps or any(type(q) is not int or q < 1 for q in self.rc_qps):
            raise EmuError(f"rc_qps={self.rc_qps} is invalid: integers >= 1 (RC's queue "
                           "pairs per plane and connection)")
        if self.burst_gap_rounds <= 0 or self.rounds < 1 or self.healthy_rounds < 1:
            raise EmuError("burst_gap_rounds must be > 0, rounds and healthy_rounds >= 1")


QUICK = Plan(reps=3, eta_bdp=(0.5, 4.0, 16.0, 64.0), flows_per_host=(1, 2), load_s=0.6,
             rounds=12, healthy_rounds=8, recovery_s=1.0, rc_qps=(1,))
FULL = Plan()
