"""Figures and a terminal table from result records (workloads/training/results.py).

Drawn with Matplotlib's Agg canvas on a ``Figure`` of our own (never ``pyplot``): no
display is needed and no global backend is switched under other code. Each plot has a
pure helper that computes the numbers it draws (``accuracy_series``, ``step_series``,
``event_markers``), so tests check those, not pixels.

* ``plot_time_to_accuracy(evals_by_label, target, path)``: accuracy (or loss) against
  wall time from training start, one line per label and repetition, the target as a
  horizontal line.
* ``plot_step_timeline(steps_by_label, events, path)``: one panel per label, the job's
  step time (slowest rank) against training time, stacked as compute, exposed
  communication and the rest; failure events as vertical lines (apply: solid red,
  restore: dashed green) labelled with what failed.
* ``comparison_table(summaries)``: summary records as an aligned plain-text table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from emu import safefs
from workloads.training.metrics import job_steps

__all__ = ["Marker", "accuracy_series", "comparison_table", "event_markers",
           "plot_step_timeline", "plot_time_to_accuracy", "step_series"]

# Fields naming a failure in event records, in the order they label a marker.
_WHAT = ("link", "switch", "plane", "target")


def accuracy_series(evals_by_label: Mapping[str, Sequence[Mapping[str, Any]]],
                    key: str = "accuracy") -> dict[str, dict[int, tuple[list, list]]]:
    """Per label and repetition, ``(t_s, value)`` lists sorted by time (None values left out)."""
    out: dict[str, dict[int, tuple[list, list]]] = {}
    for label, evals in evals_by_label.items():
        reps: dict[int, tuple[list, list]] = {}
        for e in sorted(evals, key=lambda e: (e.get("rep", 0), e["t_s"])):
            if e.get(key) is None:
                continue
            ts, vs = reps.setdefault(e.get("rep", 0), ([], []))
            ts.append(float(e["t_s"]))
            vs.append(float(e[key]))
        out[label] = reps
    return out


def step_series(steps: Sequence[Mapping[str, Any]], rep: int = 0) -> dict[str, list[float]]:
    """The job steps of ``rep`` (slowest rank each) as columns: ``t_s`` (end of step),
    ``step_s``, ``compute_s``, ``exposed_comm_s`` and ``other_s`` (the rest of the step:
    optimizer, waiting), the three parts summing to ``step_s``."""
    cols: dict[str, list[float]] = {k: [] for k in
                                    ("t_s", "step_s", "compute_s", "exposed_comm_s", "other_s")}
    for j in job_steps(s for s in steps if s.get("rep", 0) == rep):
        compute = float(j.get("compute_s") or 0.0)
        exposed = float(j.get("exposed_comm_s") or 0.0)
        step = float(j["step_s"])
        cols["t_s"].append(float(j["t_s"]))
        cols["step_s"].append(step)
        cols["compute_s"].append(compute)
        cols["exposed_comm_s"].append(exposed)
        cols["other_s"].append(max(0.0, step - compute - exposed))
    return cols


@dataclass(frozen=True)
class Marker:
    """A vertical line on the step timeline: ``action`` (apply/restore) at ``t_s``."""

    t_s: float
    action: str
    text: str


def event_markers(events: Sequence[Mapping[str, Any]], label: str | None = None,
                  rep: int = 0) -> list[Marker]:
    """The apply/restore events of ``rep`` for ``label`` (events without a label: every
    label), in time order, with a short text such as ``"apply link_down p0l0-p0s1"``."""
    out = []
    for e in events:
        if e.get("action") not in ("apply", "restore") or e.get("rep", 0) != rep:
            continue
        if label is not None and e.get("label") not in (None, label):
            continue
        t = e.get("t_s", e.get("fired", e.get("at")))
        if t is None:
            continue
        what = next((str(e[k]) for k in _WHAT if e.get(k) is not None), "")
        text = " ".join(x for x in (e["action"], str(e.get("kind", "")), what) if x)
        out.append(Marker(float(t), e["action"], text))
    return sorted(out, key=lambda m: m.t_s)


def _save(fig: Figure, path: str | Path) -> Path:
    p = Path(path)
    safefs.mkdir_private(p.parent)
    FigureCanvasAgg(fig)  # attaches itself to fig: savefig renders with Agg
    with safefs.open_write(p, binary=True) as f:
        fig.savefig(f, format="png", dpi=100)
    return p


def plot_time_to_accuracy(evals_by_label: Mapping[str, Sequence[Mapping[str, Any]]],
                          target: float | None, path: str | Path,
                          key: str = "accuracy") -> Path:
    """Accuracy (or ``key="loss"``) vs wall time per label, with the target; returns path."""
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    for label, reps in accuracy_series(evals_by_label, key).items():
        color = None
        for rep, (ts, vs) in sorted(reps.items()):
            (line,) = ax.plot(ts, vs, marker=".", color=color,
                              label=label if color is None else None,
                              linestyle="-" if rep == min(reps) else ":")
            color = line.get_color()  # every repetition of a label in one colour
    if target is not None:
        ax.axhline(target, color="black", linestyle="--", linewidth=1,
                   label=f"target {target:g}")
    ax.set_xlabel("time from training start (s)")
    ax.set_ylabel("test accuracy" if key == "accuracy" else key)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    return _save(fig, path)


def plot_step_timeline(steps_by_label: Mapping[str, Sequence[Mapping[str, Any]]],
                       events: Sequence[Mapping[str, Any]], path: str | Path,
                       rep: int = 0) -> Path:
    """Step time vs training time per label (stacked parts) with failure markers."""
    labels = list(steps_by_label) or ["(no steps)"]
    fig = Figure(figsize=(9, 2.6 * len(labels) + 0.6))
    axes = fig.subplots(len(labels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, label in zip(axes, labels, strict=True):
        s = step_series(steps_by_label.get(label, ()), rep)
        if s["t_s"]:
            ms = {k: [v * 1000 for v in s[k]] for k in ("compute_s", "exposed_comm_s",
                                                         "other_s")}
            ax.stackplot(s["t_s"], ms["compute_s"], ms["exposed_comm_s"], ms["other_s"],
                         labels=("compute", "exposed comm", "other"), step="pre",
                         colors=("#4c72b0", "#dd8452", "#bbbbbb"), alpha=0.85)
        top = max(s["step_s"], default=0.0) * 1000 or 1.0
        for m in event_markers(events, label, rep):
            restore = m.action == "restore"
            ax.axvline(m.t_s, color="green" if restore else "red",
                       linestyle="--" if restore else "-", linewidth=1)
            ax.text(m.t_s, top, " " + m.text, rotation=90, va="top", ha="left", fontsize=7)
        ax.set_title(f"{label} (repetition {rep})", fontsize=9)
        ax.set_ylabel("step (ms)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel("time from training start (s)")
    fig.tight_layout()
    return _save(fig, path)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def comparison_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """Summary records as a plain-text table: one row each, ``label`` (then ``transport``,
    ``rep``) first, then every other field in order of first appearance."""
    rows = [{k: v for k, v in s.items() if k != "type"} for s in summaries]
    if not rows:
        return "(no results)"
    cols = [c for c in ("label", "transport", "rep") if any(c in r for r in rows)]
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    cells = [cols] + [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    # Numeric columns (every value a number or "-") are right-aligned so digits line up.
    right = [all(_numeric(row[i]) or row[i] == "-" for row in cells[1:])
             for i in range(len(cols))]

    def line(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w)
                         for c, w, r in zip(row, widths, right, strict=True)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
