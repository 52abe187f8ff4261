"""What a soak watches of a driver: its resident memory over time and the sizes of its
cores' containers (nothing may grow with the number of messages).

The driver samples its own resident memory (``/proc/self/statm``) every ``RSS_EVERY_S``
in its loop (never per packet) and reports it as ``rss``: (seconds from the start,
bytes) pairs, resolution halved whenever ``RSS_MAX_SAMPLES`` are kept.
"""

from __future__ import annotations

import os

RSS_EVERY_S = 0.5  # the driver samples its resident memory this often (in its loop)
RSS_MAX_SAMPLES = 2048  # then every other sample is dropped and the period doubled


class RssSampler:
    """This process's resident set size, sampled at most every ``every_s`` (from the
    driver's loop: a ``pread`` of /proc/self/statm, about 10 us)."""

    def __init__(self, every_s: float = RSS_EVERY_S, cap: int = RSS_MAX_SAMPLES) -> None:
        self.fd = os.open("/proc/self/statm", os.O_RDONLY)
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.every, self.cap = every_s, cap
        self.samples: list[tuple[float, int]] = []
        self.next = 0.0

    def read(self) -> int:
        """Resident bytes now (statm's second field is resident pages)."""
        return int(os.pread(self.fd, 256, 0).split()[1]) * self.page

    def sample(self, now: float, t0: float, force: bool = False) -> None:
        """Record one sample if one is due (or ``force``)."""
        if now < self.next and not force:
            return
        self.samples.append((round(now - t0, 3), self.read()))
        self.next = now + self.every
        if len(self.samples) >= self.cap:  # bounded: halve the resolution
            del self.samples[1::2]
            self.every *= 2

    def close(self) -> None:
        os.close(self.fd)


def state_sizes(core: object) -> dict[str, int]:
    """How many entries each of a core's watched containers holds now (the core's
    ``state_sizes()``: every container it bounds, or empties as messages complete; a core
    without one reports nothing)."""
    sizes = getattr(core, "state_sizes", None)
    return dict(sizes()) if sizes is not None else {}
