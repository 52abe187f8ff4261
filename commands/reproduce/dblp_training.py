"""Claim 3's training comparison: the tiny LM through microbursts for the whole run.

The training bench's LM setting (commands/bench/training.py): 4 workers, the transpose
all-reduce, microbursts onto a worker's port on both planes for the whole run, modelled
compute calibrated on the fabric, repetitions interleaved on one fabric. Systems:
reliable MRC and DBLP phase-aware (error feedback), as the bench; gloo/TCP (the paper's
baseline); and the ablation: DBLP at a *fixed* tolerance equal to the phase-aware
policy's late-phase tolerance. Before anything runs, the experiments' validation checks
each bounded variant's smallest gradient block (workloads/experiment/blocks.py, by
workloads/experiment/dblp.py ``check_block``): a model whose blocks are too few chunks for the
tolerance to let one go is refused with that reason (the digits CNN's are 2 chunks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from emu.fabric import Fabric
from workloads import experiment

SYSTEMS = ("mrc", "gloo", "dblp", "dblp_fixed")


def burst_events(targets: Sequence[str], sources: Sequence[str], on_ms: float,
                 every_ms: float, steps: int) -> list[dict]:
    """Microbursts at ``targets`` from step 0 to the last step boundary (sized to drop),
    restored there (after step ``steps - 2``) so that each burst's drops at its target
    are recorded."""
    out: list[dict] = []
    for i, t in enumerate(targets):
        out.append({"at_step": 0, "do": "microburst", "target": t, "sources": list(sources),
                    "on_ms": on_ms, "every_ms": every_ms, "mode": "drop", "id": f"burst{i}"})
    return out + [{"at_step": steps - 2, "do": "restore", "id": f"burst{i}"}
                  for i in range(len(targets))]


def transports(phase: Mapping[str, float], fixed_tolerance: float) -> dict[str, dict]:
    """The ``[transport]`` table of each system."""
    dblp = {"policy": "phase_aware", "fill": "error_feedback", **phase}
    return {"mrc": {"name": "mrc", "collective": "transpose"},
            "gloo": {"name": "gloo", "collective": "ring"},
            "dblp": {"name": "dblp", "collective": "transpose", "dblp": dblp},
            "dblp_fixed": {"name": "dblp", "collective": "transpose",
                           "dblp": {"policy": "fixed", "fill": "error_feedback",
                                    "tolerance": fixed_tolerance}}}


def plan(fabric: Mapping[str, Any], systems: Sequence[str], workload: Mapping[str, Any],
         events: list[dict], phase: Mapping[str, float], fixed_tolerance: float,
         reps: int) -> list[tuple[str, experiment.Experiment]]:
    """(label, experiment) of every system, all on one fabric."""
    tr = transports(phase, fixed_tolerance)
    return [(f"lm/{s}", experiment.parse(
        {"name": f"reproduce-dblp-{s}", "seed": 1, "repetitions": reps, "fabric": dict(fabric),
         "transport": tr[s], "workload": dict(workload), "event": events},
        where=f"claim dblp {s}")) for s in systems]


def run_training(fab: Fabric, runs: list[tuple[str, experiment.Experiment]], out_dir: Path,
                 say: Callable[[str], None]) -> tuple[list[dict], dict[str, Any]]:
    """Every run, interleaved, on ``fab`` (claim 1's ``run_training``): (per-repetition
    summaries with the late-phase tolerance of each, aggregate by label)."""
    from commands.reproduce.failures_training import run_training as run_interleaved

    return run_interleaved(fab, runs, out_dir, None, say, annotate=lambda records, label, rep:
                           {"late_tolerance": late_tolerance(records, label, rep)})


def late_tolerance(records: Sequence[Mapping[str, Any]], label: str, rep: int) -> float | None:
    """The median tolerance of a run's last third of steps (None: no bounded rounds)."""
    tols = [r["tolerance"] for r in sorted(
        (r for r in records if r.get("type") == "job_step" and r.get("label") == label
         and r.get("rep", 0) == rep), key=lambda r: r["step"]) if r.get("tolerance") is not None]
    if not tols:
        return None
    late = sorted(tols[len(tols) * 2 // 3:])
    return late[len(late) // 2]
