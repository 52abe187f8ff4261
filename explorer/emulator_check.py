"""The model against the emulator: emulator runs kept as fixtures, predicted from the
calibration of a *different* run (the shipped ``emu calibrate`` record).

Each directory of explorer/data/emulator holds one run of an experiment of
experiments/validation: ``run.json`` (the experiment file, its ``--set`` overrides, the
command and date), ``records.jsonl`` (the run's meta, job-step, event and summary
records; per-rank steps are left out) and its ``calibration.json`` (version 1).
``scripts/emulator_validation.sh`` (root) makes them again.

Checks (each within ``TOLERANCE``): every run's median healthy step (job steps that
overlap no failure window, the first ``WARMUP`` steps left out) against
explorer/predict.py; the ratio of the hierarchical to the flat all-reduce run at two DCI
delays; the ratio of the median step during the link cut to the healthy one. Each step
check also reports the error of the network's part alone (``network_error``: the error
over the step minus its modelled compute, which is an input and would flatter the
step's error), as information, not as a target.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emu import safefs
from explorer.calibration import Calibration
from explorer.predict import predict

__all__ = ["FIXTURES", "TOLERANCE", "capture", "check_emulator_runs", "load_runs"]

FIXTURES = Path(__file__).parent / "data" / "emulator"
ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 0.15
WARMUP = 5
KEEP = ("meta", "job_step", "event", "summary")
RATIOS = tuple((f"hierarchical / flat all-reduce, {d} ms DCI", f"val-lm-dp-2dc-d{d}-hierarchical",
                f"val-lm-dp-2dc-d{d}-ring") for d in (2, 20))


@dataclass
class Run:
    """One fixture run."""

    name: str
    experiment: Any  # workloads.experiment.Experiment
    records: list[dict]

    def job_steps(self) -> list[dict]:
        return [r for r in self.records if r.get("type") == "job_step"]

    def windows(self) -> list[Any]:
        from workloads.training.metrics import failure_windows

        return failure_windows([r for r in self.records if r.get("type") == "event"])

    def healthy_median(self) -> float:
        """Median step of the job steps after warm-up that overlap no failure window."""
        wins = self.windows()
        steps = [s for s in self.job_steps() if s["step"] >= WARMUP
                 and not any(w.overlaps(s) for w in wins)]
        return statistics.median(s["step_s"] for s in steps)

    def window_median(self) -> float | None:
        """Median step of the job steps overlapping a (non-burst) failure window."""
        wins = [w for w in self.windows() if not w.burst]
        steps = [s for s in self.job_steps() if any(w.overlaps(s) for w in wins)]
        return statistics.median(s["step_s"] for s in steps) if steps else None


def load_runs(directory: Path = FIXTURES) -> list[Run]:
    """Every fixture run (sorted by name)."""
    from workloads import experiment

    runs = []
    for d in sorted(p for p in directory.iterdir() if (p / "run.json").is_file()):
        meta = json.loads((d / "run.json").read_text())
        exp = experiment.load(ROOT / meta["experiment"])
        if meta.get("set"):
            exp = experiment.with_overrides(exp, dict(experiment.parse_override(o)
                                                      for o in meta["set"]))
        records = [json.loads(line) for line in (d / "records.jsonl").read_text().splitlines()
                   if line.strip()]
        runs.append(Run(d.name, exp, records))
    return runs


def _check(name: str, kind: str, predicted: float, measured: float,
           floor: float | None = None) -> dict[str, Any]:
    """One comparison; ``floor`` (the step without any communication: the modelled
    compute, an input) gives the error of the network's part alone too."""
    err = (predicted - measured) / measured
    out = {"name": name, "kind": kind, "predicted": predicted, "measured": measured,
           "error": err, "target": TOLERANCE, "met": abs(err) <= TOLERANCE}
    if floor is not None and measured > floor:
        out["network_error"] = (predicted - measured) / (measured - floor)
    return out


def compute_floor(exp: Any) -> float:
    """The step if the network cost nothing: (m + p - 1) microbatches of modelled compute
    for a GPipe pipeline, the compute alone for data parallelism."""
    w = exp.workload
    c = w.compute_ms / 1000
    if w.kind == "pipeline":
        return (w.microbatches + w.workers - 1) * c
    return c


def check_emulator_runs(cal: Calibration, directory: Path = FIXTURES) -> dict[str, Any]:
    """Predict every fixture run and compare (module docstring)."""
    runs = {r.name: r for r in load_runs(directory)}
    checks, preds = [], {}
    for name, run in runs.items():
        pred = predict(run.experiment, cal)
        preds[name] = pred
        checks.append(_check(name, "healthy step", pred["healthy_step_s"],
                             run.healthy_median(), compute_floor(run.experiment)))
        cut = run.window_median()
        if cut is not None and "cut_over_healthy_median" in pred:
            checks.append(_check(name, "cut / healthy step",
                                 pred["cut_over_healthy_median"], cut / run.healthy_median()))
    for label, a, b in RATIOS:
        if a in runs and b in runs:
            checks.append(_check(label, "ratio",
                                 preds[a]["healthy_step_s"] / preds[b]["healthy_step_s"],
                                 runs[a].healthy_median() / runs[b].healthy_median()))
    return {"checks": checks, "runs": len(runs),
            "all_met": bool(checks) and all(c["met"] for c in checks)}


def capture(results: Path, experiment_file: str, sets: list[str], name: str,
            directory: Path = FIXTURES) -> Path:
    """Keep a finished ``emu run`` output directory as fixture ``name``."""
    dest = directory / name
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    keep = []
    for line in (results / "results.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") in KEEP:
            keep.append(line)
    safefs.write_text(dest / "records.jsonl", "\n".join(keep) + "\n")
    safefs.copy_file(results / "calibration.json", dest / "calibration.json")
    safefs.write_json(dest / "run.json",
                      {"experiment": experiment_file, "set": sets, "captured": time.time(),
                       "command": "scripts/emulator_validation.sh"}, indent=1)
    return dest


if __name__ == "__main__":
    # python -m explorer.emulator_check capture RESULTS_DIR EXPERIMENT NAME [KEY=VALUE ...]
    if len(sys.argv) >= 5 and sys.argv[1] == "capture":
        print(capture(Path(sys.argv[2]), sys.argv[3], sys.argv[5:], sys.argv[4]))
    else:
        sys.exit("usage: python -m explorer.emulator_check capture RESULTS_DIR EXPERIMENT "
                 "NAME [KEY=VALUE ...]")
