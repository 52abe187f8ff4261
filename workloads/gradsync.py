"""Gradient averaging for data-parallel training, plugged into DDP as a communication hook.

``GradSync`` is what DDP calls for every gradient bucket (``register_comm_hook``):
it averages the bucket over the ranks, synchronously, and returns a completed
future, so any ``nn.Module`` trains unchanged. Two backends:

``transport``
    our collectives (workloads/collectives.py) over a ``TransportComm`` (MRC, RC,
    DBLP). With DBLP, each round is a bounded-loss transpose all-reduce whose
    tolerance comes from a policy (transports/phase.py) fed with the training
    loop's signals of the *previous* round (step, epoch, learning rate, and the
    norm of the averaged gradient, identical on every rank), so every rank picks
    the same bound for the same round, as DBLP requires.
``gloo``
    torch's own all-reduce on a gloo process group (TCP over the same fabric):
    the baseline.

Every round leaves a record (``rounds``): when this rank entered and left the
exchange (CLOCK_MONOTONIC, shared by all processes of the machine), the bytes,
the tolerance, the delivered fraction and the lost entries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from transports.dblp import LossBound
from transports.phase import FixedTolerance, PhaseAware, Signals
from workloads import collectives
from workloads.comm import drive


@dataclass(frozen=True)
class DblpOptions:
    """Bounded-loss settings of a DBLP run (see workloads/experiment.py)."""

    policy: str = "phase_aware"  # "phase_aware" | "fixed" | "optireduce"
    tolerance: float | None = 0.05
    fill: str = "error_feedback"
    deadline_s: float | None = None
    margin_s: float = 1e-3  # optireduce: added to each proposal
    bounded_gather: bool = False  # the all-gather bounded too (replicas may drift)
    phase: dict | None = None  # PhaseAwareConfig fields


class GradSync:
    """The DDP comm hook state and callable (``ddp.register_comm_hook(sync, sync.hook)``)."""

    def __init__(self, backend: str, world: int, comm: Any = None, pg: Any = None,
                 collective: str = "ring", groups: list[list[int]] | None = None,
                 dblp: DblpOptions | None = None) -> None:
        if backend not in ("transport", "gloo"):
            raise ValueError(f"backend={backend!r}: use 'transport' or 'gloo'")
        self.backend, self.world, self.comm, self.pg = backend, world, comm, pg
        self.collective = collective
        self.groups = groups
        self.dblp = dblp
        self.policy: Any = None
        self.deadline: Any = None  # OptiReduce's agreed per-round deadline
        if dblp is not None:
            if dblp.policy == "fixed":
                self.policy = FixedTolerance(dblp.tolerance)
            elif dblp.policy == "phase_aware":
                from transports.phase import PhaseAwareConfig

                self.policy = PhaseAware(PhaseAwareConfig(**(dblp.phase or {})))
            elif dblp.policy == "optireduce":
                from transports.phase import OptiReduceConfig, OptiReduceDeadline

                self.deadline = OptiReduceDeadline(OptiReduceConfig(
                    margin_s=dblp.margin_s, initial_s=dblp.deadline_s))
            else:
                raise ValueError(f"dblp policy {dblp.policy!r}: use phase_aware, fixed or "
                                 "optireduce")
        self.signals: Signals | None = None
        self.residual: np.ndarray | None = None  # error feedback: what did not arrive
        self.last_norm = 0.0
        self.rounds: list[dict] = []

    def set_signals(self, step: int, epoch: int, lr: float) -> None:
        """What the loop knows before this step's exchange (the norm is the last round's)."""
        self.signals = Signals(step=step, epoch=epoch, lr=lr, grad_norm=self.last_norm)

    def _bound(self) -> tuple[LossBound | None, dict]:
        d = self.dblp
        if d is None:
            return None, {}
        if d.policy == "optireduce":  # every chunk wanted, the round ends at the deadline
            dl = self.deadline.deadline_s
            return LossBound(0.0, dl, d.fill), {"tolerance": 0.0, "why": "deadline",
                                                "deadline_s": dl}
        assert self.signals is not None, "set_signals() must run before each step"
        rec = self.policy.update(self.signals)
        return LossBound(rec["tolerance"], d.deadline_s, d.fill), rec

    def hook(self, state: Any, bucket: Any) -> torch.futures.Future:
        """DDP comm hook: average ``bucket.buffer()`` in place; a completed future."""
        buf = bucket.buffer()
        rec = self.exchange(buf)
        rec["bucket"] = bucket.index()
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(buf)
        return fut

    def exchange(self, buf: torch.Tensor) -> dict:
        """Average ``buf`` (a flat float32 tensor) over the ranks in place; the round record."""
        t_enter = time.monotonic()
        rec: dict = {"t_enter": t_enter}
        if self.backend == "gloo":
            self.pg.allreduce([buf]).wait()
            buf.div_(self.world)
            # What a ring all-reduce sends per rank (gloo picks its own algorithm).
            rec["bytes"] = int(2 * (self.world - 1) / self.world * buf.numel() * 4)
        else:
            arr = buf.numpy()
            bound, prec = self._bound()
            if bound is not None:
                rec.update(tolerance=prec["tolerance"], why=prec.get("why"))
                ef = self.dblp.fill == "error_feedback"
                if ef:
                    if self.residual is None or self.residual.size != arr.size:
                        self.residual = np.zeros(arr.size, dtype=np.float32)
                    arr += self.residual
                # A lost contribution counts as zero in the sum (zeros fill); with error
                # feedback its sender adds it to its next round, so nothing is lost.
                res = drive(collectives.transpose_allreduce(
                    self.comm, arr, average=False, bound=bound,
                    bounded_gather=self.dblp.bounded_gather), self.comm)
                arr /= self.world
                if ef:
                    self.residual[:] = 0.0
                    if res.sent_values is not None:
                        for lo, hi in res.unsent:
                            self.residual[lo:hi] = res.sent_values[lo:hi]
                rec.update(delivered=min(res.delivered, default=1.0),
                           lost_entries=res.lost_pairs,
                           estimated_entries=sum(b - a for a, b in res.gather_lost))
                if self.deadline is not None:
                    self._agree_deadline(time.monotonic() - t_enter,
                                         min(res.delivered, default=1.0))
            else:
                res = drive(self._reliable(arr), self.comm)
                rec.update(delivered=1.0, lost_entries=0)
            rec["bytes"] = res.bytes_sent
        rec["t_exit"] = time.monotonic()
        self.last_norm = float(torch.linalg.vector_norm(buf))
        self.rounds.append(rec)
        return rec

    def _agree_deadline(self, elapsed_s: float, ratio: float) -> None:
        """OptiReduce: every rank proposes elapsed / completion ratio; the next round's
        deadline is the median proposal (exchanged with a reliable all-gather)."""
        props = np.zeros(self.world, dtype=np.float32)
        props[self.comm.rank] = self.deadline.propose(elapsed_s, ratio)
        drive(collectives.all_gather(self.comm, props), self.comm)
        peers = [float(p) for i, p in enumerate(props) if i != self.comm.rank]
        self.deadline.update(elapsed_s, ratio, peers)

    def _reliable(self, arr: np.ndarray):
        if self.collective == "hierarchical":
            return collectives.hierarchical_allreduce(self.comm, arr, self.groups, average=True)
        if self.collective == "transpose":
            return collectives.transpose_allreduce(self.comm, arr, average=True)
        return collectives.ring_allreduce(self.comm, arr, average=True)
