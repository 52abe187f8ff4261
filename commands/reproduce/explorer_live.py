"""A fresh emulator-scale check of one gain the explorer predicts (root).

The model's gain of the hierarchical over the flat (ring) all-reduce for the data-parallel
tiny LM across 2 DCs (experiments/validation/lm_dp_2dc.toml, the experiment of the
recorded runs in explorer/data/emulator) at one DCI delay: predicted from the shipped
calibration (`explorer.predict.predict`), then measured on a fresh fabric, both
collectives interleaved on it (`workloads.training.runner.run_experiment`) and repeated. A
repetition's step is its median healthy job step after warm-up
(`explorer.emulator_check.Run.healthy_median`, as the recorded check takes it); the gain
is ring / hierarchical, paired per repetition.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from commands.reproduce.claim import ClaimContext
from commands.reproduce.verdict import spread

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "experiments" / "validation" / "lm_dp_2dc.toml"
COLLECTIVES = ("ring", "hierarchical")


def live_gain(ctx: ClaimContext, delay_ms: float, steps: int,
              compute_ms: float, allow_overruns: bool = False) -> dict[str, Any]:
    """Predict and measure the gain (module docstring); ``steps`` per run, each with
    ``compute_ms`` of modelled compute. A run whose real compute overran the model in
    more than 5 % of its steps is refused unless ``allow_overruns``; every run's overrun
    fraction is returned either way."""
    from explorer.calibration import load_calibration
    from explorer.emulator_check import WARMUP, Run
    from explorer.predict import predict
    from workloads.experiment import load, with_overrides
    from workloads.training.runner import run_experiment

    base = with_overrides(load(EXPERIMENT), {"fabric.dci_delay_ms": float(delay_ms),
                                             "workload.steps": int(steps),
                                             "workload.compute_ms": float(compute_ms),
                                             "repetitions": ctx.repetitions,
                                             "workload.allow_overruns": allow_overruns})
    cal = load_calibration()
    exps = {c: with_overrides(base, {"transport.collective": c}) for c in COLLECTIVES}
    predicted = {c: float(predict(e, cal)["healthy_step_s"]) for c, e in exps.items()}
    out_dir = ctx.out_dir / "emulator_check"
    ctx.say(f"emulator check: {EXPERIMENT.relative_to(ROOT)} at {delay_ms:g} ms DCI, "
            f"{steps} steps, ring and hierarchical interleaved x {ctx.repetitions}")
    run_experiment(base, out_dir, say=lambda m: ctx.say(f"  {m}"),
                   variants=[(c, {"transport.collective": c}) for c in COLLECTIVES],
                   interleave=True)
    records = [json.loads(line) for line in (out_dir / "results.jsonl").read_text()
               .splitlines() if line.strip()]
    from workloads.training.overruns import overrun_stats

    overruns = {c: [stats.job_fraction if (stats := overrun_stats(records, c, rep)) else 0.0
                    for rep in range(ctx.repetitions)] for c in COLLECTIVES}
    steps_s: dict[str, dict[int, float]] = {c: {} for c in COLLECTIVES}
    for c in COLLECTIVES:
        for rep in range(ctx.repetitions):
            mine = [r for r in records if r.get("label") == c and r.get("rep") == rep]
            if any(r.get("type") == "job_step" and r["step"] >= WARMUP for r in mine):
                steps_s[c][rep] = Run(c, exps[c], mine).healthy_median()
    paired = [steps_s["ring"][k] / steps_s["hierarchical"][k] for k in steps_s["ring"]
              if k in steps_s["hierarchical"]]
    if not paired:
        raise ValueError("emulator check: no repetition measured both collectives")
    return {"delay_ms": delay_ms, "steps": steps, "compute_ms": compute_ms,
            "predicted_step_s": predicted,
            "predicted_gain": predicted["ring"] / predicted["hierarchical"],
            "measured_step_s": {c: [v[k] for k in sorted(v)] for c, v in steps_s.items()},
            "measured_gain": spread(paired), "n": len(paired), "overruns": overruns,
            "results": str(out_dir.relative_to(ctx.out_dir))}
