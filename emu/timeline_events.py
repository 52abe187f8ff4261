"""A timeline's events and their checks against a topology (see emu.timeline).

An :class:`Event` applies a failure, or restores one (:class:`Restore`), at ``at``
seconds or after training step ``step``; a :class:`Timeline` is a sequence of them,
validated as a whole (times, order, pairing, overlaps) by ``Timeline.validate``.
``at``, ``at_step`` and ``restore`` build events in Python scripts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from emu.errors import EmuError
from emu.failure_kinds.base import Failure, Topology, check
from topologies import TopologyError

CLOCKS = ("wall", "modelled")  # what an event's `at` counts (see emu.timeline)


@dataclass(frozen=True)
class Restore:
    """Undo ``failure`` (the same value that was applied)."""

    failure: Failure


@dataclass(frozen=True)
class Event:
    """``action`` (a failure to apply, or a Restore) at ``at`` seconds after the start, or
    (``at`` None) after training step ``step``. ``id``: the name a TOML timeline gave the
    event (a later ``do = "restore"`` names it); not part of the event's identity."""

    at: float | None
    action: Failure | Restore
    step: int | None = None
    id: str | None = field(default=None, compare=False)

    @property
    def when(self) -> str:
        """The schedule as written: ``at 2.0`` or ``at_step 40``."""
        return f"at {self.at}" if self.step is None else f"at_step {self.step}"


def restore(failure: Failure) -> Restore:
    """Undo a failure."""
    return Restore(failure)


def at(t: float, action: Failure | Restore) -> Event:
    """Schedule ``action`` at ``t`` seconds."""
    return Event(t, action)


def at_step(k: int, action: Failure | Restore) -> Event:
    """Schedule ``action`` after training step ``k`` (before step k + 1, on every rank)."""
    return Event(None, action, k)


def step_range_rule(steps: int) -> str:
    """What ``at_step`` may be in a run of ``steps`` steps (for error messages)."""
    if steps < 2:
        return (f"a run of {steps} step has no boundary between two steps to fire at "
                "(at_step k fires after step k and before step k + 1)")
    return (f"must be an integer in [0, {steps - 2}]: the event fires after step k and "
            f"before step k + 1 of the run's {steps} steps (0 .. {steps - 1})")


@dataclass(frozen=True)
class Timeline:
    """A sequence of events (``validate`` checks it against a topology and a run)."""

    events: tuple[Event, ...]

    @property
    def by_step(self) -> bool:
        """Whether the events are scheduled by training step (``at_step``)."""
        return any(ev.step is not None for ev in self.events)

    def validate(self, spec: Topology, steps: int | None = None) -> None:
        """Check times, order, pairing and overlap; raise EmuError naming the event.

        ``steps``: the training run's steps, which every ``at_step`` must fall inside
        (None: not checked, e.g. before the run is known)."""
        active: dict[Failure, float] = {}
        last: float = 0
        by_step = self.by_step
        for i, ev in enumerate(self.events):
            where = f"event {i} ({ev.when})"
            if (ev.step is None) == (ev.at is None):
                raise EmuError(f"{where}: give a time (at) or a step (at_step), exactly one")
            if by_step and ev.step is None:
                raise EmuError(f"{where}: at and at_step cannot be mixed in one timeline "
                               "(schedule every event by step or every event by time)")
            when: float
            if ev.step is not None:
                if type(ev.step) is not int or ev.step < 0:
                    raise EmuError(f"{where}: at_step={ev.step!r} is invalid: must be an "
                                   "integer >= 0 (the training step after which it fires)")
                if steps is not None and ev.step > steps - 2:
                    raise EmuError(f"{where}: at_step={ev.step!r} is invalid: "
                                   f"{step_range_rule(steps)}")
                when = ev.step
            else:
                if isinstance(ev.at, bool) or not isinstance(ev.at, int | float) or \
                        not math.isfinite(ev.at) or ev.at < 0:
                    raise EmuError(f"{where}: time must be a finite number of seconds >= 0")
                when = ev.at
            if when < last:
                unit = "step" if by_step else "time"
                raise EmuError(f"{where}: out of order, events must be listed by {unit} "
                               f"(previous event {'at_step' if by_step else 'at'} {last})")
            last = when
            if isinstance(ev.action, Restore):
                f = ev.action.failure
                if f not in active:
                    raise EmuError(f"{where}: restore of {f.describe()} which is not active")
                del active[f]
                continue
            f = ev.action
            if not hasattr(f, "apply"):
                raise EmuError(f"{where}: {f!r} is not a failure or restore")
            try:
                check(f, spec)
            except (EmuError, TopologyError, ValueError) as e:
                raise EmuError(f"{where}: {e}") from None
            if f in active:
                raise EmuError(f"{where}: {f.describe()} is already active since "
                               f"{self._since(active[f])}")
            mine = {lk.name for lk in f.links(spec)}
            for other, since in active.items():
                both = mine & {lk.name for lk in other.links(spec)}
                if both:
                    raise EmuError(f"{where}: {f.describe()} overlaps {other.describe()} "
                                   f"(active since {self._since(since)}) on {sorted(both)[:3]}")
            active[f] = when

    def _since(self, when: float) -> str:
        return f"step {when}" if self.by_step else f"t={when}"

    @property
    def duration(self) -> float:
        """Seconds from the start to the last event (0 for a timeline by step)."""
        times = [ev.at for ev in self.events if ev.at is not None]
        return times[-1] if times else 0.0
