"""``explore(space, calibration)``: the search, its re-scored answers, baselines, speed-ups.

For every scenario of the space (explorer/search.py) this runs the vectorised search,
then re-evaluates what it reports (top-k, both Pareto fronts, baselines and ablations)
with the scalar model at the calibration's three bands (the projection's uncertainty)
and with the pipeline simulator (the re-score error of the closed forms).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from explorer.baselines import ABLATIONS, Baseline, ablation, production, sota
from explorer.calibration import Calibration, load_calibration
from explorer.model import evaluate as evaluate_config
from explorer.model_breakdown import Breakdown
from explorer.rescore import rescore
from explorer.search import (
    CHUNK,
    ScenarioSearch,
    check_calibrated,
    scenarios,
    search_scenario,
)
from explorer.spec import Config, SpecError
from explorer.specfile import Space

__all__ = ["Exploration", "Projection", "ScenarioOutcome", "evaluate", "explore", "project"]


@dataclass(frozen=True)
class Projection:
    """A configuration's projection: the breakdown with measured calibration values, the
    time to train at the favourable and unfavourable ends of the calibration's intervals,
    and the step re-scored with the pipeline simulator."""

    config: Config
    breakdown: Breakdown
    time_lo_s: float
    time_hi_s: float
    rescored_step_s: float

    @property
    def rescore_error(self) -> float:
        """|closed-form step - simulated step| / simulated step."""
        sim = self.rescored_step_s
        return abs(self.breakdown.step_s - sim) / sim if sim > 0 else float("nan")


def project(cfg: Config, cal: Calibration) -> Projection:
    """Evaluate ``cfg`` at the three bands and with the simulator."""
    mid = evaluate_config(cfg, cal)
    if not mid.feasible:
        return Projection(cfg, mid, float("nan"), float("nan"), float("nan"))
    lo = evaluate_config(cfg, cal, "opt")
    hi = evaluate_config(cfg, cal, "pess")
    sim = rescore(cfg, cal)
    return Projection(cfg, mid, lo.time_to_train_s if lo.feasible else float("inf"),
                      hi.time_to_train_s if hi.feasible else float("inf"),
                      sim.step_s if sim.feasible else float("nan"))


@dataclass
class ScenarioOutcome:
    """One scenario: its search, the projections of what it reports, the baselines."""

    search: ScenarioSearch
    top: list[Projection]
    pareto_cost: list[Projection]
    pareto_energy: list[Projection]
    baselines: dict[str, Baseline]
    baseline_projections: dict[str, Projection]
    ablation: dict[str, Baseline]

    @property
    def best(self) -> Projection | None:
        return self.top[0] if self.top else None

    def speedup(self, baseline: str,
                candidate: Baseline | Projection | None = None) -> float | None:
        """Time to train of ``baseline`` / of the best configuration (or ``candidate``);
        1.25 reads as "25 % faster". None if either is missing."""
        base = self.baselines.get(baseline) or self.ablation.get(baseline)
        if base is None or base.breakdown is None or not base.breakdown.feasible:
            return None
        cand = candidate if candidate is not None else self.best
        if cand is None or cand.breakdown is None or not cand.breakdown.feasible:
            return None
        return base.breakdown.time_to_train_s / cand.breakdown.time_to_train_s

    def ablation_speedups(self) -> dict[str, float | None]:
        """Speed-up over production of searching each group of axes alone, and jointly."""
        return {name: self.speedup("production", b) for name, b in self.ablation.items()}


@dataclass
class Exploration:
    """Everything ``explore`` found; ``points()`` is in explorer/report.py (streamed)."""

    space: Space
    calibration: Calibration
    scenarios: list[ScenarioOutcome]
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def top(self) -> list[Projection]:
        """Top configurations over all scenarios, fastest first."""
        allp = [p for s in self.scenarios for p in s.top]
        return sorted(allp, key=lambda p: p.breakdown.time_to_train_s)

    def speedups(self, baseline: str) -> list[float]:
        """Per scenario, the best configuration's speed-up over ``baseline``."""
        return [x for s in self.scenarios if (x := s.speedup(baseline)) is not None]

    def summary_speedups(self) -> dict[str, dict[str, float | None]]:
        """Max and median speed-ups over production and sota, and per ablation."""
        out: dict[str, dict[str, float | None]] = {}
        for name in ("production", "sota"):
            xs = self.speedups(name)
            out[name] = {"max": max(xs) if xs else None,
                         "median": statistics.median(xs) if xs else None, "scenarios": len(xs)}
        for name in ABLATIONS:
            xs = [v for s in self.scenarios if (v := s.ablation_speedups().get(name))]
            out[f"ablation_{name}"] = {"max": max(xs) if xs else None,
                                       "median": statistics.median(xs) if xs else None,
                                       "scenarios": len(xs)}
        return out


# (what, done, total, best time so far): "points" within a scenario, then "scenario"
Progress = Callable[[str, int, int, float], None]


def explore(space: Space, calibration: Calibration | Sequence[str] | None = None,
            top_k: int = 10, baselines: bool = True, progress: Progress | None = None,
            chunk: int = CHUNK) -> Exploration:
    """Search every scenario of ``space``; see the module docstring."""
    cal = _calibration(space, calibration)
    check_calibrated(space, cal)
    scen = scenarios(space)
    total = len(scen)
    outcomes = []
    notes: list[str] = []
    t0 = time.perf_counter()
    search_s = project_s = base_s = 0.0
    for i, sc in enumerate(scen):
        def step(done: int, of: int, best: float) -> None:
            if progress is not None:
                progress("points", done, of, best)
        t1 = time.perf_counter()
        res = search_scenario(space, sc, cal, top_k, step, chunk)
        t2 = time.perf_counter()
        top = [project(res.config(int(j)), cal) for j in res.top.index]
        pc = [project(res.config(int(j)), cal) for j in res.pareto_cost.index]
        pe = [project(res.config(int(j)), cal) for j in res.pareto_energy.index]
        t3 = time.perf_counter()
        bases: dict[str, Baseline] = {}
        abl: dict[str, Baseline] = {}
        if baselines and "rc" not in cal.transports:
            # Both baselines run production RoCE RC: without its calibration there are none.
            notes.append("baselines skipped: the calibration has no lossless RC (rc), "
                         "which both baselines run")
            baselines = False
        if baselines:
            dec = res.space
            bases["production"] = production(dec, cal)
            outside = _outside(dec, bases["production"].config)
            if outside:
                notes.append("the production recipe lies outside the searched space ("
                             + ", ".join(f"{k} = {v!r}" for k, v in outside.items())
                             + "): a speed-up over it may be below 1")
            bases["sota"] = sota(dec, cal, bases["production"])
            for name in ABLATIONS:
                abl[name] = ablation(dec, cal, bases["production"], name) if name != "joint" \
                    else Baseline("joint", top[0].config if top else None,
                                  top[0].breakdown if top else None)
        bp = {k: project(b.config, cal) for k, b in bases.items() if b.config is not None}
        t4 = time.perf_counter()
        search_s += t2 - t1
        project_s += t3 - t2
        base_s += t4 - t3
        outcomes.append(ScenarioOutcome(res, top, pc, pe, bases, bp, abl))
        if progress is not None:
            best = top[0].breakdown.time_to_train_s if top else float("inf")
            progress("scenario", i + 1, total, best)
    timings = {"search_s": search_s, "rescore_s": project_s, "baselines_s": base_s,
               "total_s": time.perf_counter() - t0}
    return Exploration(space, cal, outcomes, timings, sorted(set(notes)))


def _outside(dec: Space, cfg: Config | None) -> dict[str, Any]:
    """The decision values of ``cfg`` that ``dec`` neither fixes so nor offers."""
    if cfg is None:
        return {}
    flat = cfg.flat()
    out = {}
    for a in dec.axes:
        if a.key in flat and flat[a.key] not in a.values:
            out[a.key] = flat[a.key]
    for k, v in dec.fixed.items():
        if k.startswith(("placement.", "schedule.", "network.t", "network.q")) and \
                flat.get(k) != v and k in flat:
            out[k] = flat[k]
    return out


def _calibration(space: Space, calibration: Calibration | Sequence[str] | None) -> Calibration:
    if isinstance(calibration, Calibration):
        return calibration
    paths = list(calibration or ()) or list(space.calibration)
    return load_calibration(paths)


def evaluate(space: Space | Config, config: Mapping[str, Any] | Config | None = None,
             calibration: Calibration | Sequence[str] | None = None) -> Breakdown:
    """The breakdown of one configuration: ``config`` as a Config, or as axis values of
    ``space`` (default: every axis at its first value)."""
    if isinstance(space, Config):
        cfg = space
        cal = calibration if isinstance(calibration, Calibration) else load_calibration(
            list(calibration or ()))
    else:
        cfg = config if isinstance(config, Config) else space.config(config or {})
        cal = _calibration(space, calibration)
    if not isinstance(cfg, Config):
        raise SpecError("config must be a Config or a mapping of axis values")
    return evaluate_config(cfg, cal)


