"""The report of a finished training experiment, from its results.jsonl alone.

Its one job: per label and repetition a ``summary`` record (with the overrun fractions
of modelled compute, workloads/training/overruns.py), the terminal table (and, with several
repetitions, medians with their spread and which differences exceed it; bursts locked
to steps paired burst by burst, workloads/training/burst_pairs.py), and the plots
time_to_accuracy.png and step_timeline.png.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from topologies.timescale import TimeScale
from workloads.experiment import Experiment
from workloads.training import plots
from workloads.training.burst_pairs import pair_lines
from workloads.training.fabric_bound import comm_bounds
from workloads.training.overruns import overrun_stats
from workloads.training.results import ResultsWriter, read_jsonl
from workloads.training.summary import (
    aggregate,
    ratios_by_rep,
    spread_cell,
    summarize_workload,
    target_of,
    verdict,
)


def report(out_dir: Path, exp: Experiment, labels: list[str],
           say: Callable[[str], None] = print) -> list[dict]:
    """Summaries per label and repetition (written as ``summary`` records, with the overrun
    fractions of modelled compute), the terminal table and the plots
    (time_to_accuracy.png, step_timeline.png) of a finished run."""
    records = read_jsonl(out_dir / "results.jsonl")
    metric, target, _ = target_of(exp.workload)
    reps = max((r.get("rep", 0) for r in records if r.get("type") == "job_step"),
               default=-1) + 1
    summaries = []
    bounds = comm_bounds(exp)
    for label in labels:
        for rep in range(reps):
            s = summarize_workload(records, label, rep, exp.workload, bounds)
            if s["steps"]:
                stats = overrun_stats(records, label, rep)
                if stats is not None:
                    s.update(stats.as_record())
                summaries.append(s)
    with ResultsWriter(out_dir, label=labels[0]) as w:
        for s in summaries:
            w.summary(**s)
    evals = {lb: [r for r in records if r.get("type") == "eval" and r.get("label") == lb]
             for lb in labels}
    # the job's steps (slowest rank, exposed communication from the last rank's entry)
    steps = {lb: [{**r, "rank": 0} for r in records
                  if r.get("type") == "job_step" and r.get("label") == lb] for lb in labels}
    events = [r for r in records if r.get("type") == "event"]
    plots.plot_time_to_accuracy(evals, target, out_dir / "time_to_accuracy.png", key=metric)
    plots.plot_step_timeline(steps, events, out_dir / "step_timeline.png")
    kinds = [k[:-len("_worst_ms")] for s in summaries for k in s if k.endswith("_worst_ms")]
    cols = ["label", "rep", "steps", "train_s", "healthy_step_ms", "exposed_comm_ms_median"]
    for k in dict.fromkeys(kinds):
        if k in bounds:  # the fabric's own limit through it, beside what the steps took
            cols += [f"{k}_median_ms", f"{k}_step_at_bound_ms"]
        cols += [f"{k}_worst_ms", f"{k}_lost_s"]
    cols += ["time_to_target_s", "final_" + metric]
    if any("overrun_fraction" in s for s in summaries):
        cols.append("overrun_fraction")
    if any(s.get("delivered_min", 1) < 1 for s in summaries):
        cols.append("delivered_min")
    if any("burst_drops" in s for s in summaries):
        cols += ["burst_drops", "burst_delay_only"]
    say(plots.comparison_table([{c: s.get(c) for c in cols} for s in summaries]))
    if reps > 1:
        worst = [f"{k}_{m}_ms" for k in dict.fromkeys(kinds)
                 for m in (("median", "worst") if k in bounds else ("worst",))]
        say(repetitions_table(summaries, cols, ["time_to_target_s", *worst]))
    for line in pair_lines(records, labels):
        say(line)
    for kind, r in bounds.items():
        say(f"{kind}: the fabric leaves the ring's transfers {r:.3g}x their healthy least time "
            f"(cuts of the fabric, topologies/flow_bound.py); {kind}_step_at_bound_ms is the "
            "healthy step with its exposed communication stretched by that")
    meta = next((r for r in records if r.get("type") == "meta" and r.get("time_scale")), None)
    if meta is not None:
        ts = meta["time_scale"]
        say(TimeScale(ts["emulated_mbit"], ts["nominal_gbit"]).describe())
    return summaries


def repetitions_table(summaries: list[dict], cols: list[str], compare: Sequence[str]) -> str:
    """Median [spread] of each column over repetitions, per label, and for each figure of
    ``compare`` which labels' figures differ by more than their spread (the only
    differences called differences: ``summary.verdict``), with their ratio repetition by
    repetition (paired: repetition k of every label ran in one round of the
    interleaving, with one seed)."""
    agg = aggregate(summaries)
    rows = []
    for label, figs in agg.items():
        row: dict[str, Any] = {"label": label, "reps": figs["reps"]}
        for c in cols:
            if c not in ("label", "rep"):
                row[c] = spread_cell(figs.get(c), 3 if c.endswith("_s") else 2)
        rows.append(row)
    lines = [plots.comparison_table(rows)]
    labels = list(agg)
    for key in compare:
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                fa, fb = agg[a].get(key), agg[b].get(key)
                if not (fa and fb):
                    continue
                paired = ratios_by_rep(summaries, a, b, key)
                ratios = f" (paired {', '.join(f'{x:.2f}' for x in paired)})" if paired else ""
                lines.append(f"{key}: {a} {fa['median']:.3f} vs {b} {fb['median']:.3f}: "
                             f"{verdict(fa, fb, paired)}{ratios}")
    return "\n".join(lines)
