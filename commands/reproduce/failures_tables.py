"""Claim 1's training figures and table, from the aggregate of the training runs
(workloads/training/summary.py's figures: healthy step, worst step in the failure window, time
lost; all on the modelled clock)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from commands.reproduce.claim import Figure, Table

MIN_JUDGED = 3  # repetitions per system before the training comparison is judged
FIGS = (("healthy_step_ms", "healthy step time", "ms"),
        ("failure_step_ms_max", "worst step in the failure", "ms"),
        ("failure_lost_s", "training time lost to the failure", "s"))


def training_figures(training: Mapping[str, Any] | None, systems: list[str]
                     ) -> tuple[list[Figure], Table | None, str]:
    """(figures, table, a sentence for the reason) of the training comparison."""
    if not training:
        return [], None, ""
    agg = training["aggregate"]
    figures, rows = [], []
    for kind in training["kinds"]:
        for s in systems:
            a = agg.get(f"{s}/{kind}", {})
            cells = []
            for key, name, unit in FIGS:
                f = a.get(key)
                if f is None:
                    cells.append("-")
                    continue
                figures.append(Figure(f"{name}, {kind} (training)", s, unit, "emulated",
                                      f["median"], f["lo"], f["hi"], f["n"]))
                cells.append(f"{f['median']:.3g} [{f['lo']:.3g}-{f['hi']:.3g}]")
            over = a.get("overrun_fraction")
            cells.append("-" if over is None else f"{over['hi']:.1%}")
            rows.append((kind, s, *cells))
    note = ""
    kind = training["kinds"][0]
    lost = {s: agg.get(f"{s}/{kind}", {}).get("failure_lost_s") for s in systems}
    if all(lost.values()) and min(f["n"] for f in lost.values()) >= MIN_JUDGED:
        note = " In training (time lost per failure, median [min-max]): " + "; ".join(
            _compared(k, {s: agg.get(f"{s}/{k}", {}).get("failure_lost_s") for s in systems})
            for k in training["kinds"]) + "."
    elif all(lost.values()):
        parts = ", ".join(f"{s} {lost[s]['median'] * 1000:.0f} ms" for s in systems)
        note = f" In training through the {kind}, time lost per failure: {parts}."
    table = Table("Training through failures (modelled clock), median [min-max]",
                  ("failure", "system", "healthy step (ms)", "worst step (ms)",
                   "time lost (s)", "overruns (max)"), tuple(rows))
    return figures, table, note


def _ms(f: Mapping[str, Any]) -> str:
    return f"{f['median'] * 1e3:.0f} [{f['lo'] * 1e3:.0f}-{f['hi'] * 1e3:.0f}] ms"


def _compared(kind: str, lost: Mapping[str, Mapping[str, Any] | None]) -> str:
    """One failure kind's training comparison in words: MRC's time lost against the
    best baseline's (lowest median), called a difference only beyond both spreads."""
    mrc = lost.get("mrc")
    others = {s: f for s, f in lost.items() if s != "mrc" and f}
    if not mrc or not others:
        return f"{kind}: not measured for every system"
    best = min(others, key=lambda s: others[s]["median"])
    b = others[best]
    if mrc["hi"] < b["lo"]:
        verdict = "MRC loses less, beyond the spread"
    elif mrc["lo"] > b["hi"]:
        verdict = "MRC loses more, beyond the spread"
    else:
        verdict = "within the spread"
    return f"{kind}: MRC {_ms(mrc)} vs {best} {_ms(b)}, {verdict}"
