"""Exact max-plus simulator of one training step's pipeline-parallel part.

The model (the reference the closed forms of :mod:`explorer.pipeline` are checked against):

* ``p`` physical stages, each a single server that runs its operations in its schedule's
  static order, one at a time, never preempted. With ``v`` chunks per stage there are
  ``p * v`` *virtual stages*; chunk ``c`` of stage ``s`` is virtual stage ``k = c * p + s``.
* ``F(j, k)`` is the forward of microbatch ``j`` on virtual stage ``k``; it may start when
  its stage is free and the activation of ``F(j, k - 1)`` has arrived. ``B(j, k)`` is the
  backward; it needs the gradient of ``B(j, k + 1)`` and its own ``F(j, k)`` done (the last
  virtual stage's backward follows its own forward only).
* Each virtual boundary ``k -> k + 1`` is two FIFO links, one per direction. A transfer
  starts serialising when its producer finishes and the link is free, holds the link for
  the serialisation time, and arrives one latency after that. Sends never block the sender.

Because every link is fed by one stage in that stage's static order, the FIFO order is
known in advance, so the simulation is a single topological pass over the operations
(a max-plus recurrence): O(p * m * v) time, no event queue. The schedules' static orders
follow Megatron-LM's ``schedules.py`` (non-interleaved and interleaved 1F1B, with the
default microbatch group size of ``p``) plus ``warmup_extra`` additional warm-up forwards,
one count for every stage or one per stage.

What extra warm-up buys: a boundary's round trip is covered by the microbatches the stage
before it has in flight *beyond* the stage after it, i.e. by the difference of their
warm-up counts (one microbatch in 1F1B). The same extra on every stage therefore hides no
latency (it only turns stages into GPipe once it reaches ``m``); extras that grow towards
the first stage, across the slow boundaries, do (explorer/pipeline.py uses ``e`` per DCI
boundary downstream for 1F1B). In the interleaved schedule, extras that differ by more
than about two chunk forwards across the ring deadlock; :func:`simulate` reports it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "SCHEDULES",
    "Op",
    "PipelineCase",
    "SimResult",
    "simulate",
    "stage_orders",
    "warmup_count",
]

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def _check_int(name: str, value: object, lo: int) -> int:
    # bool is an int subclass, but True as a stage count is always a caller bug.
    if type(value) is not int or value < lo:
        raise ValueError(f"{name}={value!r} is invalid: must be an integer >= {lo}")
    return value


def _check_times(name: str, values: object, n: int) -> tuple[float, ...]:
    """Return ``values`` as a tuple of ``n`` finite non-negative floats, or raise."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ValueError(f"{name}={values!r} is invalid: must be a sequence of {n} times")
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} values: it must have exactly {n}")
    return tuple(_check_time(f"{name}[{i}]", x) for i, x in enumerate(values))


def _check_time(name: str, x: object) -> float:
    if (not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x)
            or x < 0):
        raise ValueError(f"{name}={x!r} is invalid: must be a finite number >= 0")
    return float(x)


@dataclass(frozen=True)
class PipelineCase:
    """One pipeline to simulate: schedule, shape and per-virtual-stage costs.

    ``t_fwd[k]`` / ``t_bwd[k]`` are one microbatch's forward / backward compute on virtual
    stage ``k`` (``p * v`` values). ``fwd_lat[k]`` / ``fwd_ser[k]`` are the latency and
    serialisation time of an activation crossing boundary ``k -> k + 1``; ``bwd_lat[k]`` /
    ``bwd_ser[k]`` those of the activation gradient crossing it back (``p * v - 1`` values
    each). Times are in any one unit; sequences are stored as tuples of floats.

    ``warmup_extra`` adds warm-up forwards to 1F1B / interleaved: one integer for every
    stage, or a tuple with one per stage (stored as the tuple).
    """

    schedule: str
    p: int
    m: int
    t_fwd: tuple[float, ...]
    t_bwd: tuple[float, ...]
    fwd_lat: tuple[float, ...]
    fwd_ser: tuple[float, ...]
    bwd_lat: tuple[float, ...]
    bwd_ser: tuple[float, ...]
    v: int = 1
    warmup_extra: int | tuple[int, ...] = 0

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r} is invalid: must be one of {SCHEDULES}")
        _check_int("p", self.p, 1)
        _check_int("m", self.m, 1)
        _check_int("v", self.v, 1)
        extra = self.warmup_extra
        if type(extra) is int:
            extra = (extra,) * self.p
        if not isinstance(extra, tuple) or len(extra) != self.p:
            raise ValueError(f"warmup_extra={self.warmup_extra!r} is invalid: must be an integer "
                             f">= 0 or a tuple of p={self.p} of them")
        for s, x in enumerate(extra):
            _check_int(f"warmup_extra[{s}]", x, 0)
        object.__setattr__(self, "warmup_extra", extra)
        if self.schedule != "interleaved" and self.v != 1:
            raise ValueError(f"v={self.v} is invalid for {self.schedule!r}: only 'interleaved' "
                             "takes chunks (v > 1)")
        if self.schedule == "interleaved" and self.m % self.p:
            raise ValueError(f"m={self.m} is invalid for 'interleaved' with p={self.p}: "
                             "m must be a multiple of p")
        n = self.p * self.v
        for name in ("t_fwd", "t_bwd"):
            object.__setattr__(self, name, _check_times(name, getattr(self, name), n))
        for name in ("fwd_lat", "fwd_ser", "bwd_lat", "bwd_ser"):
            object.__setattr__(self, name, _check_times(name, getattr(self, name), n - 1))

    @property
    def n_virtual(self) -> int:
        """Number of virtual stages, ``p * v``."""
        return self.p * self.v

    @classmethod
    def uniform(
        cls,
        schedule: str,
        p: int,
        m: int,
        *,
        t_f: float,
        t_b: float,
        lat: float = 0.0,
        ser: float = 0.0,
        v: int = 1,
        warmup_extra: int | tuple[int, ...] = 0,
    ) -> PipelineCase:
        """A case with identical stages (``t_f`` / ``t_b`` per stage, split evenly over its
        ``v`` chunks) and identical boundaries (``lat``, ``ser`` in both directions)."""
        t_f, t_b, lat, ser = (_check_time(k, x) for k, x in
                              (("t_f", t_f), ("t_b", t_b), ("lat", lat), ("ser", ser)))
        # Invalid p or v: build an empty case and let __post_init__ name the bad value.
        n = p * v if type(p) is int and type(v) is int and p >= 1 and v >= 1 else 0
        b = max(n - 1, 0)
        return cls(schedule, p, m, (t_f / max(n and v, 1),) * n, (t_b / max(n and v, 1),) * n,
                   (lat,) * b, (ser,) * b, (lat,) * b, (ser,) * b, v=v,
                   warmup_extra=warmup_extra)


@dataclass(frozen=True)
class Op:
    """One operation: ``kind`` "F" or "B" of ``microbatch`` on virtual stage ``vstage``."""

    kind: str
    microbatch: int
    vstage: int


@dataclass(frozen=True)
class SimResult:
    """What one simulation measured.

    ``makespan`` runs from the first operation's start to the last one's end;
    ``stage_finish[s]`` is when stage ``s`` ends its last operation, ``stage_busy[s]`` the
    compute it did. ``bubble_fraction`` is ``1 - max(stage_busy) / makespan``.
    ``peak_inflight[s]`` is the most activations stage ``s`` held at once (forwards done
    minus backwards done), in microbatch-equivalents (one chunk counts ``1 / v``).
    """

    makespan: float
    stage_finish: tuple[float, ...]
    stage_busy: tuple[float, ...]
    bubble_fraction: float
    peak_inflight: tuple[float, ...]


def warmup_count(schedule: str, p: int, m: int, s: int, v: int = 1, e: int = 0) -> int:
    """Forwards stage ``s`` runs before its first backward is *scheduled* (warm-up length).

    gpipe: all ``m``; 1f1b: ``min(p - s - 1 + e, m)``; interleaved (in chunk forwards):
    ``min(2 * (p - s - 1) + (v - 1) * p + e, m * v)``.
    """
    if schedule == "gpipe":
        return m
    if schedule == "1f1b":
        return min(p - s - 1 + e, m)
    if schedule == "interleaved":
        return min(2 * (p - s - 1) + (v - 1) * p + e, m * v)
    raise ValueError(f"schedule={schedule!r} is invalid: must be one of {SCHEDULES}")


def _interleaved_index(i: int, p: int, v: int) -> tuple[int, int]:
    """(chunk, microbatch) of a stage's ``i``-th chunk forward in the interleaved order:
    groups of ``p`` microbatches go through chunk 0, then chunk 1, ... then the next group."""
    return (i // p) % v, (i // (p * v)) * p + i % p


def _order_codes(case: PipelineCase) -> list[list[int]]:
    """Each stage's static order, every op encoded as ``2 * (k * m + j) + (op is B)``."""
    p, m, v = case.p, case.m, case.v
    extras = case.warmup_extra
    assert isinstance(extras, tuple)  # __post_init__ stores one integer per stage
    orders = []
    for s in range(p):
        total = m * v
        if case.schedule == "interleaved":
            fwd, bwd = [], []
            for i in range(total):
                c, j = _interleaved_index(i, p, v)
                fwd.append(2 * ((c * p + s) * m + j))
                bwd.append(2 * (((v - 1 - c) * p + s) * m + j) + 1)
        else:
            fwd = [2 * (s * m + j) for j in range(m)]
            bwd = [2 * (s * m + j) + 1 for j in range(m)]
        if case.schedule == "gpipe":
            orders.append(fwd + bwd[::-1])
            continue
        w = warmup_count(case.schedule, p, m, s, v, extras[s])
        order = fwd[:w]
        for i in range(total - w):  # steady state: one forward, then one backward
            order += (fwd[w + i], bwd[i])
        order += bwd[total - w:]
        orders.append(order)
    return orders


def stage_orders(case: PipelineCase) -> tuple[tuple[Op, ...], ...]:
    """Each stage's static operation order under ``case.schedule`` (index = stage)."""
    m = case.m
    return tuple(tuple(Op("FB"[c & 1], (c >> 1) % m, (c >> 1) // m) for c in order)
                 for order in _order_codes(case))


def _encode_orders(case: PipelineCase, orders: Sequence[Sequence[Op]]) -> list[list[int]]:
    """Check that ``orders`` hold each stage's ops exactly once; encode op as 2*(k*m+j)+isB."""
    p, m, n = case.p, case.m, case.n_virtual
    if len(orders) != p:
        raise ValueError(f"orders has {len(orders)} stages: it must have p={p}")
    encoded = []
    for s, order in enumerate(orders):
        codes = []
        for op in order:
            if not isinstance(op, Op):
                raise ValueError(f"stage {s}: {op!r} is invalid: orders must hold Op values")
            if op.kind not in ("F", "B") or not 0 <= op.microbatch < m or not 0 <= op.vstage < n:
                raise ValueError(f"stage {s}: {op} is invalid: kind must be 'F' or 'B', "
                                 f"microbatch in [0, {m}), vstage in [0, {n})")
            if op.vstage % p != s:
                raise ValueError(f"stage {s}: {op} belongs to stage {op.vstage % p}")
            codes.append(2 * (op.vstage * m + op.microbatch) + (op.kind == "B"))
        if len(set(codes)) != len(codes) or len(codes) != 2 * m * case.v:
            raise ValueError(f"stage {s}: order must hold each of its {2 * m * case.v} ops "
                             f"exactly once, got {len(codes)} ops ({len(set(codes))} distinct)")
        encoded.append(codes)
    return encoded


def simulate(case: PipelineCase, orders: Sequence[Sequence[Op]] | None = None) -> SimResult:
    """Run ``case`` (with ``orders``, default :func:`stage_orders`) and measure it.

    Raises ValueError if the orders deadlock (some stage waits for an input that can only
    be produced after an operation queued behind it), naming the blocked operations.
    """
    p, m, n, v = case.p, case.m, case.n_virtual, case.v
    codes = _order_codes(case) if orders is None else _encode_orders(case, orders)
    unknown = -1.0  # every real time is >= 0
    f_done = [unknown] * (n * m)  # F(j, k) finish, index k*m + j
    f_arr = [unknown] * (n * m)  # arrival of F(j, k)'s activation at virtual stage k+1
    b_arr = [unknown] * (n * m)  # arrival of B(j, k)'s gradient at virtual stage k-1
    f_link = [0.0] * n  # time each boundary's forward / backward link becomes free
    b_link = [0.0] * n
    t_fwd, t_bwd = case.t_fwd, case.t_bwd
    fwd_lat, fwd_ser, bwd_lat, bwd_ser = case.fwd_lat, case.fwd_ser, case.bwd_lat, case.bwd_ser
    free = [0.0] * p
    first = [math.inf] * p
    busy = [0.0] * p
    held = [0] * p
    peak = [0] * p
    ptr = [0] * p
    pending = list(range(p))
    queued = [True] * p
    while pending:
        s = pending.pop()
        queued[s] = False
        order = codes[s]
        i = ptr[s]
        t = free[s]
        while i < len(order):
            code = order[i]
            idx = code >> 1
            k = idx // m
            if code & 1:  # backward
                if f_done[idx] < 0.0:
                    break
                if k < n - 1:
                    ready = b_arr[idx + m]
                    if ready < 0.0:
                        break
                    start = ready if ready > t else t
                else:
                    start = t
                dur = t_bwd[k]
                held[s] -= 1
                t = start + dur
                if k > 0:  # gradient to virtual stage k-1 over boundary k-1
                    ls = b_link[k - 1]
                    ls = t if t > ls else ls
                    b_link[k - 1] = ls + bwd_ser[k - 1]
                    b_arr[idx] = ls + bwd_ser[k - 1] + bwd_lat[k - 1]
                    dst = (k - 1) % p
                    if not queued[dst]:
                        queued[dst] = True
                        pending.append(dst)
            else:
                if k > 0:
                    ready = f_arr[idx - m]
                    if ready < 0.0:
                        break
                    start = ready if ready > t else t
                else:
                    start = t
                dur = t_fwd[k]
                held[s] += 1
                if held[s] > peak[s]:
                    peak[s] = held[s]
                t = start + dur
                f_done[idx] = t
                if k < n - 1:  # activation to virtual stage k+1 over boundary k
                    ls = f_link[k]
                    ls = t if t > ls else ls
                    f_link[k] = ls + fwd_ser[k]
                    f_arr[idx] = ls + fwd_ser[k] + fwd_lat[k]
                    dst = (k + 1) % p
                    if not queued[dst]:
                        queued[dst] = True
                        pending.append(dst)
            if first[s] == math.inf:
                first[s] = start
            busy[s] += dur
            i += 1
        ptr[s] = i
        free[s] = t
    blocked = [s for s in range(p) if ptr[s] < len(codes[s])]
    if blocked:
        desc = []
        for s in blocked:
            code = codes[s][ptr[s]]
            j, k = (code >> 1) % m, (code >> 1) // m
            desc.append(f"stage {s} at {'FB'[code & 1]}(microbatch {j}, vstage {k})")
        raise ValueError("deadlock: the orders can never complete; blocked: " + "; ".join(desc))
    start0 = min(first)
    makespan = max(free) - start0
    top = max(busy)
    return SimResult(
        makespan=makespan,
        stage_finish=tuple(free),
        stage_busy=tuple(busy),
        bubble_fraction=1.0 - top / makespan if makespan > 0 else 0.0,
        peak_inflight=tuple(x / v for x in peak),
    )
