"""A fake clock for the sans-I/O parts: the time a test hands to ``now`` arguments.

The cores and their parts never read a clock: every event carries ``now``. A test that
drives a part alone keeps its time in a ``FakeClock`` and advances it by hand, so the
part sees exactly the instants the test chose (no wall clock, no sleeping).
"""

from __future__ import annotations


class FakeClock:
    """Virtual seconds, starting at ``start``; only ``advance`` moves them."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now!r})"

    def advance(self, seconds: float) -> float:
        """Move ``seconds`` (>= 0) forward; returns the new time."""
        if not seconds >= 0:
            raise ValueError(f"FakeClock.advance({seconds!r}): time only moves forward")
        self.now += seconds
        return self.now
