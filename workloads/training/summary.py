"""What a labelled run came to, from its records (pure functions; the runner and benches
print and store these).

Times are *training* time: the sum of the job's step times (``job_step`` records:
per step, from the slowest rank's end of the previous step to its end of this
one, evaluation excluded), so a failure that stalls a step shows in them and an
evaluation does not. Time lost to a failure is, over the steps that overlap it, each
step's excess over the same run's healthy median step (a step faster than it counts
0: the loss can never be negative, whatever the noise). With modelled compute a step's
time is its modelled compute plus its measured exposed communication
(``model_step_s``): the real compute of many workers sharing two cores does not leak
into the figures. ``aggregate`` turns repetitions into a median and a spread.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from workloads.training.metrics import failure_windows, percentile


def _of(records: Iterable[Mapping[str, Any]], kind: str, label: str, rep: int) -> list[dict]:
    return [dict(r) for r in records
            if r.get("type") == kind and r.get("label") == label and r.get("rep", 0) == rep]


def summarize(records: Sequence[Mapping[str, Any]], label: str, rep: int = 0,
              metric: str = "accuracy", target: float | None = None,
              higher_is_better: bool = True,
              bounds: Mapping[str, float] | None = None) -> dict:
    """Step times, exposed communication, failure stalls and time to target of one run.

    ``bounds``: per failure kind, how many times longer the fabric forces the
    communication to take while it holds (workloads/training/fabric_bound.py); each gives
    ``<kind>_comm_bound`` and ``<kind>_step_at_bound_ms``, the healthy step with its
    exposed communication stretched by it (what a transport that loses nothing to the
    failure but the capacity reaches, where the communication is bandwidth-bound: latency
    does not stretch with a thinner fabric, and communication the compute hid may come
    out). A bound of inf (a flow with no path left) has no step and is recorded as null."""
    steps = sorted(_of(records, "job_step", label, rep), key=lambda r: r["step"])
    evals = sorted(_of(records, "eval", label, rep), key=lambda r: r["step"])
    events = _of(records, "event", label, rep)
    out: dict[str, Any] = {"label": label, "rep": rep, "steps": len(steps)}
    if not steps:
        return out
    # Modelled compute: a step lasts its modelled compute plus its measured exposed
    # communication (``model_step_s``); the wall-clock ``step_s`` still places it in time.
    modelled = all("model_step_s" in r for r in steps)
    key = "model_step_s" if modelled else "step_s"
    clock, train_s = 0.0, {}
    for r in steps:
        clock += r[key]
        train_s[r["step"]] = clock
    windows = failure_windows(events)

    def overlaps(r: Mapping[str, Any]) -> bool:
        return any(w.overlaps(r) for w in windows)

    healthy_steps = [r for r in steps if not overlaps(r)]
    healthy = [r[key] for r in healthy_steps]
    hit = [r for r in steps if overlaps(r)]
    med = statistics.median(healthy) if healthy else None
    healthy_comm = (statistics.median(r["exposed_comm_s"] for r in healthy_steps)
                    if healthy_steps and all("exposed_comm_s" in r for r in steps) else None)
    # each failure step's excess over the run's healthy median (never negative), by step
    excess = {r["step"]: max(0.0, r[key] - med) for r in hit} if med is not None else {}
    per_kind = _per_kind(steps, windows, med, key)
    out.update(
        step_time="modelled compute + exposed communication" if modelled else "wall clock",
        train_s=round(clock, 4),
        step_ms_median=_ms(statistics.median(r[key] for r in steps)),
        step_ms_p99=_ms(percentile([r[key] for r in steps], 99)),
        healthy_step_ms=_ms(med),
        compute_ms_median=_ms(statistics.median(r["compute_s"] for r in steps)),
        exposed_comm_ms_median=_ms(statistics.median(r["exposed_comm_s"] for r in steps)),
        healthy_exposed_comm_ms=_ms(healthy_comm),
        failure_step_ms_median=_ms(statistics.median(r[key] for r in hit)) if hit else None,
        failure_step_ms_max=_ms(max(r[key] for r in hit)) if hit else None,
        failure_lost_s=round(sum(excess.values()), 4) if excess else None,
        delivered_min=min(r.get("delivered", 1.0) for r in steps),
        **per_kind,
        # only a kind some step ran through: the bound is set against those steps
        **_at_bound(bounds or {}, {w.kind for w in windows
                                   if per_kind[f"{w.kind}_median_ms"] is not None},
                    med, healthy_comm),
        lost_entries=sum(r.get("lost_entries", 0) for r in steps),
    )
    if any(r.get("tolerance") is not None for r in steps):  # bounded-loss (DBLP) rounds
        out["tolerance_zero_rounds"] = sum(1 for r in steps if r.get("tolerance") == 0)
    bursts = [e for e in events if e.get("kind") == "microburst"
              and e.get("action") in ("restore", "restore_at_stop")
              and e.get("target_drops") is not None]
    if bursts:
        # A burst that dropped nothing at its target was a delay spike, not a loss event.
        out["burst_drops"] = sum(e["target_drops"] for e in bursts)
        out["burst_delay_only"] = sum(1 for e in bursts if e.get("delay_only"))
    overruns = [r.get("overruns", 0) for r in _of(records, "worker_done", label, rep)]
    if overruns:
        out["compute_overruns"] = sum(overruns)  # modelled compute: steps whose real compute
        # took longer than the model (0 in measured mode)
    if evals:
        last = evals[-1]
        out["final_" + metric] = last.get(metric)
        out["final_step"] = last["step"]
        if target is not None:
            reached = next((e for e in evals if e.get(metric) is not None and (
                e[metric] >= target if higher_is_better else e[metric] <= target)), None)
            out["target"] = target
            out["time_to_target_s"] = (round(train_s[reached["step"]], 4)
                                       if reached is not None and reached["step"] in train_s
                                       else None)
            out["steps_to_target"] = reached["step"] + 1 if reached is not None else None
            if reached is not None and excess:
                # what the failures cost this run before it reached the target (on its own
                # healthy median: host speed drifting between runs does not enter it)
                out["failure_lost_to_target_s"] = round(sum(
                    v for step, v in excess.items() if step <= reached["step"]), 4)
    return out


def _per_kind(steps: list[dict], windows: list, healthy: float | None,
              key: str = "step_s") -> dict:
    """Median and worst step and time lost per kind of failure (windows of one kind
    merged): ``<kind>_median_ms``, ``<kind>_worst_ms``, ``<kind>_lost_s``."""
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(w.kind for w in windows):
        hit = [r for r in steps if any(w.kind == kind and w.overlaps(r) for w in windows)]
        out[f"{kind}_median_ms"] = _ms(statistics.median(r[key] for r in hit)) if hit else None
        out[f"{kind}_worst_ms"] = _ms(max(r[key] for r in hit)) if hit else None
        out[f"{kind}_lost_s"] = (round(sum(max(0.0, r[key] - healthy) for r in hit), 4)
                                 if hit and healthy is not None else None)
    return out


def _at_bound(bounds: Mapping[str, float], kinds: set[str], healthy: float | None,
              comm: float | None) -> dict:
    """``<kind>_comm_bound`` and ``<kind>_step_at_bound_ms`` of each kind that ran."""
    out: dict[str, Any] = {}
    for kind in sorted(kinds & set(bounds)):
        out[f"{kind}_comm_bound"] = round(bounds[kind], 4)
        out[f"{kind}_step_at_bound_ms"] = (
            _ms(healthy + comm * (bounds[kind] - 1.0))
            if healthy is not None and comm is not None and bounds[kind] != float("inf")
            else None)
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def target_of(workload: Any) -> tuple[str, float | None, bool]:
    """(metric, target, higher is better) of an experiment's ``[workload]``."""
    if workload.model == "tiny_lm":
        return "loss", workload.target_loss, False
    return "accuracy", workload.target_accuracy, True


def summarize_workload(records: Sequence[Mapping[str, Any]], label: str, rep: int,
                       workload: Any, bounds: Mapping[str, float] | None = None) -> dict:
    """``summarize`` with the metric and target of ``workload`` (a WorkloadConfig)."""
    metric, target, higher = target_of(workload)
    return summarize(records, label, rep, metric, target, higher_is_better=higher,
                     bounds=bounds)


def aggregate(summaries: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per label, every numeric figure over its repetitions: ``{"median", "lo", "hi",
    "n"}`` (lo..hi is the spread: the smallest and largest repetition)."""
    by_label: dict[str, list[Mapping[str, Any]]] = {}
    for s in summaries:
        by_label.setdefault(str(s.get("label")), []).append(s)
    out: dict[str, dict[str, Any]] = {}
    for label, runs in by_label.items():
        figures: dict[str, Any] = {"reps": len(runs)}
        keys = dict.fromkeys(k for r in runs for k in r)
        for k in keys:
            vals = [r.get(k) for r in runs]
            nums = [v for v in vals if isinstance(v, int | float) and not isinstance(v, bool)]
            if k in ("label", "rep") or not nums:
                continue
            figures[k] = {"median": statistics.median(nums), "lo": min(nums),
                          "hi": max(nums), "n": len(nums)}
        out[label] = figures
    return out


def beyond_spread(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two aggregated figures differ by more than their spread: their
    repetitions' ranges do not overlap (a difference inside the spread is noise)."""
    if not a or not b:
        return False
    return a["hi"] < b["lo"] or b["hi"] < a["lo"]


# Paired ratios call a difference only when at least this many repetitions have both
# figures and every one of them orders the two labels the same way.
PAIRED_MIN = 3


def ratios_by_rep(summaries: Sequence[Mapping[str, Any]], a: str, b: str,
                  key: str) -> list[float]:
    """``a``'s ``key`` over ``b``'s, repetition by repetition, where both have it.

    Repetition k of every label ran in one round of the interleaving, with one seed: one
    data order and accuracy trajectory, so a figure the seed sets for every label alike
    (the steps to the target) cancels in the ratio, where it widens each label's spread.
    """
    by = {(s.get("label"), s.get("rep", 0)): s for s in summaries}
    reps = sorted({int(s.get("rep", 0)) for s in summaries})
    out = []
    for r in reps:
        x, y = by.get((a, r), {}).get(key), by.get((b, r), {}).get(key)
        if x and y:
            out.append(x / y)
    return out


def paired_beyond_spread(ratios: Sequence[float]) -> bool:
    """Whether paired ratios (``ratios_by_rep``) call a difference: at least
    ``PAIRED_MIN`` of them and all on one side of 1 (their range excludes 1)."""
    return len(ratios) >= PAIRED_MIN and (max(ratios) < 1.0 or min(ratios) > 1.0)


def verdict(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None,
            ratios: Sequence[float]) -> str:
    """Whether two labels' figures differ, in words: their ranges over repetitions do not
    overlap (``beyond_spread``); or they overlap but every paired ratio is on one side
    of 1 (``paired_beyond_spread``: the ranges hold what the seeds set alike); or
    neither, and the difference is noise."""
    if beyond_spread(a, b):
        return "differ beyond the spread"
    if paired_beyond_spread(ratios):
        return "differ beyond the paired spread (the ranges overlap; every repetition " \
               "orders them the same way)"
    return "within the spread: not a difference"


def spread_cell(fig: Mapping[str, Any] | None, digits: int = 1) -> str | None:
    """``median [lo-hi]`` for a table (the median alone for one repetition)."""
    if not fig:
        return None
    med = f"{fig['median']:.{digits}f}"
    if fig.get("n", 1) < 2:
        return med
    return f"{med} [{fig['lo']:.{digits}f}-{fig['hi']:.{digits}f}]"
