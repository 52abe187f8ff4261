"""Re-scoring chosen points with the pipeline schedule simulator instead of closed forms.

The search ranks millions of points with the closed forms of explorer/pipeline.py; the
points it reports (top-k, Pareto fronts, baselines) are re-evaluated here with the
max-plus simulator of explorer/pipesim.py in the pipeline term
(``pipeline.simulated_time``: the same question, the same stage and boundary layout),
and the relative difference of the step time is reported as the re-score error.
"""

from __future__ import annotations

from explorer.calibration import Calibration
from explorer.model import evaluate
from explorer.model_breakdown import Breakdown
from explorer.pipeline import simulated_time
from explorer.spec import Config

__all__ = ["rescore"]


def rescore(cfg: Config, cal: Calibration, band: str = "mid") -> Breakdown:
    """``cfg``'s breakdown with the simulated pipeline."""
    return evaluate(cfg, cal, band, pipeline=simulated_time)
