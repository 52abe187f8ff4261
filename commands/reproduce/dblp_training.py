"""Claim 3's training comparison: the tiny LM through microbursts, communication-bound.

The training bench's LM setting (commands/bench/training.py): 4 workers, the transpose
all-reduce, microbursts onto a worker's port on both planes for the whole run, modelled
compute calibrated on the fabric, repetitions interleaved on one fabric. What makes it
the regime the claim needs:

- communication is at least half of a step: the fabric's links run at ``rate_mbit``
  (25 Mbit/s: 4000x slower than the 100 Gbit/s they stand for, where the LM's compute
  is what it is), so a step's exposed communication outweighs its modelled compute
  (each run's share is reported; the compute model's overruns too);
- DBLP's phase protection is on: tolerance 0 for ``critical_epochs`` epochs of
  ``epoch_steps`` rounds (the LM's data epoch is ~2,400 steps, longer than the run) and
  through Accordion's critical regimes, then ``base`` scaled by the LR decay up to
  ``cap``;
- the paper's baseline runs alongside: an MLT-style fixed tolerance (``mlt``, at DBLP's
  base tolerance: DBLP without its phase awareness), next to reliable MRC and gloo/TCP.

Every bounded variant uses error feedback (a lost chunk's values go out again next
round) and the rounds close at their needed chunk (transports/core/dblp). Before
anything runs, the experiments' validation checks each bounded variant's smallest
gradient block (workloads/experiment/blocks.py): a tolerance too small to let one of
its chunks go is refused with the reason (the LM's blocks are 15 chunks: 0.1 lets one
go).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from emu.fabric import Fabric
from workloads import experiment

SYSTEMS = ("mrc", "gloo", "mlt", "dblp")


def burst_events(targets: Sequence[str], sources: Sequence[str], on_ms: float,
                 every_ms: float, jitter_ms: float, steps: int) -> list[dict]:
    """Microbursts at ``targets`` from step 0 to the last step boundary (sized to drop,
    jittered on the wall clock so no step time locks to their period), restored there
    (after step ``steps - 2``) so that each burst's drops at its target are recorded."""
    out: list[dict] = []
    for i, t in enumerate(targets):
        out.append({"at_step": 0, "do": "microburst", "target": t, "sources": list(sources),
                    "on_ms": on_ms, "every_ms": every_ms, "jitter_ms": jitter_ms,
                    "mode": "drop", "id": f"burst{i}"})
    return out + [{"at_step": steps - 2, "do": "restore", "id": f"burst{i}"}
                  for i in range(len(targets))]


def transports(phase: Mapping[str, Any], mlt_tolerance: float) -> dict[str, dict]:
    """The ``[transport]`` table of each system."""
    return {"mrc": {"name": "mrc", "collective": "transpose"},
            "gloo": {"name": "gloo", "collective": "ring"},
            "mlt": {"name": "dblp", "collective": "transpose",
                    "dblp": {"policy": "fixed", "fill": "error_feedback",
                             "tolerance": mlt_tolerance}},
            "dblp": {"name": "dblp", "collective": "transpose",
                     "dblp": {"policy": "phase_aware", "fill": "error_feedback", **phase}}}


def plan(fabric: Mapping[str, Any], systems: Sequence[str], workload: Mapping[str, Any],
         events: list[dict], phase: Mapping[str, Any], mlt_tolerance: float,
         reps: int) -> list[tuple[str, experiment.Experiment]]:
    """(label, experiment) of every system, all on one fabric."""
    tr = transports(phase, mlt_tolerance)
    bad = [s for s in systems if s not in tr]
    if bad:
        raise ValueError(f"training systems {bad} are invalid: must be among "
                         f"{', '.join(SYSTEMS)}")
    return [(f"lm/{s}", experiment.parse(
        {"name": f"reproduce-dblp-{s}", "seed": 1, "repetitions": reps, "fabric": dict(fabric),
         "transport": tr[s], "workload": dict(workload), "event": events},
        where=f"claim dblp {s}")) for s in systems]


def run_training(fab: Fabric, runs: list[tuple[str, experiment.Experiment]], out_dir: Path,
                 say: Callable[[str], None]) -> tuple[list[dict], dict[str, Any]]:
    """Every run, interleaved, on ``fab`` (claim 1's ``run_training``): (per-repetition
    summaries with each run's late-phase tolerance, rounds at tolerance 0 and share of
    communication in the step, aggregate by label)."""
    from commands.reproduce.failures_training import run_training as run_interleaved

    def annotate(records: list[dict], label: str, rep: int) -> dict:
        steps = _steps(records, label, rep)
        return {"late_tolerance": late_tolerance(steps),
                "tolerance_zero_steps": sum(1 for r in steps if r.get("tolerance") == 0),
                "comm_share": comm_share(steps)}

    return run_interleaved(fab, runs, out_dir, None, say, annotate=annotate)


def _steps(records: Sequence[Mapping[str, Any]], label: str, rep: int) -> list[Mapping]:
    return sorted((r for r in records if r.get("type") == "job_step"
                   and r.get("label") == label and r.get("rep", 0) == rep),
                  key=lambda r: r["step"])


def late_tolerance(steps: Sequence[Mapping[str, Any]]) -> float | None:
    """The median tolerance of a run's last third of steps (None: no bounded rounds)."""
    tols = [r["tolerance"] for r in steps if r.get("tolerance") is not None]
    if not tols:
        return None
    late = sorted(tols[len(tols) * 2 // 3:])
    return late[len(late) // 2]


def comm_share(steps: Sequence[Mapping[str, Any]]) -> float | None:
    """A run's exposed communication over its step time, summed over its steps (the
    first two left out: DDP's bucket rebuild)."""
    rows = [r for r in steps[2:] if r.get("step_s") and r.get("exposed_comm_s") is not None]
    total = sum(r["step_s"] for r in rows)
    return round(sum(r["exposed_comm_s"] for r in rows) / total, 3) if total else None
