"""The modelled compute of a training run: given by the experiment, or calibrated on the fabric.

Its one job: the per-step compute (ms) a ``compute = "modelled"`` worker pads to
(:class:`ComputeModel`, with where it came from). Modelled compute must dominate the
real compute, or step times hide what the shared cores add. Without ``compute_ms`` the
model is calibrated on the fabric, as in the run (every rank computing at once, its
transport engine and the exchanges sharing the cores): a short run of each variant's
transport with measured compute, the 99th percentile of the ranks' forward + backward
times x 2 (:func:`calibrate_compute`; a separate process measuring alone, or several at
once, misses the engines and came out far below the run's tail). Variants that differ
in transport only share one model (:func:`with_compute`), so their step times compare.
Whether a run's real compute then held to the model is workloads/training/overruns.py's.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from emu.errors import EmuError
from emu.fabric import Fabric
from workloads.experiment import Experiment
from workloads.training.run import run_on_fabric

if TYPE_CHECKING:
    from workloads.training.variants import Variant

# The model pads to this percentile of the compute times measured in a calibration run,
# times a margin: a job step overruns when any of its ranks does, so each rank's tail counts.
COMPUTE_QUANTILE = 99
COMPUTE_MARGIN = 2.0  # x 1.25 let 6-12 % of job steps overrun on a noisy 2-core machine
CALIBRATION_STEPS = 60
WARMUP_STEPS = 2  # first iterations (allocations, DDP's bucket rebuild) left out


@dataclass(frozen=True)
class ComputeModel:
    """The modelled compute per step (ms) and where it came from: the experiment's
    ``compute_ms`` (``source = "experiment"``), or calibrated on the fabric
    (``calibrate_compute``: ``samples`` rank-steps of ``ranks`` ranks over
    ``transports``; the ``quantile``-th percentile ``quantile_ms`` x ``margin``;
    ``median_ms`` for reference)."""

    ms: float
    source: str = "experiment"
    ranks: int | None = None
    samples: int | None = None
    median_ms: float | None = None
    quantile: int | None = None
    quantile_ms: float | None = None
    margin: float | None = None
    transports: tuple[str, ...] | None = None

    def as_record(self) -> dict[str, Any]:
        """Its fields, those that are set (for the meta record)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


class _Records:
    """A results sink that keeps records in memory (calibration runs: nothing of them
    goes into the results)."""

    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record_type: str, **fields: Any) -> dict:
        rec = {"type": record_type, **fields}
        self.records.append(rec)
        return rec

    def event(self, record: Mapping[str, Any], *, rep: int = 0,
              label: str | None = None) -> dict:
        return self.write("event", rep=rep, label=label, **record)


def calibrate_compute(fab: Fabric, exps: Sequence[Experiment],
                      say: Callable[[str], None] = print,
                      steps: int = CALIBRATION_STEPS) -> ComputeModel:
    """The modelled compute of ``exps`` (data parallel, one model, workers and batch),
    measured as in the run: a short run of each one's transport on ``fab`` with measured
    compute (same workers, hosts and batch; no events), each rank's real forward +
    backward of every step after WARMUP_STEPS; the model pads to their 99th percentile
    x 2. Nothing of these runs goes into the results."""
    from workloads.experiment import with_overrides

    samples: list[float] = []
    transports: list[str] = []
    for e in exps:
        if e.transport.name in transports:
            continue
        transports.append(e.transport.name)
        probe = with_overrides(e, {
            "workload.compute": "measured", "workload.compute_ms": None,
            "workload.allow_overruns": None, "workload.steps": steps,
            "workload.eval_every": steps, "event": None, "timeline": None, "clock": None,
            "repetitions": None})
        sink = _Records()
        out = run_on_fabric(fab, probe, 0, sink, f"calibrate-{e.transport.name}",
                            say=lambda m: None, timeout_s=600)
        if not out.ok:
            raise EmuError(f"calibrating the compute model over {e.transport.name} failed: "
                           f"{out.error}")
        samples += [r["real_compute_s"] for r in sink.records
                    if r["type"] == "step" and r["step"] >= WARMUP_STEPS]
    if not samples:
        raise EmuError(f"calibrating the compute model: no step after the first "
                       f"{WARMUP_STEPS} (the calibration runs {steps} steps)")
    q = float(np.percentile(samples, COMPUTE_QUANTILE))
    w = exps[0].workload
    m = ComputeModel(
        ms=round(q * COMPUTE_MARGIN * 1000, 3), source="calibrated on the fabric",
        ranks=w.workers, samples=len(samples),
        median_ms=round(statistics.median(samples) * 1000, 3), quantile=COMPUTE_QUANTILE,
        quantile_ms=round(q * 1000, 3), margin=COMPUTE_MARGIN, transports=tuple(transports))
    say(f"  compute model {w.model}: {m.ms} ms per step (calibrated over "
        f"{', '.join(transports)} with {w.workers} ranks: median {m.median_ms} ms, "
        f"p{m.quantile} {m.quantile_ms} ms, x {m.margin})")
    return m


def compute_model_ms(exp: Experiment, say: Callable[[str], None] = print) -> float | None:
    """The experiment's own ``compute_ms`` (None: measured mode, or a model that
    ``run_variants`` / ``run_label`` calibrate on the fabric)."""
    del say  # nothing is measured before the fabric exists
    return exp.workload.compute_ms if exp.workload.compute == "modelled" else None


def _needs_calibration(e: Experiment) -> bool:
    w = e.workload
    return w.compute == "modelled" and w.compute_ms is None and w.kind == "data_parallel"


def with_compute(fab: Fabric, variants: Sequence[Variant],
                 say: Callable[[str], None]) -> list[Variant]:
    """``variants`` with a compute model each: the experiment's ``compute_ms``, else one
    calibrated model per distinct workload (shared by the variants that differ in
    transport only, so their step times compare)."""
    groups: dict[tuple, list[Experiment]] = {}
    for v in variants:
        if v.compute is None and _needs_calibration(v.exp):
            groups.setdefault(_compute_key(v.exp), []).append(v.exp)
    models = {k: calibrate_compute(fab, exps, say) for k, exps in groups.items()}
    out = []
    for v in variants:
        compute = v.compute
        if compute is None and v.exp.workload.compute == "modelled":
            if _needs_calibration(v.exp):
                compute = models[_compute_key(v.exp)]
            else:
                ms = v.exp.workload.compute_ms
                # modelled and not calibrated: the experiment gives it (a pipeline must)
                assert ms is not None
                compute = ComputeModel(ms=ms)
        out.append(dataclasses.replace(v, compute=compute))
    return out


def _compute_key(e: Experiment) -> tuple:
    """What a compute model depends on: variants that agree on it share one."""
    w = e.workload
    return (w.model, w.workers, w.batch_size, e.hosts())
