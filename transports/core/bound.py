"""The loss bound of one DBLP message: what the transport needs to know, nothing else."""

from __future__ import annotations

import math
from dataclasses import dataclass

INF = float("inf")


@dataclass(frozen=True)
class LossBound:
    """How much of a message may be lost: ``tolerance`` of its chunks, or what the
    ``deadline_s`` (seconds after ``post_recv``) leaves. What the caller does with the
    missing chunks (a fill policy: workloads/collectives/fill.py) is not the transport's business:
    it only reports them."""

    tolerance: float = 0.0
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        t = self.tolerance
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0.0 <= t < 1.0:
            raise ValueError(f"LossBound.tolerance={t!r} must be a number in [0, 1)")
        d = self.deadline_s
        if d is not None and (isinstance(d, bool) or not isinstance(d, int | float)
                              or not 0.0 < d < INF):
            raise ValueError(f"LossBound.deadline_s={d!r} must be a number of seconds > 0 "
                             "(or None: no deadline)")

    @property
    def reliable(self) -> bool:
        return self.tolerance == 0.0 and self.deadline_s is None

    def needed(self, nchunks: int) -> int:
        """Chunks that must arrive: ceil((1 - tolerance) * nchunks), at least 1."""
        return max(1, nchunks - math.floor(self.tolerance * nchunks + 1e-9))
