"""One point of a sweep, run where it lands: what crosses to the node and what comes back.

:func:`run_point` is the body of a point's task (a Ray task on a cluster node, or a plain
call for the benchmark's baseline): the base experiment file with the point's overrides,
validated again on the node by the same code as ``emu run --set`` (and its id checked
against the head's, so a node whose project files differ is caught, not believed), then
``run_experiment`` into a temporary directory whose files come back as bytes in the
:class:`PointOutcome` (no shared filesystem is assumed), the directory removed.

A run that fails (a worker's error, a refused run) returns its files and its error: the
head records the attempt and decides on a retry. Ctrl-C (Ray's cancel raises
KeyboardInterrupt in the task) unwinds the run's own ``with Fabric``, so the fabric is
torn down on its node, and propagates.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LOG_NAME", "PointOutcome", "PointTask", "collect_files", "run_point"]

LOG_NAME = "point.log"  # the run's progress lines, next to its results


@dataclass(frozen=True)
class PointTask:
    """What a node needs to run a point: the base experiment file (an absolute path: the
    project sits at the same path on every node), the overrides, and the id the head
    computed for them."""

    id: str
    index: int
    label: str
    base: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PointOutcome:
    """What comes back from a point's run: ``files`` (path relative to the run's results
    directory -> bytes), ``error`` (None when the run succeeded) and its ``traceback``,
    where it ran (``node``: host name and, on Ray, the node id) and when, on that node's
    clock (``start`` and ``end``: Unix time around the whole task, fabric included)."""

    id: str
    ok: bool
    files: Mapping[str, bytes]
    node: str
    start: float
    end: float
    error: str | None = None
    traceback: str | None = None
    pid: int = 0

    @property
    def seconds(self) -> float:
        return self.end - self.start


def collect_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` as (relative POSIX path -> bytes)."""
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def run_point(task: PointTask, node: str | None = None) -> PointOutcome:
    """Run one point on this machine (as root: it builds a fabric) and return its files.

    ``node`` names where this runs in the outcome (default: the host name).
    """
    # Imported here: the head reads outcomes without loading the runner.
    from commands.sweep.grid import point_id
    from workloads import experiment
    from workloads.training.runner import run_experiment

    start = time.time()
    where = node or socket.gethostname()
    lines: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="sae-sweep-"))
    error = tb = None
    try:
        try:
            exp = experiment.with_overrides(experiment.load(task.base), dict(task.overrides))
            got = point_id(exp)
            if got != task.id:
                raise RuntimeError(
                    f"point {task.index} resolves to id {got} on {where} but {task.id} on the "
                    "head: this node's project (or experiment files) differ from the head's")
            # A Python timeline that does more than declare events runs here, before the
            # fabric is built, as `emu run` does it.
            _ = exp.events
            run_experiment(exp, tmp / "run", say=lines.append)
        except Exception as e:  # the point's failure: recorded and retried by the head
            error = f"{type(e).__name__}: {e}"
            tb = traceback.format_exc()
            lines.append(tb)
        files = collect_files(tmp / "run")
        files[LOG_NAME] = ("\n".join(lines) + "\n").encode()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return PointOutcome(id=task.id, ok=error is None, files=files, node=where, start=start,
                        end=time.time(), error=error, traceback=tb, pid=os.getpid())
