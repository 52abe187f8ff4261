"""`emu demo`: the main job. The digits CNN trained data-parallel by 4 workers on the
default 2-plane Clos (eBGP + BFD), once per transport (MRC, RC over ECMP, gloo/TCP),
each through the same failure timeline (experiments/training/demo_digits.toml): the
busiest uplink of a leaf cut for a while, then microbursts onto a worker's port.
Prints a comparison table and writes the results and plots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workloads import experiment
from workloads.training.runner import run_experiment

DEMO_FILE = Path(__file__).resolve().parents[2] / "experiments/training/demo_digits.toml"
VARIANTS = [("mrc", {"transport.name": "mrc"}), ("rc", {"transport.name": "rc"}),
            ("gloo", {"transport.name": "gloo"})]


def run_training_demo(out_dir: Path, say: Callable[[str], None] = print,
                      steps: int | None = None) -> list[dict]:
    """Run the demo experiment once per transport on one fabric; the summaries."""
    exp = experiment.load(DEMO_FILE)
    if steps is not None:
        exp = experiment.with_overrides(exp, {"workload.steps": steps})
    say(f"demo: {exp.description}")
    say(f"demo: workers on {', '.join(exp.hosts())}; transports "
        f"{', '.join(v for v, _ in VARIANTS)}; results in {out_dir}/")
    return run_experiment(exp, out_dir, say=say, variants=VARIANTS)
