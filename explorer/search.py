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
   chunks (``model_structure.structure``); points that cannot run are counted by reason
   (divisibility, nvlink, dc_split) and never expanded;
2. the surviving structures are grouped by which other decision axes matter to them
   (the pipeline's warm-up with one stage, the optimizer with one data-parallel rank,
   the reduction when data parallelism stays in one DC, ...); an axis that does not
   matter keeps only its first value (the rest are "inapplicable" duplicates). The
   transport, its flows per connection and the DBLP tolerance form one *network*
   dimension of the combinations that differ (flows per connection do not matter to
   MRC, which sprays; a tolerance only to MRC). Each group is evaluated by the model
   (explorer/model.py) on a grid where every axis has a dimension of its own, so each
   term is computed over the axes it depends on only, in chunks of about ``CHUNK``
   points;
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
from explorer.model import calibration_arrays, step
from explorer.model_structure import REASONS, derive, structure
from explorer.spec import Config, SpecError
from explorer.specfile import Axis, Space

__all__ = ["CHUNK", "DECISION_PREFIXES", "ScenarioSearch", "is_decision", "pareto_front",
           "scenarios", "search_scenario", "with_axes"]

CHUNK = 1 << 18
DECISION_PREFIXES = ("placement.", "schedule.", "network.transport",
                     "network.qps_per_connection")
STRUCTURAL = ("placement.", "schedule.pipeline", "schedule.virtual_stages")
NETWORK = ("network.transport", "network.qps_per_connection", "schedule.dblp_tolerance")
# What the search keeps of every feasible point (the rest is re-evaluated on demand).
KEPT = ("time_to_train_s", "cost", "energy_kwh")
Progress = Callable[[int, int, float], None]  # (points done, points in all, best time)


# What one run may be asked for, checked before any work (emu explore, the bench, the
# claim): every scenario keeps its outcome (top-k, Pareto fronts, baselines), about 1 MB
# and a second with its baselines (the 80-scenario grid: 105 MB peak, 85 s); the search
# evaluates at least 10 M raw points a second (emu bench explorer's floor); 10**9 raw
# points is 60 times the 100K-GPU reference space.
MAX_SCENARIOS = 2_000
MAX_RAW_POINTS = 10**9
SCENARIO_BYTES = 1 << 20
SCENARIO_S = 1.0
RAW_POINTS_PER_S = 10e6


def check_size(space: Space) -> None:
    """SpecError, with the estimate, if ``space`` asks for more scenarios or raw points
    than one run may take (refused before anything is expanded)."""
    scen = math.prod(len(a.values) for a in space.axes if not is_decision(a.key))
    if scen > MAX_SCENARIOS:
        raise SpecError(
            f"{space.source}: {scen:,} scenarios (the product of the scenario axes) is more "
            f"than the {MAX_SCENARIOS:,} one run takes: they would hold about "
            f"{scen * SCENARIO_BYTES / 2**30:,.0f} GiB and take about "
            f"{duration(scen * SCENARIO_S)}; split the space or drop axis values")
    if space.size > MAX_RAW_POINTS:
        raise SpecError(
            f"{space.source}: {space.size:,} raw points is more than the {MAX_RAW_POINTS:,} "
            f"one run searches: at {RAW_POINTS_PER_S / 1e6:.0f} M raw points/s that is about "
            f"{duration(space.size / RAW_POINTS_PER_S)}; fix some decision axes or split "
            "the space")


def duration(seconds: float) -> str:
    """``seconds`` in the largest unit that reads well."""
    for unit, s in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600),
                    ("minutes", 60)):
        if seconds >= s:
            return f"{seconds / s:.3g} {unit}"
    return f"{seconds:.3g} s"


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
    """Every combination of the scenario axes (one empty dict when there are none);
    SpecError first if the space is larger than one run takes (``check_size``)."""
    check_size(space)
    scen = [a for a in space.axes if not is_decision(a.key)]
    keys = [a.key for a in scen]
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(a.values for a in scen))]


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both x and y (lower is better),
    sorted by x; of equal points the first is kept."""
    if len(x) > 64 and np.isfinite(x).all() and np.isfinite(y).all():
        # Only points inside the box of the two extremes can be on the front: beyond
        # the least-y point's x (or the least-x point's y) that point beats them.
        ix = np.flatnonzero(x == x.min())
        iy = np.flatnonzero(y == y.min())
        box = np.flatnonzero((x <= x[iy].min()) & (y <= y[ix].min()))
        return box[pareto_front(x[box], y[box])] if len(box) < len(x) else \
            _front(x, y)
    return _front(x, y)


def _front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    order = np.lexsort((y, x))
    ys = y[order]
    best = np.minimum.accumulate(ys)
    keep = np.ones(len(order), bool)
    keep[1:] = ys[1:] < best[:-1]
    return order[keep]


@dataclass
class Found:
    """Points kept from a search (decision indices + their time, cost, energy), as
    columns."""

    index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    values: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, index: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        self.index = np.concatenate([self.index, index])
        for k in KEPT:
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


def _decision_space(space: Space, scenario: Mapping[str, Any]) -> Space:
    return with_axes(space, fixed=scenario)


def _network_combos(space: Space, sizes: Mapping[str, int], dblp_matters: bool
                    ) -> list[tuple[int, int, int]]:
    """(transport, qps, tolerance) index combinations that differ: MRC sprays (its flows
    per connection do not matter), a DBLP tolerance matters to MRC only (and not at all
    with one data-parallel rank)."""
    ax = space.axis("network.transport")
    names = ax.values if ax else (space.fixed.get("network.transport", "rc"),)
    out = []
    for ti, name in enumerate(names):
        qps = [0] if name == "mrc" else range(sizes["network.qps_per_connection"])
        tols = range(sizes["schedule.dblp_tolerance"]) if name == "mrc" and dblp_matters \
            else [0]
        out += [(ti, qi, di) for qi in qps for di in tols]
    return out


def chunks(space: Space, cal: CalArrays, chunk: int = CHUNK,
           stats: ScenarioSearch | None = None, bands: Mapping[str, CalArrays] = {},
           fields: Sequence[str] = KEPT) -> Iterator[tuple[np.ndarray, dict]]:
    """Feasible points of a decision space, chunk by chunk: (decision indices, ``fields``
    of their breakdown).

    ``stats`` (if given) receives the counts by reason. For each of ``bands`` (name ->
    calibration arrays at another band) the values get ``time_to_train_<name>`` (inf
    where the point would not be feasible at that band)."""
    axes = decision_axes(space)
    sizes = [len(a.values) for a in axes]
    n_struct = sum(1 for a in axes if _structural(a.key))
    s_shape, o_shape = sizes[:n_struct], sizes[n_struct:]
    n_s, n_o = math.prod(s_shape), math.prod(o_shape)
    enc = Encoder(space)
    pos = {a.key: i for i, a in enumerate(axes)}
    others = [a.key for a in axes[n_struct:] if a.key not in NETWORK]
    size_of = {a.key: len(a.values) for a in axes}
    net_sizes = {k: size_of.get(k, 1) for k in NETWORK}
    o_strides = {a.key: math.prod(o_shape[j + 1:]) for j, a in enumerate(axes[n_struct:])}

    def space_idx(idx: Mapping[str, Any]) -> list[Any]:
        zero = np.zeros(1, np.intp)
        return [idx.get(a.key, zero) for a in space.axes]

    # 1. structures: validity, duplicates among the structural axes, and which of the
    # other axes matter for each (a bit per other axis, one for the tolerance)
    keys_bits = others + ["schedule.dblp_tolerance"]
    valid_parts, mask_parts = [], []
    for lo in range(0, n_s, chunk):
        flat = np.arange(lo, min(n_s, lo + chunk))
        n = len(flat)
        sidx = list(np.unravel_index(flat, s_shape)) if s_shape else []
        cols = enc.columns(space_idx({a.key: sidx[i] for i, a in enumerate(axes[:n_struct])}))
        d = derive(cols)
        code = np.broadcast_to(structure(cols, d), (n,))
        irrelevant = dict(_irrelevant(cols, d))
        dup = np.zeros(n, bool)
        for i, a in enumerate(axes[:n_struct]):
            if a.key in irrelevant:
                dup |= np.broadcast_to(irrelevant[a.key], (n,)) & (sidx[i] != 0)
        ok = (code == 0) & ~dup
        relevant = np.zeros(n, np.int64)
        for b, key in enumerate(keys_bits):
            matters = ~np.broadcast_to(irrelevant[key], (n,)) if key in irrelevant \
                else np.ones(n, bool)
            relevant |= np.where(matters, 1 << b, 0)
        if stats is not None:
            for r in ("nvlink", "divisibility", "dc_split"):
                stats.pruned[r] += int(np.count_nonzero(code == REASONS.index(r))) * n_o
        valid_parts.append(flat[ok])
        mask_parts.append(relevant[ok])
    valid = np.concatenate(valid_parts) if valid_parts else np.zeros(0, np.int64)
    masks = np.concatenate(mask_parts) if mask_parts else np.zeros(0, np.int64)
    if stats is not None:
        stats.raw += n_s * n_o
        stats.structural += (n_s * n_o - sum(stats.pruned[r] for r in
                                             ("nvlink", "divisibility", "dc_split")))

    # 2. each group of structures with the same relevant axes, on a grid: structures x
    # every relevant other axis x the network combinations
    groups = np.unique(masks)
    plans = []
    for mask in groups:
        dims = [size_of[k] if mask >> b & 1 else 1 for b, k in enumerate(others)]
        combos = _network_combos(space, net_sizes, bool(mask >> len(others) & 1))
        plans.append((mask, dims, combos, valid[masks == mask]))
    if stats is not None:
        stats.to_process += sum(len(g) * math.prod(dims) * len(cb) for _, dims, cb, g in plans)
    for _, dims, combos, group in plans:
        per = math.prod(dims) * len(combos)
        nd = len(dims) + 2
        shape_o = [1] + dims + [len(combos)]
        oidx = {k: _along(nd, j + 1, np.arange(dims[j])) for j, k in enumerate(others)}
        comb = np.asarray(combos, np.intp).reshape(len(combos), 3)
        for j, key in enumerate(NETWORK):
            if key in pos:
                oidx[key] = _along(nd, nd - 1, comb[:, j])
        o_flat = sum(np.asarray(oidx[k]) * o_strides[k] for k in oidx) if oidx \
            else np.zeros([1] * nd, np.int64)
        step_s = max(1, chunk // per)
        for lo in range(0, len(group), step_s):
            s_flat = group[lo:lo + step_s]
            n = len(s_flat)
            sidx = list(np.unravel_index(s_flat, s_shape)) if s_shape else []
            idx = {a.key: _along(nd, 0, sidx[i]) for i, a in enumerate(axes[:n_struct])}
            idx.update(oidx)
            cols = enc.columns(space_idx(idx))
            out = step(cols, cal)
            full = (n, *shape_o[1:])
            reason = np.broadcast_to(out["reason"], full)
            flat_all = _along(nd, 0, s_flat) * n_o + o_flat
            if stats is not None:
                stats.processed += reason.size
                stats.evaluated += reason.size
                for r in ("memory", "failures"):
                    stats.pruned[r] += int(np.count_nonzero(reason == REASONS.index(r)))
                if stats.feasible == 0:
                    _track_nearest(stats, reason, out, cols, np.broadcast_to(flat_all, full))
            ok = reason == 0
            if not ok.any():
                continue
            vals = {k: np.broadcast_to(out[k], full)[ok] for k in fields}
            for name, arrays in bands.items():
                other = step(cols, arrays)
                t = np.where(np.broadcast_to(other["reason"], full) == 0,
                             np.broadcast_to(other["time_to_train_s"], full), np.inf)
                vals[f"time_to_train_{name}"] = t[ok]
            flat_ok = np.broadcast_to(flat_all, full)[ok]
            if stats is not None:
                stats.feasible += len(flat_ok)
            yield flat_ok, vals
    if stats is not None:
        stats.pruned["inapplicable"] = (stats.structural - stats.evaluated)


def _along(nd: int, j: int, values: np.ndarray) -> np.ndarray:
    """``values`` as dimension ``j`` of ``nd`` (the others of length 1)."""
    sh = [1] * nd
    sh[j] = len(values)
    return np.asarray(values).reshape(sh)


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
    arrays = calibration_arrays(cal)
    top, pc, pe = Found(), Found(), Found()
    best = math.inf
    for flat, vals in chunks(dec, arrays, chunk, res):
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
    if len(t) > 4 * k:
        # the k-th smallest time bounds the candidates; its ties all stay in
        kth = np.partition(t, k - 1)[k - 1]
        cand = np.flatnonzero(t <= kth)
        return cand[np.lexsort((index[cand], t[cand]))][:k]
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
