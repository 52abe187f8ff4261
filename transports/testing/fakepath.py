"""The fake network's data: one EV's path in one direction (``PathSpec``), the fields a
test may change on it (``PathChanges``) and one datagram's record on the wire (``Rec``);
transports/testing/fakenet.py runs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict


@dataclass(frozen=True)
class PathSpec:
    """One direction of one EV."""

    delay: float = 10e-6
    jitter: float = 0.0
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0  # probability of an extra delay
    reorder_delay: float = 0.0  # the extra delay, uniform in [0, reorder_delay]
    rate: float | None = None  # bytes/s; None: no queue
    buffer: int = 1 << 20  # bytes the FIFO holds (with rate)
    hops: int = 1  # store-and-forward hops at rate (the FIFO is the first one's)
    mark: int | None = None  # ECN: DATA entering the FIFO above this backlog (bytes): CE
    trim: bool = False  # DATA with FLAG_TRIM_OK that does not fit is trimmed, sent ahead

    def __post_init__(self) -> None:
        for name in ("loss", "dup", "reorder"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"PathSpec.{name} must be in [0, 1]")
        if self.delay < 0 or self.jitter < 0 or self.reorder_delay < 0:
            raise ValueError("PathSpec delays must be >= 0")
        if self.hops < 1:
            raise ValueError(f"PathSpec.hops={self.hops!r} must be >= 1")


class PathChanges(TypedDict, total=False):
    """The ``PathSpec`` fields ``FakeNet.set_path`` may change."""

    delay: float
    jitter: float
    loss: float
    dup: float
    reorder: float
    reorder_delay: float
    rate: float | None
    buffer: int
    mark: int | None
    trim: bool


@dataclass
class Rec:
    """One datagram on the fake wire."""

    t: float
    src: str
    dst: str
    ev: int
    kind: int  # -1: not a parsable header
    flags: int
    psn: int
    size: int
    fate: str = "in_flight"  # delivered, lost, dead, queue_drop, port_drop, bad_ev
    t_arrive: float | None = None
