"""Overruns of modelled compute: counted from a run's records, and refused past a limit.

Its one job: judging whether a ``compute = "modelled"`` run's real compute held to its
model. Each run reports its overrun fraction (job steps in which some rank's real
compute overran the model, and per rank); a run above ``OVERRUN_LIMIT`` is refused
(EmuError) unless ``workload.allow_overruns`` is true. The refusal comes at the end of
an experiment, after its results and summaries are written, because only the run itself
knows how its compute fared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from emu.errors import EmuError
from workloads.training.jobstep import OverrunStats
from workloads.training.run import RunOutcome

OVERRUN_LIMIT = 0.05  # the largest fraction of overrun steps a run may have by default


def refuse_overruns(outcomes: Iterable[RunOutcome], limit: float = OVERRUN_LIMIT) -> None:
    """EmuError naming every run whose real compute overran its model in more than
    ``limit`` of its steps, unless its experiment allows overruns."""
    bad = [(o, o.overruns) for o in outcomes if o.overruns is not None
           and not o.allow_overruns and o.overruns.job_fraction > limit]
    if not bad:
        return
    lines = [f"{o.label} rep {o.rep}: {ov.job_overruns} of {ov.steps} steps "
             f"({ov.job_fraction:.0%}; per rank "
             f"{', '.join(f'{f:.0%}' for f in ov.rank_fractions)})" for o, ov in bad]
    raise EmuError(
        f"the modelled compute did not hold: the real compute overran it in more than "
        f"{limit:.0%} of the steps of {'; '.join(lines)}. Its step times would hide what "
        "the shared cores add. Set a larger workload.compute_ms, run fewer workers, or "
        "accept it with workload.allow_overruns = true (the results are written)")


def overrun_stats(records: Iterable[Mapping[str, Any]], label: str,
                  rep: int) -> OverrunStats | None:
    """A run's overruns from its results records (None unless its compute was modelled)."""
    records = list(records)
    meta = next((r for r in records if r.get("type") == "meta" and r.get("label") == label),
                None)
    if meta is None or (meta.get("compute") or {}).get("mode") != "modelled":
        return None
    mine = [r for r in records if r.get("label") == label and r.get("rep", 0) == rep]
    jobs = [r for r in mine if r.get("type") == "job_step"]
    steps = [r for r in mine if r.get("type") == "step"]
    ranks = 1 + max((r["rank"] for r in steps), default=-1)
    rank_steps, rank_overruns = [0] * ranks, [0] * ranks
    for r in steps:
        rank_steps[r["rank"]] += 1
        rank_overruns[r["rank"]] += bool(r.get("overrun"))
    return OverrunStats(len(jobs), sum(1 for j in jobs if j.get("overrun_ranks")),
                        tuple(rank_steps), tuple(rank_overruns))
