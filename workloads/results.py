"""Results as they arrive: one JSON object per line, then CSV files and a calibration record.

``ResultsWriter(out_dir)`` creates ``out_dir`` and appends every record to
``out_dir/results.jsonl`` as one line, flushed at once: a run interrupted by Ctrl-C or a
crash keeps everything recorded so far, and the file can be read (``read_jsonl``) while
the run still writes it. The writer is thread-safe (timeline events arrive from the
timeline runner's thread). ``finish()`` derives, from the JSONL alone, ``steps.csv``,
``job_steps.csv`` (when the runner wrote job steps), ``evals.csv``, ``events.csv`` and
``calibration.json``.

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
    "reliable" or the tolerance policy's reason), ``t_enter, t_exit, start, end``
    (CLOCK_MONOTONIC) and ``bytes`` (what this rank sent in the step's collective,
    overriding the label's ``bytes_per_step``).
``job_step``
    one per step, written by the runner once every rank's ``step`` is in: the job's
    view. ``step_s`` (from the slowest rank's end of the previous step to its end of
    this one, evaluation excluded), ``compute_s`` (median over ranks; a pipeline: the
    busiest stage), ``exposed_comm_s`` (from the last rank's entry into the exchange to
    the last exit: waiting for a slower rank's compute is not charged to the network),
    ``loss`` (mean over ranks), ``delivered`` (min), ``lost_entries`` (sum), ``bytes``
    (sum) and ``rank_bytes`` (max). Calibration uses these when present.
``eval``
    ``rep, step, t_s, accuracy, loss`` (accuracy None for language models).
``event``
    a failure-timeline record (emu.timeline.TimelineRunner's dict: ``at, fired, late_ms,
    action`` = apply | restore | measured | restore_at_stop, ``kind`` and the failure's
    fields) plus ``rep`` and ``t_s`` (= ``fired``, seconds from training start: the
    runner must be started with the training start as its t0).
``error``
    ``rank`` and ``traceback`` (text).
``summary``
    free-form per label and repetition (time to target, final accuracy or loss, ...).

Other record types (lower-case words) may be written too; they stay in the JSONL only.

Calibration record (``calibration.json``, what the full-scale explorer takes from an
emulated run; per label, all times in seconds)::

    {"format": "scaleacross-emu/calibration/1",
     "experiment": "<name>", "generated": <Unix time>,
     "variants": {"<label>": {
        "transport": "<name>" | null,     # from the label's meta record
        "rtt_s": float | null,
        "line_rate": {"fraction": float | null, "bytes": int, "comm_s": float,
                      "bottleneck_mbit": float | null, "rounds": int},
        "tail_inflation": {"value": float | null, "p99_burst_comm_s": float | null,
                           "p50_healthy_comm_s": float | null,
                           "burst_rounds": int, "healthy_rounds": int},
        "failures": [{"rep": int, "kind": str, "what": {...}, "start_s": float,
                      "end_s": float | null, "steps": int,
                      "healthy_step_s": float | null,
                      "lost_s": float | null, "lost_rtts": float | null}, ...],
        "lost_s_per_failure": float | null, "lost_rtts_per_failure": float | null}}}

Definitions (functions of the same names compute them from records; all unit-tested):

* **Failure windows** (``failure_windows``): an ``apply`` event opens a window at its
  ``applied`` time (when apply returned; else ``fired``, else ``at``); the next
  ``restore`` (or ``restore_at_stop``) of the same failure (same ``kind`` and fields)
  closes it; a window never closed lasts to the
  end of the run (``end_s`` null). Applies that failed (``error``) open none. Windows of
  kind ``microburst`` are *burst windows*. A step overlaps a window of its repetition
  when ``t_s - step_s < end`` and ``t_s > start``; a *healthy* step overlaps none.
* **Achieved fraction of line rate** (``line_rate_fraction``), over healthy step records
  of every rank with ``comm_s > 0``::

      fraction = sum(bytes) * 8 / (sum(comm_s) * bottleneck_mbit * 1e6)

  ``bytes`` is the record's ``bytes`` or else the label's ``bytes_per_step``; null when
  neither (or ``bottleneck_mbit``) is known.
* **Tail inflation of round latency under bursts** (``tail_inflation``)::

      value = p99(comm_s of step records overlapping a burst window)
              / p50(comm_s of healthy step records)

  over every rank's records; percentiles interpolate linearly between order statistics
  (numpy's default). Null without burst windows, or without rounds on either side.
* **Time lost per failure** (``time_lost``), on *job steps* (``job_steps``: per
  repetition and step, the slowest rank's record: a synchronous step lasts as long as its
  slowest rank)::

      healthy_step_s = median(step_s of healthy job steps)
      lost_s  = sum(step_s - healthy_step_s over job steps overlapping the window)
      lost_rtts = lost_s / rtt_s

  The difference is not clipped at 0, so the noise of normal steps averages out instead
  of accumulating. ``lost_s`` is null when no healthy step exists or no step overlaps
  the window; ``lost_rtts`` null without an RTT. ``lost_s_per_failure`` is the mean of
  the non-null ``lost_s`` over the label's non-burst windows (likewise in RTTs).
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import threading
import time
import traceback as tb
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CALIBRATION_FORMAT", "EVAL_FIELDS", "EVENT_FIELDS", "RECORD_TYPES", "STEP_FIELDS",
    "ResultsWriter", "Window", "calibration", "failure_windows", "host_info", "job_steps",
    "line_rate_fraction", "percentile", "read_jsonl", "software_versions", "tail_inflation",
    "time_lost", "time_to_accuracy", "write_csv",
]

CALIBRATION_FORMAT = "scaleacross-emu/calibration/1"
RECORD_TYPES = ("meta", "step", "eval", "event", "error", "summary")
STEP_FIELDS = ("label", "rep", "rank", "step", "t_s", "compute_s", "comm_s", "step_s",
               "loss", "lr", "tolerance", "delivered", "lost_entries", "mode")
JOB_STEP_FIELDS = ("label", "rep", "step", "t_s", "step_s", "compute_s", "exposed_comm_s",
                   "loss", "tolerance", "delivered", "lost_entries")
EVAL_FIELDS = ("label", "rep", "step", "t_s", "accuracy", "loss")
EVENT_FIELDS = ("label", "rep", "t_s", "action", "kind", "at", "fired", "late_ms", "error")
BURST_KIND = "microburst"
_RECORD_TYPE = re.compile(r"[a-z][a-z0-9_]*")

# Keys of an event record that say when/what happened rather than which failure it is.
_EVENT_BOOKKEEPING = frozenset({"chosen", "chosen_rx_packets", "all_rx_packets",
                                "type", "label", "rep", "t_s", "at", "fired", "late_ms",
                                "action", "error", "applied", "step", "at_step", "train_s",
                                "clock", "burst_start"})
_PACKAGES = ("scaleacross-emu", "torch", "numpy", "matplotlib", "scikit-learn", "pyroute2",
             "scapy")


# --------------------------------------------------------------------------------------
# Writing and reading
# --------------------------------------------------------------------------------------


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


def software_versions() -> dict[str, Any]:
    """Python, the packages results depend on, and the project's git commit."""
    out: dict[str, Any] = {"python": platform.python_version()}
    for pkg in _PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    out["git"] = _git_commit()
    return out


def _git_commit() -> str | None:
    """The project's commit (with ``-dirty`` if modified), or None outside a checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("-dirty" if dirty else "") if rev else None


def host_info() -> dict[str, Any]:
    """Hostname, kernel, machine and CPU count (where a result was measured)."""
    return {"hostname": socket.gethostname(), "kernel": platform.release(),
            "machine": platform.machine(), "cpus": os.cpu_count()}


class ResultsWriter:
    """Appends records to ``out_dir/results.jsonl`` as they arrive (see the module docstring).

    ``label`` is the default label of records written without one. Use as a context
    manager: leaving it (normally, on an exception or Ctrl-C) runs ``finish()`` once and
    closes the file.
    """

    def __init__(self, out_dir: str | Path, label: str = "run") -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / "results.jsonl"
        self.label = label
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")  # closed by close()
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
        tmp = self.out_dir / "calibration.json.tmp"
        tmp.write_text(json.dumps(_clean(cal), indent=2, allow_nan=False) + "\n")
        tmp.replace(self.out_dir / "calibration.json")
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
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        for r in records:
            w.writerow([_cell(r.get(k)) for k in header])


# --------------------------------------------------------------------------------------
# Calibration: pure functions of records
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """A failure active from ``start_s`` to ``end_s`` (inf: never restored) in ``rep``."""

    rep: int
    kind: str
    what: Mapping[str, Any] = field(compare=False)
    start_s: float
    end_s: float
    label: str | None = None

    @property
    def burst(self) -> bool:
        return self.kind == BURST_KIND

    def overlaps(self, step: Mapping[str, Any]) -> bool:
        """Whether ``step`` (a step record of this repetition) ran while this was active."""
        if step.get("rep", 0) != self.rep:
            return False
        end = step["t_s"]
        return end - step["step_s"] < self.end_s and end > self.start_s


def failure_windows(events: Iterable[Mapping[str, Any]]) -> list[Window]:
    """The windows during which each applied failure was active (see the module docstring).

    Events are taken in the order given (the order they were recorded), per label and rep.
    """
    open_: list[tuple[dict, dict]] = []  # (apply record, its identity)
    out: list[Window] = []
    for ev in events:
        action = ev.get("action")
        ident = {k: v for k, v in ev.items() if k not in _EVENT_BOOKKEEPING}
        key = (ev.get("label"), ev.get("rep", 0))
        if action == "apply":
            if "error" not in ev:
                open_.append((dict(ev), ident))
        elif action in ("restore", "restore_at_stop"):
            for i, (ap, aid) in enumerate(open_):
                same = (ap.get("label"), ap.get("rep", 0)) == key
                if same and all(ev.get(k) == v for k, v in aid.items()):
                    del open_[i]
                    out.append(_window(ap, aid, _when(ev)))
                    break
    out.extend(_window(ap, aid, math.inf) for ap, aid in open_)
    out.sort(key=lambda w: (w.label or "", w.rep, w.start_s))
    return out


def _when(ev: Mapping[str, Any]) -> float:
    # ``applied``: when the change took effect (the timeline runner records it after
    # apply/restore returned); older records have only ``fired``.
    for key in ("applied", "fired", "at"):
        if ev.get(key) is not None:
            return float(ev[key])
    return 0.0


def _window(ap: Mapping[str, Any], ident: Mapping[str, Any], end: float) -> Window:
    return Window(rep=ap.get("rep", 0), kind=str(ap.get("kind")), what=dict(ident),
                  start_s=_when(ap), end_s=end, label=ap.get("label"))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (linear interpolation, numpy's default); None if empty."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def _healthy(step: Mapping[str, Any], windows: Sequence[Window]) -> bool:
    return not any(w.overlaps(step) for w in windows)


def job_steps(steps: Iterable[Mapping[str, Any]]) -> list[dict]:
    """Per (rep, step), the slowest rank's record (max ``step_s``), in (rep, step) order.

    ``t_s`` is the latest end over ranks and ``ranks`` the number of records merged.
    """
    best: dict[tuple[int, int], dict] = {}
    for s in steps:
        key = (s.get("rep", 0), s["step"])
        cur = best.get(key)
        if cur is None:
            best[key] = {**s, "ranks": 1}
            continue
        n, t_end = cur["ranks"] + 1, max(cur["t_s"], s["t_s"])
        if s["step_s"] > cur["step_s"]:
            cur = {**s}
        best[key] = {**cur, "t_s": t_end, "ranks": n}
    return [best[k] for k in sorted(best)]


def line_rate_fraction(steps: Iterable[Mapping[str, Any]], windows: Sequence[Window] = (),
                       bytes_per_step: int | None = None,
                       bottleneck_mbit: float | None = None) -> dict[str, Any]:
    """Achieved fraction of the bottleneck line rate over healthy rounds (module docstring)."""
    total_bytes, comm, rounds, known = 0, 0.0, 0, True
    for s in steps:
        if not s.get("comm_s") or s["comm_s"] <= 0 or not _healthy(s, windows):
            continue
        b = s.get("bytes", bytes_per_step)
        if b is None:
            known = False
            continue
        total_bytes += int(b)
        comm += float(s["comm_s"])
        rounds += 1
    fraction = None
    if known and rounds and bottleneck_mbit:
        fraction = total_bytes * 8 / (comm * bottleneck_mbit * 1e6)
    return {"fraction": fraction, "bytes": total_bytes, "comm_s": comm,
            "bottleneck_mbit": bottleneck_mbit, "rounds": rounds}


def tail_inflation(steps: Iterable[Mapping[str, Any]],
                   windows: Sequence[Window]) -> dict[str, Any]:
    """p99 of comm_s during burst windows over p50 of healthy comm_s (module docstring)."""
    bursts = [w for w in windows if w.burst]
    burst_comm, healthy_comm = [], []
    for s in steps:
        if s.get("comm_s") is None:
            continue
        if any(w.overlaps(s) for w in bursts):
            burst_comm.append(float(s["comm_s"]))
        elif _healthy(s, windows):
            healthy_comm.append(float(s["comm_s"]))
    p99, p50 = percentile(burst_comm, 99), percentile(healthy_comm, 50)
    value = p99 / p50 if bursts and p99 is not None and p50 else None
    return {"value": value, "p99_burst_comm_s": p99, "p50_healthy_comm_s": p50,
            "burst_rounds": len(burst_comm), "healthy_rounds": len(healthy_comm)}


def time_lost(steps: Iterable[Mapping[str, Any]], windows: Sequence[Window],
              rtt_s: float | None = None) -> list[dict[str, Any]]:
    """Extra step time over each window vs the healthy median, in s and RTTs (docstring)."""
    jobs = job_steps(steps)
    healthy = [j["step_s"] for j in jobs if _healthy(j, windows)]
    median = statistics.median(healthy) if healthy else None
    out = []
    for w in windows:
        hit = [j for j in jobs if w.overlaps(j)]
        lost = None
        if hit and median is not None:
            lost = sum(j["step_s"] - median for j in hit)
        out.append({"rep": w.rep, "kind": w.kind, "what": dict(w.what), "start_s": w.start_s,
                    "end_s": None if math.isinf(w.end_s) else w.end_s, "steps": len(hit),
                    "healthy_step_s": median, "lost_s": lost,
                    "lost_rtts": lost / rtt_s if lost is not None and rtt_s else None})
    return out


def time_to_accuracy(evals: Iterable[Mapping[str, Any]], target: float,
                     key: str = "accuracy", higher_is_better: bool = True) -> float | None:
    """The first ``t_s`` at which ``key`` reached ``target`` (None: never).

    For a loss target pass ``key="loss", higher_is_better=False``.
    """
    for e in sorted(evals, key=lambda e: e["t_s"]):
        v = e.get(key)
        if v is not None and (v >= target if higher_is_better else v <= target):
            return float(e["t_s"])
    return None


def _mean(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return statistics.fmean(vs) if vs else None


def _rounds(records: Sequence[Mapping[str, Any]], label: Any) -> list[dict]:
    """The rounds calibration is computed from: the runner's ``job_step`` records when
    there are any (the job's step, evaluation excluded; its network time is
    ``exposed_comm_s``, measured from the last rank's entry, and ``rank_bytes`` what one
    rank sent), else the per-rank ``step`` records as they are."""
    jobs = [r for r in records if r.get("type") == "job_step" and r.get("label") == label]
    if jobs:
        # modelled compute: a step lasts its modelled compute + exposed communication
        return [{**j, "comm_s": j.get("exposed_comm_s"), "bytes": j.get("rank_bytes"),
                 "step_s": j.get("model_step_s", j["step_s"]), "rank": 0} for j in jobs]
    return [dict(r) for r in records if r.get("type") == "step" and r.get("label") == label]


def calibration(records: Iterable[Mapping[str, Any]], rtt_s: float | None = None) -> dict:
    """The calibration record of a run from its records (format in the module docstring).

    ``rtt_s`` applies to labels whose meta record gives none. Event records without a
    label apply to every label.
    """
    records = list(records)
    metas = {r.get("label"): r for r in records if r.get("type") == "meta"}
    labels = list(dict.fromkeys(r.get("label") for r in records
                                if r.get("type") in ("meta", "step", "job_step")))
    events = [r for r in records if r.get("type") == "event"]
    experiment = next((m.get("experiment", {}).get("name") for m in metas.values()
                       if isinstance(m.get("experiment"), Mapping)), None)
    variants: dict[str, Any] = {}
    for label in labels:
        meta = metas.get(label, {})
        steps = _rounds(records, label)
        windows = failure_windows(e for e in events if e.get("label") in (label, None))
        rtt = meta.get("rtt_s") if meta.get("rtt_s") is not None else rtt_s
        transport = meta.get("transport")
        if isinstance(transport, Mapping):
            transport = transport.get("name")
        lost = time_lost(steps, windows, rtt)
        failures = [f for f in lost if f["kind"] != BURST_KIND]
        variants[str(label)] = {
            "transport": transport,
            "rtt_s": rtt,
            "line_rate": line_rate_fraction(steps, windows, meta.get("bytes_per_step"),
                                            meta.get("bottleneck_mbit")),
            "tail_inflation": tail_inflation(steps, windows),
            "failures": lost,
            "lost_s_per_failure": _mean(f["lost_s"] for f in failures),
            "lost_rtts_per_failure": _mean(f["lost_rtts"] for f in failures),
        }
    return {"format": CALIBRATION_FORMAT, "experiment": experiment, "generated": time.time(),
            "variants": variants}
