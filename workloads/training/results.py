"""Results as they arrive: one JSON object per line, then CSV files and a calibration record.

``ResultsWriter(out_dir)`` creates ``out_dir`` and appends every record to
``out_dir/results.jsonl`` as one line, flushed at once: a run interrupted by Ctrl-C or a
crash keeps everything recorded so far, and the file can be read (``read_jsonl``) while
the run still writes it. The writer is thread-safe (timeline events arrive from the
timeline runner's thread). ``finish()`` derives, from the JSONL alone, ``steps.csv``,
``job_steps.csv`` (when the runner wrote job steps), ``evals.csv``, ``events.csv`` and
``calibration.json`` (its format and the formulas behind it: workloads/training/metrics.py).
What the meta record says about the software and the machine: workloads/provenance.py.

Records (every one has ``type``; ``label`` names the variant a record belongs to, e.g.
``"mrc"`` or ``"dblp_phase_aware"``, so one run can compare several; ``rep`` is the
repetition). Non-finite floats are written as null.

``meta``
    ``experiment`` (``Experiment.as_record()``), ``fabric``, ``transport``, ``compute``
    (mode and, modelled, the per-step time), ``versions`` (python, packages, git commit,
    filled in), ``host`` (hostname, kernel, CPUs, filled in), ``started`` (Unix time),
    and the calibration inputs of the label: ``bytes_per_step`` (bytes one rank sends in
    one step's collective), ``bottleneck_mbit`` (the line rate that bounds it) and
    ``rtt_s`` (the healthy round-trip time), each optional.
``step``
    one per rank and step: ``rep, rank, step, t_s`` (seconds from training start at the
    *end* of the step, so the step spans ``[t_s - step_s, t_s]``), ``compute_s, comm_s``
    (the step's collective on this rank, start to end: it includes waiting for slower
    ranks), ``step_s, loss, lr, tolerance, delivered`` (fraction of the gradient that
    arrived), ``lost_entries`` (gradient values filled in), ``estimated_entries``
    (values estimated locally: bounded all-gather), ``mode`` (how the round ran:
    "reliable" or the tolerance policy's reason, the worker's ``why``), ``t_enter,
    t_exit, start, end`` (CLOCK_MONOTONIC) and ``bytes`` (what this rank sent in the
    step's collective, overriding the label's ``bytes_per_step``). The runner's records
    also carry the worker's ``epoch, real_compute_s, model_compute_s, overrun,
    pipeline`` (workloads/records.py, ``StepRecord``).
``job_step``
    one per step, written by the runner once every rank's ``step`` is in: the job's
    view (workloads/training/jobstep.py, ``JobStep``). ``step``, ``t_s`` (the last rank's),
    ``step_s`` (from the slowest rank's end of the previous step to its end of this one,
    evaluation excluded), ``train_s`` (the sum of ``step_s`` so far), ``compute_s``
    (median over ranks; a pipeline: the busiest stage), ``exposed_comm_s`` (from the last
    rank's entry into the exchange to the last exit: waiting for a slower rank's compute
    is not charged to the network), ``loss`` (mean over ranks), ``delivered`` (min),
    ``lost_entries`` (sum), ``tolerance`` and ``why`` (the round's bound and the
    tolerance policy's reason for it, null for a reliable round: written as ``why``
    here, not as the step record's ``mode``), ``bytes`` (sum), ``rank_bytes`` (max),
    ``overrun_ranks`` (ranks whose real compute overran the model) and, with modelled
    compute only, ``model_step_s`` (the modelled compute plus ``exposed_comm_s``).
    Calibration uses these when present.
``eval``
    ``rep, step, t_s`` and the task's metrics: ``accuracy, loss`` (a classifier) or
    ``loss, perplexity`` (a language model: no accuracy); the runner's also carry
    ``rank`` and ``eval_s`` (how long the evaluation took).
``event``
    a failure-timeline record (emu.timeline.TimelineRunner's dict: ``at, fired, late_ms,
    action`` = apply | restore | measured | restore_at_stop, ``kind`` and the failure's
    fields) plus ``rep`` and ``t_s`` (= ``fired``, seconds from training start: the
    runner must be started with the training start as its t0).
``error``
    ``rank`` and ``traceback`` (text); a worker's also ``error`` (the exception's repr).
``summary``
    free-form per label and repetition (time to target, final accuracy or loss, ...).

Other record types (lower-case words) may be written too; they stay in the JSONL only.
"""

from __future__ import annotations

import csv
import json
import math
import re
import threading
import time
import traceback as tb
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from emu import safefs
from workloads.provenance import host_info, software_versions
from workloads.training.metrics import calibration  # what finish() writes

__all__ = [
    "EVAL_FIELDS", "EVENT_FIELDS", "RECORD_TYPES", "STEP_FIELDS", "ResultsWriter",
    "read_jsonl", "write_csv",
]

RECORD_TYPES = ("meta", "step", "eval", "event", "error", "summary")
STEP_FIELDS = ("label", "rep", "rank", "step", "t_s", "compute_s", "comm_s", "step_s",
               "loss", "lr", "tolerance", "delivered", "lost_entries", "mode")
JOB_STEP_FIELDS = ("label", "rep", "step", "t_s", "step_s", "compute_s", "exposed_comm_s",
                   "loss", "tolerance", "delivered", "lost_entries")
EVAL_FIELDS = ("label", "rep", "step", "t_s", "accuracy", "loss")
EVENT_FIELDS = ("label", "rep", "t_s", "action", "kind", "at", "fired", "late_ms", "error")
_RECORD_TYPE = re.compile(r"[a-z][a-z0-9_]*")


def _clean(obj: Any) -> Any:
    """JSON-able data: tuples/sets to lists, numpy/torch scalars to numbers, NaN/inf to None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted(_clean(v) for v in obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy and torch scalars (0-d)
        return _clean(obj.item())
    if hasattr(obj, "tolist"):  # small arrays
        return _clean(obj.tolist())
    return repr(obj)


def read_jsonl(path: str | Path) -> list[dict]:
    """Every record of a JSONL file; a last line still being written (no newline) is skipped.

    Readable while a writer appends to it. A malformed complete line is an error
    (ValueError naming the line): it means the file was damaged, not still growing.
    """
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.endswith("\n"):
                break  # partial: the writer has not finished this line
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON record: {e}") from None
    return out



class ResultsWriter:
    """Appends records to ``out_dir/results.jsonl`` as they arrive (see the module docstring).

    ``label`` is the default label of records written without one. Use as a context
    manager: leaving it (normally, on an exception or Ctrl-C) runs ``finish()`` once and
    closes the file.
    """

    def __init__(self, out_dir: str | Path, label: str = "run") -> None:
        self.out_dir = Path(out_dir)
        safefs.mkdir_private(self.out_dir)
        self.path = self.out_dir / "results.jsonl"
        self.label = label
        self._lock = threading.Lock()
        self._file = safefs.open_append(self.path)  # closed by close()
        self.finished = False

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if not self.finished:
                self.finish()
        finally:
            self.close()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def write(self, record_type: str, **fields: Any) -> dict:
        """Append one record of ``record_type`` now (flushed); returns it as written.

        Any lower-case word is accepted (a runner may add its own, e.g. "job_step");
        ``RECORD_TYPES`` are the ones ``finish()`` and the calibration interpret.
        """
        if not _RECORD_TYPE.fullmatch(record_type):
            raise ValueError(f"record type {record_type!r}: must be a lower-case word such "
                             f"as {', '.join(RECORD_TYPES)}")
        rec = _clean({"type": record_type, **fields})
        if rec.get("label") is None:
            rec["label"] = self.label
        line = json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()
        return rec

    def meta(self, *, experiment: Mapping[str, Any], fabric: Mapping[str, Any] | None = None,
             transport: str | Mapping[str, Any] | None = None,
             compute: Mapping[str, Any] | None = None, label: str | None = None,
             bytes_per_step: int | None = None, bottleneck_mbit: float | None = None,
             rtt_s: float | None = None, **extra: Any) -> dict:
        """The run's description, with software versions and host filled in."""
        return self.write("meta", label=label, experiment=experiment, fabric=fabric,
                          transport=transport, compute=compute, bytes_per_step=bytes_per_step,
                          bottleneck_mbit=bottleneck_mbit, rtt_s=rtt_s,
                          versions=software_versions(), host=host_info(), started=time.time(),
                          **extra)

    def step(self, *, rep: int, rank: int, step: int, t_s: float, compute_s: float,
             comm_s: float, exposed_comm_s: float, step_s: float, loss: float | None,
             lr: float, tolerance: float | None = None, delivered: float | None = None,
             lost_entries: int | None = None, mode: str | None = None,
             label: str | None = None, **extra: Any) -> dict:
        """One rank's step (see the module docstring for the fields)."""
        return self.write("step", label=label, rep=rep, rank=rank, step=step, t_s=t_s,
                          compute_s=compute_s, comm_s=comm_s, exposed_comm_s=exposed_comm_s,
                          step_s=step_s, loss=loss, lr=lr, tolerance=tolerance,
                          delivered=delivered, lost_entries=lost_entries, mode=mode, **extra)

    def eval(self, *, rep: int, step: int, t_s: float, accuracy: float | None = None,
             loss: float | None = None, label: str | None = None, **extra: Any) -> dict:
        """One evaluation of the model."""
        return self.write("eval", label=label, rep=rep, step=step, t_s=t_s, accuracy=accuracy,
                          loss=loss, **extra)

    def event(self, record: Mapping[str, Any], *, rep: int = 0,
              label: str | None = None) -> dict:
        """A failure-timeline record (pass this bound method, with ``functools.partial`` for
        ``rep``, as the TimelineRunner's ``record``)."""
        rec = dict(record)
        t_s = rec.get("fired", rec.get("at"))
        return self.write("event", **{"label": label, "rep": rep, "t_s": t_s, **rec})

    def error(self, *, rank: int | None, traceback: str | BaseException,
              rep: int | None = None, label: str | None = None) -> dict:
        """A rank's failure; an exception is formatted with its traceback."""
        if isinstance(traceback, BaseException):
            traceback = "".join(tb.format_exception(traceback))
        return self.write("error", label=label, rep=rep, rank=rank, traceback=traceback)

    def summary(self, *, label: str | None = None, **fields: Any) -> dict:
        """What a label's run (or one repetition of it) came to."""
        return self.write("summary", label=label, **fields)

    def finish(self, rtt_s: float | None = None) -> dict:
        """Write the CSV files and calibration.json from the JSONL; returns the calibration.

        ``rtt_s`` is used for labels whose meta record gives none. Safe to call again
        (files are rewritten from everything recorded so far).
        """
        with self._lock:
            if not self._file.closed:
                self._file.flush()
        records = read_jsonl(self.path)
        by_type: dict[str, list[dict]] = {t: [] for t in RECORD_TYPES}
        for r in records:
            by_type.setdefault(r.get("type", ""), []).append(r)
        write_csv(self.out_dir / "steps.csv", by_type["step"], STEP_FIELDS)
        if by_type.get("job_step"):
            write_csv(self.out_dir / "job_steps.csv", by_type["job_step"], JOB_STEP_FIELDS)
        write_csv(self.out_dir / "evals.csv", by_type["eval"], EVAL_FIELDS)
        write_csv(self.out_dir / "events.csv", by_type["event"], EVENT_FIELDS)
        cal = calibration(records, rtt_s=rtt_s)
        safefs.write_json(self.out_dir / "calibration.json", _clean(cal), indent=2,
                          allow_nan=False)
        self.finished = True
        return cal


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, list | dict):
        return json.dumps(v, separators=(",", ":"))
    return v


def write_csv(path: str | Path, records: Sequence[Mapping[str, Any]],
              columns: Sequence[str]) -> None:
    """``records`` as CSV: ``columns`` first, then any other keys (sorted), ``type`` left out.

    None is an empty cell; lists and tables are JSON text.
    """
    extra = sorted({k for r in records for k in r} - set(columns) - {"type"})
    header = [*columns, *extra]
    with safefs.open_write(path) as f:
        w = csv.writer(f)
        w.writerow(header)
        for r in records:
            w.writerow([_cell(r.get(k)) for k in header])
