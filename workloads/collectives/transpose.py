"""The bounded-loss (DBLP) all-reduce: OptiReduce's Transpose AllReduce and its loss tally.

Its one job: ``transpose_allreduce``, the one collective whose messages may arrive with
chunks missing, and the accounting that makes a lossy round usable: which elements of
which contribution were lost, the mean of what arrived, and what this rank's own
contributions failed to deliver (for error feedback). The reliable collectives are in
``workloads.collectives.ops``; the steps it runs in ``workloads.collectives.schedules``
(``transpose_rs_steps``, ``transpose_ag_steps``); the executor that runs them in
``workloads.collectives.executor``.

Every rank sends block b straight to its owner b, which reduces it and sends it
straight back. With ``bound=LossBound(...)`` the reduce-scatter messages are
bounded-loss rounds: each may complete with some chunks missing (``Completion.missing``,
chunk i = bytes ``[i * mtu_payload, (i + 1) * mtu_payload)``). The owner of a block knows
exactly which elements of which contribution are lost (a chunk boundary inside an element
makes that whole element lost), counts them as zero, and with ``average=True`` divides
each element by the number of contributions that arrived for it (its own always does),
an unbiased mean of what arrived. The all-gather stays reliable unless
``bounded_gather``, so every rank ends with the same array. The result names the lost
element ranges of the rank's own block; the union over ranks covers the whole array.

The tally runs once per round, after the messages completed, and costs nothing when
nothing was lost (the common case): per-chunk work stays in the executor's loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from transports.core.bound import LossBound
from workloads.collectives.comm import Comm, Handle
from workloads.collectives.executor import (
    Collective,
    Tally,
    check_array,
    check_comm,
    check_flag,
    finish,
    lost_elements,
    merge_ranges,
    run_steps,
)
from workloads.collectives.schedules import (
    Recv,
    Send,
    block_bounds,
    transpose_ag_steps,
    transpose_rs_steps,
)


def transpose_allreduce(comm: Comm, buf: np.ndarray, average: bool = False,
                        bound: LossBound | None = None,
                        bounded_gather: bool = False) -> Collective:
    """OptiReduce's Transpose AllReduce in place: every rank sends block b straight to
    rank b, which adds them up and sends its block straight back to everyone.

    With ``bound`` the reduce-scatter messages are bounded-loss (the all-gather stays
    reliable, so all ranks end identical): lost elements count as no contribution; with
    ``average`` each element is divided by the number of contributions that arrived for
    it, else by nothing (a plain sum of what arrived). The result's ``lost`` are the
    element ranges of this rank's block that missed a contribution.

    ``bounded_gather`` bounds the all-gather too: an entry of another rank's block that
    does not arrive is estimated from this rank's own input (times ``size`` for a sum,
    as is for an average). Ranks then end with slightly different values there (their
    ``gather_lost`` ranges): replicas drift apart by what was estimated, which a
    training loop must be able to tolerate; the default keeps them identical."""
    check_comm(comm)
    check_array(buf)
    check_flag(average, "average")
    check_flag(bounded_gather, "bounded_gather")
    _check_bound(bound)
    return _transpose_allreduce(comm, buf, average, bound, bounded_gather)


def _check_bound(bound: object) -> LossBound | None:
    if bound is not None and not isinstance(bound, LossBound):
        raise TypeError(f"bound must be a transports.core.bound.LossBound or None, "
                        f"not {type(bound).__name__}")
    return bound


def _transpose_allreduce(comm: Comm, buf: np.ndarray, average: bool,
                         bound: LossBound | None, bounded_gather: bool = False
                         ) -> Collective:
    r, size, n = comm.rank, comm.size, buf.size
    tally = Tally()
    yield from run_steps(comm, transpose_rs_steps(n, size, r), buf, buf, tally, bound)
    lo, hi = block_bounds(n, size)[r]
    lost_ranges, pairs = _reduce_owned(buf, tally.lost, lo, hi, size, average)
    gather_lost: list[tuple[int, int]] = []
    rs_sends = len(tally.bounded_sends)  # error feedback is about the contributions only
    if bounded_gather and bound is not None and not bound.reliable:
        own = buf.copy()  # other ranks' blocks still hold this rank's own input here
        ag = [replace(st, bounded=True) for st in transpose_ag_steps(n, size, r)]
        first = len(tally.lost)
        yield from run_steps(comm, ag, buf, buf, tally, bound)
        gather_lost = _estimate_gathered(buf, own, tally.lost[first:],
                                         np.float32(1.0 if average else size))
        del tally.lost[first:]  # estimated, not lost: ``lost`` is the owned block's
    else:
        yield from run_steps(comm, transpose_ag_steps(n, size, r), buf, buf, tally)
    yield from finish(tally)
    unsent, values = _unsent(tally.bounded_sends[:rs_sends], n, comm.mtu_payload)
    res = tally.result(merge_ranges(lost_ranges), pairs, merge_ranges(unsent), values)
    return replace(res, gather_lost=tuple(merge_ranges(gather_lost))) if gather_lost else res


# ---- the loss tally -----------------------------------------------------------------------


def _reduce_owned(buf: np.ndarray, lost: Sequence[tuple[Recv, list[tuple[int, int]]]],
                  lo: int, hi: int, size: int, average: bool
                  ) -> tuple[list[tuple[int, int]], int]:
    """Finish the owned block ``[lo, hi)`` after the reduce-scatter (``lost``: per receive
    that lost some, its lost element ranges): with ``average``, each element divided by the
    contributions that arrived for it. Returns the lost ranges and (element, contributor)
    pairs."""
    lost_ranges: list[tuple[int, int]] = []
    pairs = 0
    if lost:
        # contributions per element of the owned block: everyone's, minus each lost one
        arrived = np.full(hi - lo, size, dtype=np.int64)
        for _, ranges in lost:
            for a, b in ranges:
                arrived[a - lo:b - lo] -= 1
                pairs += b - a
                lost_ranges.append((a, b))
        if average:
            buf[lo:hi] /= arrived.astype(np.float32)
    elif average:
        buf[lo:hi] /= np.float32(size)
    return lost_ranges, pairs


def _estimate_gathered(buf: np.ndarray, own: np.ndarray,
                       lost: Sequence[tuple[Recv, list[tuple[int, int]]]],
                       scale: np.float32) -> list[tuple[int, int]]:
    """Fill what a bounded all-gather lost from this rank's own input times ``scale`` (its
    best estimate of the reduced value); returns the ranges estimated."""
    out: list[tuple[int, int]] = []
    for _, ranges in lost:
        for a, b in ranges:
            buf[a:b] = own[a:b] * scale
            out.append((a, b))
    return out


def _unsent(sends: Sequence[tuple[Send, bytes, Handle]], n: int, mtu: int
            ) -> tuple[list[tuple[int, int]], np.ndarray | None]:
    """The sender's side of the losses: element ranges of this rank's contributions that
    did not arrive (exact: DBLP's STOP carries the receiver's chunk bitmap), and the values
    it sent there (length ``n``, zeros elsewhere; None when everything arrived)."""
    unsent: list[tuple[int, int]] = []
    values: np.ndarray | None = None
    for s, data, h in sends:
        c = h.completion
        if c is None or not c.missing:
            continue
        sent = np.frombuffer(data, dtype=np.float32)
        for a, b in lost_elements(c.missing, s.lo, s.hi, mtu):
            if values is None:
                values = np.zeros(n, dtype=np.float32)
            values[a:b] = sent[a - s.lo:b - s.lo]
            unsent.append((a, b))
    return unsent, values
