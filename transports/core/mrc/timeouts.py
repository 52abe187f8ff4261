"""MRC's retransmission timeouts: RTT estimators, the RTO floor, back-off and the retry budget.

``Timeouts`` keeps what MRC's loss detection (lossdetect.py) knows of time:

- an RFC 6298 estimator per EV and one over all EVs (transports/core/rto.py
  ``RttEstimator``); an EV's RTO is the larger of its own ``srtt + 4 rttvar`` and the
  overall one, within [floor, rto_max] (``rto``), so a path is not timed by a faster one;
- the peer's ACK delay (rto.py ``PeerHold``, from the ACKs), added to every RTO as QUIC
  adds ``max_ack_delay``: the RTT samples leave it out;
- the floor, ``max(rto_min, rto_min_rtts * base RTT) + host delay`` (rto.py
  ``rto_floor``): it scales with the path through NSCC's base RTT (``new_floor``, after
  every sample that may move it) and rises with the I/O loop's measured scheduling delay
  (``set_host_delay``);
- strikes: each RTO round without progress (an ACK of new data, or a tail probe
  answered) is one (``strike``), doubles every RTO (``backed_off``, capped at
  ``rto_max``) and, once backed off, stretches it by up to ``BACKOFF_JITTER`` at random
  (``jittered``): a timeout that repeats at a fixed period (``rto_max``, a multiple of a
  periodic impairment's period) would otherwise meet the same phase of it every time,
  e.g. each retransmission the tail of a microburst. Blamed RTOs within half an RTO of a
  strike belong to its round (``in_round``).
- the retry budget: more than ``max_retries`` strikes, the first at least ``give_up_s``
  ago (``exhausted``), fail the connection; a peer that answers (``reset``) restores it.
"""

from __future__ import annotations

import random
from typing import Protocol

from transports.core.rto import PeerHold, RttEstimator, rto_floor

INF = float("inf")
BACKOFF_JITTER = 0.25  # a backed-off RTO is stretched by up to this fraction at random


class TimeoutConfig(Protocol):
    """The knobs ``Timeouts`` reads (``MrcConfig`` has them)."""

    @property
    def rto_init(self) -> float: ...  # the RTO before any RTT sample
    @property
    def rto_min(self) -> float: ...  # the floor's absolute part
    @property
    def rto_min_rtts(self) -> float: ...  # ... and its part in base RTTs
    @property
    def rto_max(self) -> float: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def give_up_s(self) -> float: ...


class Timeouts:
    """RTT estimators, RTOs and strikes of one MRC sender over ``evs`` EVs; ``rng`` draws
    the jitter of backed-off RTOs."""

    def __init__(self, cfg: TimeoutConfig, evs: int, rng: random.Random) -> None:
        self.cfg = cfg
        self.rng = rng
        self.rtt = [RttEstimator() for _ in range(evs)]  # per EV
        self.srtt = RttEstimator()  # all EVs together
        self.host_delay = 0.0  # the I/O loop's scheduling delay, part of the floor
        self.peer_hold = PeerHold()  # the peer's ACK delay: added to every RTO
        self.floor = cfg.rto_min  # the RTO floor (rto_floor())
        self.strikes = 0  # RTO rounds without progress
        self.strike_at = INF  # when the first of them came
        self.strike_until = -INF  # blamed RTOs before this belong to the last strike's round

    def __repr__(self) -> str:
        return (f"Timeouts(srtt={self.srtt.srtt:.6f}, floor={self.floor:.6f}, "
                f"strikes={self.strikes})")

    # ---- RTT samples and the floor ----------------------------------------------------------

    def sample(self, ev: int, rtt: float) -> None:
        """One RTT sample of a data packet on EV ``ev`` (seconds)."""
        self.rtt[ev].sample(rtt)
        self.srtt.sample(rtt)

    def sample_ev(self, ev: int, rtt: float) -> None:
        """One RTT sample of EV ``ev`` alone (a PROBE_ACK: the EV learns its RTT again)."""
        self.rtt[ev].sample(rtt)

    def new_floor(self, base_rtt: float | None) -> None:
        """NSCC's base RTT may have moved (an RTT sample, an EV forgotten): the floor too."""
        cfg = self.cfg
        self.floor = rto_floor(cfg.rto_min, cfg.rto_min_rtts, base_rtt, self.host_delay)

    def set_host_delay(self, delay: float, base_rtt: float | None) -> None:
        """The I/O loop's measured scheduling delay (transports/core/rto.py ``HostDelay``)."""
        self.host_delay = delay
        self.new_floor(base_rtt)

    # ---- RTOs -------------------------------------------------------------------------------

    def rto(self, ev: int) -> float:
        """EV ``ev``'s RTO: the larger of its own and the overall one, within the bounds."""
        cfg = self.cfg
        floor = self.floor
        overall = self.srtt.rto(floor, cfg.rto_max, cfg.rto_init)
        rto = max(overall, self.rtt[ev].rto(floor, cfg.rto_max, overall)) + self.peer_hold.value
        return rto if rto < cfg.rto_max else cfg.rto_max

    def backed_off(self, ev: int, strikes: int | None = None) -> float:
        """EV ``ev``'s RTO doubled per strike (``strikes``, the current count by default),
        capped at ``rto_max``."""
        n = self.strikes if strikes is None else strikes
        return min(self.cfg.rto_max, self.rto(ev) * (1 << min(n, 30)))

    def jittered(self, ev: int) -> float:
        """``backed_off(ev)``, stretched by up to ``BACKOFF_JITTER`` at random once backed
        off, so that repeated timeouts keep no fixed phase of a periodic impairment."""
        rto = self.backed_off(ev)
        return rto * (1.0 + BACKOFF_JITTER * self.rng.random()) if self.strikes else rto

    def rto_any(self) -> float:
        """The RTO over all EVs, backed off."""
        cfg = self.cfg
        return min(cfg.rto_max, (self.srtt.rto(self.floor, cfg.rto_max, cfg.rto_init)
                                 + self.peer_hold.value) * (1 << min(self.strikes, 30)))

    # ---- strikes and the retry budget -------------------------------------------------------

    def strike(self, now: float) -> None:
        """One more RTO round without progress (the retry budget's count and time); blamed
        RTOs within half an RTO of it belong to the same round."""
        if self.strikes == 0:
            self.strike_at = now
        self.strikes += 1
        self.strike_until = now + 0.5 * self.rto_any()

    def in_round(self, now: float) -> bool:
        """Whether a blamed RTO at ``now`` belongs to the last strike's round."""
        return now < self.strike_until

    def reset(self) -> None:
        """Progress, or the peer answered: the retry budget starts again."""
        self.strikes = 0
        self.strike_at = INF
        self.strike_until = -INF

    def exhausted(self, now: float) -> bool:
        """More than ``max_retries`` strikes, the first at least ``give_up_s`` ago."""
        cfg = self.cfg
        return self.strikes > cfg.max_retries and now - self.strike_at >= cfg.give_up_s
