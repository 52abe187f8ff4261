"""What a microburst is: a frozen, validated description (pure; no topology, no root)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from emu.burst_sender import HEADER, jitter_offset
from emu.errors import EmuError
from topologies import validate

MODES = ("any", "drop", "delay_only")


class MicroburstError(EmuError, ValueError):
    """An invalid microburst description, or one the fabric cannot carry."""


def check_number(name: str, value: object, lo: float, *, lo_open: bool = True) -> float:
    """``value`` as a float if it is a finite number above ``lo`` (or at least ``lo``
    with ``lo_open=False``), else MicroburstError naming it and the valid range.

    The check and its wording are topologies.validate's; only the error type is the
    burst's own, so a bad burst stays a MicroburstError."""
    try:
        return validate.check_number(name, value, lo, lo_open=lo_open)
    except validate.InvalidValue as e:
        raise MicroburstError(str(e)) from None


@dataclass(frozen=True)
class MicroburstSpec:
    """What to burst, from where, and when.

    ``target`` is a switch egress ``"node:ifname"`` (``"p0l3:h13"``: leaf
    p0l3's port to host h13; ``"p0s1:l3"``: spine p0s1's port to leaf 3;
    ``"p0l3:s1"``: leaf p0l3's uplink to spine 1). Every ``every_ms`` from
    ``start_s`` (seconds after start) each source sends for ``on_ms`` at
    ``rate_mbit`` (wire rate; None: as fast as its NIC takes, i.e. line rate),
    until ``duration_s`` (None: until stopped). ``jitter_ms`` > 0 starts each burst
    up to that much after its slot (drawn from ``seed`` and the burst's number, so
    bursts of one seed on several planes stay together and every run gets the same
    pattern): a strictly periodic burst meets a training loop whose step divides its
    period at the same phase of the step every time, and that phase is set by the
    transport's own step time, so two transports would meet different bursts.
    ``on_ms + jitter_ms`` must stay below ``every_ms`` (bursts never overlap).
    ``schedule``, if given, replaces the periodic pattern with explicit
    ``(start_s, duration_ms)`` bursts (sorted, not overlapping); ``start_s``,
    ``duration_s`` and ``jitter_ms`` must then keep their defaults. ``seed`` also
    breaks ties between equally good paths.

    ``every_steps`` > 0 locks the bursts to a training run's steps instead (only in a
    timeline event by ``at_step``; ``every_ms`` then stays None): burst ``k`` starts
    ``jitter_offset(seed, k, jitter_ms)`` after the ranks resume from the step boundary
    ``k * every_steps`` steps after the event's own, so every transport meets burst ``k``
    at the same point of the same step, whatever its step time. Its windows are known
    only as the run hands them out (``Microburst.next_window``).

    ``mode`` says what the burst is meant to do at its target FIFO, checked against
    the fabric before anything runs (emu.burst_geometry): ``"drop"``: overflow it
    (the excess over the drain rate during one burst must exceed the buffer);
    ``"delay_only"``: a delay spike that must not overflow it (excess below the
    buffer); ``"any"`` (default): either; the records then say which it was.
    """

    target: str
    sources: tuple[str, ...]
    on_ms: float
    every_ms: float | None = None
    rate_mbit: float | None = None
    start_s: float = 0.0
    duration_s: float | None = None
    schedule: tuple[tuple[float, float], ...] | None = None
    payload: int = 8000
    seed: int = 0
    mode: str = "any"
    jitter_ms: float = 0.0
    every_steps: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or self.target.count(":") != 1:
            raise MicroburstError(f"target={self.target!r} is invalid: must be 'node:ifname', "
                                  "e.g. 'p0l3:h13' (leaf p0l3's port to host h13)")
        if not isinstance(self.sources, tuple) or not self.sources:
            raise MicroburstError(f"sources={self.sources!r} is invalid: must be a non-empty "
                                  "tuple of host names")
        dup = sorted(n for n, c in Counter(self.sources).items() if c > 1)
        if dup:
            raise MicroburstError(f"sources={self.sources!r} is invalid: {dup} listed twice")
        on = check_number("on_ms", self.on_ms, 0.0)
        jitter = check_number("jitter_ms", self.jitter_ms, 0.0, lo_open=False)
        if type(self.every_steps) is not int or self.every_steps < 0:
            raise MicroburstError(f"every_steps={self.every_steps!r} is invalid: must be an "
                                  "integer >= 1 (bursts locked to training steps) or 0")
        if self.step_locked:
            self._check_step_locked()
        else:
            self._check_period(on, jitter)
        if self.rate_mbit is not None:
            check_number("rate_mbit", self.rate_mbit, 0.0)
        check_number("start_s", self.start_s, 0.0, lo_open=False)
        if self.duration_s is not None:
            check_number("duration_s", self.duration_s, 0.0)
        if type(self.payload) is not int or not HEADER.size <= self.payload <= 9000 - 112:
            raise MicroburstError(f"payload={self.payload!r} is invalid: must be an integer "
                                  f"in [{HEADER.size}, {9000 - 112}] (and fit the fabric MTU)")
        if type(self.seed) is not int:
            raise MicroburstError(f"seed={self.seed!r} is invalid: must be an integer")
        if self.mode not in MODES:
            raise MicroburstError(f"mode={self.mode!r} is invalid: must be one of "
                                  f"{', '.join(repr(m) for m in MODES)}")
        if self.schedule is not None:
            self._check_schedule()

    def _check_period(self, on: float, jitter: float) -> None:
        if self.every_ms is None:
            raise MicroburstError("every_ms=None is invalid: a burst pattern needs a period "
                                  "(every_ms > on_ms), or every_steps >= 1 to lock it to "
                                  "training steps")
        every = check_number("every_ms", self.every_ms, 0.0)
        if every <= on:
            raise MicroburstError(f"every_ms={self.every_ms!r} is invalid: must be > "
                                  f"on_ms={self.on_ms!r} (a burst period longer than the burst)")
        if on + jitter >= every:
            raise MicroburstError(f"jitter_ms={self.jitter_ms!r} is invalid: on_ms + jitter_ms "
                                  f"must stay below every_ms={self.every_ms!r} (bursts must "
                                  "not overlap)")

    def _check_step_locked(self) -> None:
        if self.every_ms is not None or self.schedule is not None or self.start_s != 0.0 \
                or self.duration_s is not None:
            raise MicroburstError(
                f"every_ms={self.every_ms!r}, schedule={self.schedule!r}, start_s="
                f"{self.start_s!r} and duration_s={self.duration_s!r} are invalid with "
                f"every_steps={self.every_steps!r}: step-locked bursts are timed by the "
                "training steps (keep None, None, 0.0 and None)")

    @property
    def step_locked(self) -> bool:
        """Whether the bursts are locked to training steps (``every_steps``), not timed."""
        return self.every_steps > 0

    def _check_schedule(self) -> None:
        sched = self.schedule
        if not isinstance(sched, tuple) or not sched:
            raise MicroburstError(f"schedule={sched!r} is invalid: must be a non-empty tuple "
                                  "of (start_s, duration_ms) pairs, or None")
        if self.start_s != 0.0 or self.duration_s is not None or self.jitter_ms != 0.0:
            raise MicroburstError(
                f"start_s={self.start_s!r}, duration_s={self.duration_s!r} and jitter_ms="
                f"{self.jitter_ms!r} are invalid with a schedule: the schedule's own start "
                "times apply (keep 0.0, None and 0.0)")
        end = -1.0
        for i, item in enumerate(sched):
            if not isinstance(item, tuple) or len(item) != 2:
                raise MicroburstError(f"schedule[{i}]={item!r} is invalid: must be a "
                                      "(start_s, duration_ms) pair")
            s = check_number(f"schedule[{i}] start_s", item[0], 0.0, lo_open=False)
            d = check_number(f"schedule[{i}] duration_ms", item[1], 0.0)
            if s < end:
                raise MicroburstError(
                    f"schedule[{i}]={item!r} is invalid: starts at {s:g} s, before the previous "
                    f"burst ends at {end:g} s (bursts must be sorted and not overlap)")
            end = s + d / 1000

    @property
    def longest_on_ms(self) -> float:
        """The longest burst of the pattern (ms): the one that decides whether it drops."""
        if self.schedule is not None:
            return max(d for _, d in self.schedule)
        return self.on_ms

    def window_start(self, k: int) -> float:
        """When burst ``k`` (from 0) is scheduled to start, seconds after the start
        (step-locked: after the instant the ranks resume from its step boundary)."""
        if self.schedule is not None:
            return self.schedule[k][0]
        if self.step_locked:  # after the resume from its own step boundary
            return jitter_offset(self.seed, k, self.jitter_ms / 1000)
        assert self.every_ms is not None  # validated: periodic
        return (self.start_s + k * self.every_ms / 1000
                + jitter_offset(self.seed, k, self.jitter_ms / 1000))

    def windows(self, limit_s: float | None = None) -> list[tuple[float, float]]:
        """Burst windows ``(start_s, end_s)`` relative to the start, up to ``limit_s``.

        A periodic burst cut by ``duration_s`` ends there. An unbounded
        pattern needs ``limit_s``.
        """
        if self.step_locked:
            raise MicroburstError("a step-locked burst pattern (every_steps) has no windows "
                                  "of its own: the training run hands them out")
        if self.schedule is not None:
            out = [(s, s + d / 1000) for s, d in self.schedule]
        else:
            until = self.start_s + self.duration_s if self.duration_s is not None else math.inf
            if limit_s is None and math.isinf(until):
                raise MicroburstError("windows() of an unbounded burst pattern needs limit_s")
            out, k = [], 0
            while True:
                a = self.window_start(k)
                if a >= until or (limit_s is not None and a >= limit_s):
                    break
                out.append((a, min(a + self.on_ms / 1000, until)))
                k += 1
        if limit_s is not None:
            out = [(a, min(b, limit_s)) for a, b in out if a < limit_s]
        return out

    def sender_windows(self) -> dict:
        """The pattern as the sender process takes it (``--windows``): an explicit
        schedule, the periodic parameters in seconds, or (step-locked) the on-time of the
        windows the parent hands out one by one."""
        if self.step_locked:
            return {"on": self.on_ms / 1000, "on_demand": True}
        if self.schedule is not None:
            return {"schedule": [[a, b] for a, b in self.windows()]}
        until = self.start_s + self.duration_s if self.duration_s is not None else None
        assert self.every_ms is not None  # validated: periodic
        w = {"start": self.start_s, "on": self.on_ms / 1000, "every": self.every_ms / 1000,
             "until": until}
        if self.jitter_ms:
            w |= {"jitter": self.jitter_ms / 1000, "seed": self.seed}
        return w
