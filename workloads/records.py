"""Records that cross the runner/worker process boundary: one frozen dataclass each.

The runner (workloads/training/run.py, workloads/training/worker_job.py) and a training worker
(workloads/training/worker.py) talk in JSON lines, one record per line, each with a ``type`` tag.
Every record is defined here once and serialised in one place only
(workloads/recordcodec.py: ``encode``, ``decode``): nothing is built as a dict on one
side and read back by string keys on the other.

Runner to worker (the worker's stdin):

``config`` (:class:`WorkerConfig`)
    the first line: what to train.
``start`` (:class:`Start`)
    after the worker said ``ready``: the CLOCK_MONOTONIC instant of step 0.
``release`` (:class:`Release`)
    after the worker reached a gate: when to resume and where the next gate is.

Worker to runner (the worker's stdout): ``ready`` (:class:`Ready`), ``step``
(:class:`StepRecord`), ``eval`` (:class:`EvalRecord`), ``gate``
(:class:`GateReached`), ``done`` (:class:`Done`), ``error`` (:class:`WorkerError`).

The runner joins the ranks' step records into the job's step (workloads/training/jobstep.py);
``StepRecord.result_fields`` and ``EvalRecord.result_fields`` are the fields of the
``step`` and ``eval`` records of results.jsonl (workloads/training/results.py documents them).
DBLP's settings, which ``WorkerConfig`` carries, are workloads/experiment/dblp.py's.

Gates: a worker blocks after step k when k is its next gate (``WorkerConfig.first_gate``,
then each ``Release.next_gate``): it reports ``gate``, waits for the runner's
``release`` (the runner applies the failures due at that step boundary in between)
and sleeps until the release's common instant, so every rank resumes together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# At run time, not only for type checking: the codec resolves WorkerConfig's field
# types (``dblp: DblpConfig | None``, ``transport_config: TransportSettings``,
# ``conns``' ConnPlan) by name in this module.
from transports import registry
from transports.planrecord import ConnPlan
from transports.registry import TransportSettings
from workloads.experiment.dblp import DblpConfig

__all__ = [
    "Done", "EvalRecord", "GateReached", "Ready", "Release", "Start", "StepRecord",
    "WorkerConfig", "WorkerError",
]


# --------------------------------------------------------------------------------------
# Runner -> worker
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """Everything one rank's worker process needs (the first line of its stdin).

    ``transport_config``: the transport's settings (transports/registry.py: its own
    dataclass, as the experiment resolved it). ``conns``: peer rank -> this rank's
    connections to it (one per lane; transports/planrecord.py ``ConnPlan``, as
    transports.plan.conn_spec makes them), empty for gloo. ``groups``: the ranks of
    each DC for the hierarchical all-reduce. ``compute_ms``: the modelled compute
    (data parallel: one step's forward + backward; pipeline: one microbatch's forward +
    backward on one stage), None in measured mode. ``first_gate``: the first step after
    which the worker waits for a release (None: no gate). ``inject_error_at_step``:
    fault injection for tests (the worker raises at that step).
    """

    rank: int
    size: int
    host: str
    addr: str
    master_addr: str
    master_port: int
    transport: str
    transport_config: TransportSettings
    conns: Mapping[int, tuple[ConnPlan, ...]] = field(default_factory=dict)
    # What the experiment resolved: required here, so no default can drift from the
    # experiment's own (workloads/experiment/config.py, the one place they are written).
    collective: str
    groups: tuple[tuple[int, ...], ...] | None = None
    dblp: DblpConfig | None = None
    kind: str
    model: str
    steps: int
    batch_size: int
    microbatches: int | None = None
    lr: float
    lr_schedule: str
    eval_every: int
    compute: str
    compute_ms: float | None = None
    seed: int
    first_gate: int | None = None
    inject_error_at_step: int | None = None
    pg_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        want = registry.get(self.transport).config
        if type(self.transport_config) is not want:
            raise ValueError(f"WorkerConfig.transport_config is a "
                             f"{type(self.transport_config).__name__}: transport "
                             f"{self.transport!r} takes a {want.__name__}")

    @property
    def modelled(self) -> bool:
        return self.compute == "modelled"


@dataclass(frozen=True)
class Start:
    """The CLOCK_MONOTONIC instant at which every worker starts step 0."""

    t0: float


@dataclass(frozen=True)
class Release:
    """Leave the gate after ``step`` at ``t_resume`` (CLOCK_MONOTONIC, common to every
    rank); the next gate is after ``next_gate`` (None: no more gates)."""

    step: int
    t_resume: float
    next_gate: int | None = None


# --------------------------------------------------------------------------------------
# Worker -> runner
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """Set up (model, data, process group, transport); waiting for the start instant."""

    rank: int
    pid: int


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One rank's training step.

    ``t_s``: seconds from the common start at the step's end (wall clock, gates
    included); ``start, end, t_enter, t_exit``: CLOCK_MONOTONIC of the step and of this
    rank's exchange (entry into the first round, exit from the last; a pipeline stage:
    the step itself). ``compute_s``: the step less its exchange (padded, in modelled
    mode); ``real_compute_s``: what the forward and backward really took;
    ``model_compute_s``: the modelled compute (data parallel, modelled mode);
    ``overrun``: the real compute took longer than the model in this step. ``why``: the
    tolerance policy's reason for the round's bound (None: a reliable round).
    """

    rank: int
    step: int
    t_s: float
    start: float
    end: float
    t_enter: float
    t_exit: float
    compute_s: float
    comm_s: float
    step_s: float
    loss: float | None
    lr: float
    epoch: int
    bytes: int
    real_compute_s: float | None = None
    model_compute_s: float | None = None
    overrun: bool = False
    tolerance: float | None = None
    why: str | None = None
    delivered: float = 1.0
    lost_entries: int = 0
    estimated_entries: int = 0
    pipeline: bool = False

    @property
    def mode(self) -> str:
        """How the round ran: "reliable", or the tolerance policy's reason."""
        return self.why or "reliable"

    def result_fields(self) -> dict[str, Any]:
        """The fields of the results' ``step`` record (``why`` written as ``mode``)."""
        out = dataclasses.asdict(self)
        del out["why"]
        out["mode"] = self.mode
        return out


@dataclass(frozen=True, kw_only=True)
class EvalRecord:
    """An evaluation after ``step`` (rank 0, or a pipeline's last stage), ``eval_s``
    long; ``metrics`` as the task reports them (accuracy and loss, or loss and
    perplexity)."""

    rank: int
    step: int
    t_s: float
    eval_s: float
    metrics: Mapping[str, float | None] = field(default_factory=dict)

    def result_fields(self) -> dict[str, Any]:
        """The fields of the results' ``eval`` record (metrics at the top level)."""
        return {"rank": self.rank, "step": self.step, "t_s": self.t_s,
                "eval_s": self.eval_s, **self.metrics}


@dataclass(frozen=True)
class GateReached:
    """This rank finished ``step`` (and its evaluation) and waits for a release."""

    rank: int
    step: int


@dataclass(frozen=True, kw_only=True)
class Done:
    """The worker's loop ended: ``steps`` completed, ``overruns`` of them overran the
    modelled compute, ``comm`` the transport engine's totals."""

    rank: int
    steps: int
    overruns: int
    comm: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class WorkerError:
    """The worker raised: ``error`` (repr) and its traceback; the worker exits 1."""

    rank: int
    error: str
    traceback: str = ""


# Every record that crosses the boundary (the codec's tag table covers exactly these).
Record = (WorkerConfig | Start | Release | Ready | StepRecord | EvalRecord | GateReached
          | Done | WorkerError)
