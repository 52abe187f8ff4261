"""Per-EV liveness of an MRC connection: the states, their transitions and the probe schedule.

States: GOOD (carries data), ASSUMED_BAD (retired after a loss blamed on it; probed,
re-admitted when a probe is answered or an ACK proves the path), DENIED (by a
controller, until ``allow``). Transitions (``t``: now):

    GOOD        --retire(t)-->   ASSUMED_BAD   probing starts at t
    ASSUMED_BAD --readmit(t)-->  GOOD          a probe answered, or a loss undone
    any         --deny(t)-->     DENIED        not probed
    DENIED      --allow(t)-->    ASSUMED_BAD   probed at once
    ASSUMED_BAD --(guard)-->     GOOD          fewer than min(ev_min_active, EVs not
                                               denied) are GOOD: the least recently
                                               failed one comes back unprobed

Probes of an ASSUMED_BAD EV go out every ``backoff`` seconds, the backoff starting at
what the caller gives (its RTO of that EV, at least ``probe_min``) and doubling up to
``probe_max``; only an answer to a probe sent since the EV was last retired counts.
``on_active(evs)`` is called with the GOOD EVs whenever they change (never empty).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

EV_GOOD, EV_ASSUMED_BAD, EV_DENIED = "GOOD", "ASSUMED_BAD", "DENIED"
INF = float("inf")


class EvStates:
    """The states of ``evs`` EVs and their probe schedule."""

    def __init__(self, evs: int, ev_min_active: int, probe_min: float, probe_max: float,
                 stats: Counter[str], on_active: Callable[[list[int]], None]) -> None:
        self.evs = evs
        self.ev_min_active = ev_min_active
        self.probe_min, self.probe_max = probe_min, probe_max
        self.stats = stats
        self.on_active = on_active
        self.state = [EV_GOOD] * evs
        self.failed_at = [-INF] * evs  # when each was last retired
        self.bad: set[int] = set()  # ASSUMED_BAD: probed
        self.active: list[int] = list(range(evs))  # GOOD
        self.probe_at = [INF] * evs
        self.probe_backoff = [probe_min] * evs
        self.probe_seq = [0] * evs
        self.probe_base = [0] * evs  # probes numbered above this answer the current episode
        self.events: list[tuple[float, int, str, str]] = []

    def __repr__(self) -> str:
        return f"EvStates(active={self.active}, bad={sorted(self.bad)})"

    def retire(self, ev: int, now: float, backoff: float) -> bool:
        """A loss was blamed on GOOD ``ev``: probe it from now on; False if it was not GOOD."""
        if self.state[ev] != EV_GOOD:
            return False
        self._set(ev, EV_ASSUMED_BAD, now)
        self.failed_at[ev] = now
        self.stats["ev_retired"] += 1
        self._probe(ev, now, backoff)
        self._guard(now)
        self._sync()
        return True

    def readmit(self, ev: int, now: float) -> None:
        """ASSUMED_BAD ``ev`` proved its path: GOOD again."""
        self.bad.discard(ev)
        self.probe_at[ev] = INF
        self._set(ev, EV_GOOD, now)
        self._sync()

    def deny(self, ev: int, now: float) -> None:
        self._set(ev, EV_DENIED, now)
        self.bad.discard(ev)
        self.probe_at[ev] = INF
        self._guard(now)
        self._sync()

    def allow(self, ev: int, now: float, backoff: float) -> None:
        if self.state[ev] != EV_DENIED:
            return
        self._set(ev, EV_ASSUMED_BAD, now)
        self._probe(ev, now, backoff)

    def due(self, now: float) -> list[tuple[int, int]]:
        """The probes to send now: (EV, probe number); their next ones are scheduled."""
        out = []
        for ev in self.bad:
            if self.probe_at[ev] <= now:
                self.probe_seq[ev] += 1
                out.append((ev, self.probe_seq[ev]))
                self.probe_at[ev] = now + self.probe_backoff[ev]
                self.probe_backoff[ev] = min(self.probe_max, 2 * self.probe_backoff[ev])
        return out

    def answers(self, ev: int, seq: int) -> bool:
        """Whether a PROBE_ACK numbered ``seq`` on ``ev`` answers a probe of its episode."""
        return (self.state[ev] == EV_ASSUMED_BAD
                and self.probe_base[ev] < seq <= self.probe_seq[ev])

    def next_probe(self) -> float:
        return min((self.probe_at[e] for e in self.bad), default=INF)

    def changes(self) -> list[tuple[float, int, str, str]]:
        """(t, ev, old, new) changes since the last call (drained)."""
        ev = self.events[:]
        self.events.clear()
        return ev

    def clear(self) -> None:
        """The connection failed: nothing is probed any more."""
        self.bad.clear()

    def _set(self, ev: int, new: str, now: float) -> None:
        old = self.state[ev]
        if old != new:
            self.state[ev] = new
            self.events.append((now, ev, old, new))

    def _probe(self, ev: int, now: float, backoff: float) -> None:
        self.bad.add(ev)
        self.probe_base[ev] = self.probe_seq[ev]
        self.probe_backoff[ev] = max(self.probe_min, backoff)
        self.probe_at[ev] = now

    def _guard(self, now: float) -> None:
        state = self.state
        allowed = sum(1 for s in state if s != EV_DENIED)
        need = min(self.ev_min_active, allowed)
        good = sum(1 for s in state if s == EV_GOOD)
        while good < need and self.bad:
            ev = min(self.bad, key=lambda e: (self.failed_at[e], e))
            self.bad.discard(ev)
            self.probe_at[ev] = INF
            self._set(ev, EV_GOOD, now)
            self.stats["ev_forced_back"] += 1
            good += 1

    def _sync(self) -> None:
        self.active = [e for e in range(self.evs) if self.state[e] == EV_GOOD]
        if self.active:
            self.on_active(self.active)
