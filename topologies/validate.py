"""The one numeric validator: integer and number checks with errors that name the value.

Every frozen topology dataclass checks its fields with these, and so do the layers
above that read numbers from users (experiment files, microburst descriptions), so a
bound and the wording of its rule are written once. An invalid value raises
:class:`InvalidValue`, a :class:`~topologies.errors.TopologyError` that also carries
the field's name, the value and the rule, so a caller reading a file can re-raise it
naming its own key (``fabric.planes = 17 is invalid: must be an integer in [1, 16]``)
instead of restating the bound.
"""

from __future__ import annotations

import math

from topologies.errors import TopologyError

__all__ = [
    "MAX_QUEUE_PACKETS", "MAX_RATE_MBIT", "MIN_RATE_MBIT", "InvalidValue", "check_int",
    "check_number", "int_rule", "number_rule",
]

# What the kernel's queueing can encode (checked on this machine's kernel through
# pyroute2): a pfifo limit is a signed 32-bit count, and an HTB class keeps its burst in
# timer ticks, which stays exact up to about 40 Gbit/s (beyond it the burst is rounded
# to nothing). An emulated link runs in software far below either. At the other end the
# rate reaches the kernel in whole bytes per second and a jumbo frame's transmission time
# in 32-bit timer ticks: 10 kbit/s keeps both well inside (a 9 KB frame takes 7.2 s).
MAX_QUEUE_PACKETS = 2**31 - 1
MAX_RATE_MBIT = 40_000.0
MIN_RATE_MBIT = 0.01


class InvalidValue(TopologyError):
    """``name=value is invalid: must be <rule>``, with ``name``, ``value`` and ``rule``
    kept so that a reader of a file can name its key instead (see the module docstring)."""

    def __init__(self, name: str, value: object, rule: str) -> None:
        super().__init__(f"{name}={value!r} is invalid: must be {rule}")
        self.name, self.value, self.rule = name, value, rule


def int_rule(lo: int, hi: int | None = None) -> str:
    """What :func:`check_int` accepts, in words: ``an integer in [1, 16]``."""
    return f"an integer in [{lo}, {hi}]" if hi is not None else f"an integer >= {lo}"


def number_rule(lo: float, hi: float | None = None, *, lo_open: bool = False,
                hi_open: bool = False) -> str:
    """What :func:`check_number` accepts, in words: ``a finite number in (0, 1]``."""
    if hi is None:
        return f"a finite number {'>' if lo_open else '>='} {lo:g}"
    return (f"a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}"
            f"{')' if hi_open else ']'}")


def check_int(name: str, value: object, lo: int, hi: int | None = None) -> int:
    """Return ``value`` if it is a real ``int`` in ``[lo, hi]`` (``hi`` None: unbounded)."""
    # bool is a subclass of int, but True/False as a count is always a caller bug.
    if type(value) is not int or value < lo or (hi is not None and value > hi):
        raise InvalidValue(name, value, int_rule(lo, hi))
    return value


def check_number(name: str, value: object, lo: float, hi: float | None = None, *,
                 lo_open: bool = False, hi_open: bool = False) -> float:
    """Return ``value`` as float if it is a finite int/float within the bounds.

    ``lo_open`` / ``hi_open`` make a bound exclusive (e.g. rates must be > 0).
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = (math.isfinite(v) and (v > lo if lo_open else v >= lo)
              and (hi is None or (v < hi if hi_open else v <= hi)))
    if not ok:
        raise InvalidValue(name, value, number_rule(lo, hi, lo_open=lo_open, hi_open=hi_open))
    return float(value)  # type: ignore[arg-type]
