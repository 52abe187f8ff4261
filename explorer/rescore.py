"""Re-scoring chosen points with the pipeline schedule simulator instead of closed forms.

The search ranks millions of points with the closed forms of explorer/pipeline.py; the
points it reports (top-k, Pareto fronts, baselines) are re-evaluated here with the
max-plus simulator of explorer/pipesim.py in the pipeline term
(``pipeline.simulated_time``: the same question, the same stage and boundary layout),
and the relative difference of the step time is reported as the re-score error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.calibration import Calibration
from explorer.model import evaluate
from explorer.model_breakdown import Breakdown
from explorer.pipeline import simulated_time
from explorer.spec import PIPELINES, Config

__all__ = ["rescore"]


def _simulated(*args: Any) -> Any:
    """``simulated_time`` for the model's pipeline inputs (one point: 0-d or 1-element)."""
    sched, p, m, v, e, t_f, t_b, c_lat, c_ser, x_lat, x_ser, g = (
        float(np.asarray(a).ravel()[0]) for a in args)
    return simulated_time(PIPELINES[int(sched)], int(p), int(m), int(v), int(e), t_f, t_b,
                          c_lat, c_ser, x_lat, x_ser, int(g))


def rescore(cfg: Config, cal: Calibration, band: str = "mid") -> Breakdown:
    """``cfg``'s breakdown with the simulated pipeline."""
    return evaluate(cfg, cal, band, pipeline=_simulated)
