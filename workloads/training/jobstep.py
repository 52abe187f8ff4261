"""The job's step (runner side): every rank's ``StepRecord`` of a step joined into a
``JobStep``, the slowest rank's view, and the overrun count of the modelled compute.

The runner writes each ``JobStep`` as a ``job_step`` record of results.jsonl
(workloads/training/results.py documents its fields); calibration (workloads/training/metrics.py)
prefers
these to the per-rank step records.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
from dataclasses import dataclass
from typing import Any

from workloads.records import StepRecord

__all__ = ["JobStep", "OverrunStats", "StepAggregator"]


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
        out = dataclasses.asdict(self)
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
