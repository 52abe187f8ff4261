"""Gradient averaging for data-parallel training, plugged into DDP as a communication hook.

``GradSync`` is what DDP calls for every gradient bucket (``register_comm_hook``):
it averages the bucket over the ranks, synchronously, and returns a completed
future, so any ``nn.Module`` trains unchanged. Two backends:

``transport``
    our collectives (workloads/collectives/ops.py) over a ``TransportComm`` (MRC, RC,
    DBLP). With DBLP, each round is a bounded-loss transpose all-reduce whose
    tolerance comes from a policy (workloads/collectives/phase.py) fed with the training
    loop's signals of the *previous* round (step, epoch, learning rate, and the
    norm of the averaged gradient, identical on every rank), so every rank picks
    the same bound for the same round, as DBLP requires.
``gloo``
    torch's own all-reduce on a gloo process group (TCP over the same fabric):
    the baseline.

Every round leaves a record (``rounds``, a dict per bucket exchange; it stays in
the worker process): when this rank entered and left the exchange
(CLOCK_MONOTONIC, shared by all processes of the machine), the bytes, the
tolerance and its reason (``why``), the delivered fraction and the lost entries.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from transports.core.bound import LossBound
from workloads.collectives import ops as collectives
from workloads.collectives.comm import drive
from workloads.collectives.phase import OptiReduceDeadline, Signals
from workloads.collectives.schedules import block_bounds
from workloads.collectives.transpose import transpose_allreduce
from workloads.experiment.dblp import DblpConfig

# The settings' one definition is workloads.experiment.dblp.DblpConfig; this name stays for callers.
DblpOptions = DblpConfig


class GradSync:
    """The DDP comm hook state and callable (``ddp.register_comm_hook(sync, sync.hook)``)."""

    def __init__(self, backend: str, world: int, comm: Any = None, pg: Any = None,
                 collective: str = "ring", groups: Any = None,
                 dblp: DblpConfig | None = None) -> None:
        if backend not in ("transport", "gloo"):
            raise ValueError(f"backend={backend!r}: use 'transport' or 'gloo'")
        self.backend, self.world, self.comm, self.pg = backend, world, comm, pg
        self.collective = collective
        self.groups = None if groups is None else [list(g) for g in groups]
        self.dblp = dblp
        self.policy: Any = None
        self.deadline: Any = None  # OptiReduce's agreed per-round deadline
        if dblp is not None:
            policy = dblp.policy_object()
            if isinstance(policy, OptiReduceDeadline):
                self.deadline = policy
            else:
                self.policy = policy
        self.residual: dict[int, np.ndarray] = {}  # error feedback per bucket: not arrived
        self.last_norm: float | None = None  # the averaged gradient's norm, last step
        self._norm_sq = 0.0  # this step's, summed over buckets
        self._bound: LossBound | None = None  # this step's (every bucket, every rank)
        self._bound_rec: dict = {}
        self.rounds: list[dict] = []

    def set_signals(self, step: int, epoch: int, lr: float) -> None:
        """What the loop knows before this step's exchange; fixes the step's loss bound.

        The policy sees the norm of the previous step's averaged gradient, identical on
        every rank, so all ranks pick the same bound. Before any norm exists (the first
        step) the round is reliable.
        """
        if self._norm_sq > 0 or self.rounds:
            self.last_norm = math.sqrt(self._norm_sq)
        self._norm_sq = 0.0
        d = self.dblp
        if d is None:
            self._bound, self._bound_rec = None, {}
        elif d.policy == "optireduce":  # every chunk wanted, the round ends at the deadline
            dl = self.deadline.deadline_s
            self._bound = LossBound(0.0, dl)
            self._bound_rec = {"tolerance": 0.0, "why": "deadline", "deadline_s": dl}
        elif self.last_norm is None:
            self._bound = LossBound(0.0, d.deadline_s)
            self._bound_rec = {"tolerance": 0.0, "why": "no_signal_yet"}
        else:
            self._bound_rec = self.policy.update(
                Signals(step=step, epoch=epoch, lr=lr, grad_norm=self.last_norm))
            self._bound = LossBound(self._bound_rec["tolerance"], d.deadline_s)

    def hook(self, state: Any, bucket: Any) -> torch.futures.Future:
        """DDP comm hook: average ``bucket.buffer()`` in place; a completed future."""
        buf = bucket.buffer()
        self.exchange(buf, bucket.index())
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(buf)
        return fut

    def exchange(self, buf: torch.Tensor, bucket: int = 0) -> dict:
        """Average ``buf`` (a flat float32 tensor) over the ranks in place; the round record."""
        t_enter = time.monotonic()
        rec: dict = {"t_enter": t_enter, "bucket": bucket}
        own_sq = None
        if self.backend == "gloo":
            self.pg.allreduce([buf]).wait()
            buf.div_(self.world)
            # What a ring all-reduce sends per rank (gloo picks its own algorithm).
            rec["bytes"] = int(2 * (self.world - 1) / self.world * buf.numel() * 4)
        elif self._bound is not None:
            arr = buf.numpy()
            bound, d = self._bound, self.dblp
            assert d is not None  # set_signals sets a bound only with DBLP options
            rec.update(tolerance=self._bound_rec["tolerance"], why=self._bound_rec.get("why"))
            ef = d.fill == "error_feedback"
            if ef:
                res_buf = self.residual.get(bucket)
                if res_buf is None or res_buf.size != arr.size:
                    res_buf = self.residual[bucket] = np.zeros(arr.size, dtype=np.float32)
                arr += res_buf
            # A lost contribution counts as zero in the sum (zeros fill); with error
            # feedback its sender adds it to its next round, so nothing is lost.
            res = drive(transpose_allreduce(
                self.comm, arr, average=False, bound=bound,
                bounded_gather=d.bounded_gather), self.comm)
            arr /= self.world
            if ef:
                assert res_buf is not None  # set above, with error feedback
                res_buf[:] = 0.0
                if res.sent_values is not None:
                    for lo, hi in res.unsent:
                        res_buf[lo:hi] = res.sent_values[lo:hi]
            rec.update(delivered=min(res.delivered, default=1.0), lost_entries=res.lost_pairs,
                       estimated_entries=sum(b - a for a, b in res.gather_lost))
            rec["bytes"] = res.bytes_sent
            if d.bounded_gather:
                # Entries estimated locally differ between ranks: the norm the policy
                # sees must come from values every rank shares (each owner's block).
                own_sq = self._shared_norm_sq(arr)
            if self.deadline is not None:
                self._agree_deadline(time.monotonic() - t_enter,
                                     min(res.delivered, default=1.0))
        else:
            res = drive(self._reliable(buf.numpy()), self.comm)
            rec.update(delivered=1.0, lost_entries=0)
            rec["bytes"] = res.bytes_sent
        rec["t_exit"] = time.monotonic()
        self._norm_sq += own_sq if own_sq is not None else float(
            torch.linalg.vector_norm(buf)) ** 2
        self.rounds.append(rec)
        return rec

    def _shared_norm_sq(self, arr: np.ndarray) -> float:
        """The squared norm of ``arr`` from each owner's exact block, all-gathered."""
        lo, hi = block_bounds(arr.size, self.world)[self.comm.rank]
        sq = np.zeros(self.world, dtype=np.float32)
        sq[self.comm.rank] = np.dot(arr[lo:hi], arr[lo:hi])
        drive(collectives.all_gather(self.comm, sq), self.comm)
        return float(np.sum(sq, dtype=np.float64))

    def _agree_deadline(self, elapsed_s: float, ratio: float) -> None:
        """OptiReduce: every rank proposes elapsed / completion ratio; the next round's
        deadline is the median proposal, computed by every rank from the same gathered
        (float32) proposals, so all agree to the bit."""
        props = np.zeros(self.world, dtype=np.float32)
        props[self.comm.rank] = self.deadline.propose(elapsed_s, ratio)
        drive(collectives.all_gather(self.comm, props), self.comm)
        cfg = self.deadline.cfg
        self.deadline.deadline_s = min(cfg.max_s, max(cfg.min_s, float(np.median(props))))

    def _reliable(self, arr: np.ndarray):
        if self.collective == "hierarchical":
            assert self.groups is not None  # worker_configs gives hierarchical its groups
            return collectives.hierarchical_allreduce(self.comm, arr, self.groups, average=True)
        if self.collective == "transpose":
            return transpose_allreduce(self.comm, arr, average=True)
        return collectives.ring_allreduce(self.comm, arr, average=True)
