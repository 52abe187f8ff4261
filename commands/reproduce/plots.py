"""Plots of the reproduction report: medians as bars with their spread as error bars.

Object-oriented matplotlib (no pyplot state), written as PNG into a claim's directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure

from commands.reproduce.claim import Figure
from emu import safefs


def bars(path: Path, title: str, ylabel: str, groups: Sequence[tuple[str, Sequence[Figure]]],
         refs: Sequence[tuple[str, float]] = ()) -> str:
    """Grouped bars: per group (an x label) one bar per figure (labelled by its system),
    the median with the lo..hi spread; ``refs`` are horizontal reference lines (label,
    value). Returns the file name written (inside ``path``'s directory)."""
    fig = MplFigure(figsize=(7, 3.6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    systems = list(dict.fromkeys(f.system or f.name for _, figs in groups for f in figs))
    width = 0.8 / max(1, len(systems))
    colors = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f")
    for k, system in enumerate(systems):
        xs: list[float] = []
        meds: list[float] = []
        errs: list[list[float]] = [[], []]
        for g, (_, figs) in enumerate(groups):
            f = next((f for f in figs if (f.system or f.name) == system), None)
            if f is None:
                continue
            xs.append(g - 0.4 + width * (k + 0.5))
            meds.append(f.median)
            errs[0].append(max(0.0, f.median - f.lo))
            errs[1].append(max(0.0, f.hi - f.median))
        ax.bar(xs, meds, width * 0.9, yerr=errs, capsize=3, label=system,
               color=colors[k % len(colors)])
    for i, (label, value) in enumerate(refs):
        ax.axhline(value, color="black", linestyle=("--", ":", "-.")[i % 3], linewidth=1,
                   label=label)
    ax.set_xticks(range(len(groups)), [g for g, _ in groups])
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    with safefs.open_write(path, binary=True) as out:
        fig.savefig(out, format="png", dpi=110)
    return path.name
