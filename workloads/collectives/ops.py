"""The reliable collective operations over any ``Comm``, on flat float32 numpy arrays.

Its one job is the reliable collectives: ``ring_allreduce`` (ring reduce-scatter, then
ring all-gather), ``reduce_scatter`` and ``all_gather`` (ring), ``all_to_all`` (direct)
and ``hierarchical_allreduce`` (ranks grouped by data center: intra-DC ring
reduce-scatter, inter-DC ring all-reduce among the ranks with the same local index,
intra-DC ring all-gather, so only 1/g of the array crosses the DCI per rank).

Every collective is a function that checks its inputs at once and returns a generator
(``workloads.collectives.comm.Waits``): it yields lists of handles and is resumed once they are all
done, so the same code runs on a blocking comm (``drive``) and on the fake network
(``workloads.collectives.fakecomm``), where many ranks interleave in virtual time. The generator's
value is a ``CollectiveResult``.

The other parts of the collectives live in modules of their own (import each name from
its module):

* ``workloads.collectives.schedules``: schedules as data (``Step``, ``Send``, ``Recv``,
  ``block_bounds``, the ``*_schedule`` builders, ``check_groups``);
* ``workloads.collectives.executor``: running a schedule on a ``Comm``
  (``CollectiveResult``, ``Collective``, ``merge_ranges``);
* ``workloads.collectives.transpose``: the bounded-loss (DBLP) ``transpose_allreduce``
  (OptiReduce's Transpose AllReduce) and its loss tally.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workloads.collectives.comm import Comm
from workloads.collectives.executor import (
    Collective,
    Tally,
    check_array,
    check_comm,
    check_flag,
    finish,
    run_steps,
)
from workloads.collectives.schedules import (
    all_to_all_recv_len,
    all_to_all_steps,
    block_bounds,
    check_groups,
    hierarchical_phases,
    ring_ag_steps,
    ring_rs_steps,
)

__all__ = ["all_gather", "all_to_all", "hierarchical_allreduce", "reduce_scatter",
           "ring_allreduce"]


# ---- the collectives ----------------------------------------------------------------------


def ring_allreduce(comm: Comm, buf: np.ndarray, average: bool = False) -> Collective:
    """Sum (``average``: mean) ``buf`` over all ranks, in place: ring reduce-scatter then
    ring all-gather."""
    check_comm(comm)
    check_array(buf)
    check_flag(average, "average")
    return _ring_allreduce(comm, buf, average)


def _ring_allreduce(comm: Comm, buf: np.ndarray, average: bool) -> Collective:
    ring, r, n = range(comm.size), comm.rank, buf.size
    tally = Tally()
    yield from run_steps(comm, ring_rs_steps(ring, r, 0, n), buf, buf, tally)
    if average:
        # the owner divides its block before the all-gather copies it: every rank then
        # holds the very same floats
        lo, hi = block_bounds(n, comm.size)[r]
        buf[lo:hi] /= np.float32(comm.size)
    yield from run_steps(comm, ring_ag_steps(ring, r, 0, n), buf, buf, tally)
    yield from finish(tally)
    return tally.result()


def reduce_scatter(comm: Comm, buf: np.ndarray, average: bool = False) -> Collective:
    """Ring reduce-scatter in place: rank r ends with block r
    (``block_bounds(buf.size, size)[r]``) of the sum (``average``: mean) over ranks; the rest
    of ``buf`` holds partial sums."""
    check_comm(comm)
    check_array(buf)
    check_flag(average, "average")
    return _reduce_scatter(comm, buf, average)


def _reduce_scatter(comm: Comm, buf: np.ndarray, average: bool) -> Collective:
    tally = Tally()
    r = comm.rank
    yield from run_steps(comm, ring_rs_steps(range(comm.size), r, 0, buf.size), buf, buf, tally)
    if average:
        lo, hi = block_bounds(buf.size, comm.size)[r]
        buf[lo:hi] /= np.float32(comm.size)
    yield from finish(tally)
    return tally.result()


def all_gather(comm: Comm, buf: np.ndarray) -> Collective:
    """Ring all-gather in place: rank r contributes block r (``block_bounds(buf.size,
    size)[r]``) of ``buf`` and ends with every rank's block."""
    check_comm(comm)
    check_array(buf)
    return _all_gather(comm, buf)


def _all_gather(comm: Comm, buf: np.ndarray) -> Collective:
    tally = Tally()
    yield from run_steps(comm, ring_ag_steps(range(comm.size), comm.rank, 0, buf.size),
                         buf, buf, tally)
    yield from finish(tally)
    return tally.result()


def all_to_all(comm: Comm, send: np.ndarray, recv: np.ndarray) -> Collective:
    """Direct all-to-all: block j (``block_bounds(send.size, size)[j]``) of ``send`` goes to
    rank j; ``recv`` (``all_to_all_recv_len(send.size, size, rank)`` elements, not
    overlapping ``send``) receives rank j's block at ``[j * m, (j + 1) * m)``. Every rank
    must pass the same ``send.size``."""
    check_comm(comm)
    check_array(send, "send", writable=False)
    check_array(recv, "recv")
    want = all_to_all_recv_len(send.size, comm.size, comm.rank)
    if recv.size != want:
        raise ValueError(f"recv has {recv.size} elements: rank {comm.rank} of {comm.size} "
                         f"receives {want} (block {comm.rank} of every rank's "
                         f"{send.size}-element send)")
    if send.size and np.shares_memory(send, recv):
        raise ValueError("send and recv overlap: all_to_all needs separate arrays")
    return _all_to_all(comm, send, recv)


def _all_to_all(comm: Comm, send: np.ndarray, recv: np.ndarray) -> Collective:
    r, size = comm.rank, comm.size
    lo, hi = block_bounds(send.size, size)[r]
    m = hi - lo
    recv[r * m:(r + 1) * m] = send[lo:hi]
    tally = Tally()
    yield from run_steps(comm, all_to_all_steps(send.size, size, r), send, recv, tally)
    yield from finish(tally)
    return tally.result()


def hierarchical_allreduce(comm: Comm, buf: np.ndarray, groups: Sequence[Sequence[int]],
                           average: bool = False) -> Collective:
    """All-reduce for ranks grouped by data center (``groups``: equal lists of ranks that
    partition ``range(size)``; ring order is list order): intra-DC ring reduce-scatter,
    inter-DC ring all-reduce of the owned block, intra-DC ring all-gather. In place."""
    check_comm(comm)
    check_array(buf)
    check_flag(average, "average")
    gs = check_groups(groups, comm.size)
    return _hierarchical(comm, buf, gs, average)


def _hierarchical(comm: Comm, buf: np.ndarray, groups: tuple[tuple[int, ...], ...],
                  average: bool) -> Collective:
    reduce, (lo, hi), gather = hierarchical_phases(buf.size, groups, comm.rank)
    tally = Tally()
    yield from run_steps(comm, reduce, buf, buf, tally)
    if average:
        buf[lo:hi] /= np.float32(comm.size)
    yield from run_steps(comm, gather, buf, buf, tally)
    yield from finish(tally)
    return tally.result()
