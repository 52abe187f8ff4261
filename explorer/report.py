"""What ``emu explore`` writes: every feasible point, Pareto fronts, top-k, plots, summary.

``write_report(exploration, out_dir)`` writes into ``out_dir``:

* ``points.csv.gz``: every feasible point of every scenario (scenario and decision axes,
  the step's breakdown, time to train with the calibration's favourable / unfavourable
  ends, the ``extrapolated`` bit mask of regime.EXTRAPOLATION_FLAGS), streamed chunk by
  chunk (re-evaluated, so the search itself never holds them in memory);
* ``pareto_cost.csv`` / ``pareto_energy.csv``: the fronts of time to train vs cost and vs
  energy, with every field of each configuration and the simulator's re-scored step;
* ``top.csv``: the top-k (also returned by ``top_table`` for printing);
* ``pareto.png``: time to train vs cost per scenario (a sample of the points, the front,
  the top-k, the production and state-of-the-art baselines);
* ``breakdown.png``: the step of the best configuration and of the baselines, by part;
* ``summary.json``: counts, pruning by reason, timings, calibration files and hashes,
  speed-ups (max, median, per ablation), the best configuration and baselines per
  scenario, the re-score error; for a scenario with nothing feasible, the binding
  constraint and the nearest infeasible point.
Non-finite numbers are never written: a value that would be is written as empty (CSV)
or null (JSON).
"""

from __future__ import annotations

import csv
import gzip
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from emu import safefs
from explorer.exploration import Exploration, Projection, ScenarioOutcome
from explorer.model import calibration_arrays
from explorer.model_breakdown import BREAKDOWN_FIELDS, PARTS
from explorer.regime import EXTRAPOLATION_FLAGS
from explorer.search import chunks, decision_axes, is_decision

__all__ = ["finite", "summary", "top_table", "write_points", "write_report"]

_WRITE_ROWS = 16384  # rows formatted at a time (bounds the text held in memory)
_PARTS = PARTS


def finite(x: Any) -> Any:
    """``x`` with every NaN or infinity replaced by None (for JSON)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.floating, np.integer)):
        return finite(x.item())
    if isinstance(x, Mapping):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def _scenario_keys(ex: Exploration) -> list[str]:
    return [a.key for a in ex.space.axes if not is_decision(a.key)]


def _strings(values: np.ndarray) -> np.ndarray:
    """A column as bytes, converted in C loops (float32's shortest repr keeps files small;
    bytes, not str, keep a chunk's text at a quarter of the memory)."""
    v = np.asarray(values)
    if v.dtype.kind in "iub":
        return v.astype(np.int64).astype(np.bytes_)
    if v.dtype.kind == "f":
        out = v.astype(np.float32).astype(np.bytes_)
        bad = ~np.isfinite(v)
        if bad.any():
            out = np.where(bad, b"", out)
        return out
    return np.char.encode(v.astype(str), "utf-8")


def write_points(ex: Exploration, path: Path, progress: Callable[[int], None] | None = None,
                 sample: int = 4000, seed: int = 0) -> tuple[int, dict[int, dict]]:
    """Stream every feasible point to ``path`` (gzip CSV). Returns the row count and, per
    scenario, a random sample of (time, cost) for the plot."""
    rng = np.random.default_rng(seed)
    mid = calibration_arrays(ex.calibration, "mid")
    bands = {"opt": calibration_arrays(ex.calibration, "opt"),
             "pess": calibration_arrays(ex.calibration, "pess")}
    scen_keys = _scenario_keys(ex)
    rows = 0
    samples: dict[int, dict] = {}
    with safefs.open_write(path, binary=True) as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3) as f:
        header_written = False
        for si, outcome in enumerate(ex.scenarios):
            dec = outcome.search.space
            axes = decision_axes(dec)
            sizes = [len(a.values) for a in axes]
            tables = [np.array([(str(v).lower() if isinstance(v, bool) else str(v)).encode()
                                for v in a.values]) for a in axes]
            scen_vals = [str(outcome.search.scenario[k]).encode() for k in scen_keys]
            if not header_written:
                f.write((",".join(["scenario", *scen_keys, *(a.key for a in axes),
                                   *BREAKDOWN_FIELDS, "time_to_train_opt",
                                   "time_to_train_pess"]) + "\n").encode())
                header_written = True
            st: list[np.ndarray] = []
            sc: list[np.ndarray] = []
            for flat, vals in chunks(dec, mid, bands=bands, fields=BREAKDOWN_FIELDS):
                n = len(flat)
                idx = np.unravel_index(flat, sizes) if sizes else []
                for lo in range(0, n, _WRITE_ROWS):
                    sl = slice(lo, min(n, lo + _WRITE_ROWS))
                    m = sl.stop - sl.start
                    cols = [np.full(m, str(si).encode())] + [np.full(m, v) for v in scen_vals]
                    cols += [tables[i][idx[i][sl]] for i in range(len(axes))]
                    cols += [_strings(vals[k][sl]) for k in (
                        *BREAKDOWN_FIELDS, "time_to_train_opt", "time_to_train_pess")]
                    line = cols[0]
                    for c in cols[1:]:
                        line = np.char.add(np.char.add(line, b","), c)
                    f.write(b"\n".join(line.tolist()))
                    f.write(b"\n")
                rows += n
                take = rng.random(n) < min(1.0, sample / max(outcome.search.feasible, 1))
                st.append(vals["time_to_train_s"][take])
                sc.append(vals["cost"][take])
                if progress is not None:
                    progress(rows)
            samples[si] = {"time": np.concatenate(st) if st else np.zeros(0),
                           "cost": np.concatenate(sc) if sc else np.zeros(0)}
    return rows, samples


def _projection_row(p: Projection, keys: Sequence[str]) -> dict[str, Any]:
    flat = p.config.flat()
    b = p.breakdown.as_dict()
    row = {k: flat[k] for k in keys}
    row.update({k: b[k] for k in BREAKDOWN_FIELDS})
    row.update(time_to_train_opt=p.time_lo_s, time_to_train_pess=p.time_hi_s,
               rescored_step_s=p.rescored_step_s, rescore_error=p.rescore_error,
               extrapolated_what=";".join(p.breakdown.extrapolated_what))
    return row


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    with safefs.open_write(path) as f:
        if not rows:
            f.write("")
            return
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if isinstance(v, float) and not math.isfinite(v) else v)
                        for k, v in r.items()})


def _config_keys(ex: Exploration) -> list[str]:
    # Every field that varies somewhere, plus the main decisions (always shown).
    keys = [a.key for a in ex.space.axes]
    for k in ("placement.tp", "placement.cp", "placement.pp", "placement.microbatch",
              "placement.cross", "schedule.pipeline", "schedule.recompute",
              "schedule.optimizer", "schedule.allreduce", "network.transport"):
        if k not in keys:
            keys.append(k)
    return keys


def _days(seconds: float) -> str:
    return f"{seconds / 86400:.1f}" if math.isfinite(seconds) else "n/a"


def top_table(ex: Exploration, k: int = 10) -> str:
    """The top-k (over all scenarios) as an aligned text table."""
    keys = [a.key for a in ex.space.axes]
    rows = []
    for p in ex.top[:k]:
        flat = p.config.flat()
        b = p.breakdown
        rows.append([*(str(flat[x]) for x in keys), f"{b.step_s:.3f}",
                     f"{b.time_to_train_s / 86400:.1f} [{_days(p.time_lo_s)}-"
                     f"{_days(p.time_hi_s)}]", f"{b.mfu:.3f}", f"{b.cost / 1e6:.2f}",
                     f"{b.memory_gib:.0f}", ",".join(b.extrapolated_what) or "-"])
    head = [x.split(".", 1)[1] for x in keys] + ["step s", "days [band]", "MFU", "cost M",
                                                  "mem GiB", "extrapolated"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head)] + [fmt.format(*r) for r in rows])


def _baseline_dict(o: ScenarioOutcome, name: str) -> dict[str, Any]:
    b = o.baselines.get(name)
    if b is None:
        return {}
    out: dict[str, Any] = {"note": b.note, "feasible": b.config is not None}
    if b.config is not None and b.breakdown is not None:
        p = o.baseline_projections.get(name)
        out["config"] = {k: v for k, v in b.config.flat().items()
                         if is_decision(k) and v is not None}
        out["breakdown"] = b.breakdown.as_dict()
        if p is not None:
            out["time_to_train_opt"] = p.time_lo_s
            out["time_to_train_pess"] = p.time_hi_s
            out["rescore_error"] = p.rescore_error
    return out


def summary(ex: Exploration, extra_timings: Mapping[str, float] | None = None) -> dict:
    """The summary record (see the module docstring)."""
    totals = {"raw": 0, "structural": 0, "evaluated": 0, "feasible": 0}
    pruned: dict[str, int] = {}
    scen = []
    errors = []
    for o in ex.scenarios:
        s = o.search
        for k in totals:
            totals[k] += getattr(s, k)
        for r, n in s.pruned.items():
            pruned[r] = pruned.get(r, 0) + n
        reported = o.top + o.pareto_cost + o.pareto_energy + list(
            o.baseline_projections.values())
        errors += [p.rescore_error for p in reported if math.isfinite(p.rescored_step_s)]
        entry: dict[str, Any] = {
            "scenario": s.scenario, "raw": s.raw, "structural": s.structural,
            "evaluated": s.evaluated, "feasible": s.feasible, "pruned": s.pruned,
            "search_s": s.seconds, "pareto_cost_points": len(o.pareto_cost),
            "pareto_energy_points": len(o.pareto_energy),
            "speedup_vs_production": o.speedup("production"),
            "speedup_vs_sota": o.speedup("sota"),
            "ablation_speedups": o.ablation_speedups(),
            "production": _baseline_dict(o, "production"), "sota": _baseline_dict(o, "sota"),
        }
        if o.best is not None:
            entry["best"] = _projection_row(o.best, list(o.best.config.flat()))
        else:
            entry["nothing_feasible"] = _empty(o)
        scen.append(entry)
    points_s = totals["evaluated"] / ex.timings["search_s"] if ex.timings.get("search_s") else None
    return finite({
        "name": ex.space.name, "source": ex.space.source, "generated": time.time(),
        "axes": {a.key: list(a.values) for a in ex.space.axes},
        "calibration": {"files": [{"path": p, "sha256": h} for p, h in ex.calibration.files],
                        "notes": list(ex.calibration.notes)},
        "notes": list(ex.notes),
        "counts": totals, "pruned": pruned,
        "timings": {**ex.timings, **(extra_timings or {}), "points_per_s": points_s},
        "speedups": ex.summary_speedups(),
        "rescore_error_max": max(errors) if errors else None,
        "extrapolation_flags": {str(k): v for k, v in EXTRAPOLATION_FLAGS.items()},
        "scenarios": scen,
    })


def _empty(o: ScenarioOutcome) -> dict[str, Any]:
    """The binding constraint and the nearest infeasible point of an empty scenario."""
    s = o.search
    # The stage that removed what was left: structure, else memory or failures.
    stage: tuple[str, ...]
    if s.structural == 0:
        stage = ("nvlink", "divisibility", "dc_split")
    else:
        stage = ("memory", "failures")
    binding = max(stage, key=lambda r: s.pruned.get(r, 0))
    out: dict[str, Any] = {"binding": binding, "pruned": s.pruned}
    if s.nearest is not None:
        near = dict(s.nearest)
        near["config"] = {k: v for k, v in s.choice(near.pop("index")).items()}
        out["nearest"] = near
    return out


def _plot_pareto(ex: Exploration, samples: Mapping[int, Mapping[str, np.ndarray]],
                 path: Path) -> None:
    shown = ex.scenarios[:9]
    cols = min(3, len(shown)) or 1
    rows = math.ceil(len(shown) / cols) or 1
    fig = Figure(figsize=(5 * cols, 4 * rows))
    FigureCanvasAgg(fig)
    for i, o in enumerate(shown):
        ax = fig.add_subplot(rows, cols, i + 1)
        smp = samples.get(i)
        if smp is not None and len(smp["time"]):
            ax.scatter(smp["time"] / 86400, smp["cost"] / 1e6, s=2, c="0.75",
                       label="points (sample)", rasterized=True)
        if o.pareto_cost:
            xs = [p.breakdown.time_to_train_s / 86400 for p in o.pareto_cost]
            ys = [p.breakdown.cost / 1e6 for p in o.pareto_cost]
            ax.plot(xs, ys, "-o", ms=3, color="tab:blue", label="Pareto front")
        if o.top:
            ax.plot([p.breakdown.time_to_train_s / 86400 for p in o.top],
                    [p.breakdown.cost / 1e6 for p in o.top], "*", color="tab:green",
                    ms=8, label="top-k")
        for name, mark in (("production", "X"), ("sota", "P")):
            b = o.baselines.get(name)
            if b is not None and b.breakdown is not None:
                ax.plot(b.breakdown.time_to_train_s / 86400, b.breakdown.cost / 1e6, mark,
                        ms=10, color="tab:red" if name == "production" else "tab:orange",
                        label=name)
        title = ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in o.search.scenario.items())
        ax.set_title(title or ex.space.name, fontsize=8)
        ax.set_xlabel("time to train (days)")
        ax.set_ylabel("cost (millions)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)


def _plot_breakdown(ex: Exploration, path: Path) -> None:
    picks = [0]
    sp = [o.speedup("production") or 0.0 for o in ex.scenarios]
    if sp and int(np.argmax(sp)) != 0:
        picks.append(int(np.argmax(sp)))
    fig = Figure(figsize=(9, 2.8 * len(picks)))
    FigureCanvasAgg(fig)
    for row, si in enumerate(picks):
        o = ex.scenarios[si]
        ax = fig.add_subplot(len(picks), 1, row + 1)
        bars = [("best", o.best.breakdown if o.best else None)]
        for name in ("production", "sota"):
            b = o.baselines.get(name)
            bars.append((name, b.breakdown if b is not None else None))
        labels = []
        for y, (name, bd) in enumerate(bars):
            labels.append(name)
            if bd is None or not bd.feasible:
                continue
            left = 0.0
            for i, part in enumerate(_PARTS):
                w = getattr(bd, part)
                ax.barh(y, w, left=left, color=f"C{i}", label=part if y == 0 else None)
                left += w
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xlabel("expected step time (s)")
        title = ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in o.search.scenario.items())
        ax.set_title(title or ex.space.name, fontsize=8)
        ax.legend(fontsize=7, ncol=5, loc="lower right")
    fig.tight_layout()
    _save(fig, path)


def _save(fig: Figure, path: Path) -> None:
    with safefs.open_write(path, binary=True) as f:
        fig.savefig(f, format="png", dpi=110)


def write_report(ex: Exploration, out_dir: str | Path, points: bool = True,
                 progress: Callable[[int], None] | None = None) -> dict:
    """Write every output (module docstring); returns the summary."""
    out = Path(out_dir)
    safefs.mkdir_private(out)
    keys = _config_keys(ex)
    timings: dict[str, float] = {}
    samples: dict[int, dict] = {}
    if points:
        t0 = time.perf_counter()
        rows, samples = write_points(ex, out / "points.csv.gz", progress)
        timings["write_points_s"] = time.perf_counter() - t0
        timings["points_written"] = rows
    t0 = time.perf_counter()
    for name, attr in (("pareto_cost", "pareto_cost"), ("pareto_energy", "pareto_energy"),
                       ("top", "top")):
        rows_ = []
        for si, o in enumerate(ex.scenarios):
            for p in getattr(o, attr):
                rows_.append({"scenario": si, **_projection_row(p, keys)})
        _write_csv(out / f"{name}.csv", rows_)
    _plot_pareto(ex, samples, out / "pareto.png")
    _plot_breakdown(ex, out / "breakdown.png")
    timings["write_other_s"] = time.perf_counter() - t0
    s = summary(ex, timings)
    safefs.write_json(out / "summary.json", s, indent=1, allow_nan=False)
    return s
