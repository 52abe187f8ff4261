"""Pipeline-parallel training over the transports: one model stage per rank (GPipe).

A step splits the batch into ``microbatches``; stage k runs every microbatch's
forward (receiving activations from k-1 and sending its output to k+1), then
every backward in reverse order (receiving the gradient of its output from k+1
and sending the gradient of its input to k-1). The last stage computes the
loss (each microbatch's mean loss / microbatches, so the summed gradients are
the full batch's). Activation shapes are known on every rank because every
rank builds the whole model (``split_stages`` only hands out views) and runs a
dry forward of one microbatch at start.

Everything is a generator over ``Comm`` handles (workloads/collectives/comm.py), like the
collectives; the time spent waiting on handles is the step's communication.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from workloads.collectives.comm import Comm, Handle


@dataclass(frozen=True)
class StepResult:
    loss: float | None  # the last stage's batch loss; None elsewhere
    comm_s: float  # time spent waiting on transfers
    bytes: int


class PipelineStage:
    """Stage ``rank`` of ``size``; ``stages`` is every stage (the whole model)."""

    def __init__(self, stages: list[nn.Module], rank: int, comm: Comm,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        if len(stages) != comm.size:
            raise ValueError(f"{len(stages)} stages for {comm.size} ranks")
        self.stages = stages
        self.module = stages[rank]
        self.rank, self.size = rank, comm.size
        self.comm = comm
        self.loss_fn = loss_fn
        self._shapes: dict[tuple, list[tuple[int, ...]]] = {}

    def _out_shapes(self, x: torch.Tensor) -> list[tuple[int, ...]]:
        """Output shape of every stage for input ``x`` (a dry forward, cached by shape)."""
        key = (tuple(x.shape), x.dtype)
        if key not in self._shapes:
            shapes = []
            with torch.no_grad():
                h = x
                for s in self.stages:
                    h = s(h)
                    shapes.append(tuple(h.shape))
            self._shapes[key] = shapes
        return self._shapes[key]

    def _timed(self, handles: list[Handle], acc: list[float]
               ) -> Generator[list[Handle], None, None]:
        t = time.monotonic()
        yield handles
        acc[0] += time.monotonic() - t

    def train_step(self, x: torch.Tensor, y: torch.Tensor, microbatches: int,
                   pacer=None) -> Generator[list[Handle], None, StepResult]:
        """One training step (gradients accumulate in the stage's parameters)."""
        if microbatches < 1 or microbatches > len(x):
            raise ValueError(f"microbatches={microbatches} must be in 1..{len(x)}")
        k, last = self.rank, self.size - 1
        xs, ys = torch.tensor_split(x, microbatches), torch.tensor_split(y, microbatches)
        waited = [0.0]
        nbytes = 0
        sends: list[Handle] = []
        saved: list[tuple[torch.Tensor | None, torch.Tensor]] = []
        total_loss = 0.0
        for m in range(microbatches):
            if k == 0:
                inp = xs[m]
            else:
                shape = self._out_shapes(xs[m])[k - 1]
                buf = np.empty(shape, dtype=np.float32)
                yield from self._timed([self.comm.irecv(k - 1, buf.data.cast("B"))],
                                       waited)
                inp = torch.from_numpy(buf).requires_grad_(True)
            t = time.monotonic()
            out = self.module(inp)
            if k == last:
                loss = self.loss_fn(out, ys[m]) / microbatches
                total_loss += loss.item()
                saved.append((inp if k else None, loss))
            else:
                data = out.detach().numpy().tobytes()
                nbytes += len(data)
                sends.append(self.comm.isend(k + 1, data))
                saved.append((inp if k else None, out))
            if pacer is not None:
                pacer.pad(t, 1 / 3)  # a backward costs about twice a forward
        for m in reversed(range(microbatches)):
            saved_inp, out = saved[m]
            if k == last:
                t = time.monotonic()
                out.backward()
            else:
                g = np.empty(tuple(out.shape), dtype=np.float32)
                yield from self._timed([self.comm.irecv(k + 1, g.data.cast("B"))],
                                       waited)
                t = time.monotonic()
                out.backward(torch.from_numpy(g))
            if pacer is not None:
                pacer.pad(t, 2 / 3)
            if k > 0:
                # stages after the first saved their input, made to require a gradient
                assert saved_inp is not None and saved_inp.grad is not None
                data = saved_inp.grad.numpy().tobytes()
                nbytes += len(data)
                sends.append(self.comm.isend(k - 1, data))
        yield from self._timed(sends, waited)
        return StepResult(total_loss if k == last else None, waited[0], nbytes)

    def evaluate(self, evaluate: Callable[[nn.Module], dict]
                 ) -> Generator[list[Handle], None, dict | None]:
        """Gather every stage's parameters on the last stage and evaluate the whole model
        there; returns the metrics on the last stage, None elsewhere."""
        last = self.size - 1
        if self.rank != last:
            flat = torch.nn.utils.parameters_to_vector(self.module.parameters()).detach()
            yield [self.comm.isend(last, flat.numpy().tobytes())]
            return None
        handles, bufs = [], []
        for r in range(last):
            n = sum(p.numel() for p in self.stages[r].parameters())
            buf = np.empty(n, dtype=np.float32)
            bufs.append(buf)
            handles.append(self.comm.irecv(r, buf.data.cast("B")))
        yield handles
        with torch.no_grad():
            for r, buf in enumerate(bufs):
                torch.nn.utils.vector_to_parameters(torch.from_numpy(buf),
                                                    self.stages[r].parameters())
        return evaluate(nn.Sequential(*self.stages))
