"""Bursts locked to training steps, compared burst by burst across transports (pure).

Its one job: pair what each step-locked burst cost one label against what the same
burst cost another. A step-locked burst (``MicroburstSpec.every_steps``) opens at the
same point of the same step in every run (its ``window`` record names the step
boundary it belongs to), so unlike a worst step, which is one extreme out of many
bursts, the pairs compare the transports at identical points, every burst counted.

A burst's cost here is the two job steps after its boundary: the one it opens in, and
the next, which a burst opened late in its step runs into. Windows of one boundary on
several targets (a burst on each plane) are one burst.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["burst_costs", "describe_pair", "pair_figure", "pair_lines", "paired_ratios"]


def burst_costs(records: Iterable[Mapping[str, Any]], label: str,
                rep: int) -> dict[int, float]:
    """Per step boundary with a step-locked burst window, the two job steps after it
    (seconds), for ``label``'s repetition ``rep``."""
    recs = [r for r in records if r.get("label") == label and r.get("rep", 0) == rep]
    steps = {r["step"]: r["step_s"] for r in recs if r.get("type") == "job_step"}
    out: dict[int, float] = {}
    for r in recs:
        if r.get("type") != "event" or r.get("action") != "window" or "error" in r:
            continue
        s = int(r["step"])
        if s + 1 in steps and s + 2 in steps:
            out.setdefault(s, steps[s + 1] + steps[s + 2])
    return out


def paired_ratios(records: Sequence[Mapping[str, Any]], a: str, b: str) -> list[float]:
    """``a``'s cost / ``b``'s, for every burst both met (same repetition, same boundary)."""
    reps = sorted({r.get("rep", 0) for r in records if r.get("type") == "job_step"})
    out = []
    for rep in reps:
        ca, cb = burst_costs(records, a, rep), burst_costs(records, b, rep)
        out += [ca[s] / cb[s] for s in sorted(ca.keys() & cb.keys()) if cb[s] > 0]
    return out


def pair_figure(records: Sequence[Mapping[str, Any]], a: str, b: str) -> dict | None:
    """The paired ratios of ``a`` over ``b``: median, 10th and 90th percentiles, how many
    bursts were paired and in how many ``a``'s cost was the larger (None: no pair)."""
    ratios = paired_ratios(records, a, b)
    if not ratios:
        return None
    p10, med, p90 = np.percentile(ratios, [10, 50, 90])
    return {"median": round(float(med), 3), "p10": round(float(p10), 3),
            "p90": round(float(p90), 3), "bursts": len(ratios),
            "longer": sum(x > 1 for x in ratios)}


def describe_pair(a: str, b: str, fig: Mapping[str, Any]) -> str:
    """``pair_figure``'s figure of ``a`` over ``b`` in words."""
    return (f"{a} / {b} {fig['median']:.2f} [p10 {fig['p10']:.2f} - p90 {fig['p90']:.2f}] "
            f"over {fig['bursts']} bursts paired; {a}'s longer in {fig['longer']}")


def pair_lines(records: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> list[str]:
    """One line per pair of labels that met the same step-locked bursts: the median of
    the paired ratios with their 10th and 90th percentiles, and how often the first
    label's cost was the larger (empty without step-locked bursts)."""
    lines = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            fig = pair_figure(records, a, b)
            if fig is not None:
                lines.append("bursts locked to steps, the two steps after each burst's "
                             f"boundary: {describe_pair(a, b, fig)}")
    return lines
