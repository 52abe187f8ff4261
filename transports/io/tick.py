"""When an I/O loop may wake: interrupt coalescing, as a NIC moderates its interrupts.

A NIC does not interrupt its host per packet: it waits at least an interval between two
interrupts and hands over everything that arrived meanwhile. The transport engine wakes
the same way (``Coalescing``): never sooner than ``tick_s`` after its last wake-up, then at
the first of its earliest timer and the first datagram to arrive. A wake-up thus carries
every datagram that arrived in the gap, and a timer fires late by at most one tick.

The tick is a time of the emulation, scaled like any other (docs/concepts/time-scale.md):
1 ms at the emulated links' 1000x slower rates stands for a NIC's 1 us of interrupt
moderation at full scale. Kernel receive timestamps keep RTT samples and ACK hold times
exact whatever the tick (transports/io/sockets.py).
"""

from __future__ import annotations

from dataclasses import dataclass

TICK_S = 1e-3  # the engine's default: 1 ms emulated, 1 us at full scale
TICK_MAX_S = 0.05  # beyond this a tick is a stall, not moderation


@dataclass(frozen=True)
class Coalescing:
    """The wake-up rule: at least ``tick_s`` between two wake-ups (0: none)."""

    tick_s: float = TICK_S

    def __post_init__(self) -> None:
        if not 0.0 <= self.tick_s <= TICK_MAX_S:
            raise ValueError(f"tick_s={self.tick_s!r} must be in [0, {TICK_MAX_S}] seconds")

    def earliest(self, last: float) -> float:
        """The soonest the loop may wake again after waking at ``last``."""
        return last + self.tick_s

    def wake_at(self, last: float, due: float) -> float:
        """When a loop that last woke at ``last`` wakes for something due at ``due`` (a
        timer, or a datagram's arrival)."""
        return max(self.earliest(last), due)
