"""The statistics of the calibration: the eta fit, the percentile bootstrap, balls into bins.

Its one job is the numbers, free of what was measured: ``fit_eta`` (least squares of
completion time against message size), ``bootstrap`` (a seeded percentile-bootstrap
interval of any statistic over repetitions) and ``balls_into_bins`` (ECMP's expected
occupancy). ``workloads.calibration.record`` applies them to the measurements; the module
docstring there says which figure uses which, and why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from workloads.calibration.schema import CalibrationError

RESAMPLES = 2000
T = TypeVar("T")


@dataclass(frozen=True)
class EtaFit:
    """``t(S) = overhead_s + (S - credit) * 8 / (eta * binding_mbit * 1e6)``."""

    eta: float
    overhead_s: float


def fit_eta(message_bytes: Sequence[int], seconds: Sequence[float], binding_mbit: float,
            credit_bytes: float = 0.0) -> EtaFit:
    """Least-squares eta and per-message overhead from (size, completion time) pairs."""
    if len(message_bytes) != len(seconds):
        raise CalibrationError(f"fit_eta: {len(message_bytes)} sizes but {len(seconds)} times")
    sizes = sorted(set(message_bytes))
    if len(sizes) < 3:
        raise CalibrationError(f"eta needs at least 3 distinct message sizes, got {len(sizes)}"
                               f" ({sizes}): one slope and one intercept need a third to check")
    if sizes[-1] < 10 * sizes[0]:
        raise CalibrationError(f"eta needs the largest message >= 10x the smallest, got "
                               f"{sizes[0]}..{sizes[-1]} bytes")
    y = np.asarray(seconds, dtype=float)
    if not np.all(np.isfinite(y)) or np.any(y <= 0) or not binding_mbit > 0:
        raise CalibrationError("fit_eta: times must be finite and > 0 and binding_mbit > 0")
    x = (np.asarray(message_bytes, dtype=float) - credit_bytes) * 8 / (binding_mbit * 1e6)
    slope, intercept = np.polyfit(x, y, 1)
    if not slope > 0:
        raise CalibrationError(f"eta fit has a slope {slope:g} <= 0: times do not grow "
                               "with size")
    return EtaFit(float(1 / slope), float(intercept))


def bootstrap(groups: Sequence[T], stat: Callable[[Sequence[T]], float | None], *,
              seed: int, resamples: int = RESAMPLES, level: float = 0.95,
              value: float | None = None) -> tuple[float | None, float | None]:
    """Percentile-bootstrap interval of ``stat`` over ``groups`` (one per repetition),
    resampled with replacement; (None, None) when fewer than half the resamples define it.
    Given the full-sample ``value``, the interval is widened to contain it."""
    if resamples < 1000:
        raise CalibrationError(f"resamples={resamples} is invalid: must be >= 1000")
    if not groups:
        return None, None
    rng = np.random.default_rng(seed)
    vals = []
    for row in rng.integers(0, len(groups), size=(resamples, len(groups))):
        try:
            v = stat([groups[i] for i in row])
        except CalibrationError:
            continue
        if v is not None and math.isfinite(v):
            vals.append(v)
    if len(vals) < resamples / 2:
        return None, None
    lo, hi = (float(x) for x in np.percentile(vals, [50 * (1 - level), 50 * (1 + level)]))
    if value is not None and math.isfinite(value):
        lo, hi = min(lo, value), max(hi, value)
    return lo, hi


def balls_into_bins(flows: int, bins: int) -> float:
    """E[occupied bins] / min(flows, bins) for ``flows`` hashed uniformly onto ``bins``."""
    if flows < 1 or bins < 1:
        raise CalibrationError(f"balls_into_bins({flows}, {bins}): both must be >= 1")
    return bins * (1 - (1 - 1 / bins) ** flows) / min(flows, bins)
