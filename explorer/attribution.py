"""Where a speed-up comes from, scenario by scenario, and whether it is a scale-across gain.

For each scenario of an exploration: the speed-up of the best configuration over the
production recipe and over the state of the art; the step components the gain removes
(production's step minus the best's, part by part: compute, TP, CP, bubble, pipeline
transfers, exposed data parallelism, optimizer, tails, failures), the largest named; and
how the gain changes with the DCI's cost. Scenarios that differ only in the DCI (delay,
capacity) form a family; its *cheapest* member has the least delay and the most
capacity. A gain that is not at least ``GROWTH`` larger than its family's cheapest
member's, i.e. one that a near-free DCI shows as well, is labelled "not a scale-across
gain": it comes from what happens inside a DC.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from explorer.exploration import Exploration
from explorer.model_breakdown import PARTS

__all__ = ["GROWTH", "attribute", "removed_parts"]

GROWTH = 1.05  # a scale-across gain grows by at least 5 % from the cheapest DCI
DCI_KEYS = ("dci.delay_ms", "dci.pair_tbps", "dci.loss")
SCALE_ACROSS = "scale-across gain"
NOT_SCALE_ACROSS = "not a scale-across gain"


def removed_parts(base: Mapping[str, float], best: Mapping[str, float]) -> dict[str, float]:
    """Seconds of each step part the best configuration removes from ``base`` (negative:
    it adds), largest removal first."""
    diff = {p: base[p] - best[p] for p in PARTS}
    return dict(sorted(diff.items(), key=lambda kv: -kv[1]))


def _cost(scenario: Mapping[str, Any]) -> tuple[float, float, float]:
    """Orders a family from cheapest DCI: least delay, most capacity, least loss."""
    return (float(scenario.get("dci.delay_ms", 0.0)),
            -float(scenario.get("dci.pair_tbps") or 0.0),
            float(scenario.get("dci.loss", 0.0)))


def attribute(ex: Exploration) -> list[dict[str, Any]]:
    """Per scenario: speed-ups, ablation, the parts the gain removes, the family's
    cheapest-DCI gain and the label (module docstring)."""
    rows = []
    for o in ex.scenarios:
        prod = o.baselines.get("production")
        # the scenario's DCI, whether an axis of the grid or fixed (a one-value grid)
        cfg = o.best.config if o.best else (prod.config if prod else None)
        row: dict[str, Any] = {
            "dci": {"dci.delay_ms": cfg.dci.delay_ms, "dci.pair_tbps": cfg.dci.pair_tbps}
            if cfg is not None else {},
            "scenario": o.search.scenario, "production": o.speedup("production"),
            "sota": o.speedup("sota"), "ablation": o.ablation_speedups(),
            "best_transport": o.best.config.network.transport if o.best else None,
            "best_cross": o.best.config.placement.cross if o.best else None,
            # what the recipe settled on (a recomputation there is the memory model's call)
            "production_plan": (f"PP{prod.config.placement.pp} "
                                f"{prod.config.schedule.recompute}")
            if prod is not None and prod.config is not None else None}
        if o.best is not None and prod is not None and prod.breakdown is not None \
                and prod.breakdown.feasible:
            removed = removed_parts(prod.breakdown.as_dict(), o.best.breakdown.as_dict())
            row["removed_s"] = removed
            row["removes"] = next(iter(removed))
            row["production_step_s"] = prod.breakdown.step_s
            row["best_step_s"] = o.best.breakdown.step_s
        rows.append(row)
    families: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        key = tuple(sorted((k, v) for k, v in row["scenario"].items() if k not in DCI_KEYS))
        families.setdefault(key, []).append(row)
    for members in families.values():
        known = [r for r in members if r["production"]]
        if not known:
            continue
        cheapest = min(known, key=lambda r: _cost(r["scenario"]))
        for r in members:
            r["cheapest_dci_gain"] = cheapest["production"]
            r["cheapest_dci"] = {k: v for k, v in cheapest["scenario"].items()
                                 if k in DCI_KEYS}
            if r["production"]:
                grows = r["production"] >= GROWTH * cheapest["production"]
                r["label"] = SCALE_ACROSS if grows and r is not cheapest else NOT_SCALE_ACROSS
    return rows
