"""Running a collective's schedule on a ``Comm``, and what it did: the executor and its tally.

Its one job: take one rank's steps (``workloads.collectives.schedules``) and run them,
counting what was sent, what arrived and which element ranges were lost, into a
``CollectiveResult``. Every collective (``workloads.collectives.ops``, and the bounded-loss
``workloads.collectives.transpose``) is built on it, together with the argument checks
they all make before they start (here, so that every collective rejects the same bad
input with the same message).

A collective is a generator (``Collective``): it yields lists of handles and is resumed
once they are all done, so the same code runs on a blocking comm (``workloads.collectives.comm.
drive``) and on the fake network (``workloads.collectives.fakecomm``), where many ranks interleave
in
virtual time.

``run_steps`` runs a rank's steps in order: it posts the step's receives, then its
sends, and waits for the receives; sends stay in flight and are all waited for at the end
of the collective (``finish``). Sends carry a copy of their slice (later steps overwrite
the buffer); "sum" receives land in a scratch array and are added once complete, "copy"
receives are placed in place. A bounded step's message may complete with chunks missing
(``Completion.missing``, chunk i = bytes ``[i * mtu_payload, (i + 1) * mtu_payload)``):
``lost_elements`` turns them into element ranges, a float cut by a chunk boundary
counting as lost whole. This loop runs once per message of every round: keep per-chunk
work out of it.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from transports.core.bound import LossBound
from workloads.collectives.comm import Comm, CommError, Handle
from workloads.collectives.fill import chunk_ranges
from workloads.collectives.schedules import Recv, Send, Step

ITEM = 4  # bytes per float32 element


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


# ---- the executor -------------------------------------------------------------------------


@dataclass
class Tally:
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
        """The result so far; the loss figures are the caller's (only a bounded-loss
        collective knows how its lost ranges combine)."""
        return CollectiveResult(self.bytes_sent, self.bytes_received, self.messages_sent,
                                len(self.delivered), tuple(self.delivered),
                                tuple(lost), lost_pairs, tuple(unsent), sent_values)


def _view(a: np.ndarray) -> memoryview:
    # ``a.data`` is ``memoryview(a)``; numpy's stubs give ndarray ``__buffer__`` only for
    # Python >= 3.12, so ``memoryview(a)`` does not type-check for 3.11
    return a.data.cast("B")


def lost_elements(missing: Sequence[int], lo: int, hi: int, mtu: int) -> list[tuple[int, int]]:
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


def run_steps(comm: Comm, steps: Sequence[Step], src: np.ndarray, dst: np.ndarray,
              tally: Tally, bound: LossBound | None = None
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
            lost = lost_elements(missing, r.lo, r.hi, mtu) if missing else []
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


def finish(tally: Tally) -> Generator[list[Handle], None, None]:
    """Wait for the sends still in flight (their buffers are ours until then)."""
    pending = [h for h in tally.sends if not h.done]
    if pending:
        yield pending


# ---- input checks -------------------------------------------------------------------------


def check_comm(comm: Comm) -> None:
    """ValueError unless ``comm`` has the size, rank and chunk size the executor uses."""
    size, rank = getattr(comm, "size", None), getattr(comm, "rank", None)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"comm.size={size!r} must be an int >= 1")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
        raise ValueError(f"comm.rank={rank!r} must be an int in 0..{size - 1}")
    mtu = getattr(comm, "mtu_payload", None)
    if isinstance(mtu, bool) or not isinstance(mtu, int) or mtu < 1:
        raise ValueError(f"comm.mtu_payload={mtu!r} must be an int >= 1 (bytes per chunk)")


def check_array(a: object, name: str = "buf", writable: bool = True) -> np.ndarray:
    """``a`` if it is a flat, contiguous float32 array (writable if asked): the executor
    sends and receives raw views of it."""
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


def check_flag(value: object, name: str) -> bool:
    """``value`` if it is a bool: a truthy non-bool is more likely a misplaced argument."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r} must be True or False")
    return value
