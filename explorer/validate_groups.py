"""The published validation in two groups: rows where the network matters and rows where
it does not, each held to the same targets.

A scored row (explorer/validate.py) is *network-bound* when the model puts at least
``NETWORK_BOUND`` of its steady step in exposed scale-out communication (pipeline
transfers, data-parallel collectives, tails), else *compute-bound*. Per group, over the
scored rows of every table: mean and max |relative error| and Spearman's rank
correlation of predicted against measured model TFLOP/s per GPU, against ``TARGETS``.
The classification uses the model's own breakdown (no measured breakdown is published);
the rows' fitted parameter (one per GPU type) comes from compute-bound rows only, so the
network-bound group is never tuned to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from explorer.validate import Score, spearman

__all__ = ["NETWORK_BOUND", "TARGETS", "GroupScore", "group_scores"]

NETWORK_BOUND = 0.2
TARGETS = {"mean_abs_error": 0.10, "max_abs_error": 0.20, "spearman": 0.9}


@dataclass(frozen=True)
class GroupScore:
    """One group's rows (table, label, error, network share) and its figures."""

    name: str
    rows: tuple[tuple[str, str, float, float], ...]
    mean_abs_error: float
    max_abs_error: float
    spearman: float

    @property
    def met(self) -> dict[str, bool]:
        """Each target met (Spearman needs 3 rows)."""
        return {"mean_abs_error": self.mean_abs_error <= TARGETS["mean_abs_error"],
                "max_abs_error": self.max_abs_error <= TARGETS["max_abs_error"],
                "spearman": math.isfinite(self.spearman)
                and self.spearman >= TARGETS["spearman"]}

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.name, "rows": [{"table": t, "label": lab, "error": e,
                                              "network_share": n}
                                             for t, lab, e, n in self.rows],
                "n": len(self.rows), "mean_abs_error": self.mean_abs_error,
                "max_abs_error": self.max_abs_error, "spearman": self.spearman,
                "targets": TARGETS, "met": self.met}


def group_scores(scores: Sequence[Score]) -> dict[str, GroupScore]:
    """The compute-bound and network-bound groups of the scored rows."""
    out = {}
    for name in ("compute-bound", "network-bound"):
        rows, pred, meas = [], [], []
        for s in scores:
            for r in s.rows:
                if not r.scored or not math.isfinite(r.network_share):
                    continue
                if (r.network_share >= NETWORK_BOUND) != (name == "network-bound"):
                    continue
                rows.append((s.table.name, r.label, r.error, r.network_share))
                pred.append(r.tflops_predicted)
                meas.append(r.tflops_measured)
        errs = [abs(e) for _, _, e, _ in rows]
        ok = [e for e in errs if math.isfinite(e)]
        out[name] = GroupScore(
            name, tuple(rows), sum(ok) / len(ok) if ok else math.nan,
            max(errs) if errs and len(ok) == len(errs) else math.nan,
            spearman(pred, meas) if len(rows) > 2 and len(ok) == len(errs) else math.nan)
    return out
