"""A sweep's results over its grid: one table, plots against every axis, one calibration.

:func:`aggregate` reads what the store holds (store.py) for the points of the grid:

* ``grid.json`` and ``grid.csv``: one row per point (index, id, status done / failed /
  missing, its axis values, transport, attempts, error) with every numeric figure of its
  runs' ``summary`` records as the median and spread (smallest, largest) over its
  repetitions (workloads/training/summary.py ``aggregate``; the CSV's ``FIG`` column is the
  median, ``FIG_lo`` and ``FIG_hi`` the spread). Times are the emulator's: ``step_time``
  says whether a step counts the wall clock of this machine or modelled compute plus
  measured exposed communication; ``time_scale_factor`` turns bandwidth-bound times into
  full-scale equivalents (emulated / factor: topologies/timescale.py).
* ``plots/vs-AXIS.png``: the main figures (time to target, training time, healthy step,
  exposed communication, time lost to failures, those the runs have) against each axis,
  one line per transport: the median over the points at that axis value of their
  medians, bars from the smallest to the largest repetition among them.
* ``calibration.json``: the calibration records (version 1, workloads/training/metrics.py) of
  every done point merged into one, each variant keyed ``ID/LABEL`` and carrying its
  ``point`` (index, id, axis values): the explorer reads it with ``--calibration``
  (explorer/calibration.py takes the first variant of each transport), and a script can
  pick the variants of the points it wants.
"""

from __future__ import annotations

import csv
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from commands.sweep.grid import Point, show
from commands.sweep.store import SweepStore
from emu import safefs
from workloads.training.metrics import CALIBRATION_FORMAT
from workloads.training.results import read_jsonl
from workloads.training.summary import aggregate as over_repetitions

__all__ = ["MAIN_FIGURES", "aggregate", "point_rows"]

MAIN_FIGURES = ("time_to_target_s", "train_s", "healthy_step_ms", "exposed_comm_ms_median",
                "failure_lost_s")
CLOCKS = {
    "emulated": "this machine's monotonic clock (step_time = 'wall clock')",
    "modelled": "emulated, compute replaced by its modelled duration (step_time = 'modelled "
                "compute + exposed communication')",
    "full_scale": "emulated / time_scale_factor: bandwidth-bound times only",
}


def _status(store: SweepStore, records: list[dict[str, Any]]) -> dict[str, str]:
    status: dict[str, str] = {}
    for r in records:
        if r.get("type") == "failed":
            status.setdefault(r["id"], "failed")
        if r.get("type") == "attempt" and r.get("status") == "done" \
                and store.point_dir(r["id"]).is_dir():
            status[r["id"]] = "done"
    return status


def point_rows(store: SweepStore, points: Sequence[Point]) -> list[dict[str, Any]]:
    """One row per point of the grid, its figures over repetitions (see the docstring)."""
    records = store.records()
    status = _status(store, records)
    attempts: dict[str, int] = {}
    errors: dict[str, str] = {}
    for r in records:
        if r.get("type") == "attempt":
            attempts[r["id"]] = attempts.get(r["id"], 0) + 1
            if r.get("error"):
                errors[r["id"]] = r["error"]
    rows = []
    for p in points:
        row: dict[str, Any] = {
            "index": p.index, "id": p.id, "status": status.get(p.id, "missing"),
            "values": dict(p.values), "transport": p.transport,
            "attempts": attempts.get(p.id, 0), "error": None, "reps": 0,
            "step_time": None, "time_scale_factor": None, "figures": {}}
        if row["status"] != "done":
            row["error"] = errors.get(p.id)
        else:
            recs = read_jsonl(store.point_dir(p.id) / "results.jsonl")
            summaries = [r for r in recs if r.get("type") == "summary"]
            figures = next(iter(over_repetitions(summaries).values()), {})
            row["reps"] = figures.pop("reps", 0)
            row["figures"] = figures
            row["step_time"] = next((s["step_time"] for s in summaries if "step_time" in s),
                                    None)
            meta = next((r for r in recs if r.get("type") == "meta" and r.get("time_scale")),
                        None)
            if meta is not None:
                row["time_scale_factor"] = meta["time_scale"].get("factor")
        rows.append(row)
    return rows


def _write_csv(path: Path, rows: list[dict[str, Any]], axes: list[str]) -> None:
    figs = list(dict.fromkeys(f for r in rows for f in r["figures"]))
    head = ["index", "id", "status", *axes, "transport", "attempts", "reps", "step_time",
            "time_scale_factor"]
    for f in figs:
        head += [f, f"{f}_lo", f"{f}_hi"]
    head.append("error")
    with safefs.open_write(path) as fh:
        w = csv.writer(fh)
        w.writerow(head)
        for r in rows:
            line = [r["index"], r["id"], r["status"], *(show(r["values"][a]) for a in axes),
                    r["transport"], r["attempts"], r["reps"], r["step_time"] or "",
                    "" if r["time_scale_factor"] is None else r["time_scale_factor"]]
            for f in figs:
                cell = r["figures"].get(f)
                line += ["", "", ""] if cell is None else [cell["median"], cell["lo"],
                                                          cell["hi"]]
            line.append(r["error"] or "")
            w.writerow(line)


def _plot_axis(path: Path, axis: str, rows: list[dict[str, Any]], figs: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if r["status"] == "done"]
    values = list(dict.fromkeys(show(r["values"][axis]) for r in done))
    numeric = all(isinstance(r["values"][axis], int | float)
                  and not isinstance(r["values"][axis], bool) for r in done)
    fig, axs = plt.subplots(len(figs), 1, figsize=(6.4, 2.4 * len(figs)), squeeze=False)
    for ax, name in zip(axs[:, 0], figs, strict=True):
        for transport in dict.fromkeys(r["transport"] for r in done):
            xs, ys, lo, hi = [], [], [], []
            for v in values:
                cells = [r["figures"][name] for r in done if r["transport"] == transport
                         and show(r["values"][axis]) == v and name in r["figures"]]
                if not cells:
                    continue
                x = next(r["values"][axis] for r in done if show(r["values"][axis]) == v)
                xs.append(float(x) if numeric else values.index(v))
                ys.append(statistics.median(c["median"] for c in cells))
                lo.append(ys[-1] - min(c["lo"] for c in cells))
                hi.append(max(c["hi"] for c in cells) - ys[-1])
            if xs:
                order = sorted(range(len(xs)), key=xs.__getitem__)
                ax.errorbar([xs[i] for i in order], [ys[i] for i in order],
                            yerr=[[lo[i] for i in order], [hi[i] for i in order]],
                            marker="o", capsize=3, label=transport)
        ax.set_ylabel(name)
        if not numeric:
            ax.set_xticks(range(len(values)), values)
        elif len(values) <= 12:
            ax.set_xticks(sorted(float(r["values"][axis]) for r in
                                 {show(r["values"][axis]): r for r in done}.values()))
        ax.grid(alpha=0.3)
    clocks = ", ".join(sorted({str(r["step_time"]) for r in done}))
    axs[0, 0].set_title(f"vs {axis}: median over points and repetitions, bars: spread\n"
                        f"emulated times; steps on the {clocks}", fontsize=9)
    axs[0, 0].legend(title="transport", fontsize=8)
    axs[-1, 0].set_xlabel(axis)
    fig.tight_layout()
    with safefs.open_write(path, binary=True) as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)


def _merged_calibration(store: SweepStore, rows: list[dict[str, Any]],
                        name: str) -> dict[str, Any]:
    variants: dict[str, Any] = {}
    for r in rows:
        path = store.point_dir(r["id"]) / "calibration.json"
        if r["status"] != "done" or not path.is_file():
            continue
        doc = json.loads(path.read_text())
        if doc.get("format") != CALIBRATION_FORMAT:
            continue
        for label, v in (doc.get("variants") or {}).items():
            variants[f"{r['id']}/{label}"] = {
                **v, "point": {"index": r["index"], "id": r["id"], "values": r["values"]}}
    return {"format": CALIBRATION_FORMAT, "experiment": name, "generated": time.time(),
            "sweep": {"name": name, "points": len(rows)}, "variants": variants}


def aggregate(store: SweepStore, points: Sequence[Point], name: str,
              axes: Sequence[str]) -> dict[str, Any]:
    """Write grid.json, grid.csv, plots/ and calibration.json (see the module docstring);
    returns the grid.json document."""
    rows = point_rows(store, points)
    doc = {"sweep": name, "generated": time.time(), "axes": list(axes), "clocks": CLOCKS,
           "counts": {s: sum(r["status"] == s for r in rows)
                      for s in ("done", "failed", "missing")},
           "rows": rows}
    safefs.write_json(store.root / "grid.json", doc, indent=1, default=str)
    _write_csv(store.root / "grid.csv", rows, list(axes))
    figs = [f for f in MAIN_FIGURES if any(f in r["figures"] for r in rows)]
    if figs and any(r["status"] == "done" for r in rows):
        safefs.mkdir_private(store.root / "plots")
        for axis in axes:
            _plot_axis(store.root / "plots" / f"vs-{_file_part(axis)}.png", axis, rows, figs)
    cal = _merged_calibration(store, rows, name)
    safefs.write_json(store.root / "calibration.json", cal, indent=1, default=str)
    return doc


def _file_part(key: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in key)
