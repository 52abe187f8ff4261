"""Collective operations over any ``Comm``, on flat float32 numpy arrays.

Every collective is a function that checks its inputs at once and returns a
generator (``workloads.comm.Waits``): it yields lists of handles and is resumed
once they are all done, so the same code runs on a blocking comm (``drive``)
and on the fake network (``workloads.fakecomm``), where many ranks interleave in
virtual time. The generator's value is a ``CollectiveResult``.

Schedules are data. A rank's schedule is a tuple of ``Step``; a step names the
element ranges it sends (``Send``) and receives (``Recv``, with ``op`` "sum":
added into the buffer, or "copy": placed in the buffer as it is). The executor
runs a rank's steps in order: it posts the step's receives, then its sends, and
waits for the receives; sends stay in flight and are all waited for at the end
of the collective. Sends carry a copy of their slice (later steps overwrite the
buffer); "sum" receives land in a scratch array and are added once complete,
"copy" receives are placed in place. The builders (``*_schedule``) are pure
functions of the array length and the group, one schedule per rank, so that
two ranks always agree: the n-th send from a to b pairs with b's n-th receive
from a (``Comm``'s numbering). Empty ranges are never sent: both ends compute
the same block bounds, so they skip the same messages.

Blocks are ``np.array_split``'s: ``n`` elements in ``p`` parts, the first
``n % p`` one element longer (``block_bounds``), so any ``n >= 0`` works for
any group size, ``n < p`` and ``n = 0`` included.

Provided: ``ring_allreduce`` (ring reduce-scatter, then ring all-gather),
``reduce_scatter`` and ``all_gather`` (ring), ``all_to_all`` (direct),
``transpose_allreduce`` (OptiReduce's Transpose AllReduce: every rank sends
block b straight to its owner b, which reduces it and sends it straight back;
its reduce-scatter may be bounded-loss, see below) and
``hierarchical_allreduce`` (ranks grouped by data center: intra-DC ring
reduce-scatter, inter-DC ring all-reduce among the ranks with the same local
index, intra-DC ring all-gather, so only 1/g of the array crosses the DCI per
rank).

Bounded loss (``transpose_allreduce(..., bound=LossBound(...))``). The
reduce-scatter messages are bounded-loss rounds: each may complete with some
chunks missing (``Completion.missing``, chunk i = bytes ``[i * mtu_payload,
(i + 1) * mtu_payload)``). The owner of a block knows exactly which elements of
which contribution are lost (a chunk boundary inside an element makes that
whole element lost), counts them as zero, and with ``average=True`` divides
each element by the number of contributions that arrived for it (its own always
does), an unbiased mean of what arrived. The all-gather stays reliable, so every
rank ends with the same array. The result names the lost element ranges of the
rank's own block; the union over ranks covers the whole array.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from transports.bound import LossBound
from workloads.comm import Comm, CommError, Handle
from workloads.fill import chunk_ranges

OPS = ("sum", "copy")
ITEM = 4  # bytes per float32 element


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


@dataclass(frozen=True)
class CollectiveResult:
    """What one rank's collective did.

    ``delivered``: the fraction of chunks that arrived, per received message (in
    posting order; 1.0 for reliable messages). ``lost``: element ranges ``[lo, hi)`` of
    the output this rank knows to be missing a contribution (merged, sorted; empty for
    reliable collectives). ``lost_pairs``: (element, contributor) pairs lost.

    The sender's side of the same losses (bounded messages only), exact since DBLP's
    STOP carries the receiver's chunk bitmap: ``unsent`` are the element ranges of this
    rank's contributions that did not arrive, and ``sent_values`` holds the values it
    contributed there (full length, zeros elsewhere; None when everything arrived), which
    is what error feedback adds to the next round.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    delivered: tuple[float, ...] = ()
    lost: tuple[tuple[int, int], ...] = ()
    lost_pairs: int = 0
    unsent: tuple[tuple[int, int], ...] = ()
    sent_values: np.ndarray | None = field(default=None, compare=False, repr=False)
    gather_lost: tuple[tuple[int, int], ...] = ()  # estimated locally (bounded_gather)

    @property
    def exact(self) -> bool:
        """Nothing was lost."""
        return not self.lost


Collective = Generator[list[Handle], None, CollectiveResult]


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


def _ring_rs_steps(members: Sequence[int], pos: int, lo: int, hi: int) -> list[Step]:
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


def _ring_ag_steps(members: Sequence[int], pos: int, lo: int, hi: int) -> list[Step]:
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
    return [tuple(_ring_rs_steps(ring, r, 0, n)) for r in range(size)]


def all_gather_schedule(n: int, size: int) -> list[Schedule]:
    """Per rank: ring all-gather of ``n`` elements; rank r contributes block r."""
    _check_group(n, size)
    ring = range(size)
    return [tuple(_ring_ag_steps(ring, r, 0, n)) for r in range(size)]


def ring_allreduce_schedule(n: int, size: int) -> list[Schedule]:
    """Per rank: ring reduce-scatter then ring all-gather (2 (size - 1) steps)."""
    rs, ag = reduce_scatter_schedule(n, size), all_gather_schedule(n, size)
    return [a + b for a, b in zip(rs, ag, strict=True)]


def _transpose_rs(n: int, size: int, r: int) -> list[Step]:
    b = block_bounds(n, size)
    # sends to r+1, r+2, ... and receives from r-1, r-2, ...: every rank starts on a
    # different peer, so no owner is hit by everybody first
    others = [(r + k) % size for k in range(1, size)]
    return _steps(_step([Send(j, *b[j]) for j in others],
                        [Recv((r - k) % size, *b[r], "sum") for k in range(1, size)],
                        bounded=True))


def _transpose_ag(n: int, size: int, r: int) -> list[Step]:
    b = block_bounds(n, size)
    return _steps(_step([Send((r + k) % size, *b[r]) for k in range(1, size)],
                        [Recv(j, *b[j], "copy") for j in ((r - k) % size
                                                          for k in range(1, size))]))


def transpose_allreduce_schedule(n: int, size: int) -> list[Schedule]:
    """Per rank: direct reduce-scatter (block b straight to rank b; bounded) then direct
    all-gather (reliable): two steps."""
    _check_group(n, size)
    return [tuple(_transpose_rs(n, size, r) + _transpose_ag(n, size, r))
            for r in range(size)]


def all_to_all_recv_len(n: int, size: int, rank: int) -> int:
    """Length of rank ``rank``'s output of an all-to-all of ``n`` elements per rank:
    block ``rank`` of every rank's input."""
    _check_group(n, size)
    lo, hi = block_bounds(n, size)[rank]
    return size * (hi - lo)


def _a2a_steps(n: int, size: int, r: int) -> list[Step]:
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
    return [tuple(_a2a_steps(n, size, r)) for r in range(size)]


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


def _hier_phases(n: int, groups: Sequence[Sequence[int]],
                 rank: int) -> tuple[list[Step], tuple[int, int], list[Step]]:
    """Rank's reduce phase (intra-DC RS, inter-DC RS), the sub-block it then owns fully
    reduced, and its gather phase (inter-DC AG, intra-DC AG)."""
    d, i = _where(groups, rank)
    dcs = len(groups)
    local = groups[d]
    peers = [groups[e][i] for e in range(dcs)]  # same local index in every DC
    lo, hi = block_bounds(n, len(local))[i]
    sub = block_bounds(hi - lo, dcs, lo)[d]
    reduce = _ring_rs_steps(local, i, 0, n) + _ring_rs_steps(peers, d, lo, hi)
    gather = _ring_ag_steps(peers, d, lo, hi) + _ring_ag_steps(local, i, 0, n)
    return reduce, sub, gather


def hierarchical_allreduce_schedule(n: int, groups: Sequence[Sequence[int]]) -> list[Schedule]:
    """Per rank (indexed by rank): intra-DC ring reduce-scatter, inter-DC ring all-reduce
    of the owned block among the ranks of the same local index, intra-DC ring all-gather."""
    gs = check_groups(groups)
    _check_group(n, sum(len(g) for g in gs))
    out = []
    for r in range(len(gs) * len(gs[0])):
        red, _, gat = _hier_phases(n, gs, r)
        out.append(tuple(red + gat))
    return out


# ---- the executor -------------------------------------------------------------------------


@dataclass
class _Tally:
    """What a collective did so far (its result, and the sends still in flight)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    delivered: list[float] = field(default_factory=list)
    # (recv, lost element ranges [lo, hi) in array coordinates) per receive that lost some
    lost: list[tuple[Recv, list[tuple[int, int]]]] = field(default_factory=list)
    sends: list[Handle] = field(default_factory=list)
    # bounded sends with their payloads, to tell what did not arrive once they are done
    bounded_sends: list[tuple[Send, bytes, Handle]] = field(default_factory=list)

    def result(self, lost: Sequence[tuple[int, int]] = (), lost_pairs: int = 0,
               unsent: Sequence[tuple[int, int]] = (),
               sent_values: np.ndarray | None = None) -> CollectiveResult:
        return CollectiveResult(self.bytes_sent, self.bytes_received, self.messages_sent,
                                len(self.delivered), tuple(self.delivered),
                                tuple(lost), lost_pairs, tuple(unsent), sent_values)


def _view(a: np.ndarray) -> memoryview:
    # ``a.data`` is ``memoryview(a)``; numpy's stubs give ndarray ``__buffer__`` only for
    # Python >= 3.12, so ``memoryview(a)`` does not type-check for 3.11
    return a.data.cast("B")


def _lost_elements(missing: Sequence[int], lo: int, hi: int, mtu: int) -> list[tuple[int, int]]:
    """Element ranges (array coordinates) of a message of elements ``[lo, hi)`` whose
    ``missing`` chunks did not arrive; an element cut by a chunk boundary counts as lost."""
    out: list[tuple[int, int]] = []
    for b0, b1 in chunk_ranges(missing, (hi - lo) * ITEM, mtu):
        e0, e1 = lo + b0 // ITEM, lo + -(-b1 // ITEM)
        if out and e0 <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e1))
        else:
            out.append((e0, e1))
    return out


def merge_ranges(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted union of ``[lo, hi)`` ranges (touching ones joined; empty ones dropped)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(r for r in ranges if r[1] > r[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _run_steps(comm: Comm, steps: Sequence[Step], src: np.ndarray, dst: np.ndarray,
              tally: _Tally, bound: LossBound | None = None
              ) -> Generator[list[Handle], None, None]:
    """Run one rank's ``steps``: sends read ``src``, receives write ``dst`` (the same array
    for in-place collectives). Sends are left in flight in ``tally.sends``."""
    mtu = comm.mtu_payload
    for step in steps:
        kw: dict[str, Any] = {"bound": bound} if step.bounded and bound is not None else {}
        posted: list[tuple[Recv, np.ndarray | None, Handle]] = []
        for r in step.recvs:
            scratch: np.ndarray | None
            if r.op == "sum":
                # zeros: a chunk a bounded round never placed must read as no contribution
                scratch = np.zeros(r.hi - r.lo, dtype=np.float32)
                h = comm.irecv(r.peer, _view(scratch), **kw)
            else:
                scratch = None
                h = comm.irecv(r.peer, _view(dst[r.lo:r.hi]), **kw)
            posted.append((r, scratch, h))
        for s in step.sends:
            # a copy: the next steps overwrite this slice while the message may be in flight
            data = src[s.lo:s.hi].tobytes()
            h = comm.isend(s.peer, data, **kw)
            tally.sends.append(h)
            if kw:
                tally.bounded_sends.append((s, data, h))
            tally.bytes_sent += len(data)
            tally.messages_sent += 1
        if posted:
            yield [h for _, _, h in posted]
        for r, scratch, h in posted:
            c = h.completion
            if c is None:
                raise CommError(f"resumed before {h} was done")
            missing = c.missing
            lost = _lost_elements(missing, r.lo, r.hi, mtu) if missing else []
            nbytes = (r.hi - r.lo) * ITEM
            tally.bytes_received += nbytes - sum(
                e - s for s, e in chunk_ranges(missing, nbytes, mtu))
            tally.delivered.append(c.delivered)
            if lost:
                tally.lost.append((r, lost))
            if scratch is not None:
                # a float a chunk boundary cuts may be half placed: it is lost as a whole
                for lo, hi in lost:
                    scratch[lo - r.lo:hi - r.lo] = 0.0
                dst[r.lo:r.hi] += scratch


def _finish(tally: _Tally) -> Generator[list[Handle], None, None]:
    """Wait for the sends still in flight (their buffers are ours until then)."""
    pending = [h for h in tally.sends if not h.done]
    if pending:
        yield pending


# ---- input checks -------------------------------------------------------------------------


def _check_comm(comm: Comm) -> None:
    size, rank = getattr(comm, "size", None), getattr(comm, "rank", None)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"comm.size={size!r} must be an int >= 1")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
        raise ValueError(f"comm.rank={rank!r} must be an int in 0..{size - 1}")
    mtu = getattr(comm, "mtu_payload", None)
    if isinstance(mtu, bool) or not isinstance(mtu, int) or mtu < 1:
        raise ValueError(f"comm.mtu_payload={mtu!r} must be an int >= 1 (bytes per chunk)")


def _check_array(a: object, name: str = "buf", writable: bool = True) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy float32 array, not {type(a).__name__}")
    if a.dtype != np.float32:
        raise TypeError(f"{name}.dtype={a.dtype}: float32 expected")
    if a.ndim != 1:
        raise ValueError(f"{name} has shape {a.shape}: a flat (1-D) array expected "
                         "(pass .reshape(-1) of a contiguous array)")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} is not contiguous (strides {a.strides}): pass a copy")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name} is read-only: the collective writes its result there")
    return a


def _check_flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r} must be True or False")
    return value


def _check_bound(bound: object) -> LossBound | None:
    if bound is not None and not isinstance(bound, LossBound):
        raise TypeError(f"bound must be a transports.bound.LossBound or None, "
                        f"not {type(bound).__name__}")
    return bound


# ---- the collectives ----------------------------------------------------------------------


def ring_allreduce(comm: Comm, buf: np.ndarray, average: bool = False) -> Collective:
    """Sum (``average``: mean) ``buf`` over all ranks, in place: ring reduce-scatter then
    ring all-gather."""
    _check_comm(comm)
    _check_array(buf)
    _check_flag(average, "average")
    return _ring_allreduce(comm, buf, average)


def _ring_allreduce(comm: Comm, buf: np.ndarray, average: bool) -> Collective:
    ring, r, n = range(comm.size), comm.rank, buf.size
    tally = _Tally()
    yield from _run_steps(comm, _ring_rs_steps(ring, r, 0, n), buf, buf, tally)
    if average:
        # the owner divides its block before the all-gather copies it: every rank then
        # holds the very same floats
        lo, hi = block_bounds(n, comm.size)[r]
        buf[lo:hi] /= np.float32(comm.size)
    yield from _run_steps(comm, _ring_ag_steps(ring, r, 0, n), buf, buf, tally)
    yield from _finish(tally)
    return tally.result()


def reduce_scatter(comm: Comm, buf: np.ndarray, average: bool = False) -> Collective:
    """Ring reduce-scatter in place: rank r ends with block r
    (``block_bounds(buf.size, size)[r]``) of the sum (``average``: mean) over ranks; the rest
    of ``buf`` holds partial sums."""
    _check_comm(comm)
    _check_array(buf)
    _check_flag(average, "average")
    return _reduce_scatter(comm, buf, average)


def _reduce_scatter(comm: Comm, buf: np.ndarray, average: bool) -> Collective:
    tally = _Tally()
    r = comm.rank
    yield from _run_steps(comm, _ring_rs_steps(range(comm.size), r, 0, buf.size), buf, buf, tally)
    if average:
        lo, hi = block_bounds(buf.size, comm.size)[r]
        buf[lo:hi] /= np.float32(comm.size)
    yield from _finish(tally)
    return tally.result()


def all_gather(comm: Comm, buf: np.ndarray) -> Collective:
    """Ring all-gather in place: rank r contributes block r (``block_bounds(buf.size,
    size)[r]``) of ``buf`` and ends with every rank's block."""
    _check_comm(comm)
    _check_array(buf)
    return _all_gather(comm, buf)


def _all_gather(comm: Comm, buf: np.ndarray) -> Collective:
    tally = _Tally()
    yield from _run_steps(comm, _ring_ag_steps(range(comm.size), comm.rank, 0, buf.size),
                         buf, buf, tally)
    yield from _finish(tally)
    return tally.result()


def all_to_all(comm: Comm, send: np.ndarray, recv: np.ndarray) -> Collective:
    """Direct all-to-all: block j (``block_bounds(send.size, size)[j]``) of ``send`` goes to
    rank j; ``recv`` (``all_to_all_recv_len(send.size, size, rank)`` elements, not
    overlapping ``send``) receives rank j's block at ``[j * m, (j + 1) * m)``. Every rank
    must pass the same ``send.size``."""
    _check_comm(comm)
    _check_array(send, "send", writable=False)
    _check_array(recv, "recv")
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
    tally = _Tally()
    yield from _run_steps(comm, _a2a_steps(send.size, size, r), send, recv, tally)
    yield from _finish(tally)
    return tally.result()


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
    _check_comm(comm)
    _check_array(buf)
    _check_flag(average, "average")
    _check_flag(bounded_gather, "bounded_gather")
    _check_bound(bound)
    return _transpose_allreduce(comm, buf, average, bound, bounded_gather)


def _transpose_allreduce(comm: Comm, buf: np.ndarray, average: bool,
                         bound: LossBound | None, bounded_gather: bool = False
                         ) -> Collective:
    r, size, n = comm.rank, comm.size, buf.size
    tally = _Tally()
    yield from _run_steps(comm, _transpose_rs(n, size, r), buf, buf, tally, bound)
    lo, hi = block_bounds(n, size)[r]
    lost_ranges: list[tuple[int, int]] = []
    pairs = 0
    if tally.lost:
        # contributions per element of the owned block: everyone's, minus each lost one
        arrived = np.full(hi - lo, size, dtype=np.int64)
        for _, ranges in tally.lost:
            for a, b in ranges:
                arrived[a - lo:b - lo] -= 1
                pairs += b - a
                lost_ranges.append((a, b))
        if average:
            buf[lo:hi] /= arrived.astype(np.float32)
    elif average:
        buf[lo:hi] /= np.float32(size)
    gather_lost: list[tuple[int, int]] = []
    rs_sends = len(tally.bounded_sends)  # error feedback is about the contributions only
    if bounded_gather and bound is not None and not bound.reliable:
        own = buf.copy()  # other ranks' blocks still hold this rank's own input here
        ag = [replace(st, bounded=True) for st in _transpose_ag(n, size, r)]
        first = len(tally.lost)
        yield from _run_steps(comm, ag, buf, buf, tally, bound)
        scale = np.float32(1.0 if average else size)
        for _, ranges in tally.lost[first:]:
            for a, b in ranges:
                buf[a:b] = own[a:b] * scale
                gather_lost.append((a, b))
        del tally.lost[first:]
    else:
        yield from _run_steps(comm, _transpose_ag(n, size, r), buf, buf, tally)
    yield from _finish(tally)
    unsent: list[tuple[int, int]] = []
    values: np.ndarray | None = None
    for s, data, h in tally.bounded_sends[:rs_sends]:
        c = h.completion
        if c is None or not c.missing:
            continue
        sent = np.frombuffer(data, dtype=np.float32)
        for a, b in _lost_elements(c.missing, s.lo, s.hi, comm.mtu_payload):
            if values is None:
                values = np.zeros(n, dtype=np.float32)
            values[a:b] = sent[a - s.lo:b - s.lo]
            unsent.append((a, b))
    res = tally.result(merge_ranges(lost_ranges), pairs, merge_ranges(unsent), values)
    return replace(res, gather_lost=tuple(merge_ranges(gather_lost))) if gather_lost else res


def hierarchical_allreduce(comm: Comm, buf: np.ndarray, groups: Sequence[Sequence[int]],
                           average: bool = False) -> Collective:
    """All-reduce for ranks grouped by data center (``groups``: equal lists of ranks that
    partition ``range(size)``; ring order is list order): intra-DC ring reduce-scatter,
    inter-DC ring all-reduce of the owned block, intra-DC ring all-gather. In place."""
    _check_comm(comm)
    _check_array(buf)
    _check_flag(average, "average")
    gs = check_groups(groups, comm.size)
    return _hierarchical(comm, buf, gs, average)


def _hierarchical(comm: Comm, buf: np.ndarray, groups: tuple[tuple[int, ...], ...],
                  average: bool) -> Collective:
    reduce, (lo, hi), gather = _hier_phases(buf.size, groups, comm.rank)
    tally = _Tally()
    yield from _run_steps(comm, reduce, buf, buf, tally)
    if average:
        buf[lo:hi] /= np.float32(comm.size)
    yield from _run_steps(comm, gather, buf, buf, tally)
    yield from _finish(tally)
    return tally.result()
