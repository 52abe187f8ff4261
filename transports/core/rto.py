"""Retransmission timeouts: RFC 6298 estimation with a floor that scales with the path.

``RttEstimator`` keeps the smoothed RTT and its variation of one path (or of a whole
connection) as RFC 6298 does: the first sample ``r`` sets ``srtt = r``,
``rttvar = r / 2``; each later one ``rttvar += (|srtt - r| - rttvar) / 4``, then
``srtt += (r - srtt) / 8``. The RTO it implies is ``srtt + 4 rttvar``, clamped to
``[floor, rto_max]``, and ``rto_init`` (not under the floor) before any sample.

The floor (``rto_floor``) is ``max(rto_min, rto_min_rtts * min_rtt)``:

- ``rto_min_rtts * min_rtt``, a number of round trips of the path's *minimum* RTT
  (the transports' windowed, guarded base RTT: transports/core/cc.py ``BaseRtt``), is the
  part that scales with the path, so the floor means the same on a 100 Mbit/s and a
  10 Mbit/s emulated fabric and at full scale: a queue of k minimum RTTs needs k >
  ``rto_min_rtts`` before an RTO can fire on it with the estimate unchanged;
- ``rto_min`` is an absolute bound for the machine, not the path: the timer
  granularity of the event loop and the receiver's ACK coalescing delay, below which a
  timeout would fire on scheduling noise. It is the whole floor before any sample.

``rto_min_rtts = 0`` gives the fixed floor ``rto_min`` alone.

On top of that floor comes the host's own delay (RFC 6298's clock granularity G, but
measured): a userspace transport's ACK waits for its process to be scheduled, which
on a busy machine takes milliseconds at random, while its RTT samples, taken mostly
between such waits, do not show them. The I/O loop measures how late its timer
wake-ups run (``HostDelay``: a peak that decays over ``HOST_DELAY_DECAY_S``) and
gives it to its cores (``set_host_delay``), which add it to the floor: an RTO then
fires on a queue or a loss, not on the receiver waiting for a CPU. The delay of this
host stands for its peer's (the hosts run alike). A NIC has no such delay, so at
full scale it is 0.
"""

from __future__ import annotations

import math

from transports.core.cc import BaseRtt

MIN_RTT_WINDOW = 1.0  # seconds a minimum RTT lasts without confirmation (as NSCC's base)
HOST_DELAY_DECAY_S = 5.0  # time constant of the host delay's decaying peak
HOST_DELAY_MAX_S = 0.1  # a late wake-up beyond this is a stop (a debugger, SIGSTOP), not noise


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
        """The RTO: ``srtt + 4 rttvar`` within [floor, rto_max]; ``default`` (not under
        the floor) before any sample."""
        if self.srtt == 0.0:
            return max(floor, default)
        return min(rto_max, max(floor, self.srtt + 4 * self.rttvar))


def rto_floor(rto_min: float, rto_min_rtts: float, min_rtt: float | None,
              host_delay: float = 0.0) -> float:
    """``max(rto_min, rto_min_rtts * min_rtt) + host_delay``; ``rto_min + host_delay``
    while no RTT is known."""
    if not min_rtt or not rto_min_rtts:
        return rto_min + host_delay
    return max(rto_min, rto_min_rtts * min_rtt) + host_delay


class HostDelay:
    """How late this host's I/O loop runs its timers: the peak lateness, decaying with
    time constant ``decay_s`` (see the module docstring). ``sample`` returns True when
    the value moved by more than ``step`` of itself since it was last published, so the
    loop tells its cores only then."""

    __slots__ = ("peak", "at", "published", "decay_s", "step", "samples")

    def __init__(self, decay_s: float = HOST_DELAY_DECAY_S, step: float = 0.25) -> None:
        if not decay_s > 0 or not step >= 0:
            raise ValueError(f"HostDelay: decay_s={decay_s!r} must be > 0 s, step={step!r} "
                             ">= 0")
        self.peak = 0.0
        self.at = 0.0
        self.published = 0.0
        self.decay_s = decay_s
        self.step = step
        self.samples = 0

    def value(self, now: float) -> float:
        """The decayed peak at ``now``."""
        if self.peak == 0.0:
            return 0.0
        return self.peak * math.exp(-max(0.0, now - self.at) / self.decay_s)

    def sample(self, late: float, now: float) -> bool:
        """A timer wake-up ran ``late`` seconds after its deadline, at ``now``."""
        self.samples += 1
        late = min(max(late, 0.0), HOST_DELAY_MAX_S)
        v = self.value(now)
        if late >= v:
            self.peak, self.at, v = late, now, late
        if abs(v - self.published) > self.step * max(self.published, 1e-4):
            self.published = v
            return True
        return False


class PeerHold:
    """How long the peer holds a packet before its ACK goes (QUIC's ``max_ack_delay``, here
    measured): the peak of the holds the ACKs state (wire.py, an ACK's ``msg_len``),
    decaying with time constant ``decay_s``, as this host's own ``HostDelay``: the hold is
    the peer's scheduling delay, and a peak it reached once (a loop that fell behind) may
    come back. The RTT samples leave the hold out (the peer's echo adds it back to the
    stamp), so an RTO or a loss bound built on them adds ``value``: a coalesced ACK
    answers its wake-up's first packet that much later than its last."""

    __slots__ = ("value", "peak", "at", "decay_s")

    def __init__(self, decay_s: float = HOST_DELAY_DECAY_S) -> None:
        if not decay_s > 0:
            raise ValueError(f"PeerHold: decay_s={decay_s!r} must be > 0 s")
        self.value = 0.0  # as of the last sample
        self.peak = 0.0
        self.at = 0.0
        self.decay_s = decay_s

    def sample(self, held: float, now: float) -> None:
        """An ACK, taken at ``now``, whose oldest packet waited ``held`` seconds at the peer
        (beyond ``HOST_DELAY_MAX_S``: a stopped peer, not a hold to plan for)."""
        if held > HOST_DELAY_MAX_S:
            held = HOST_DELAY_MAX_S
        peak = self.peak
        v = peak * math.exp(-(now - self.at) / self.decay_s) if peak else 0.0
        if held >= v:
            self.peak, self.at, v = held, now, held
        self.value = v


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
