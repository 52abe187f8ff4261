"""One labelled run (a variant's repetition) of a training experiment on a running fabric.

Its one job is :func:`run_on_fabric`: the ranks' configurations
(workloads/training/rank_configs.py), their worker processes (workloads/training/worker_job.py)
started on
one common instant, and the failure timeline fired from that instant: events by time on
the wall clock in the timeline's thread; events by step (``at_step``) or in modelled
training time (``clock = "modelled"``) at step boundaries, where every rank waits (a
gate) until what is due there is applied, so each transport meets the failure at the
same point of training. Gate time is in no step's time. Worker records stream into a
:class:`RecordSink` (the results writer: JSON lines, flushed one by one; or memory, for
a calibration run), the ranks' steps joined into the job's step, while a progress line
shows the step, loss and accuracy. A worker that fails ends the run: its traceback is
recorded, the other workers are killed, the timeline restores what it broke. The
outcome (:class:`RunOutcome`) carries the run's overrun counts for the caller to judge
(workloads/training/overruns.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from emu.errors import EmuError
from emu.fabric import Fabric
from emu.timeline import TimelineRunner
from workloads.experiment import Experiment
from workloads.progress import Progress
from workloads.records import Done, EvalRecord, StepRecord, WorkerError
from workloads.training.jobstep import OverrunStats, StepAggregator
from workloads.training.rank_configs import worker_configs
from workloads.training.worker_job import WorkerJob


@dataclass
class RunOutcome:
    """What one labelled run (one repetition) came to. ``overruns``: the run's overrun
    counts (modelled compute; None in measured mode or when the run failed)."""

    label: str
    rep: int
    ok: bool
    error: str | None = None
    summary: dict = field(default_factory=dict)
    overruns: OverrunStats | None = None
    allow_overruns: bool = False


class RecordSink(Protocol):
    """Where ``run_on_fabric`` writes its records: a ``ResultsWriter``, or the in-memory
    sink of a compute calibration run (workloads/training/compute_model.py)."""

    def write(self, record_type: str, **fields: Any) -> dict: ...

    def event(self, record: Mapping[str, Any], *, rep: int = 0,
              label: str | None = None) -> dict: ...


def run_on_fabric(fab: Fabric, exp: Experiment, rep: int, writer: RecordSink, label: str,
                  say: Callable[[str], None] = print, compute_ms: float | None = None,
                  timeout_s: float = 1800) -> RunOutcome:
    """Train ``exp`` (repetition ``rep``) on a running fabric; records go to ``writer``.
    ``compute_ms``: the modelled compute (default: the experiment's ``compute_ms``)."""
    seed = exp.seeds()[rep]
    w = exp.workload
    compute_ms = w.compute_ms if compute_ms is None else compute_ms
    timeline = None
    if exp.events:
        def record(event: dict) -> None:
            writer.event(event, rep=rep, label=label)

        timeline = TimelineRunner(fab, exp.timeline(), record, clock=exp.clock,
                                  training=True)

    def next_gate(after: int) -> int | None:
        g = timeline.next_gate(after) if timeline is not None else None
        return g if g is not None and g <= w.steps - 2 else None  # no boundary after the end

    cfgs = worker_configs(exp, seed, compute_ms, next_gate(0))
    prog = Progress(f"{label} rep {rep}", w.steps, say)
    agg = StepAggregator(len(cfgs))
    internal: list[tuple[int, str]] = []  # (rank, traceback): a core raised on a datagram

    def on_record(rec: Any) -> None:
        if isinstance(rec, StepRecord):
            job_step = agg.add(rec)
            writer.write("step", rep=rep, label=label, **rec.result_fields())
            if job_step is not None:
                writer.write("job_step", rep=rep, label=label, **job_step.result_fields())
                prog.update(job_step.step + 1, loss=job_step.loss)
        elif isinstance(rec, EvalRecord):
            agg.evaluated(rec.step, rec.eval_s)
            writer.write("eval", rep=rep, label=label, **rec.result_fields())
            prog.note(**{k: v for k, v in rec.metrics.items()
                         if k in ("accuracy", "loss") and v is not None})
        elif isinstance(rec, WorkerError):
            writer.write("error", rep=rep, label=label, rank=rec.rank, error=rec.error,
                         traceback=rec.traceback)
        elif isinstance(rec, Done):
            writer.write("worker_done", rep=rep, label=label, rank=rec.rank, steps=rec.steps,
                         overruns=rec.overruns, comm=dict(rec.comm))
            for tb in rec.comm.get("internal_errors", ()):
                internal.append((rec.rank, tb))

    def on_gate(step: int) -> int | None:
        # Every rank's record of ``step`` is in (each rank reports its step before
        # reaching the gate), so the training time is the job's up to this boundary.
        assert timeline is not None  # gates are waited on only with a gated timeline
        timeline.fire_due(step, agg.training_s)
        agg.resumed(step)
        return next_gate(step + 1)

    job = WorkerJob(fab, cfgs, on_record)
    gated = timeline is not None and timeline.gated
    try:
        if timeline is not None:
            timeline.prepare()  # e.g. burst senders started and armed, while workers set up
        job.wait_ready(300)
        t0 = time.monotonic() + 0.2
        if timeline is not None:
            timeline.start(t0)
            if gated:  # modelled-time events at 0 fire before step 0
                timeline.fire_due(-1, 0.0)
        job.start(t0)
        job.wait(timeout_s, on_gate if gated else None,
                 timeline.resumed if gated and timeline is not None else None)
        prog.close()
        if internal:  # the engines dropped those datagrams and went on: the run is suspect
            rank, tb = internal[0]
            raise EmuError(f"the transport of rank {rank} raised on a received datagram "
                           f"({len(internal)} tracebacks in the results); the last line: "
                           f"{tb.strip().splitlines()[-1]}")
        stats = agg.overruns() if w.compute == "modelled" else None
        return RunOutcome(label, rep, True, overruns=stats, allow_overruns=w.allow_overruns)
    except EmuError as e:
        prog.close()
        say(f"  {label}: {e}")
        return RunOutcome(label, rep, False, str(e))
    finally:
        job.kill()
        if timeline is not None:
            timeline.stop()
