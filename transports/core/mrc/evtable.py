"""Per-EV liveness of an MRC connection: states, ONE explicit transition table, probe schedule.

Every EV (path) of a connection is in one of three states:

- ``GOOD``: carries data.
- ``ASSUMED_BAD``: retired after a loss blamed on it; probed, and re-admitted when a
  probe is answered or an ACK proves the path.
- ``DENIED``: forbidden by a controller until ``allow``; not probed.

Every state change goes through ``TRANSITIONS``, ``(state, event) -> new state``::

    (state,        event)          new state      method / trigger
    (GOOD,         "retire")       ASSUMED_BAD    retire(ev, t, backoff)
    (ASSUMED_BAD,  "readmit")      GOOD           readmit(ev, t)
    (GOOD,         "deny")         DENIED         deny(ev, t)
    (ASSUMED_BAD,  "deny")         DENIED         deny(ev, t)
    (DENIED,       "deny")         DENIED         deny(ev, t)  (legal, changes nothing)
    (DENIED,       "allow")        ASSUMED_BAD    allow(ev, t, backoff)
    (ASSUMED_BAD,  "forced_back")  GOOD           the min-active guard (below)

A pair missing from the table is not an error: the event is ignored, nothing changes,
and the method returns False (True when the event applied, self-transitions included).

Why explicit (as h11 does for HTTP/1.1): the legal moves are one literal dict that can
be read, reviewed and tested exhaustively (tests/unit/transports/test_transport_evtable.py checks
every state x event pair), instead of being spread over ``if`` guards in each method,
where one method forgetting its guard (``readmit`` used to turn a DENIED EV GOOD)
goes unnoticed. A change to the table is a deliberate one-line diff.

Side effects are attached to transitions, not scattered:

- Entering ASSUMED_BAD starts a probe episode; leaving it stops the probes. Nothing
  else starts or stops them (``clear``, on connection failure, stops all).
- ``retire`` records ``failed_at`` and counts ``stats["ev_retired"]``; ``forced_back``
  counts ``stats["ev_forced_back"]``.
- After ``retire`` and ``deny`` (the events that can leave too few GOOD EVs) the guard
  runs: while fewer than min(``ev_min_active``, EVs not DENIED) are GOOD, the least
  recently failed ASSUMED_BAD EV is ``forced_back`` to GOOD, unprobed.
- ``on_active(evs)`` is called with the GOOD EVs after ``retire``, ``readmit`` and
  ``deny`` (never with an empty list).

Probe schedule: an EV entering ASSUMED_BAD is probed at once, then every ``backoff``
seconds, the backoff starting at what the caller gives (its RTO of that EV, at least
``probe_min``) and doubling up to ``probe_max``. Only an answer to a probe sent since
the EV last entered ASSUMED_BAD counts (``answers``): a late answer from a previous
episode must not re-admit a path that has failed again since.

Change log: each change is kept as ``(t, ev, old, new)`` until ``changes()`` drains it.
The log is bounded (``CHANGES_MAX``, oldest dropped first and counted in
``stats["ev_changes_dropped"]``): a flapping link whose owner never drains the log
must not grow it for the life of the connection.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

EV_GOOD, EV_ASSUMED_BAD, EV_DENIED = "GOOD", "ASSUMED_BAD", "DENIED"
STATES = (EV_GOOD, EV_ASSUMED_BAD, EV_DENIED)
EVENTS = ("retire", "readmit", "deny", "allow", "forced_back")
INF = float("inf")
CHANGES_MAX = 4096  # undrained (t, ev, old, new) changes kept; older ones are dropped

# The only place a state may change. Pairs not listed are ignored (see _fire).
TRANSITIONS: dict[tuple[str, str], str] = {
    (EV_GOOD, "retire"): EV_ASSUMED_BAD,
    (EV_ASSUMED_BAD, "readmit"): EV_GOOD,
    (EV_GOOD, "deny"): EV_DENIED,
    (EV_ASSUMED_BAD, "deny"): EV_DENIED,
    (EV_DENIED, "deny"): EV_DENIED,  # a repeated deny is legal (controllers repeat)
    (EV_DENIED, "allow"): EV_ASSUMED_BAD,  # probed before it carries data again
    (EV_ASSUMED_BAD, "forced_back"): EV_GOOD,
}


class EvTable:
    """The states of ``evs`` EVs and their probe schedule, driven by ``TRANSITIONS``."""

    def __init__(self, evs: int, ev_min_active: int, probe_min: float, probe_max: float,
                 stats: Counter[str], on_active: Callable[[list[int]], None]) -> None:
        self.evs = evs
        self.ev_min_active = ev_min_active
        self.probe_min, self.probe_max = probe_min, probe_max
        self.stats = stats
        self.on_active = on_active
        # Its own: other parts ask ``state_of``, ``is_good``, ``retired_at``.
        self.state = [EV_GOOD] * evs
        self.failed_at = [-INF] * evs  # when each was last retired
        self.bad: set[int] = set()  # probed: the ASSUMED_BAD EVs (empty after clear())
        # The GOOD EVs, ascending: a new list after every change, never changed in place,
        # so a reader may keep one as a snapshot.
        self.active: list[int] = list(range(evs))
        self.probe_at = [INF] * evs
        self.probe_backoff = [probe_min] * evs
        self.probe_seq = [0] * evs
        self.probe_base = [0] * evs  # probes numbered above this answer the current episode
        self.events: deque[tuple[float, int, str, str]] = deque(maxlen=CHANGES_MAX)

    def __repr__(self) -> str:
        return f"EvTable(active={self.active}, bad={sorted(self.bad)})"

    def __len__(self) -> int:
        """EV state changes kept until ``changes()`` drains them."""
        return len(self.events)

    # ---- queries --------------------------------------------------------------------------

    def state_of(self, ev: int) -> str:
        """``ev``'s state: EV_GOOD, EV_ASSUMED_BAD or EV_DENIED."""
        return self.state[ev]

    def is_good(self, ev: int) -> bool:
        """Whether ``ev`` carries data."""
        return self.state[ev] == EV_GOOD

    def retired_at(self, ev: int) -> float:
        """When ``ev`` was last retired (-inf: never)."""
        return self.failed_at[ev]

    # ---- events ---------------------------------------------------------------------------

    def retire(self, ev: int, now: float, backoff: float) -> bool:
        """A loss was blamed on GOOD ``ev``: probe it from now on; False if it was not GOOD."""
        if not self._fire(ev, "retire", now, backoff):
            return False
        self.failed_at[ev] = now  # set before the guard: it picks the least recently failed
        self.stats["ev_retired"] += 1
        self._guard(now)
        self._sync()
        return True

    def readmit(self, ev: int, now: float) -> bool:
        """ASSUMED_BAD ``ev`` proved its path: GOOD again; False if it was not ASSUMED_BAD."""
        if not self._fire(ev, "readmit", now):
            return False
        self._sync()
        return True

    def deny(self, ev: int, now: float) -> bool:
        """A controller forbids ``ev`` (from any state): DENIED, not probed.

        Always True: every state may be denied; denying a DENIED EV changes no state.
        """
        if not self._fire(ev, "deny", now):
            return False  # only if the table no longer allows deny from this state
        self._guard(now)  # a GOOD EV may have left: bring others back if too few remain
        self._sync()
        return True

    def allow(self, ev: int, now: float, backoff: float) -> bool:
        """Undo ``deny``: ASSUMED_BAD, probed at once; False if ``ev`` was not DENIED."""
        # No guard or on_active: no EV became or stopped being GOOD.
        return self._fire(ev, "allow", now, backoff)

    # ---- probe schedule -------------------------------------------------------------------

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
        """When the next probe is due (``inf`` if no EV is probed)."""
        return min((self.probe_at[e] for e in self.bad), default=INF)

    def changes(self) -> list[tuple[float, int, str, str]]:
        """(t, ev, old, new) changes since the last call (drained; at most CHANGES_MAX)."""
        out = list(self.events)
        self.events.clear()
        return out

    def clear(self) -> None:
        """The connection failed: nothing is probed any more (states are left as they are)."""
        self.bad.clear()

    # ---- the one place states change ------------------------------------------------------

    def _fire(self, ev: int, event: str, now: float, backoff: float = 0.0) -> bool:
        """Apply ``event`` to ``ev`` per TRANSITIONS; False (and no effect) if not listed.

        Also runs the effects tied to the states themselves, so that no caller can
        forget them: leaving ASSUMED_BAD stops the probes, entering it starts an
        episode (``backoff``: the first interval). ``forced_back`` is counted here
        since it has no method of its own.
        """
        old = self.state[ev]
        new = TRANSITIONS.get((old, event))
        if new is None:
            return False
        if old == new:
            return True  # a legal self-transition (DENIED --deny--> DENIED): nothing to do
        self.state[ev] = new
        self._record(now, ev, old, new)
        if old == EV_ASSUMED_BAD:
            self.bad.discard(ev)
            self.probe_at[ev] = INF
        if new == EV_ASSUMED_BAD:
            self._probe(ev, now, backoff)
        if event == "forced_back":
            self.stats["ev_forced_back"] += 1
        return True

    def _record(self, now: float, ev: int, old: str, new: str) -> None:
        if len(self.events) == self.events.maxlen:
            self.stats["ev_changes_dropped"] += 1  # the deque drops the oldest on append
        self.events.append((now, ev, old, new))

    def _probe(self, ev: int, now: float, backoff: float) -> None:
        self.bad.add(ev)
        self.probe_base[ev] = self.probe_seq[ev]  # answers to older probes no longer count
        self.probe_backoff[ev] = max(self.probe_min, backoff)
        self.probe_at[ev] = now

    def _guard(self, now: float) -> None:
        state = self.state
        allowed = sum(1 for s in state if s != EV_DENIED)
        need = min(self.ev_min_active, allowed)
        good = sum(1 for s in state if s == EV_GOOD)
        while good < need and self.bad:
            ev = min(self.bad, key=lambda e: (self.failed_at[e], e))
            if self._fire(ev, "forced_back", now):
                good += 1
            else:
                self.bad.discard(ev)  # not ASSUMED_BAD (cannot happen): do not loop on it

    def _sync(self) -> None:
        self.active = [e for e in range(self.evs) if self.state[e] == EV_GOOD]
        if self.active:
            self.on_active(self.active)
