"""Records that cross the runner/worker process boundary: one frozen dataclass each.

The runner (workloads/runner.py) and a training worker (workloads/worker.py) talk
in JSON lines, one record per line, each with a ``type`` tag. Every record is
defined here once and serialised here only (``encode``, ``decode``): nothing is
built as a dict on one side and read back by string keys on the other.

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

The runner joins the ranks' step records into the job's step (:class:`JobStep`,
:class:`StepAggregator`); ``StepRecord.result_fields`` and ``JobStep.result_fields``
are the fields of the ``step`` and ``job_step`` records of results.jsonl
(workloads/results.py documents them). DBLP's settings (:class:`DblpConfig`) are
defined here too, as the experiment file reads them and the worker uses them.

Gates: a worker blocks after step k when k is its next gate (``WorkerConfig.first_gate``,
then each ``Release.next_gate``): it reports ``gate``, waits for the runner's
``release`` (the runner applies the failures due at that step boundary in between)
and sleeps until the release's common instant, so every rank resumes together.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import threading
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from emu.childproto import READY, START
from workloads.fill import DEFAULT_FILL
from workloads.phase import (
    FixedTolerance,
    OptiReduceConfig,
    OptiReduceDeadline,
    PhaseAware,
    PhaseAwareConfig,
)

__all__ = [
    "POLICIES", "DblpConfig", "Done", "EvalRecord", "GateReached", "JobStep", "OverrunStats",
    "Ready", "Release", "Start", "StepAggregator", "StepRecord", "WorkerConfig", "WorkerError",
    "decode", "encode",
]

POLICIES = ("phase_aware", "fixed", "optireduce")


# --------------------------------------------------------------------------------------
# DBLP settings (the experiment's [transport.dblp] table, resolved)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DblpConfig:
    """How much loss each bounded round may take, and what fills the loss.

    Only the fields of the chosen ``policy`` matter: ``tolerance`` for fixed (required
    there), ``phase`` for phase_aware (None: PhaseAwareConfig's defaults), ``margin_ms``
    for optireduce (None: 1 ms). ``deadline_ms`` bounds every round (optireduce: the
    first round's, later ones adapt).
    """

    policy: str = "phase_aware"
    fill: str = DEFAULT_FILL
    tolerance: float | None = None
    phase: PhaseAwareConfig | None = None
    deadline_ms: float | None = None
    margin_ms: float | None = None
    bounded_gather: bool = False

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"DblpConfig.policy={self.policy!r}: must be one of "
                             f"{', '.join(POLICIES)}")
        if self.policy == "fixed" and self.tolerance is None:
            raise ValueError("DblpConfig(policy='fixed') needs a tolerance in [0, 1)")

    @property
    def deadline_s(self) -> float | None:
        """``deadline_ms`` in seconds (None: no deadline)."""
        return None if self.deadline_ms is None else self.deadline_ms / 1000.0

    def policy_object(self) -> FixedTolerance | PhaseAware | OptiReduceDeadline:
        """A fresh policy object (workloads/phase.py); one per rank and repetition."""
        if self.policy == "fixed":
            assert self.tolerance is not None
            return FixedTolerance(self.tolerance)
        if self.policy == "phase_aware":
            return PhaseAware(self.phase)
        return OptiReduceDeadline(self.optireduce_config())

    def optireduce_config(self) -> OptiReduceConfig:
        """The OptiReduce deadline policy's settings (policy = "optireduce")."""
        margin = 1.0 if self.margin_ms is None else self.margin_ms
        return OptiReduceConfig(margin_s=margin / 1000.0, initial_s=self.deadline_s)


# --------------------------------------------------------------------------------------
# Runner -> worker
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """Everything one rank's worker process needs (the first line of its stdin).

    ``conns``: peer rank -> this rank's connection plan entries to it (one per lane;
    transports.plan.conn_spec's format), empty for gloo. ``groups``: the ranks of
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
    transport_config: Mapping[str, Any] = field(default_factory=dict)
    conns: Mapping[int, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    collective: str = "ring"
    groups: tuple[tuple[int, ...], ...] | None = None
    dblp: DblpConfig | None = None
    kind: str = "data_parallel"
    model: str
    steps: int
    batch_size: int
    microbatches: int | None = None
    lr: float
    lr_schedule: str = "constant"
    eval_every: int
    compute: str = "measured"
    compute_ms: float | None = None
    seed: int = 0
    first_gate: int | None = None
    inject_error_at_step: int | None = None
    pg_timeout_s: float = 120.0

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
        out = _plain(self)
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


# --------------------------------------------------------------------------------------
# Serialisation (the only place records become JSON and back)
# --------------------------------------------------------------------------------------

_TYPES: dict[str, type] = {
    "config": WorkerConfig, START: Start, "release": Release, READY: Ready,
    "step": StepRecord, "eval": EvalRecord, "gate": GateReached, "done": Done,
    "error": WorkerError,
}
_TAGS = {cls: tag for tag, cls in _TYPES.items()}
Record = (WorkerConfig | Start | Release | Ready | StepRecord | EvalRecord | GateReached
          | Done | WorkerError)


def encode(record: Record) -> str:
    """One JSON line (newline included) for ``record``, tagged with its type."""
    tag = _TAGS.get(type(record))
    if tag is None:
        raise TypeError(f"{type(record).__name__} is not a process record; records are "
                        f"{', '.join(c.__name__ for c in _TYPES.values())}")
    return json.dumps({"type": tag, **_plain(record)}) + "\n"


def decode(line: str) -> Record:
    """The record of one line written by ``encode``; ValueError naming what is wrong."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a JSON record: {e}: {line[:200]!r}") from None
    return decode_obj(data, line)


def decode_obj(data: Any, line: str = "") -> Record:
    """The record of one parsed JSON object (``line``: its text, for the error)."""
    if not isinstance(data, dict) or data.get("type") not in _TYPES:
        raise ValueError(f"not a process record (type must be one of "
                         f"{', '.join(_TYPES)}): {(line or repr(data))[:200]!r}")
    data = dict(data)
    cls = _TYPES[data.pop("type")]
    return _build(cls, data, cls.__name__)


def _plain(obj: Any) -> Any:
    """JSON-able data of a record: dataclasses to dicts, tuples to lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


def _build(cls: type, data: object, where: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must be an object, not {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown}; fields are {sorted(names)}")
    args = {k: _value(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**args)
    except TypeError as e:  # a required field is missing
        raise ValueError(f"{where}: {e}") from None


def _value(tp: Any, v: Any, where: str) -> Any:
    """``v`` (decoded JSON) as type ``tp``: the inverse of ``_plain``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return v
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if v is None:
            if len(options) < len(typing.get_args(tp)):
                return None
            raise ValueError(f"{where}: must not be null")
        errors = []
        for a in options:
            try:
                return _value(a, v, where)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError("; ".join(errors))
    if dataclasses.is_dataclass(tp):
        return _build(cast(type, tp), v, where)  # a type hint: a class, not an instance
    if origin is tuple:
        if not isinstance(v, list):
            raise ValueError(f"{where}: must be an array, not {type(v).__name__}")
        item = typing.get_args(tp)[0]
        return tuple(_value(item, x, f"{where}[{i}]") for i, x in enumerate(v))
    if origin in (Mapping, dict):
        if not isinstance(v, dict):
            raise ValueError(f"{where}: must be an object, not {type(v).__name__}")
        kt, vt = typing.get_args(tp)
        # JSON object keys are strings: integer keys (peer ranks) come back as such.
        return {(int(k) if kt is int else k): _value(vt, x, f"{where}[{k}]")
                for k, x in v.items()}
    if tp is float:
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    elif tp is int or tp is bool or tp is str:
        if type(v) is tp:
            return v
    else:
        raise TypeError(f"{where}: no decoding for {tp!r}")  # a record definition's bug
    raise ValueError(f"{where} = {v!r}: must be {getattr(tp, '__name__', tp)}")


# --------------------------------------------------------------------------------------
# The job's step (runner side)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class JobStep:
    """A step of the whole job, from every rank's record of it (the slowest rank's view).

    ``step_s``: from the previous step's end (its slowest rank) to this one's, less the
    evaluation in between; after a gate, from the last rank's start (gates are not
    training). ``train_s``: the sum of ``step_s`` so far. ``compute_s``: median over
    ranks (a pipeline: the busiest stage). ``exposed_comm_s``: from the last rank's
    entry into the exchange to the last exit. ``model_step_s`` (modelled compute): the
    modelled compute plus ``exposed_comm_s``. ``overrun_ranks``: ranks whose real
    compute overran the model in this step.
    """

    step: int
    t_s: float
    train_s: float
    step_s: float
    compute_s: float
    exposed_comm_s: float
    loss: float | None
    delivered: float
    lost_entries: int
    tolerance: float | None
    why: str | None
    bytes: int
    rank_bytes: int
    model_step_s: float | None = None
    overrun_ranks: int = 0

    def result_fields(self) -> dict[str, Any]:
        """The fields of the results' ``job_step`` record (``model_step_s`` only when
        the compute is modelled: readers take its presence as the mode)."""
        out = _plain(self)
        if self.model_step_s is None:
            del out["model_step_s"]
        return out


@dataclass(frozen=True)
class OverrunStats:
    """How often the real compute overran the modelled compute in one run."""

    steps: int  # job steps
    job_overruns: int  # job steps in which at least one rank overran
    rank_steps: tuple[int, ...]
    rank_overruns: tuple[int, ...]

    @property
    def job_fraction(self) -> float:
        """Overrun job steps / job steps (0 without steps)."""
        return self.job_overruns / self.steps if self.steps else 0.0

    @property
    def rank_fractions(self) -> tuple[float, ...]:
        """Per rank: its overrun steps / its steps."""
        return tuple(o / s if s else 0.0
                     for o, s in zip(self.rank_overruns, self.rank_steps, strict=True))

    def as_record(self) -> dict[str, Any]:
        """The summary fields (fractions rounded to 4 digits)."""
        return {"overrun_fraction": round(self.job_fraction, 4),
                "overrun_fraction_ranks": [round(f, 4) for f in self.rank_fractions],
                "overrun_steps": self.job_overruns}


class StepAggregator:
    """Joins the ranks' records of a step into the job's step (:class:`JobStep`).

    ``exposed_comm_s`` of a job step is measured from the moment the *last* rank
    entered the exchange to the moment the last one left it: time one rank spent
    waiting for a slower rank's compute is not charged to the network. Thread-safe:
    the runner reads each rank's records in a thread of its own.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size={size!r}: a job has at least one rank")
        self.size = size
        self._lock = threading.Lock()
        self._pending: dict[int, list[StepRecord]] = {}
        self._prev_end: float | None = None
        self._eval_s: dict[int, float] = {}  # evaluation time after a step (not training)
        self._resumed: set[int] = set()  # steps after which the ranks waited at a gate
        self._train_s = 0.0  # the sum of step_s
        self._model_s = 0.0  # the sum of model_step_s (modelled compute)
        self._modelled = True
        self._steps = 0
        self._job_overruns = 0
        self._rank_steps = [0] * size
        self._rank_overruns = [0] * size

    def evaluated(self, step: int, seconds: float) -> None:
        """Evaluation ran for ``seconds`` after ``step``: not part of the next step."""
        with self._lock:
            self._eval_s[step] = seconds

    def resumed(self, step: int) -> None:
        """The ranks waited at a gate after ``step``: the next step is timed from the
        moment its last rank started it."""
        with self._lock:
            self._resumed.add(step)

    @property
    def training_s(self) -> float:
        """The job's reported training time so far: the sum of ``model_step_s`` when
        every step has one (modelled compute), else of ``step_s``."""
        with self._lock:
            return self._model_s if self._modelled and self._steps else self._train_s

    def overruns(self) -> OverrunStats:
        """Overruns counted over the job steps so far."""
        with self._lock:
            return OverrunStats(self._steps, self._job_overruns, tuple(self._rank_steps),
                                tuple(self._rank_overruns))

    def add(self, rec: StepRecord) -> JobStep | None:
        """Add one rank's record; the job's step once every rank's record of it is in."""
        with self._lock:
            if not 0 <= rec.rank < self.size:
                raise ValueError(f"rank={rec.rank!r}: must be in [0, {self.size - 1}]")
            recs = self._pending.setdefault(rec.step, [])
            recs.append(rec)
            self._rank_steps[rec.rank] += 1
            self._rank_overruns[rec.rank] += rec.overrun
            if len(recs) < self.size:
                return None
            del self._pending[rec.step]
            return self._join(sorted(recs, key=lambda r: r.rank))

    def _join(self, recs: list[StepRecord]) -> JobStep:
        step = recs[0].step
        end = max(r.end for r in recs)
        start = max(r.start for r in recs)
        exposed = max(r.t_exit for r in recs) - max(r.t_enter for r in recs)
        compute = statistics.median(r.compute_s for r in recs)
        if recs[0].pipeline:
            # Pipeline stages overlap: what the busiest stage did not spend computing is
            # communication and bubbles.
            compute = max(r.compute_s for r in recs)
            exposed = (end - start) - compute
        losses = [r.loss for r in recs if r.loss is not None]
        if step - 1 in self._resumed or self._prev_end is None:
            # The first step, or the first after a gate (evaluation came before the gate).
            self._resumed.discard(step - 1)
            self._eval_s.pop(step - 1, None)
            step_s = end - start
        else:
            # From the previous step's end (its slowest rank) to this one's, less the
            # evaluation that ran in between.
            step_s = end - self._prev_end - self._eval_s.pop(step - 1, 0.0)
        step_s = max(0.0, step_s)
        self._prev_end = end
        self._train_s += step_s
        exposed = max(0.0, exposed)
        model = None
        first = recs[0].model_compute_s
        if first is not None and all(r.model_compute_s is not None for r in recs):
            # The step as the model says it lasts (its compute) plus the network's part
            # as measured; what shared cores add to the real compute is left out.
            model = round(first + exposed, 6)
            self._model_s += model
        else:
            self._modelled = False
        overran = sum(r.overrun for r in recs)
        self._steps += 1
        self._job_overruns += overran > 0
        return JobStep(
            step=step, t_s=max(r.t_s for r in recs), train_s=round(self._train_s, 6),
            step_s=round(step_s, 6), compute_s=round(compute, 6),
            exposed_comm_s=round(exposed, 6),
            loss=statistics.fmean(losses) if losses else None,
            delivered=min(r.delivered for r in recs),
            lost_entries=sum(r.lost_entries for r in recs), tolerance=recs[0].tolerance,
            why=recs[0].why, bytes=sum(r.bytes for r in recs),
            rank_bytes=max(r.bytes for r in recs), model_step_s=model, overrun_ranks=overran)
