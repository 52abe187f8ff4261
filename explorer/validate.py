"""Scoring the model against published measurements (``emu explore --validate TABLE``).

A table (explorer/data/published/*.toml) has ``name``, ``source``, ``metric`` (what
``measured`` is: ``tflops_per_gpu``, ``step_seconds`` or ``mfu``), ``flops`` (how the
paper counted the FLOPs behind a TFLOP/s figure: ``megatron`` = 96 B s l h^2 (1 + s/6h +
V/16lh), the count with full recomputation of Narayanan et al. 2021; ``model`` = 72 B s
l h^2 (1 + s/6h + V/12lh), without), ``[defaults]`` (dotted spec keys shared by every
row) and ``[[row]]`` tables (``label``, ``measured``, dotted spec keys, optionally
``fit = true`` and free ``notes``, ``paper_params_b``).

The model's one efficiency parameter per GPU type (``gpu.gemm_efficiency``) is fitted
on one row (``fit = true``, or ``--fit LABEL``): the value at which the model reproduces
that row exactly. That row is then excluded from scoring, and the value is carried to
every other table of the same GPU. explorer/validate_groups.py pools the scored rows of
all tables into compute-bound and network-bound groups. Scored: each row's relative
error, the mean and max absolute error, and Spearman's rank correlation between predicted
and measured per-GPU throughput over the scored rows (ties get average ranks; a table of
step times is ranked on model FLOP/s per GPU, since the times mostly rank the model
sizes, which would make the correlation trivially high). Predictions are of
the step alone (failures and microbursts are set to zero: the published runs report
steady-state throughput). A row that ran but that the memory model refuses is scored on
its time with the HBM limit lifted and flagged ``memory_refused`` (the memory miss is
the memory check's to report, explorer/memory_check.py; the row's time is still a
measurement of the time model).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.calibration import Calibration
from explorer.model import evaluate
from explorer.model_breakdown import Breakdown
from explorer.spec import Config, SpecError
from explorer.specfile import build_config, read_toml

__all__ = ["Row", "Score", "Table", "load_table", "predict_metric", "score", "spearman"]

METRICS = ("tflops_per_gpu", "step_seconds", "mfu")
FLOPS = ("megatron", "model")
_ROW_META = ("label", "measured", "fit", "notes", "paper_params_b")
STEADY = {"fabric.link_fail_per_hour": 0.0, "fabric.switch_fail_per_hour": 0.0,
          "cluster.interrupt_per_gpu_hour": 0.0, "fabric.burst_hz": 0.0}


@dataclass(frozen=True)
class Row:
    label: str
    config: Config
    measured: float
    fit: bool


@dataclass(frozen=True)
class Table:
    name: str
    source: str
    metric: str
    flops: str
    rows: tuple[Row, ...]
    path: str


def load_table(path: str | Path) -> Table:
    """Read and validate a table; errors name the file, the row and the key."""
    p = Path(path)
    doc = read_toml(p, "validation table")
    for key in doc:
        if key not in ("name", "source", "url", "metric", "flops", "notes", "defaults", "row"):
            raise SpecError(f"{p}: unknown top-level key {key!r}")
    metric = doc.get("metric")
    if metric not in METRICS:
        raise SpecError(f"{p}: metric = {metric!r} is invalid: one of {', '.join(METRICS)}")
    flops = doc.get("flops", "megatron")
    if metric == "tflops_per_gpu" and flops not in FLOPS:
        raise SpecError(f"{p}: flops = {flops!r} is invalid: one of {', '.join(FLOPS)}")
    defaults = doc.get("defaults", {})
    rows = []
    for i, r in enumerate(doc.get("row", [])):
        where = f"{p}: row {i + 1} ({r.get('label', '?')})"
        if not isinstance(r.get("measured"), (int, float)) or r["measured"] <= 0:
            raise SpecError(f"{where}: measured = {r.get('measured')!r} must be a number > 0")
        values = dict(STEADY) | dict(defaults)
        values.update({k: v for k, v in r.items() if k not in _ROW_META})
        try:
            cfg = build_config(values)
        except (SpecError, ValueError, TypeError) as e:
            raise SpecError(f"{where}: {e}") from None
        rows.append(Row(str(r.get("label", i + 1)), cfg, float(r["measured"]),
                        bool(r.get("fit", False))))
    if not rows:
        raise SpecError(f"{p}: no [[row]] tables")
    return Table(str(doc.get("name", p.stem)), str(doc.get("source", "")), metric, flops,
                 tuple(rows), str(p))


def _paper_flops(cfg: Config, kind: str) -> float:
    """FLOPs per step as the paper counts them (module docstring)."""
    m = cfg.model
    B, s, l, h, V = m.batch_seqs, m.seq, m.layers, m.hidden, m.vocab  # noqa: E741, N806
    if kind == "megatron":
        return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def rank_value(table: Table, value: float, cfg: Config) -> float:
    """What rows are ranked on: per-GPU throughput. A step time is turned into it with
    the model-FLOPs count (a step time mostly ranks the model sizes)."""
    if table.metric != "step_seconds":
        return value
    return _paper_flops(cfg, "model") / (value * sum(cfg.cluster.gpus)) / 1e12


def predict_metric(table: Table, b: Breakdown, cfg: Config) -> float:
    """The model's value of the table's metric for one row."""
    if not b.feasible:
        return math.nan
    step = b.step_s - b.failure_s
    if table.metric == "step_seconds":
        return step
    if table.metric == "mfu":
        return b.mfu * b.step_s / step
    gpus = sum(cfg.cluster.gpus)
    return _paper_flops(cfg, table.flops) / (step * gpus) / 1e12


def _with_efficiency(cfg: Config, eff: float) -> Config:
    return cfg.replace({"gpu.gemm_efficiency": eff})


def _evaluate_ran(cfg: Config, cal: Calibration) -> tuple[Breakdown, Config, bool]:
    """A row that ran: its breakdown, and whether the memory model refused it (then the
    breakdown is with the HBM limit lifted, module docstring)."""
    b = evaluate(cfg, cal)
    if b.feasible or b.reason != "memory":
        return b, cfg, False
    lifted = cfg.replace({"gpu.hbm_gib": max(b.memory_gib, cfg.gpu.hbm_gib) * 2})
    return evaluate(lifted, cal), lifted, True


def fit_efficiency(table: Table, row: Row, cal: Calibration) -> float:
    """The gemm_efficiency at which the model reproduces ``row`` (bisection)."""
    def value(eff: float) -> float:
        b, cfg, _ = _evaluate_ran(_with_efficiency(row.config, eff), cal)
        return predict_metric(table, b, cfg)
    lo, hi = 0.05, 1.0
    # Throughput grows with efficiency; step time falls.
    sign = -1.0 if table.metric == "step_seconds" else 1.0
    f_lo, f_hi = sign * (value(lo) - row.measured), sign * (value(hi) - row.measured)
    if not (f_lo <= 0 <= f_hi):
        raise SpecError(f"{table.path}: row {row.label}: no gemm_efficiency in [{lo}, {hi}] "
                        f"reproduces {row.measured} (model gives {value(lo):.4g} .. "
                        f"{value(hi):.4g})")
    for _ in range(80):
        mid = (lo + hi) / 2
        if sign * (value(mid) - row.measured) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy) if vx and vy else math.nan


@dataclass(frozen=True)
class RowScore:
    """One row scored: measured and predicted metric, relative error, whether it is
    scored (not the fit row), the model's exposed scale-out share of its step
    (``network_share``: pipeline and data-parallel communication and tails over the
    steady step) and both values as model TFLOP/s per GPU (what rows are ranked on)."""

    label: str
    measured: float
    predicted: float
    error: float
    scored: bool
    network_share: float
    tflops_predicted: float
    tflops_measured: float
    memory_refused: bool = False


@dataclass(frozen=True)
class Score:
    """A table scored (module docstring)."""

    table: Table
    efficiency: float | None
    fit_row: str | None
    rows: tuple[RowScore, ...]
    mean_abs_error: float
    max_abs_error: float
    spearman: float

    def as_dict(self) -> dict[str, Any]:
        return {"table": self.table.name, "path": self.table.path, "metric": self.table.metric,
                "gemm_efficiency": self.efficiency, "fit_row": self.fit_row,
                "mean_abs_error": self.mean_abs_error, "max_abs_error": self.max_abs_error,
                "spearman": self.spearman,
                "rows": [{"label": r.label, "measured": r.measured, "predicted": r.predicted,
                          "error": r.error, "scored": r.scored,
                          "network_share": r.network_share,
                          "memory_refused": r.memory_refused} for r in self.rows]}


def network_share(b: Breakdown, cfg: Config) -> float:
    """Exposed scale-out communication over the steady step (pipeline transfers, data
    parallelism, tails, CP when TP x CP leaves the NVLink domain; TP and CP over NVLink
    are not the network)."""
    steady = b.step_s - b.failure_s
    pl = cfg.placement
    cp = b.cp_s if pl.tp * pl.cp > cfg.gpu.nvlink_domain else 0.0
    return (b.pp_s + b.dp_s + b.tail_s + cp) / steady if b.feasible and steady > 0 \
        else math.nan


def tflops(table: Table, value: float, cfg: Config) -> float:
    """A row's metric as model TFLOP/s per GPU (without recomputation), so that rows of
    any table rank together."""
    gpus = sum(cfg.cluster.gpus)
    if table.metric == "step_seconds":
        return _paper_flops(cfg, "model") / (value * gpus) / 1e12
    if table.metric == "mfu":
        return value * cfg.gpu.peak_tflops
    return value * _paper_flops(cfg, "model") / _paper_flops(cfg, table.flops)


def score(table: Table, cal: Calibration, fit: str | None = None,
          efficiency: float | None = None) -> Score:
    """Fit on one row (``fit`` label, else the row marked fit; ``efficiency`` given:
    no fit) and score the others (module docstring)."""
    fit_row = None
    if efficiency is None:
        marked = [r for r in table.rows if (r.label == fit if fit else r.fit)]
        if fit and not marked:
            raise SpecError(f"{table.path}: --fit {fit!r}: no such row; rows: "
                            + ", ".join(r.label for r in table.rows))
        if marked:
            fit_row = marked[0].label
            efficiency = fit_efficiency(table, marked[0], cal)
    out, ranked = [], []
    for r in table.rows:
        cfg = r.config if efficiency is None else _with_efficiency(r.config, efficiency)
        b, cfg, refused = _evaluate_ran(cfg, cal)
        pred = predict_metric(table, b, cfg)
        err = (pred - r.measured) / r.measured if math.isfinite(pred) else math.nan
        tp = tflops(table, pred, cfg) if math.isfinite(pred) else math.nan
        out.append(RowScore(r.label, r.measured, pred, err, r.label != fit_row,
                            network_share(b, cfg), tp, tflops(table, r.measured, cfg),
                            refused))
        if r.label != fit_row and math.isfinite(pred):
            ranked.append((rank_value(table, pred, cfg), rank_value(table, r.measured, cfg)))
    scored = [x for x in out if x.scored]
    errs = [abs(x.error) for x in scored]
    finite = [e for e in errs if math.isfinite(e)]
    rho = spearman([x[0] for x in ranked], [x[1] for x in ranked]) \
        if len(finite) == len(errs) and len(scored) > 2 else math.nan
    return Score(table, efficiency, fit_row, tuple(out),
                 sum(finite) / len(finite) if finite else math.nan,
                 max(errs) if errs and len(finite) == len(errs) else math.inf, rho)


def scores(tables: Sequence[str | Path], cal: Calibration, fit: Mapping[str, str] | None = None
           ) -> list[Score]:
    """Score several tables. The one fitted parameter is per GPU type (its peak): a table
    with a fit row fits it, the others of that GPU carry it (tables with a fit row
    first, so the order of ``tables`` does not matter)."""
    loaded = [load_table(p) for p in tables]
    loaded.sort(key=lambda t: not any(r.fit for r in t.rows))
    eff: dict[float, float] = {}
    out: list[Score] = []
    for t in loaded:
        gpu = t.rows[0].config.gpu.peak_tflops
        own = (fit or {}).get(t.name) or any(r.fit for r in t.rows)
        s = score(t, cal, (fit or {}).get(t.name), None if own else eff.get(gpu))
        if s.efficiency is not None and own:
            eff[gpu] = s.efficiency
        out.append(s)
    return out
