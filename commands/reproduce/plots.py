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


def heatmap(path: Path, title: str, panels: Sequence[tuple[str, Sequence[str], Sequence[str],
                                                          Sequence[Sequence[float | None]],
                                                          Sequence[Sequence[bool]]]],
            xlabel: str, ylabel: str, cbar: str) -> str:
    """Side-by-side heat maps of a factor (> 1: better) on a log colour scale centred on
    1x: per panel (its title, the x and y tick labels, the values by row of y and column
    of x, and which cells are beyond the spread, marked with a frame and an asterisk);
    each cell says its value. Returns the file name written."""
    import math

    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.patches import Rectangle

    n = len(panels)
    fig = MplFigure(figsize=(2.3 * n + 1.2, 3.0))
    FigureCanvasAgg(fig)
    finite = [math.log2(v) for _, _, _, vals, _ in panels for row in vals for v in row
              if v is not None and v > 0]
    span = max([1.0, *(abs(v) for v in finite)])
    norm = TwoSlopeNorm(vmin=-span, vcenter=0.0, vmax=span)
    image = None
    for k, (name, xs, ys, vals, marks) in enumerate(panels):
        ax = fig.add_subplot(1, n, k + 1)
        grid = [[math.log2(v) if v is not None and v > 0 else float("nan") for v in row]
                for row in vals]
        image = ax.imshow(grid, cmap="RdBu", norm=norm, origin="lower", aspect="auto")
        for i, row in enumerate(vals):
            for j, v in enumerate(row):
                if v is None:
                    continue
                beyond = marks[i][j]
                ax.text(j, i, f"{v:.2f}" + ("*" if beyond else ""), ha="center",
                        va="center", fontsize=7, fontweight="bold" if beyond else "normal")
                if beyond:
                    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                           edgecolor="black", linewidth=1.2))
        ax.set_xticks(range(len(xs)), list(xs), fontsize=7)
        ax.set_yticks(range(len(ys)), list(ys) if k == 0 else [""] * len(ys), fontsize=7)
        ax.set_title(name, fontsize=8)
        ax.set_xlabel(xlabel, fontsize=7)
        if k == 0:
            ax.set_ylabel(ylabel, fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(top=0.8, bottom=0.17, left=0.09, right=0.86)
    if image is not None:
        bar = fig.colorbar(image, ax=fig.axes, shrink=0.8)
        ticks = [t for t in (-3, -2, -1, 0, 1, 2, 3) if abs(t) <= span]
        bar.set_ticks(ticks, labels=[f"{2.0 ** t:g}x" for t in ticks])
        bar.set_label(cbar, fontsize=7)
    with safefs.open_write(path, binary=True) as out:
        fig.savefig(out, format="png", dpi=110)
    return path.name
