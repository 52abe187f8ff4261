"""Shared argument checks for the frozen topology dataclasses.

Kept private: the public contract is only that invalid values raise
:class:`~topologies.errors.TopologyError` with a message naming the field, the
bad value and the valid range.
"""

from __future__ import annotations

import math

from topologies.errors import TopologyError

# What the kernel's queueing can encode (checked on this machine's kernel through
# pyroute2): a pfifo limit is a signed 32-bit count, and an HTB class keeps its burst in
# timer ticks, which stays exact up to about 40 Gbit/s (beyond it the burst is rounded
# to nothing). An emulated link runs in software far below either.
MAX_QUEUE_PACKETS = 2**31 - 1
MAX_RATE_MBIT = 40_000.0


def check_int(name: str, value: object, lo: int, hi: int | None = None) -> int:
    """Return ``value`` if it is a real ``int`` in ``[lo, hi]`` (``hi`` None: unbounded)."""
    valid = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
    # bool is a subclass of int, but True/False as a count is always a caller bug.
    if type(value) is not int or value < lo or (hi is not None and value > hi):
        raise TopologyError(f"{name}={value!r} is invalid: must be an integer {_range(valid)}")
    return value


def check_number(
    name: str,
    value: object,
    lo: float,
    hi: float | None = None,
    *,
    lo_open: bool = False,
) -> float:
    """Return ``value`` as float if it is a finite int/float within the bounds.

    ``lo_open`` makes the lower bound exclusive (e.g. rates must be > 0).
    """
    if lo_open:
        valid = f"> {lo:g}" if hi is None else f"in ({lo:g}, {hi:g}]"
    else:
        valid = f">= {lo:g}" if hi is None else f"in [{lo:g}, {hi:g}]"
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)
    if not ok:
        raise TopologyError(f"{name}={value!r} is invalid: must be a finite number {valid}")
    return float(value)  # type: ignore[arg-type]


def _range(valid: str) -> str:
    # "[1, 16]" reads as "in [1, 16]"; ">= 1" reads as-is.
    return f"in {valid}" if valid.startswith("[") else valid
