"""DBLP's settings: the experiment's ``[transport.dblp]`` table, resolved and validated.

Defined apart from the experiment file (workloads/experiment/ reads the table into a
``DblpConfig``) and from the worker (workloads/gradsync.py builds each rank's tolerance
policy from it) because both sides use it, and it crosses the process boundary inside
``WorkerConfig`` (workloads/records.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.fill import DEFAULT_FILL
from workloads.phase import (
    FixedTolerance,
    OptiReduceConfig,
    OptiReduceDeadline,
    PhaseAware,
    PhaseAwareConfig,
)

__all__ = ["POLICIES", "DblpConfig"]

POLICIES = ("phase_aware", "fixed", "optireduce")


@dataclass(frozen=True, kw_only=True)
class DblpConfig:
    """How much loss each bounded round may take, and what fills the loss.

    Only the fields of the chosen ``policy`` matter: ``tolerance`` for fixed (required
    there), ``phase`` for phase_aware (None: PhaseAwareConfig's defaults), ``margin_ms``
    for optireduce (None: 1 ms). ``deadline_ms`` bounds every round (optireduce: the
    first round's, later ones adapt).
    """

    policy: str = "phase_aware"
    fill: str = DEFAULT_FILL
    tolerance: float | None = None
    phase: PhaseAwareConfig | None = None
    deadline_ms: float | None = None
    margin_ms: float | None = None
    bounded_gather: bool = False

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"DblpConfig.policy={self.policy!r}: must be one of "
                             f"{', '.join(POLICIES)}")
        if self.policy == "fixed" and self.tolerance is None:
            raise ValueError("DblpConfig(policy='fixed') needs a tolerance in [0, 1)")

    @property
    def deadline_s(self) -> float | None:
        """``deadline_ms`` in seconds (None: no deadline)."""
        return None if self.deadline_ms is None else self.deadline_ms / 1000.0

    def policy_object(self) -> FixedTolerance | PhaseAware | OptiReduceDeadline:
        """A fresh policy object (workloads/phase.py); one per rank and repetition."""
        if self.policy == "fixed":
            assert self.tolerance is not None
            return FixedTolerance(self.tolerance)
        if self.policy == "phase_aware":
            return PhaseAware(self.phase)
        return OptiReduceDeadline(self.optireduce_config())

    def optireduce_config(self) -> OptiReduceConfig:
        """The OptiReduce deadline policy's settings (policy = "optireduce")."""
        margin = 1.0 if self.margin_ms is None else self.margin_ms
        return OptiReduceConfig(margin_s=margin / 1000.0, initial_s=self.deadline_s)
