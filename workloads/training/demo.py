"""`emu demo`: the main job. The digits CNN trained data-parallel by 4 workers on the
default 2-plane Clos (eBGP + BFD), once per variant (MRC and RC over ECMP in their
production forms, today's lossy RC, gloo/TCP; ``ablation``: MRC with each congestion
mechanism off in turn),
each through the same failure timeline (experiments/training/demo_digits.toml): the
busiest uplink of a leaf cut for a while, then microbursts onto a worker's port.
Prints a comparison table and writes the results and plots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workloads import experiment
from workloads.training.runner import run_experiment

DEMO_FILE = Path(__file__).resolve().parents[2] / "experiments/training/demo_digits.toml"
GLOO = ("gloo", {"transport.name": "gloo", "fabric.ecn": False, "fabric.trim": False,
                 "fabric.lossless": False})
# MRC and RC in their production forms (MRC on ECN + trimming switches, RC with DCQCN on a
# lossless ECN fabric), today's lossy RC, and gloo on the kernel's TCP (plain switches):
# workloads/systems.py says what each label runs.
LABELS = ("mrc", "rc", "rc-lossy")
# --ablation: MRC with each congestion mechanism off in turn, and on today's switches
ABLATION = ("mrc-no-trim", "mrc-no-ecn", "mrc-equal-nics", "mrc-plain")


def variants(ablation: bool = False) -> list[tuple[str, dict]]:
    """The demo's labelled variants (experiment overrides), in the order they interleave."""
    from workloads.systems import system

    labels = LABELS + (ABLATION if ablation else ())
    return [(label, system(label).overrides()) for label in labels] + [GLOO]


def run_training_demo(out_dir: Path, say: Callable[[str], None] = print,
                      steps: int | None = None, ablation: bool = False) -> list[dict]:
    """Run the demo experiment once per variant on one fabric; the summaries."""
    exp = experiment.load(DEMO_FILE)
    if steps is not None:
        exp = experiment.with_overrides(exp, {"workload.steps": steps})
    runs = variants(ablation)
    say(f"demo: {exp.description}")
    say(f"demo: workers on {', '.join(exp.hosts())}; variants "
        f"{', '.join(v for v, _ in runs)}; results in {out_dir}/")
    return run_experiment(exp, out_dir, say=say, variants=runs)
