"""Claim 1's training comparison: the digits CNN over each system through failures.

The training bench's machinery (workloads/training/variants.py: one fabric, repetitions
interleaved, modelled compute calibrated on the fabric; workloads/training/summary.py: step
times, the steps inside a failure window, time lost) on the claim's fabric. Failures are
scheduled by training step (after ``fail_step``, restored after ``restore_step``), so
every system meets each one at the same point of training. Step times are on the
modelled clock (modelled compute + measured exposed communication).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from emu.fabric import Fabric
from workloads import experiment
from workloads.training.overruns import overrun_stats, refuse_overruns
from workloads.training.results import ResultsWriter, read_jsonl
from workloads.training.summary import aggregate, summarize_workload
from workloads.training.variants import Variant, run_variants

TRAINING_KINDS = ("link_cut", "spine_down", "gray")
# The training's gloo rides the kernel's TCP: the "tcp" system of the transfers.
TRAINING_TRANSPORT = {"mrc": "mrc", "rc": "rc", "tcp": "gloo"}


def events(kind: str, fail_step: int, restore_step: int, gray_loss: float) -> list[dict]:
    """The timeline of ``kind`` by training step. The cut is the demo's (the leaf-spine
    link busiest into rack 0, on either plane); the spine and the gray link are fixed
    ones on rack 0's plane-0 uplinks (ECMP may hash no flow onto them: the cut's sample
    is what aims a failure at the job)."""
    fail: dict[str, object]
    if kind == "link_cut":
        fail = {"do": "fail_busiest_uplink", "leaf": "p0l0,p1l0"}
    elif kind == "spine_down":
        fail = {"do": "fail_switch", "switch": "p0s0"}
    elif kind == "gray":
        fail = {"do": "gray_link", "link": "p0l0-p0s0", "loss": gray_loss}
    else:
        raise ValueError(f"training kind {kind!r} is invalid: must be one of "
                         f"{', '.join(TRAINING_KINDS)}")
    return [{"at_step": fail_step, **fail, "id": "f"},
            {"at_step": restore_step, "do": "restore", "id": "f"}]


def plan(fabric: Mapping[str, Any], systems: Sequence[str], kinds: Sequence[str],
         steps: int, fail_step: int, restore_step: int, gray_loss: float,
         reps: int) -> list[tuple[str, experiment.Experiment]]:
    """(label, experiment) of every run: ``<system>/<kind>``, all on one fabric."""
    workload = {"model": "digits_cnn", "workers": 4, "steps": steps, "batch_size": 64,
                "lr": 0.05, "lr_schedule": "cosine", "eval_every": max(10, steps // 4),
                "compute": "modelled"}
    runs = []
    for kind in kinds:
        for system in systems:
            t = TRAINING_TRANSPORT[system]
            doc = {"name": f"reproduce-{system}-{kind}", "seed": 1, "repetitions": reps,
                   "fabric": dict(fabric), "transport": {"name": t},
                   "workload": workload,
                   "event": events(kind, fail_step, restore_step, gray_loss)}
            runs.append((f"{system}/{kind}",
                         experiment.parse(doc, where=f"claim failures {system}/{kind}")))
    return runs


def run_training(fab: Fabric, runs: list[tuple[str, experiment.Experiment]], out_dir: Path,
                 rtt_s: float | None, say: Callable[[str], None],
                 annotate: Callable[[list[dict], str, int], dict] | None = None,
                 ) -> tuple[list[dict], dict]:
    """Every run, interleaved, on ``fab``: (per-repetition summaries, aggregate by label);
    ``annotate(records, label, rep)`` adds to a repetition's summary (claim 3 uses it
    too). EmuError if a run failed or overran its modelled compute in more than 5 % of
    steps."""
    with ResultsWriter(out_dir, label=runs[0][0]) as writer:
        outcomes = run_variants(fab, writer, [Variant(label, e) for label, e in runs], rtt_s,
                                say, interleave=True)
    refuse_overruns(outcomes)
    records = read_jsonl(out_dir / "results.jsonl")
    per_rep = []
    for label, e in runs:
        for rep in range(e.repetitions):
            s = summarize_workload(records, label, rep, e.workload)
            stats = overrun_stats(records, label, rep)
            if stats is not None:
                s.update(stats.as_record())
            if annotate is not None:
                s.update(annotate(records, label, rep))
            per_rep.append(s)
    return per_rep, aggregate(per_rep)
