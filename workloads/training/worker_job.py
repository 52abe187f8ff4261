"""The worker processes of one training run: launched, their records streamed, gated.

Its one job is the process side of a run: :class:`WorkerJob` starts
``workloads.training.worker`` in every rank's namespace (``nsenter``, as children of
``emu.launch``) with its :class:`~workloads.records.WorkerConfig`, decodes each rank's
records on that rank's reader thread and hands them on, holds every rank at a gate
until the caller has applied what is due at that step boundary, and names the first
failure (a worker's error record, a non-zero exit, malformed records, a timeout).
What the records mean and when a gate is due is the caller's (workloads/training/run.py).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from emu.errors import EmuError
from emu.fabric import Fabric
from emu.launch import Child, ChildGroup
from workloads.recordcodec import decode_obj, encode
from workloads.records import GateReached, Release, WorkerConfig, WorkerError

RESUME_S = 0.005  # from a gate's release to the common instant the ranks resume at
# Quiet torch's C++ logging, one thread per rank (the ranks share the cores), and
# records that leave at once (they are streamed, not read at exit).
_WORKER_ENV = {"TORCH_CPP_LOG_LEVEL": "ERROR", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


class WorkerJob:
    """The workers of one run (children of ``emu.launch``) and their gates."""

    def __init__(self, fab: Fabric, cfgs: list[WorkerConfig],
                 on_record: Callable[[Any], None]) -> None:
        self.failed: WorkerError | None = None
        self.on_record = on_record
        self.lock = threading.Lock()
        self.at_gate: dict[int, set[int]] = {}  # step -> ranks waiting after it
        self.gates: queue.Queue[int] = queue.Queue()  # steps every rank waits after
        self.group = ChildGroup()
        try:
            for cfg in cfgs:
                self.group.spawn(
                    f"worker {cfg.rank}",
                    fab.in_netns(cfg.host, sys.executable, "-m", "workloads.training.worker"),
                    config=encode(cfg), env=_WORKER_ENV,
                    on_record=partial(self._record, cfg.rank))
        except BaseException:
            self.group.kill()
            raise
        self.children = list(self.group)

    def _fail(self, rec: WorkerError) -> None:
        with self.lock:
            self.failed = self.failed or rec

    def _record(self, rank: int, child: Child, data: dict[str, Any]) -> None:
        """One record of ``rank`` (on its reader thread)."""
        try:
            rec = decode_obj(data)
        except ValueError as e:
            self._fail(WorkerError(rank=rank, error=f"a malformed record: {e}"))
            return
        if isinstance(rec, GateReached):
            with self.lock:
                waiting = self.at_gate.setdefault(rec.step, set())
                waiting.add(rank)
                if len(waiting) == len(self.children):
                    del self.at_gate[rec.step]
                    self.gates.put(rec.step)
            return
        if isinstance(rec, WorkerError):
            self._fail(rec)
        try:
            self.on_record(rec)
        except Exception as e:  # noqa: BLE001 - the run ends with it; keep draining
            self._fail(WorkerError(rank=rank, error=f"recording a {type(rec).__name__} "
                                                    f"failed: {e!r}"))

    def wait_ready(self, timeout: float) -> None:
        try:
            self.group.wait_ready(timeout)
        except EmuError as e:
            raise EmuError(self._why(None) if self.failed else str(e)) from None

    def _why(self, rank: int | None) -> str:
        if self.failed:
            return f"worker {self.failed.rank} failed: {self.failed.error}"
        assert rank is not None
        return self.children[rank].why(f"exited {self.children[rank].poll()}")

    def start(self, t0: float) -> None:
        self.group.start_at(t0)

    def wait(self, timeout: float, on_gate: Callable[[int], int | None] | None = None,
             on_release: Callable[[int, float], None] | None = None) -> None:
        """Until every worker exited; raises EmuError naming the first failure. When every
        rank waits at the gate after a step, ``on_gate(step)`` runs (it applies what is
        due there) and returns the next gate; then the ranks are released together, to
        resume at one instant, which ``on_release(step, instant)`` learns just before."""
        end = time.monotonic() + timeout
        while True:
            codes = [c.poll() for c in self.children]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if self.failed or bad:
                for r in bad:  # its records end at EOF, after the error record
                    self.children[r].wait(5.0)
                raise EmuError(self._why(bad[0] if bad else None))
            if all(c == 0 for c in codes):
                for c in self.children:
                    c.wait(5.0)
                broken = [c for c in self.children if c.malformed]
                if broken:
                    raise EmuError(f"{broken[0].name} wrote {broken[0].malformed} malformed "
                                   "records")
                return
            if time.monotonic() > end:
                raise EmuError(f"workers still running after {timeout:.0f} s")
            try:
                step = self.gates.get(timeout=0.05)
            except queue.Empty:
                continue
            if on_gate is None:
                raise EmuError(f"the workers wait at a gate after step {step} that nothing "
                               "fires at")
            nxt = on_gate(step)
            t_resume = time.monotonic() + RESUME_S
            if on_release is not None:
                on_release(step, t_resume)
            line = encode(Release(step, t_resume, nxt))
            for c in self.children:
                c.send_line(line)

    def kill(self) -> None:
        self.group.kill()
