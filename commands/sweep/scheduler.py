"""Points as Ray tasks: submitted up to a bound, retried, recorded as they finish.

:func:`run_points` submits every point still to run as a task that needs one fabric slot
(and no CPU of Ray's accounting: the slot is the unit, a node's cores all go to its one
fabric), at most ``max_parallel`` at a time, and waits for whichever finishes first. Each
outcome is written to the store at once (store.py): a done point's files, or a failed
attempt's with its error. A failed attempt (the run raised, or its worker or node died)
is submitted again, up to ``retries`` times, then recorded as failed; the others go on.
Ray's own task retries are off, so every attempt and its cause are on record.

Ctrl-C (or SIGTERM or SIGHUP, which `emu` turns into it) cancels the running tasks: Ray raises
KeyboardInterrupt inside each, the run's ``with Fabric`` tears its fabric down on its
node, and the head waits up to ``cancel_grace_s`` for that (a point that finishes in
the meantime is kept). A second Ctrl-C stops waiting and kills the tasks (`emu clean`
on their nodes then removes what they left). What is done stays done: ``--resume``
continues. The progress line counts points done / running / failed with an ETA from
the median time of the points done in this session.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from commands.sweep.cluster import SLOT
from commands.sweep.grid import Point
from commands.sweep.store import Attempt, SweepStore
from commands.sweep.task import PointOutcome, PointTask, run_point

__all__ = ["SweepCounts", "run_points"]

HEARTBEAT_S = 30.0  # a progress line at least this often while points run


@dataclass(frozen=True)
class SweepCounts:
    """How a session ended: points ``done`` (this session and before), ``failed`` (out of
    retries), ``retried`` (attempts run again), ``cancelled`` (interrupted)."""

    total: int
    done: int
    failed: int
    retried: int
    cancelled: int
    interrupted: bool = False
    point_seconds: tuple[float, ...] = ()  # head-side time of each done attempt


def _task_body(task: PointTask) -> PointOutcome:
    """The Ray task: the point on this node, named by host and Ray node id."""
    import ray

    node = f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:12]}"
    return run_point(task, node)


@dataclass(frozen=True)
class _Flight:
    point: Point
    attempt: int
    submitted: float


def _fmt_s(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class _Progress:
    """The progress line: done / running / failed, with an ETA."""

    def __init__(self, total: int, done: int, parallel: int, say: Callable[[str], None]):
        self.total, self.done, self.parallel, self.say = total, done, max(1, parallel), say
        self.failed = self.retried = 0
        self.durations: list[float] = []
        self.last = 0.0

    def line(self, running: dict[Any, _Flight], pending: int) -> str:
        text = (f"sweep: {self.done}/{self.total} done, {len(running)} running, "
                f"{self.failed} failed")
        if self.retried:
            text += f" ({self.retried} retried)"
        if self.durations and (pending or running):
            med = statistics.median(self.durations)
            now = time.time()
            left = pending * med + sum(max(0.0, med - (now - f.submitted))
                                       for f in running.values())
            text += f", ETA {_fmt_s(left / min(self.parallel, pending + len(running)))}"
        return text

    def show(self, running: dict[Any, _Flight], pending: int, force: bool = True) -> None:
        now = time.monotonic()
        if force or now - self.last >= HEARTBEAT_S:
            self.last = now
            self.say(self.line(running, pending))


def run_points(points: Sequence[Point], todo: Sequence[Point], store: SweepStore, base: str,
               session: int, *, max_parallel: int, retries: int,
               say: Callable[[str], None] = print,
               cancel_grace_s: float = 120.0) -> SweepCounts:
    """Run ``todo`` (points of the grid ``points`` not done yet) on the connected Ray
    cluster (see the module docstring). Returns the counts; on Ctrl-C, cancels, records,
    and raises KeyboardInterrupt."""
    import ray
    from ray.exceptions import RayError, TaskCancelledError

    remote = ray.remote(num_cpus=0, resources={SLOT: 1}, max_retries=0,
                        retry_exceptions=False)(_task_body)
    pending: deque[tuple[Point, int]] = deque((p, 1) for p in todo)
    running: dict[Any, _Flight] = {}
    prog = _Progress(len(points), len(points) - len(todo), max_parallel, say)
    cancelled = 0

    def finish(ref: Any, flight: _Flight, cancelling: bool = False,
               timeout: float | None = None) -> None:
        nonlocal cancelled
        p = flight.point
        outcome: PointOutcome | None = None
        error = tb = None
        try:
            outcome = ray.get(ref, timeout=timeout)
        except TaskCancelledError:
            status = "cancelled"
        except RayError as e:  # the worker or its node died, or the task itself broke
            status, error = "error", f"{type(e).__name__}: {e}"
        if outcome is not None:
            status = "done" if outcome.ok else "error"
            error, tb = outcome.error, outcome.traceback
        elif cancelling and status == "error":
            status = "cancelled"
        attempt = Attempt(
            id=p.id, index=p.index, attempt=flight.attempt, session=session, status=status,
            node=outcome.node if outcome else None, start=outcome.start if outcome else None,
            end=outcome.end if outcome else None, submitted=flight.submitted,
            finished=time.time(), error=error, traceback=tb)
        store.record(attempt, outcome)
        if status == "done":
            prog.done += 1
            prog.durations.append(attempt.finished - flight.submitted)
            say(f"point {p.index} ({p.label}) done on {attempt.node} in "
                f"{attempt.finished - flight.submitted:.1f} s")
        elif status == "cancelled":
            cancelled += 1
        elif flight.attempt <= retries and not cancelling:
            prog.retried += 1
            say(f"point {p.index} ({p.label}) failed (attempt {flight.attempt}): {error}; "
                "retrying")
            pending.append((p, flight.attempt + 1))
        else:
            prog.failed += 1
            store.failed(p, flight.attempt, error)
            say(f"point {p.index} ({p.label}) FAILED after {flight.attempt} attempt(s): "
                f"{error}")

    try:
        changed = True
        while pending or running:
            while pending and len(running) < max_parallel:
                p, n = pending.popleft()
                task = PointTask(id=p.id, index=p.index, label=p.label, base=base,
                                 overrides=dict(p.overrides))
                running[remote.remote(task)] = _Flight(p, n, time.time())
            prog.show(running, len(pending), force=changed)
            ready, _ = ray.wait(list(running), num_returns=1, timeout=5.0)
            for ref in ready:
                finish(ref, running.pop(ref))
            changed = bool(ready)
        prog.show(running, 0)
    except KeyboardInterrupt:
        _cancel(ray, running, finish, say, cancel_grace_s)
        raise
    return SweepCounts(total=len(points), done=prog.done, failed=prog.failed,
                       retried=prog.retried, cancelled=cancelled,
                       point_seconds=tuple(prog.durations))


def _cancel(ray: Any, running: dict[Any, _Flight],
            finish: Callable[..., None], say: Callable[[str], None], grace_s: float) -> None:
    """Cancel running tasks, letting their fabrics tear down; record how each ended."""
    if not running:
        return
    say(f"interrupted: cancelling {len(running)} running point(s); their fabrics tear "
        f"down on their nodes (up to {grace_s:.0f} s; Ctrl-C again to stop waiting)")
    for ref in running:
        ray.cancel(ref, force=False)  # KeyboardInterrupt inside the task
    deadline = time.monotonic() + grace_s
    try:
        while running and time.monotonic() < deadline:
            ready, _ = ray.wait(list(running), num_returns=len(running), timeout=1.0)
            for ref in ready:
                finish(ref, running.pop(ref), cancelling=True)
    except KeyboardInterrupt:
        pass
    for ref, flight in list(running.items()):
        ray.cancel(ref, force=True)  # the worker is killed: `emu clean` on its node
        say(f"point {flight.point.index} did not stop in time: its worker was killed "
            "(run `emu clean` on its node)")
        finish(ref, running.pop(ref), cancelling=True, timeout=10.0)
