"""DBLP's settings: the experiment's ``[transport.dblp]`` table, resolved and validated.

Defined apart from the experiment file (workloads/experiment/ reads the table into a
``DblpConfig``) and from the worker (workloads/training/gradsync.py builds each rank's tolerance
policy from it) because both sides use it, and it crosses the process boundary inside
``WorkerConfig`` (workloads/records.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from transports.core.bound import LossBound
from workloads.collectives.fill import DEFAULT_FILL
from workloads.collectives.phase import (
    FixedTolerance,
    OptiReduceConfig,
    OptiReduceDeadline,
    PhaseAware,
    PhaseAwareConfig,
)
from workloads.collectives.schedules import block_bounds

__all__ = ["CHUNK_BYTES", "POLICIES", "BlockTooSmall", "DblpConfig", "block_chunks",
           "check_block", "droppable_chunks"]

POLICIES = ("phase_aware", "fixed", "optireduce")
CHUNK_BYTES = 8000  # the transports' default chunk (mtu_payload): one datagram's payload
VALUE_BYTES = 4  # float32 gradients


class BlockTooSmall(ValueError):
    """A gradient block has too few chunks for a loss tolerance to let any of them go:
    the bounded round would need every chunk, i.e. DBLP would run as reliable MRC."""


def block_chunks(values: int, workers: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Chunks of the smallest block of the transpose all-reduce (``values`` float32
    gradient entries split over ``workers`` owners), each chunk ``chunk_bytes``."""
    if values < 1 or workers < 1 or chunk_bytes < 1:
        raise ValueError(f"values={values}, workers={workers}, chunk_bytes={chunk_bytes}: "
                         "each must be >= 1")
    smallest = min(hi - lo for lo, hi in block_bounds(values, workers))
    return max(1, math.ceil(smallest * VALUE_BYTES / chunk_bytes))


def droppable_chunks(tolerance: float, nchunks: int) -> int:
    """Chunks a round of ``nchunks`` may lose at ``tolerance`` (what the transport's
    ``LossBound.needed`` leaves over)."""
    return nchunks - LossBound(tolerance).needed(nchunks)


def check_block(tolerance: float, values: int, workers: int,
                chunk_bytes: int = CHUNK_BYTES, what: str = "the model") -> int:
    """The chunks of ``what``'s smallest transpose block; BlockTooSmall, with the reason
    and the chunk size that would do, when ``tolerance`` (> 0) lets none of them go."""
    n = block_chunks(values, workers, chunk_bytes)
    if tolerance <= 0 or droppable_chunks(tolerance, n) >= 1:
        return n
    need = math.ceil(1 / tolerance - 1e-9)  # chunks for floor(tolerance x n) >= 1
    block = min(hi - lo for lo, hi in block_bounds(values, workers)) * VALUE_BYTES
    raise BlockTooSmall(
        f"{what}'s gradient blocks ({values} values over {workers} workers: {block} B) are "
        f"{n} chunk(s) of {chunk_bytes} B, and a tolerance of {tolerance:g} lets "
        f"floor({tolerance:g} x {n}) = 0 of them go: every round would need all its chunks "
        f"and DBLP would run as reliable MRC. A tolerance of {tolerance:g} needs blocks of "
        f">= {need} chunks: chunks of at most {block // need} B, or a larger model")


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

    def largest_tolerance(self, lr_decays: bool = True) -> tuple[str, float] | None:
        """(the ``[transport.dblp]`` key that sets it, the largest tolerance a round of
        this policy can get), the one a block must be large enough for (`check_block`)
        for DBLP to let any chunk go; ``lr_decays``: the learning rate falls during the
        run (phase_aware scales ``base`` up towards ``cap`` as it does). None when rounds
        have a deadline (optireduce, or ``deadline_ms``): a round then ends at its
        deadline however few chunks its block has, so it is bounded all the same."""
        if self.deadline_ms is not None or self.policy == "optireduce":
            return None
        if self.policy == "fixed":
            assert self.tolerance is not None  # __post_init__
            return "tolerance", self.tolerance
        phase = self.phase or PhaseAwareConfig()
        if phase.lr_scaling and lr_decays:
            return "cap", phase.cap
        return "base", phase.base

    @property
    def deadline_s(self) -> float | None:
        """``deadline_ms`` in seconds (None: no deadline)."""
        return None if self.deadline_ms is None else self.deadline_ms / 1000.0

    def policy_object(self) -> FixedTolerance | PhaseAware | OptiReduceDeadline:
        """A fresh policy object (workloads/collectives/phase.py); one per rank and repetition."""
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
