"""GradSync's bounded rounds with error feedback conserve the gradient: over many
rounds, what was applied plus what is still owed equals what the ranks computed.

The ranks run in threads over an in-memory Comm double that loses chunks of bounded
messages (never more than the bound allows) and tells both ends exactly which, as
DBLP's STOP bitmap does; everything else is the real collective and hook code."""

from __future__ import annotations

import queue
import random
import threading

import numpy as np
import pytest
import torch

from transports.core.api import Completion
from workloads.collectives.comm import Handle
from workloads.training.gradsync import DblpOptions, GradSync

MTU = 64  # bytes per chunk: 16 floats, so a block has many chunks


class Hub:
    def __init__(self, size: int, loss: float, seed: int) -> None:
        self.q = {(a, b): queue.Queue() for a in range(size) for b in range(size) if a != b}
        self.loss, self.rng, self.lock = loss, random.Random(seed), threading.Lock()
        self.lost_chunks = 0

    def lose(self, nbytes: int, bound) -> tuple[int, ...]:
        if bound is None or bound.reliable:
            return ()
        n = max(1, -(-nbytes // MTU))
        with self.lock:
            cand = [i for i in range(n) if self.rng.random() < self.loss]
        keep = n - int(bound.tolerance * n)  # never below the bound
        lost = tuple(cand[:n - keep])
        self.lost_chunks += len(lost)
        return lost


class ThreadComm:
    def __init__(self, hub: Hub, rank: int, size: int) -> None:
        self.hub, self.rank, self.size, self.mtu_payload = hub, rank, size, MTU
        self.pending: list[tuple[Handle, memoryview]] = []

    def isend(self, peer, data, bound=None):
        data = bytes(data)
        lost = self.hub.lose(len(data), bound)
        self.hub.q[(self.rank, peer)].put((data, lost))
        h = Handle(peer, "send", len(data))
        h.completion = Completion(0, "send", True, len(data), 0.0, None,
                                  1 - len(lost) / max(1, -(-len(data) // MTU)), lost)
        return h

    def irecv(self, peer, buf, bound=None):
        h = Handle(peer, "recv", len(buf))
        self.pending.append((h, memoryview(buf).cast("B")))
        return h

    def wait(self, handles):
        for h, view in list(self.pending):
            if h not in handles:
                continue
            data, lost = self.hub.q[(h.peer, self.rank)].get(timeout=10)
            for i in range(0, len(data), MTU):
                if i // MTU not in lost:
                    view[i:i + MTU] = data[i:i + MTU]
            n = max(1, -(-len(data) // MTU))
            h.completion = Completion(0, "recv", True, len(data), 0.0, None,
                                      1 - len(lost) / n, lost)
            self.pending.remove((h, view))


@pytest.mark.parametrize("bounded_gather", [False, True])
def test_error_feedback_conserves_the_gradient(bounded_gather):
    size, n, rounds = 3, 1000, 12
    hub = Hub(size, loss=0.3, seed=1)
    rng = np.random.default_rng(7)
    grads = rng.normal(size=(rounds, size, n)).astype(np.float32)
    applied = np.zeros((size, n), dtype=np.float64)
    syncs = [GradSync("transport", size, comm=ThreadComm(hub, r, size), dblp=DblpOptions(
        policy="fixed", tolerance=0.3, fill="error_feedback",
        bounded_gather=bounded_gather)) for r in range(size)]
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            for t in range(rounds):
                syncs[r].set_signals(t, 0, 0.1)
                buf = torch.from_numpy(grads[t, r].copy())
                syncs[r].exchange(buf)
                applied[r] += buf.numpy()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert hub.lost_chunks > 0  # rounds really lost data
    owed = sum(syncs[r].residual[0].astype(np.float64) for r in range(size)) / size
    want = grads.astype(np.float64).mean(axis=1).sum(axis=0)
    if not bounded_gather:
        for r in range(1, size):  # reliable all-gather: every rank applied the same
            np.testing.assert_array_equal(applied[r], applied[0])
        # nothing lost for good: applied + still owed = everything computed
        np.testing.assert_allclose(applied[0] + owed, want, rtol=1e-4, atol=1e-4)
        # and the first round really was reliable (no norm signal yet), later ones not
        assert syncs[0].rounds[0]["tolerance"] == 0.0 and syncs[0].rounds[1]["tolerance"] == 0.3
    else:
        # estimated entries differ between ranks, but the rounds still share one bound
        assert all(s.rounds[t]["tolerance"] == syncs[0].rounds[t]["tolerance"]
                   for s in syncs for t in range(rounds))
        assert any(r["estimated_entries"] for s in syncs for r in s.rounds)
