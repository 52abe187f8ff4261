"""Exhaustive, vectorised search of a design space, scenario by scenario.

Axes are of two kinds. *Decisions* are what a job's owner chooses: placement
(``placement.*``), schedule (``schedule.*``) and network technology (the transport and
its flows per connection). Everything else (model, GPU, the DCs and their sizes,
fabric, DCI, control-plane and transport timers, prices) is the *scenario*: each
combination of scenario axes is searched on its own and gets its own best
configuration, baselines and speed-ups.

Per scenario:
1. the product of the *structural* decision axes (those that decide divisibility and
   placement: placement, pipeline schedule and chunks) is checked in vectorised
   chunks (``vecmodel.structure``); points that cannot run are counted by reason
   (divisibility, nvlink, dc_split) and never expanded;
2. the surviving structures times every combination of the other decision axes are
   evaluated in chunks of ``CHUNK`` points (``vecmodel.timing``), after removing
   duplicates: a point whose value on an axis does not matter there (the pipeline
   schedule with one stage, the reduction when DP stays in one DC, ...) is kept only with
   that axis' first value ("inapplicable"; e.g. a DBLP tolerance on anything but MRC);
3. memory and failure pruning come out of the evaluation; the feasible points feed the
   running top-k (by time to train) and the candidates of two Pareto fronts (time to
   train vs cost, vs energy). Nothing per point is kept beyond those, so memory stays
   bounded by the chunk size whatever the space.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from explorer.calarrays import CalArrays
from explorer.calibration import Calibration
from explorer.columns import Encoder
from explorer.spec import Config, SpecError
from explorer.specfile import Axis, Space
from explorer.vecmodel import BREAKDOWN_FIELDS, REASONS, derive, structure, timing

__all__ = ["CHUNK", "DECISION_PREFIXES", "ScenarioSearch", "is_decision", "pareto_front",
           "scenarios", "search_scenario", "with_axes"]

CHUNK = 1 << 18
DECISION_PREFIXES = ("placement.", "schedule.", "network.transport",
                     "network.qps_per_connection")
STRUCTURAL = ("placement.", "schedule.pipeline", "schedule.virtual_stages")
Progress = Callable[[int, int, float], None]  # (points done, points in all, best time)


def is_decision(key: str) -> bool:
    """Whether an axis is a decision (else it is part of the scenario)."""
    return key.startswith(DECISION_PREFIXES)


def _structural(key: str) -> bool:
    return key.startswith(STRUCTURAL)


def with_axes(space: Space, fixed: Mapping[str, Any] = {},
              axes: Mapping[str, Sequence[Any]] = {}) -> Space:
    """A copy of ``space`` with keys fixed (their axes dropped) or turned into axes."""
    new_fixed = {k: v for k, v in space.fixed.items() if k not in axes}
    new_fixed.update(fixed)
    new_axes = [a for a in space.axes if a.key not in fixed and a.key not in axes]
    new_axes += [Axis(k, tuple(v)) for k, v in axes.items()]
    return Space(space.name, space.description, space.source, new_fixed, tuple(new_axes),
                 space.calibration, space.base_dir)


def scenarios(space: Space) -> list[dict[str, Any]]:
    """Every combination of the scenario axes (one empty dict when there are none)."""
    scen = [a for a in space.axes if not is_decision(a.key)]
    keys = [a.key for a in scen]
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(a.values for a in scen))]


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both x and y (lower is better),
    sorted by x; of equal points the first is kept."""
    order = np.lexsort((y, x))
    ys = y[order]
    best = np.minimum.accumulate(ys)
    keep = np.ones(len(order), bool)
    keep[1:] = ys[1:] < best[:-1]
    return order[keep]


@dataclass
class Found:
    """Points kept from a search (decision indices + their breakdown), as columns."""

    index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    values: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, index: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        self.index = np.concatenate([self.index, index])
        for k in BREAKDOWN_FIELDS:
            self.values[k] = np.concatenate([self.values.get(k, np.zeros(0)),
                                             np.asarray(values[k], float)])

    def take(self, sel: np.ndarray) -> Found:
        return Found(self.index[sel], {k: v[sel] for k, v in self.values.items()})

    def __len__(self) -> int:
        return len(self.index)


@dataclass
class ScenarioSearch:
    """The outcome of searching one scenario's decision space."""

    scenario: dict[str, Any]
    space: Space  # the scenario's decision space (scenario axes fixed)
    raw: int = 0
    structural: int = 0
    processed: int = 0  # points gone through so far (progress) ...
    to_process: int = 0  # ... of these (structural minus duplicates of their structure)
    evaluated: int = 0
    feasible: int = 0
    pruned: dict[str, int] = field(default_factory=lambda: {r: 0 for r in REASONS if r})
    top: Found = field(default_factory=Found)
    pareto_cost: Found = field(default_factory=Found)
    pareto_energy: Found = field(default_factory=Found)
    nearest: dict[str, Any] | None = None  # when nothing is feasible
    seconds: float = 0.0

    def config(self, flat: int) -> Config:
        """The configuration of a decision index."""
        return self.space.config(self.choice(flat))

    def choice(self, flat: int) -> dict[str, Any]:
        """The axis values of a decision index."""
        axes = decision_axes(self.space)
        out = {}
        for a, i in zip(axes, np.unravel_index(int(flat), [len(a.values) for a in axes]),
                        strict=True):
            out[a.key] = a.values[int(i)]
        return out

    @property
    def best(self) -> int | None:
        """Decision index of the fastest feasible point."""
        return int(self.top.index[0]) if len(self.top) else None


def decision_axes(space: Space) -> list[Axis]:
    dec = [a for a in space.axes if is_decision(a.key)]
    return [a for a in dec if _structural(a.key)] + [a for a in dec if not _structural(a.key)]


# Axes that do not matter in some configurations: (key, mask of the points where the
# value is irrelevant). Only the axis' first value is kept there (duplicates otherwise).
def _irrelevant(cols: dict[str, Any], d: dict[str, Any]) -> list[tuple[str, Any]]:
    p = cols["placement.pp"]
    n = d["dp"] * cols["placement.cp"]
    pipe = cols["schedule.pipeline"]
    return [
        ("schedule.pipeline", p == 1),
        ("schedule.virtual_stages", (pipe != 2) | (p == 1)),
        # 1F1B's extra warm-up is per DCI boundary downstream (explorer/pipeline.py).
        ("schedule.warmup_extra", (pipe == 0) | (p == 1) | ((pipe == 1) & (d["g"] == 1))),
        ("placement.cross", d["dcs"] == 1),
        ("placement.dc_group", (cols["placement.cross"] != 2) | (d["dcs"] == 1)),
        ("schedule.allreduce", d["k"] == 1),
        ("schedule.sequence_parallel", cols["placement.tp"] == 1),
        ("schedule.overlap", n == 1),
        ("schedule.optimizer", n == 1),
        ("schedule.dblp_tolerance", n == 1),
    ]


def _compress(cols: dict[str, Any], sel: np.ndarray) -> dict[str, Any]:
    return {k: (v[sel] if isinstance(v, np.ndarray) and v.ndim == 1 else v)
            for k, v in cols.items()}


def _decision_space(space: Space, scenario: Mapping[str, Any]) -> Space:
    return with_axes(space, fixed=scenario)


def chunks(space: Space, cal: CalArrays, chunk: int = CHUNK,
           stats: ScenarioSearch | None = None,
           bands: Mapping[str, CalArrays] = {}) -> Iterator[tuple[np.ndarray, dict]]:
    """Feasible points of a decision space, chunk by chunk: (decision indices, breakdown).

    ``stats`` (if given) receives the counts by reason. For each of ``bands`` (name ->
    calibration arrays at another band) the breakdown gets ``time_to_train_<name>``
    (inf where the point would not be feasible at that band)."""
    axes = decision_axes(space)
    sizes = [len(a.values) for a in axes]
    n_struct = sum(1 for a in axes if _structural(a.key))
    s_shape, o_shape = sizes[:n_struct], sizes[n_struct:]
    n_s, n_o = math.prod(s_shape), math.prod(o_shape)
    order = [space.axes.index(a) for a in axes]  # axis i of `axes` is space.axes[order[i]]
    enc = Encoder(space)
    pos = {a.key: i for i, a in enumerate(axes)}
    other_keys = [a.key for a in axes[n_struct:]]

    def space_idx(idx: list[np.ndarray], n: int) -> list[np.ndarray]:
        out: list[np.ndarray] = [np.zeros(n, np.intp)] * len(space.axes)
        for i, ax_i in enumerate(order):
            out[ax_i] = idx[i]
        return out

    # 1. structures: validity, duplicates among the structural axes, and which of the
    # other axes matter for each (a bit per other axis)
    valid_parts, mask_parts = [], []
    for lo in range(0, n_s, chunk):
        flat = np.arange(lo, min(n_s, lo + chunk))
        n = len(flat)
        sidx = list(np.unravel_index(flat, s_shape)) if s_shape else []
        idx = sidx + [np.zeros(n, np.intp)] * len(o_shape)
        cols = enc.columns(space_idx(idx, n))
        d = derive(cols)
        code = np.broadcast_to(structure(cols, d), (n,))
        irrelevant = dict(_irrelevant(cols, d))
        dup = np.zeros(n, bool)
        for key in pos:
            if pos[key] < n_struct and key in irrelevant:
                dup |= np.broadcast_to(irrelevant[key], (n,)) & (idx[pos[key]] != 0)
        ok = (code == 0) & ~dup
        relevant = np.zeros(n, np.int64)
        for b, key in enumerate(other_keys):
            matters = ~np.broadcast_to(irrelevant[key], (n,)) if key in irrelevant \
                else np.ones(n, bool)
            relevant |= np.where(matters, 1 << b, 0)
        if stats is not None:
            for r in ("nvlink", "divisibility", "dc_split"):
                stats.pruned[r] += int(np.count_nonzero(code == REASONS.index(r))) * n_o
            stats.pruned["inapplicable"] += int(np.count_nonzero((code == 0) & dup)) * n_o
        valid_parts.append(flat[ok])
        mask_parts.append(relevant[ok])
    valid = np.concatenate(valid_parts) if valid_parts else np.zeros(0, np.int64)
    masks = np.concatenate(mask_parts) if mask_parts else np.zeros(0, np.int64)
    if stats is not None:
        stats.raw += n_s * n_o
        stats.structural += (n_s * n_o - sum(stats.pruned[r] for r in
                                             ("nvlink", "divisibility", "dc_split")))

    # 2. each group of structures with the same relevant axes x the product of those
    groups = np.unique(masks)
    if stats is not None:
        stats.to_process += sum(int(np.count_nonzero(masks == mk)) * math.prod(
            o_shape[b] if mk >> b & 1 else 1 for b in range(len(o_shape))) for mk in groups)
    for mask in groups:
        group = valid[masks == mask]
        sub = [o_shape[b] if mask >> b & 1 else 1 for b in range(len(o_shape))]
        n_sub = math.prod(sub)
        if stats is not None:
            stats.pruned["inapplicable"] += len(group) * (n_o - n_sub)
        total = len(group) * n_sub
        for lo in range(0, total, chunk):
            j = np.arange(lo, min(total, lo + chunk))
            n = len(j)
            s_flat = group[j // n_sub]
            oidx = list(np.unravel_index(j % n_sub, sub)) if sub else []
            o_flat = np.ravel_multi_index(oidx, o_shape) if o_shape else np.zeros(n, np.int64)
            sidx = list(np.unravel_index(s_flat, s_shape)) if s_shape else []
            idx = sidx + oidx
            cols = enc.columns(space_idx(idx, n))
            d = derive(cols)
            # DBLP is a mode of MRC here: on another transport the tolerance does not
            # matter, so only its first value is evaluated.
            if "schedule.dblp_tolerance" in pos:
                dup = np.broadcast_to((cols["network.transport"] != 0)
                                      & (idx[pos["schedule.dblp_tolerance"]] != 0), (n,))
            else:
                dup = np.zeros(n, bool)
            if stats is not None:
                stats.processed += n
                stats.pruned["inapplicable"] += int(np.count_nonzero(dup))
            keep = ~dup
            if not keep.any():
                continue
            cols_k = _compress(cols, keep)
            d_k = {k: (v[keep] if isinstance(v, np.ndarray) and v.ndim == 1 else v)
                   for k, v in d.items()}
            out = timing(cols_k, d_k, cal)
            reason = np.broadcast_to(out["reason"], (int(keep.sum()),))
            flat_all = s_flat[keep] * n_o + o_flat[keep]
            if stats is not None:
                stats.evaluated += len(reason)
                for r in ("memory", "failures"):
                    stats.pruned[r] += int(np.count_nonzero(reason == REASONS.index(r)))
                _track_nearest(stats, reason, out, cols_k, flat_all)
            ok = reason == 0
            vals = {k: np.broadcast_to(out[k], reason.shape)[ok] for k in BREAKDOWN_FIELDS}
            for name, arrays in bands.items():
                other = timing(cols_k, d_k, arrays)
                t = np.where(np.broadcast_to(other["reason"], reason.shape) == 0,
                             np.broadcast_to(other["time_to_train_s"], reason.shape), np.inf)
                vals[f"time_to_train_{name}"] = t[ok]
            yield flat_all[ok], vals


def _track_nearest(stats: ScenarioSearch, reason: np.ndarray, out: Mapping[str, Any],
                   cols: Mapping[str, Any], flat: np.ndarray) -> None:
    """Remember the memory-infeasible point closest to fitting (for an empty result)."""
    mem = reason == REASONS.index("memory")
    if not mem.any():
        return
    need = np.broadcast_to(out["memory_gib"], reason.shape)[mem]
    hbm = np.broadcast_to(cols["gpu.hbm_gib"], reason.shape)[mem]
    i = int(np.argmin(need / hbm))
    ratio = float(need[i] / hbm[i])
    if stats.nearest is None or ratio < stats.nearest["memory_over_hbm"]:
        stats.nearest = {"reason": "memory", "index": int(flat[mem][i]),
                         "memory_gib": float(need[i]), "hbm_gib": float(hbm[i]),
                         "memory_over_hbm": ratio}


def search_scenario(space: Space, scenario: Mapping[str, Any], cal: Calibration, top_k: int = 10,
                    progress: Progress | None = None, chunk: int = CHUNK) -> ScenarioSearch:
    """Search one scenario: counts, top-k by time to train, Pareto candidates."""
    t0 = time.perf_counter()
    dec = _decision_space(space, scenario)
    res = ScenarioSearch(dict(scenario), dec)
    arrays = CalArrays.build(cal)
    top, pc, pe = Found(), Found(), Found()
    best = math.inf
    for flat, vals in chunks(dec, arrays, chunk, res):
        res.feasible += len(flat)
        top.add(flat, vals)
        if len(top) > 4 * top_k:
            top = top.take(_smallest(top.values["time_to_train_s"], top.index, top_k))
        t, c, e = vals["time_to_train_s"], vals["cost"], vals["energy_kwh"]
        for found, front in ((pc, pareto_front(t, c)), (pe, pareto_front(t, e))):
            found.add(flat[front], {k: v[front] for k, v in vals.items()})
        if len(pc) > 20000:
            pc = pc.take(pareto_front(pc.values["time_to_train_s"], pc.values["cost"]))
        if len(pe) > 20000:
            pe = pe.take(pareto_front(pe.values["time_to_train_s"], pe.values["energy_kwh"]))
        if len(t):
            best = min(best, float(t.min()))
        if progress is not None:
            progress(res.processed, res.to_process, best)
    res.top = top.take(_smallest(top.values.get("time_to_train_s", np.zeros(0)), top.index,
                                 top_k)) if len(top) else top
    if len(pc):
        res.pareto_cost = pc.take(pareto_front(pc.values["time_to_train_s"], pc.values["cost"]))
        res.pareto_energy = pe.take(pareto_front(pe.values["time_to_train_s"],
                                                 pe.values["energy_kwh"]))
    res.seconds = time.perf_counter() - t0
    return res


def _smallest(t: np.ndarray, index: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k smallest times, ties broken by decision index (deterministic)."""
    order = np.lexsort((index, t))
    return order[:k]


def check_calibrated(space: Space, cal: Calibration) -> None:
    """Every transport the space can choose must be calibrated (no silent default)."""
    ax = space.axis("network.transport")
    names = ax.values if ax else (space.fixed.get("network.transport", "mrc"),)
    for name in names:
        cal.get(name)
    if (space.axis("schedule.dblp_tolerance") or space.fixed.get("schedule.dblp_tolerance")) \
            and cal.dblp is None:
        raise SpecError("schedule.dblp_tolerance > 0 needs DBLP results in the calibration "
                        "(a record with a dblp transport; `emu calibrate` makes one)")
