"""Collective schedules as data: which element ranges each rank sends and receives, per step.

Its one job is the plan, not the running of it (``workloads.collectives.executor`` runs a
schedule on a ``Comm``): everything here is a pure function of the array length and the
group, so that two ranks always agree, and the tests can check a schedule without a
network.

A rank's schedule is a tuple of ``Step``; a step names the element ranges it sends
(``Send``) and receives (``Recv``, with ``op`` "sum": added into the buffer, or "copy":
placed in the buffer as it is). The builders (``*_schedule``) give one schedule per
rank; the n-th send from a to b pairs with b's n-th receive from a (``Comm``'s
numbering). Empty ranges are never sent: both ends compute the same block bounds, so
they skip the same messages.

Blocks are ``np.array_split``'s: ``n`` elements in ``p`` parts, the first ``n % p`` one
element longer (``block_bounds``), so any ``n >= 0`` works for any group size, ``n < p``
and ``n = 0`` included.

The step builders the collectives run (``ring_rs_steps``, ``ring_ag_steps``,
``transpose_rs_steps``, ``transpose_ag_steps``, ``all_to_all_steps``,
``hierarchical_phases``) are public so that the collectives, in their own modules, run
exactly the steps the ``*_schedule`` functions describe.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

OPS = ("sum", "copy")


class Send(NamedTuple):
    """Send elements ``[lo, hi)`` of the source array to ``peer``."""

    peer: int
    lo: int
    hi: int


class Recv(NamedTuple):
    """Receive elements ``[lo, hi)`` from ``peer``: added (``"sum"``) or placed (``"copy"``)."""

    peer: int
    lo: int
    hi: int
    op: str


@dataclass(frozen=True)
class Step:
    """One step of a rank: its receives are posted, then its sends, then the receives are
    waited for. ``bounded``: the step's messages use the collective's loss bound (both
    ends of a message must agree, which they do since both run the same builder)."""

    sends: tuple[Send, ...] = ()
    recvs: tuple[Recv, ...] = ()
    bounded: bool = False

    def __post_init__(self) -> None:
        # plain tuples are accepted: (peer, lo, hi) and (peer, lo, hi, op)
        object.__setattr__(self, "sends", tuple(Send(*x) for x in self.sends))
        object.__setattr__(self, "recvs", tuple(Recv(*x) for x in self.recvs))
        for x in self.sends + self.recvs:
            if not 0 <= x.lo <= x.hi:
                raise ValueError(f"bad element range [{x.lo}, {x.hi}) in {x}")
        for r in self.recvs:
            if r.op not in OPS:
                raise ValueError(f"Recv.op={r.op!r} must be one of {', '.join(OPS)}")


Schedule = tuple[Step, ...]


# ---- block bounds and schedule builders ---------------------------------------------------


def block_bounds(n: int, parts: int, lo: int = 0) -> list[tuple[int, int]]:
    """``np.array_split``'s blocks of ``n`` elements in ``parts``, as ``[lo, hi)`` ranges
    starting at element ``lo``."""
    if n < 0 or parts < 1:
        raise ValueError(f"need n >= 0 and parts >= 1, not n={n}, parts={parts}")
    q, extra = divmod(n, parts)
    out, at = [], lo
    for i in range(parts):
        k = q + (1 if i < extra else 0)
        out.append((at, at + k))
        at += k
    return out


def _step(sends: Sequence[Send], recvs: Sequence[Recv], bounded: bool = False) -> Step | None:
    """A step without its empty transfers (both ends drop the same ones); None if empty."""
    s = tuple(x for x in sends if x.hi > x.lo)
    r = tuple(x for x in recvs if x.hi > x.lo)
    return Step(s, r, bounded) if s or r else None


def _steps(*steps: Step | None) -> list[Step]:
    return [s for s in steps if s is not None]


def ring_rs_steps(members: Sequence[int], pos: int, lo: int, hi: int) -> list[Step]:
    """Ring reduce-scatter of ``[lo, hi)`` among ``members`` for the one at ``pos``; it ends
    owning block ``pos`` (of ``block_bounds(hi - lo, len(members), lo)``) reduced."""
    p = len(members)
    if p == 1:
        return []
    b = block_bounds(hi - lo, p, lo)
    right, left = members[(pos + 1) % p], members[(pos - 1) % p]
    # step s forwards the partial sum of block pos-s-1 and adds into block pos-s-2, so the
    # last step (s = p-2) completes block pos itself
    return _steps(*(
        _step([Send(right, *b[(pos - s - 1) % p])], [Recv(left, *b[(pos - s - 2) % p], "sum")])
        for s in range(p - 1)))


def ring_ag_steps(members: Sequence[int], pos: int, lo: int, hi: int) -> list[Step]:
    """Ring all-gather of ``[lo, hi)`` among ``members``: the one at ``pos`` holds block
    ``pos`` and ends with all of them."""
    p = len(members)
    if p == 1:
        return []
    b = block_bounds(hi - lo, p, lo)
    right, left = members[(pos + 1) % p], members[(pos - 1) % p]
    return _steps(*(
        _step([Send(right, *b[(pos - s) % p])], [Recv(left, *b[(pos - s - 1) % p], "copy")])
        for s in range(p - 1)))


def _check_group(n: int, size: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n={n!r} must be an int >= 0 (elements)")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size={size!r} must be an int >= 1 (ranks)")


def reduce_scatter_schedule(n: int, size: int) -> list[Schedule]:
    """Per rank: ring reduce-scatter of ``n`` elements; rank r ends owning block r."""
    _check_group(n, size)
    ring = range(size)
    return [tuple(ring_rs_steps(ring, r, 0, n)) for r in range(size)]


def all_gather_schedule(n: int, size: int) -> list[Schedule]:
    """Per rank: ring all-gather of ``n`` elements; rank r contributes block r."""
    _check_group(n, size)
    ring = range(size)
    return [tuple(ring_ag_steps(ring, r, 0, n)) for r in range(size)]


def ring_allreduce_schedule(n: int, size: int) -> list[Schedule]:
    """Per rank: ring reduce-scatter then ring all-gather (2 (size - 1) steps)."""
    rs, ag = reduce_scatter_schedule(n, size), all_gather_schedule(n, size)
    return [a + b for a, b in zip(rs, ag, strict=True)]


def transpose_rs_steps(n: int, size: int, r: int) -> list[Step]:
    """Rank ``r``'s direct reduce-scatter of ``n`` elements: block j straight to rank j,
    every other rank's block ``r`` added in; one bounded step."""
    b = block_bounds(n, size)
    # sends to r+1, r+2, ... and receives from r-1, r-2, ...: every rank starts on a
    # different peer, so no owner is hit by everybody first
    others = [(r + k) % size for k in range(1, size)]
    return _steps(_step([Send(j, *b[j]) for j in others],
                        [Recv((r - k) % size, *b[r], "sum") for k in range(1, size)],
                        bounded=True))


def transpose_ag_steps(n: int, size: int, r: int) -> list[Step]:
    """Rank ``r``'s direct all-gather of ``n`` elements: its block ``r`` straight to every
    rank, every other rank's block placed; one reliable step (the bounded-loss transpose
    marks it bounded itself when asked to)."""
    b = block_bounds(n, size)
    return _steps(_step([Send((r + k) % size, *b[r]) for k in range(1, size)],
                        [Recv(j, *b[j], "copy") for j in ((r - k) % size
                                                          for k in range(1, size))]))


def transpose_allreduce_schedule(n: int, size: int) -> list[Schedule]:
    """Per rank: direct reduce-scatter (block b straight to rank b; bounded) then direct
    all-gather (reliable): two steps."""
    _check_group(n, size)
    return [tuple(transpose_rs_steps(n, size, r) + transpose_ag_steps(n, size, r))
            for r in range(size)]


def all_to_all_recv_len(n: int, size: int, rank: int) -> int:
    """Length of rank ``rank``'s output of an all-to-all of ``n`` elements per rank:
    block ``rank`` of every rank's input."""
    _check_group(n, size)
    lo, hi = block_bounds(n, size)[rank]
    return size * (hi - lo)


def all_to_all_steps(n: int, size: int, r: int) -> list[Step]:
    """Rank ``r``'s all-to-all step (``all_to_all_schedule`` says what the ranges index)."""
    b = block_bounds(n, size)
    m = b[r][1] - b[r][0]
    return _steps(_step([Send((r + k) % size, *b[(r + k) % size]) for k in range(1, size)],
                        [Recv(j, j * m, (j + 1) * m, "copy")
                         for j in ((r - k) % size for k in range(1, size))]))


def all_to_all_schedule(n: int, size: int) -> list[Schedule]:
    """Per rank: one step; ``Send`` ranges index the input (block j to rank j), ``Recv``
    ranges the output (rank j's block lands at ``[j * m, (j + 1) * m)``, ``m`` the length of
    this rank's block). The rank's own block is a local copy, not in the schedule."""
    _check_group(n, size)
    return [tuple(all_to_all_steps(n, size, r)) for r in range(size)]


def check_groups(groups: Sequence[Sequence[int]],
                 size: int | None = None) -> tuple[tuple[int, ...], ...]:
    """``groups`` as tuples if they partition ``range(size)`` (``size`` None: as many ranks
    as they hold) into equal, non-empty groups; ValueError naming the problem otherwise."""
    if isinstance(groups, str | bytes) or not isinstance(groups, Sequence) or not groups:
        raise ValueError(f"groups={groups!r} must be a non-empty list of lists of ranks")
    out = []
    for i, g in enumerate(groups):
        if isinstance(g, str | bytes) or not isinstance(g, Sequence) or not g:
            raise ValueError(f"groups[{i}]={g!r} must be a non-empty list of ranks")
        for x in g:
            if isinstance(x, bool) or not isinstance(x, int | np.integer):
                raise ValueError(f"groups[{i}] holds {x!r}: ranks are ints")
        out.append(tuple(int(x) for x in g))
    if len({len(g) for g in out}) != 1:
        raise ValueError(f"groups have sizes {[len(g) for g in out]}: every data center "
                         "needs the same number of ranks")
    count = Counter(x for g in out for x in g)
    dup = sorted(x for x, k in count.items() if k > 1)
    if dup:
        raise ValueError(f"ranks {dup} appear more than once in groups")
    size = len(count) if size is None else size
    extra = sorted(set(count) - set(range(size)))
    absent = sorted(set(range(size)) - set(count))
    if extra or absent:
        why = [f"ranks {extra} are not in it"] if extra else []
        why += [f"ranks {absent} are missing"] if absent else []
        raise ValueError(f"groups must partition range({size}): {'; '.join(why)}")
    return tuple(out)


def _where(groups: Sequence[Sequence[int]], rank: int) -> tuple[int, int]:
    for d, g in enumerate(groups):
        if rank in g:
            return d, list(g).index(rank)
    raise ValueError(f"rank {rank} is in no group")


def hierarchical_phases(n: int, groups: Sequence[Sequence[int]],
                        rank: int) -> tuple[list[Step], tuple[int, int], list[Step]]:
    """Rank's reduce phase (intra-DC RS, inter-DC RS), the sub-block it then owns fully
    reduced, and its gather phase (inter-DC AG, intra-DC AG)."""
    d, i = _where(groups, rank)
    dcs = len(groups)
    local = groups[d]
    peers = [groups[e][i] for e in range(dcs)]  # same local index in every DC
    lo, hi = block_bounds(n, len(local))[i]
    sub = block_bounds(hi - lo, dcs, lo)[d]
    reduce = ring_rs_steps(local, i, 0, n) + ring_rs_steps(peers, d, lo, hi)
    gather = ring_ag_steps(peers, d, lo, hi) + ring_ag_steps(local, i, 0, n)
    return reduce, sub, gather


def hierarchical_allreduce_schedule(n: int, groups: Sequence[Sequence[int]]) -> list[Schedule]:
    """Per rank (indexed by rank): intra-DC ring reduce-scatter, inter-DC ring all-reduce
    of the owned block among the ranks of the same local index, intra-DC ring all-gather."""
    gs = check_groups(groups)
    _check_group(n, sum(len(g) for g in gs))
    out = []
    for r in range(len(gs) * len(gs[0])):
        red, _, gat = hierarchical_phases(n, gs, r)
        out.append(tuple(red + gat))
    return out
