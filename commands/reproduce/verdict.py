"""Verdicts from measured improvement factors, and the spread of repetitions.

One rule for every claim: an improvement factor (> 1 means the claimed direction, e.g.
the baseline's time over the system's) "holds" when even its low end is above 1 and its
median reaches the paper's number, "holds in direction" when it is above 1 but smaller
than claimed, and "does not hold here" when its low end is at or below 1 (the difference
is not beyond the spread of the repetitions).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

from commands.reproduce.claim import Verdict


def spread(values: Iterable[float]) -> tuple[float, float, float]:
    """(median, lo, hi) of the repetitions' values, lo..hi being the smallest and largest.

    The same convention as `workloads.training.summary.aggregate` (the spread is the min..max of
    the repetitions). Raises ValueError when there is no finite value.
    """
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        raise ValueError("spread() of no finite value")
    return statistics.median(vals), min(vals), max(vals)


def _fmt(x: float) -> str:
    return f"{x:.2f}" if abs(x) < 100 else f"{x:.0f}"


def judge(ratio: tuple[float, float, float], claimed: float | None, *,
          what: str) -> tuple[Verdict, str]:
    """The verdict on an improvement factor ``ratio = (median, lo, hi)`` and its sentence.

    ``claimed`` is the paper's factor (None when the paper claims only the direction);
    ``what`` names the factor ("MRC's goodput over RC's"). The sentence states the
    measured factor with its spread against the claimed one.
    """
    med, lo, hi = ratio
    if not all(math.isfinite(x) for x in ratio):
        raise ValueError(f"judge({what}): a non-finite factor {ratio}")
    measured = f"{what} is {_fmt(med)}x [{_fmt(lo)}-{_fmt(hi)}]"
    against = f" against {_fmt(claimed)}x claimed" if claimed is not None else ""
    if lo <= 1:
        return ("does not hold here",
                f"{measured}{against}: its spread reaches 1x or below, so no gain "
                "beyond the repetitions' spread.")
    if claimed is not None and med < claimed:
        return "holds in direction", f"{measured}{against}: better, but by less than claimed."
    return "holds", f"{measured}{against}: above 1x over the whole spread."
