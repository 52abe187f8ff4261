"""Retransmission timeouts: RFC 6298 estimation with a floor that scales with the path.

``RttEstimator`` keeps the smoothed RTT and its variation of one path (or of a whole
connection) as RFC 6298 does: the first sample ``r`` sets ``srtt = r``,
``rttvar = r / 2``; each later one ``rttvar += (|srtt - r| - rttvar) / 4``, then
``srtt += (r - srtt) / 8``. The RTO it implies is ``srtt + 4 rttvar``, clamped to
``[floor, rto_max]``, and ``rto_init`` before any sample.

The floor (``rto_floor``) is ``max(rto_min, rto_min_rtts * min_rtt)``:

- ``rto_min_rtts * min_rtt``, a number of round trips of the path's *minimum* RTT
  (the transports' windowed, guarded base RTT: transports/cc.py ``BaseRtt``), is the
  part that scales with the path, so the floor means the same on a 100 Mbit/s and a
  10 Mbit/s emulated fabric and at full scale: a queue of k minimum RTTs needs k >
  ``rto_min_rtts`` before an RTO can fire on it with the estimate unchanged;
- ``rto_min`` is an absolute bound for the machine, not the path: the timer
  granularity of the event loop and the receiver's ACK coalescing delay, below which a
  timeout would fire on scheduling noise. It is the whole floor before any sample.

``rto_min_rtts = 0`` gives the fixed floor ``rto_min`` alone.
"""

from __future__ import annotations

from transports.cc import BaseRtt

MIN_RTT_WINDOW = 1.0  # seconds a minimum RTT lasts without confirmation (as NSCC's base)


class RttEstimator:
    """Smoothed RTT and variation of one path (RFC 6298), and its RTO."""

    __slots__ = ("srtt", "rttvar", "last")

    def __init__(self) -> None:
        self.srtt = 0.0  # 0: no sample yet
        self.rttvar = 0.0
        self.last = 0.0

    def __repr__(self) -> str:
        return f"RttEstimator(srtt={self.srtt:.6f}, rttvar={self.rttvar:.6f})"

    def sample(self, rtt: float) -> None:
        """Take one RTT sample (seconds)."""
        self.last = rtt
        if self.srtt == 0.0:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar += 0.25 * (abs(self.srtt - rtt) - self.rttvar)
            self.srtt += 0.125 * (rtt - self.srtt)

    def bound(self) -> float:
        """``srtt + 4 rttvar`` without floor or cap (0 before any sample)."""
        return self.srtt + 4 * self.rttvar

    def rto(self, floor: float, rto_max: float, default: float) -> float:
        """The RTO: ``srtt + 4 rttvar`` within [floor, rto_max]; ``default`` before any
        sample."""
        if self.srtt == 0.0:
            return default
        return min(rto_max, max(floor, self.srtt + 4 * self.rttvar))


def rto_floor(rto_min: float, rto_min_rtts: float, min_rtt: float | None) -> float:
    """``max(rto_min, rto_min_rtts * min_rtt)``; ``rto_min`` while no RTT is known."""
    if not min_rtt or not rto_min_rtts:
        return rto_min
    return max(rto_min, rto_min_rtts * min_rtt)


class MinRtt:
    """The minimum RTT of a connection: a windowed, guarded minimum (``BaseRtt``) of its
    samples, for a core without NSCC (RC) to scale its RTO floor with."""

    __slots__ = ("_base",)

    def __init__(self, window: float = MIN_RTT_WINDOW) -> None:
        self._base = BaseRtt(window)

    @property
    def value(self) -> float | None:
        return self._base.value

    def sample(self, rtt: float, now: float) -> None:
        self._base.sample(rtt, now)


def check_rto_config(owner: str, rto_init: float, rto_min: float, rto_min_rtts: float,
                     rto_max: float) -> None:
    """Raise ValueError naming the bad RTO key of ``owner`` (a config class name)."""
    if not 0 < rto_min <= rto_max:
        raise ValueError(f"{owner}: need 0 < rto_min <= rto_max, not rto_min={rto_min!r}, "
                         f"rto_max={rto_max!r} (seconds)")
    if not 0 < rto_init:
        raise ValueError(f"{owner}.rto_init={rto_init!r} must be > 0 seconds")
    if isinstance(rto_min_rtts, bool) or not 0 <= rto_min_rtts < 1e6:
        raise ValueError(f"{owner}.rto_min_rtts={rto_min_rtts!r} must be a number of minimum "
                         "RTTs >= 0 (0: the floor is rto_min alone)")
