"""Learning-rate schedules of the training workloads (one function: every rank, the
single-process reference and the tests compute the same rate)."""

from __future__ import annotations

import math

LR_SCHEDULES = ("cosine", "constant")


def lr_at_step(lr: float, schedule: str, steps: int, step: int) -> float:
    """The learning rate of ``step`` of ``steps``: constant, or cosine-annealed to 0."""
    if schedule == "cosine":
        return lr * 0.5 * (1 + math.cos(math.pi * step / steps))
    if schedule == "constant":
        return lr
    raise ValueError(f"lr_schedule={schedule!r}: use one of {', '.join(LR_SCHEDULES)}")
