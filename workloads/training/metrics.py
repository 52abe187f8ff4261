"""Metrics of a run from its result records (pure): failure windows, fraction of line rate,
tail inflation, time lost per failure, time to accuracy, and the calibration record
(version 1) built from them.

The records are those of ``results.jsonl`` (workloads/training/results.py documents them).
Nothing here reads or writes a file: ``ResultsWriter.finish()`` writes the calibration
record as ``calibration.json``; workloads/training/summary.py and workloads/training/plots.py use
the
metrics. The explorer (explorer/calibration.py) reads the record back.

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

import math
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "CALIBRATION_FORMAT", "Window", "calibration", "failure_windows", "job_steps",
    "line_rate_fraction", "percentile", "tail_inflation", "time_lost", "time_to_accuracy",
]

CALIBRATION_FORMAT = "scaleacross-emu/calibration/1"
BURST_KIND = "microburst"  # the failure kind whose windows are burst windows

# Keys of an event record that say when/what happened rather than which failure it is.
_EVENT_BOOKKEEPING = frozenset({"chosen", "chosen_rx_packets", "all_rx_packets",
                                "type", "label", "rep", "t_s", "at", "fired", "late_ms",
                                "action", "error", "applied", "step", "at_step", "train_s",
                                "clock", "burst_start"})


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
