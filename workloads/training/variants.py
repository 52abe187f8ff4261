"""The labelled variants of an experiment and the order their repetitions run in.

Its one job: running every repetition of every :class:`Variant` on one fabric
(:func:`run_variants`), after one meta record per label, each variant with its compute
model (workloads/training/compute_model.py). Several variants with repetitions run interleaved
by default (rep 0 of A, B, C, then rep 1 of A, B, C, ...: :func:`schedule`), so slow
drifts of the machine spread over all variants. One run is workloads/training/run.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from emu.errors import EmuError
from emu.fabric import Fabric
from topologies.timescale import time_scale
from workloads.experiment import Experiment
from workloads.training.captures import RunCaptures
from workloads.training.compute_model import ComputeModel, with_compute
from workloads.training.overruns import refuse_overruns
from workloads.training.results import ResultsWriter
from workloads.training.run import RunOutcome, run_on_fabric


@dataclass(frozen=True)
class Variant:
    """One labelled variant of a run: ``exp`` with its compute model (None: the
    experiment's ``compute_ms``, or one ``run_variants`` calibrates; unused in measured
    mode)."""

    label: str
    exp: Experiment
    compute: ComputeModel | None = None


def schedule(variants: Sequence[Variant], interleave: bool) -> list[tuple[Variant, int]]:
    """The order of the runs: (variant, repetition). Interleaved: rep 0 of every variant,
    then rep 1 of every variant, ...; else every repetition of a variant in a row."""
    if not interleave:
        return [(v, rep) for v in variants for rep in range(v.exp.repetitions)]
    most = max((v.exp.repetitions for v in variants), default=0)
    return [(v, rep) for rep in range(most) for v in variants if rep < v.exp.repetitions]


def run_variants(fab: Fabric, writer: ResultsWriter, variants: Sequence[Variant],
                 rtt_s: float | None = None, say: Callable[[str], None] = print,
                 interleave: bool = True,
                 captures: Sequence[tuple[str, str]] = ()) -> list[RunOutcome]:
    """Every repetition of every variant on ``fab`` (order: ``schedule``), after one meta
    record per label; EmuError naming the run if one fails. A modelled variant without a
    compute model (``Variant.compute`` None, no ``compute_ms``) gets one calibrated on
    ``fab`` first (``calibrate_compute``; one per workload, shared by its variants).
    ``captures`` ((node, ifname) pairs): a pcap of each around every run
    (workloads/training/captures.py). Overruns are not checked here: pass the outcomes to
    ``refuse_overruns`` once the results are reported."""
    labels = [v.label for v in variants]
    dup = sorted({lb for lb in labels if labels.count(lb) > 1})
    if dup:
        raise EmuError(f"variant labels must be distinct: {dup} given more than once")
    variants = with_compute(fab, variants, say)
    for v in variants:
        e = v.exp
        writer.meta(experiment=e.as_record(), transport=e.transport.name, label=v.label,
                    compute={"mode": e.workload.compute,
                             "ms": None if v.compute is None else v.compute.ms,
                             **({} if v.compute is None else v.compute.as_record())},
                    bottleneck_mbit=e.fabric.rate_mbit * e.fabric.planes, rtt_s=rtt_s,
                    order="interleaved" if interleave else "sequential",
                    time_scale=time_scale(e.fabric_spec()).as_record())
    outcomes = []
    for v, rep in schedule(variants, interleave):
        ms = None if v.compute is None else v.compute.ms
        with RunCaptures(fab, writer, captures, v.label, rep, say):
            out = run_on_fabric(fab, v.exp, rep, writer, v.label, say, ms)
        if not out.ok:
            raise EmuError(f"{v.label} repetition {rep} failed: {out.error}")
        outcomes.append(out)
    return outcomes


def run_label(fab: Fabric, writer: ResultsWriter, label: str, exp: Experiment,
              compute_ms: float | None, rtt_s: float | None,
              say: Callable[[str], None] = print) -> list[RunOutcome]:
    """Every repetition of ``exp`` on ``fab`` under ``label``, after its meta record;
    EmuError naming the label if one fails or overran its modelled compute (see
    ``refuse_overruns``)."""
    compute = ComputeModel(ms=compute_ms, source="given") if compute_ms is not None else None
    outcomes = run_variants(fab, writer, [Variant(label, exp, compute)], rtt_s, say,
                            interleave=False)
    refuse_overruns(outcomes)
    return outcomes
