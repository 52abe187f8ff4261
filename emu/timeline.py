"""Failure timelines: short Python scripts or TOML files, fired on a clock or at steps.

A script is Python that defines ``timeline``::

    cut = fail_link("p0l0-p0s1")
    timeline = [at(2.0, cut), at(4.0, restore(cut))]

The same as TOML::

    [[event]]
    at = 2.0
    do = "fail_link"
    link = "p0l0-p0s1"

    [[event]]
    at = 4.0
    do = "restore"
    what = "fail_link"
    link = "p0l0-p0s1"

Three clocks. ``at(t, ...)`` (TOML ``at = t``) is ``t`` seconds from the start on
the wall clock (CLOCK_MONOTONIC; ``TimelineRunner.start`` fires these in a thread),
or, in a training run whose experiment says ``clock = "modelled"``, ``t`` seconds of
the training time the run reports (modelled compute + exposed communication per
step): the event fires at the first step boundary whose training time is >= t.
``at_step(k, ...)`` (TOML ``at_step = k``) fires after training step k and before
step k+1 on every rank: the training runner holds every rank at that boundary
(a gate) until the event is applied (``TimelineRunner.fire_due``), so every
transport meets the failure at the same point of training. One timeline uses one
kind: every event by ``at`` or every event by ``at_step``.

Everything is validated against the topology (and, for ``at_step``, the run's
steps) before a run starts; each event is logged with its scheduled and actual
firing time (and, at a step boundary, the step and the training time).
"""

from __future__ import annotations

import math
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from emu.errors import EmuError
from emu.failures import (
    BusiestUplinkDown,
    ChosenLink,
    DciDelay,
    Failure,
    GrayLink,
    LinkDown,
    LinkFlap,
    Microbursts,
    PlaneDown,
    RateDegrade,
    SwitchDown,
    Topology,
)
from emu.microburst import MicroburstSpec


@dataclass(frozen=True)
class Restore:
    """Undo ``failure`` (the same value that was applied)."""

    failure: Failure


@dataclass(frozen=True)
class Event:
    """``action`` (a failure to apply, or a Restore) at ``at`` seconds after the start, or
    (``at`` None) after training step ``step``."""

    at: float | None
    action: Failure | Restore
    step: int | None = None

    @property
    def when(self) -> str:
        """The schedule as written: ``at 2.0`` or ``at_step 40``."""
        return f"at {self.at}" if self.step is None else f"at_step {self.step}"


# The vocabulary of scripts (and of TOML ``do = ...``).
def fail_link(link: str) -> LinkDown:
    """A cut cable."""
    return LinkDown(link)


def fail_busiest_uplink(leaf: str) -> BusiestUplinkDown:
    """Cut the leaf-spine link carrying the most traffic into the rack of ``leaf`` (one
    leaf, or several comma-separated: "p0l0,p1l0")."""
    return BusiestUplinkDown(leaf)


def fail_switch(switch: str) -> SwitchDown:
    """A dead leaf or spine."""
    return SwitchDown(switch)


def fail_plane(plane: int) -> PlaneDown:
    """A whole plane down."""
    return PlaneDown(plane)


def flap_link(link: str, period_s: float, duty: float = 0.5) -> LinkFlap:
    """A link going down ``duty`` of every ``period_s``."""
    return LinkFlap(link, period_s, duty)


def gray_link(link: str, loss: float) -> GrayLink:
    """Random loss of a fraction ``loss`` on a link, both directions."""
    return GrayLink(link, loss)


def degrade_link(link: str, rate_mbit: float) -> RateDegrade:
    """A link slowed to ``rate_mbit``."""
    return RateDegrade(link, rate_mbit)


def microburst(target: str, sources: list[str] | tuple[str, ...], on_ms: float,
               every_ms: float, rate_mbit: float | None = None, payload: int = 8000,
               seed: int = 0, mode: str = "any") -> Microbursts:
    """Line-rate bursts of ``on_ms`` every ``every_ms`` from ``sources`` onto egress ``target``
    ("node:ifname", e.g. "p0l3:h13"); ``mode`` "drop" or "delay_only" makes the burst's
    effect at its target a checked promise (emu/burst_spec.py)."""
    return Microbursts(MicroburstSpec(target, tuple(sources), on_ms, every_ms, rate_mbit,
                                      payload=payload, seed=seed, mode=mode))


def delay_link(link: str, delay_ms: float) -> DciDelay:
    """A DCI link's one-way delay set to ``delay_ms`` (DCI links only)."""
    return DciDelay(link, delay_ms)


def restore(failure: Failure) -> Restore:
    """Undo a failure."""
    return Restore(failure)


def at(t: float, action: Failure | Restore) -> Event:
    """Schedule ``action`` at ``t`` seconds."""
    return Event(t, action)


def at_step(k: int, action: Failure | Restore) -> Event:
    """Schedule ``action`` after training step ``k`` (before step k + 1, on every rank)."""
    return Event(None, action, k)


VOCABULARY: dict[str, Callable[..., Failure]] = {
    "fail_link": fail_link, "fail_busiest_uplink": fail_busiest_uplink,
    "fail_switch": fail_switch, "fail_plane": fail_plane,
    "flap_link": flap_link, "gray_link": gray_link, "degrade_link": degrade_link,
    "microburst": microburst, "delay_link": delay_link,
}


CLOCKS = ("wall", "modelled")
ARM_LEAD_S = 0.05  # an armed failure is handed its start instant this long before it


def step_range_rule(steps: int) -> str:
    """What ``at_step`` may be in a run of ``steps`` steps (for error messages)."""
    if steps < 2:
        return (f"a run of {steps} step has no boundary between two steps to fire at "
                "(at_step k fires after step k and before step k + 1)")
    return (f"must be an integer in [0, {steps - 2}]: the event fires after step k and "
            f"before step k + 1 of the run's {steps} steps (0 .. {steps - 1})")


@dataclass(frozen=True)
class Timeline:
    """A validated sequence of events."""

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
            f.validate(spec)
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


def load(path: str | Path) -> Timeline:
    """Load a timeline from a ``.py`` script (defining ``timeline``) or a ``.toml`` file."""
    p = Path(path)
    if not p.is_file():
        raise EmuError(f"timeline file {str(p)!r} does not exist")
    if p.suffix == ".toml":
        return _from_toml(tomllib.loads(p.read_text()), str(p))
    if p.suffix == ".py":
        scope: dict = {"__name__": "timeline", **VOCABULARY, "at": at, "at_step": at_step,
                       "restore": restore}
        exec(compile(p.read_text(), str(p), "exec"), scope)  # noqa: S102 - user's own script
        events = scope.get("timeline")
        if not isinstance(events, list | tuple) or not all(isinstance(e, Event) for e in events):
            raise EmuError(f"{p}: must define `timeline = [at(t, ...), ...]` (or "
                           "`at_step(k, ...)`)")
        return Timeline(tuple(events))
    raise EmuError(f"timeline file {str(p)!r}: use a .py script or a .toml file")


_TOML_ARGS = {"fail_link": {"link"}, "fail_busiest_uplink": {"leaf"},
              "fail_switch": {"switch"}, "fail_plane": {"plane"},
              "flap_link": {"link", "period_s", "duty"}, "gray_link": {"link", "loss"},
              "degrade_link": {"link", "rate_mbit"},
              "delay_link": {"link", "delay_ms"},
              "microburst": {"target", "sources", "on_ms", "every_ms", "rate_mbit", "payload",
                             "seed", "mode"}}


def _from_toml(data: dict, where: str) -> Timeline:
    unknown = set(data) - {"event"}
    if unknown:
        raise EmuError(f"{where}: unknown top-level keys {sorted(unknown)}; only [[event]]")
    events = []
    for i, raw in enumerate(data.get("event", [])):
        raw = dict(raw)
        if ("at" not in raw and "at_step" not in raw) or "do" not in raw:
            raise EmuError(f"{where}: event {i} needs `at` (or `at_step`) and `do`")
        if "at" in raw and "at_step" in raw:
            raise EmuError(f"{where}: event {i} has both `at` and `at_step`: give one")
        t, k, do = raw.pop("at", None), raw.pop("at_step", None), raw.pop("do")
        restoring = do == "restore"
        if restoring:
            do = raw.pop("what", None)
        if do not in _TOML_ARGS:
            raise EmuError(f"{where}: event {i}: do={do!r} is unknown; valid: "
                           f"{sorted(_TOML_ARGS)} or 'restore' with what=...")
        bad = set(raw) - _TOML_ARGS[do]
        if bad:
            raise EmuError(f"{where}: event {i}: unknown keys {sorted(bad)} for {do}; "
                           f"valid: {sorted(_TOML_ARGS[do])}")
        failure = VOCABULARY[do](**raw)
        events.append(Event(t, Restore(failure) if restoring else failure, k))
    return Timeline(tuple(events))


Record = Callable[[dict], None]
AfterApply = Callable[[Failure], dict]


class Armed(Protocol):
    """What an armable failure's ``arm(fab)`` returns (Microbursts: a Microburst)."""

    def fire(self, t0: float) -> object: ...


class Armable(Protocol):
    """A failure that can be armed before the run (see TimelineRunner.prepare)."""

    def arm(self, fab: Any) -> Armed: ...

    def disarm(self, fab: Any, armed: Any) -> None: ...

    def apply(self, fab: Any, armed: Any) -> object: ...

    def describe(self) -> dict: ...


class TimelineRunner:
    """Fires a timeline's events, logging each one.

    ``record`` receives one dict per event as it fires (scheduled and actual
    time, what happened, any error). ``after_apply`` (e.g. control-plane
    convergence) runs in a thread of its own after each applied failure, so it
    never delays later events, and its result is recorded as an extra
    ``"measured"`` record. Failures still active at ``stop()`` are restored.

    Events by time on the wall clock (``clock = "wall"``) fire in a thread from
    ``start(t0)``. Events by step, and events by time with ``clock = "modelled"``,
    are *gated* (only with ``training=True``): a training runner calls
    ``fire_due(step, train_s)`` at each step boundary it holds the ranks at
    (``next_gate`` says which), and they fire there, synchronously. Their records
    add ``step`` (the step after which they fired; -1: before step 0), ``train_s``
    (the run's training time there) and ``clock`` ("step" or "modelled").

    ``prepare()`` (optional, before ``start``) arms every failure that can be armed
    (one with ``arm(fab)`` and ``disarm(fab, armed)``: burst senders started and
    waiting); the events due together (one ``at``, or one step boundary) then get one
    common instant (``armed.fire(instant)`` for each, then ``apply(fab, armed)`` for
    each), ARM_LEAD_S ahead of it on the wall clock, so bursts on several planes
    begin together. Armed failures that never fired are disarmed at ``stop()``.
    """

    def __init__(self, fab, timeline: Timeline, record: Record,
                 after_apply: AfterApply | None = None, clock: str = "wall",
                 training: bool = False) -> None:
        if clock not in CLOCKS:
            raise EmuError(f"clock={clock!r} is invalid: must be one of {', '.join(CLOCKS)}")
        timeline.validate(fab.spec)
        self.fab, self.timeline, self.record = fab, timeline, record
        self.after_apply = after_apply
        self.clock = "step" if timeline.by_step else clock
        if self.gated and not training:
            # Only a training run has step boundaries to hold the ranks at.
            raise EmuError("this timeline schedules events by training step (at_step) or "
                           "training time (clock = 'modelled'): only a training run "
                           "(emu run, an experiment) can fire it; use `at` on the wall "
                           "clock here")
        self.active: dict[Failure, object] = {}  # failure -> the handle apply() returned
        self.t0: float | None = None
        # gated events not fired yet, in order, with their index in the timeline
        self._pending = list(enumerate(timeline.events))
        self._baseline: dict[int, dict] = {}  # event index -> busiest-uplink counters at start
        self._armed: dict[int, Armed] = {}  # event index -> what its failure's arm() gave
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="timeline", daemon=True)
        self._measuring: list[threading.Thread] = []

    def prepare(self) -> None:
        """Arm every failure of the timeline that can be armed (see the class docstring)."""
        for i, ev in enumerate(self.timeline.events):
            f = ev.action
            if not isinstance(f, Restore) and hasattr(f, "arm") and hasattr(f, "disarm"):
                self._armed[i] = cast(Armable, f).arm(self.fab)

    @property
    def gated(self) -> bool:
        """Whether events fire at step boundaries (``fire_due``), not in a thread."""
        return self.clock != "wall" and bool(self.timeline.events)

    def start(self, t0: float | None = None) -> None:
        """Start firing; ``t0`` (monotonic) is time zero (default: now). A gated timeline
        only takes note of t0 (the training runner fires it with ``fire_due``)."""
        self.t0 = time.monotonic() if t0 is None else t0
        if not self.gated:
            self._thread.start()
            return
        from emu.counters import interface_packets

        # A busiest-uplink cut at a step boundary cannot sample traffic there (the ranks
        # are held): it chooses from what the leaves received since the start.
        for i, ev in self._pending:
            f = ev.action
            if isinstance(f, BusiestUplinkDown):
                self._baseline[i] = {leaf: interface_packets(self.fab.kernels[leaf])
                                     for leaf in f.leaves()}

    def next_gate(self, after: int) -> int | None:
        """The first step >= ``after`` at whose end the ranks must wait for ``fire_due``
        (None: no event is left to fire at a boundary)."""
        if not self.gated or not self._pending:
            return None
        ev = self._pending[0][1]
        if ev.step is None:  # modelled time: due at a boundary not known in advance
            return after
        return max(after, ev.step)

    def fire_due(self, step: int, train_s: float) -> list[dict]:
        """At the boundary after ``step`` (-1: before step 0), with ``train_s`` seconds of
        training time reported so far: fire every event due (synchronously, in order);
        their records."""
        if not self.gated:
            raise EmuError("fire_due is for timelines fired at step boundaries (at_step, or "
                           "clock = 'modelled')")
        if self.t0 is None:
            raise EmuError("fire_due before start(): the runner sets time zero first")
        due = []
        while self._pending:
            ev = self._pending[0][1]
            if ev.step is not None:
                is_due = ev.step <= step
            else:
                assert ev.at is not None  # validated: every event has a step or a time
                is_due = ev.at <= train_s
            if not is_due:
                break
            due.append(self._pending.pop(0))
        self._hand_instant([i for i, _ in due], time.monotonic() + ARM_LEAD_S)
        out = []
        for i, ev in due:
            extra: dict = {"step": step, "train_s": round(train_s, 6), "clock": self.clock}
            if ev.step is not None:
                extra["at_step"] = ev.step
            else:  # how much training time past its schedule it fired (< one step)
                assert ev.at is not None  # validated: every event has a step or a time
                extra["late_ms"] = round((train_s - ev.at) * 1000, 3)
            out.append(self._fire(i, ev, extra))
        return out

    def _hand_instant(self, indices: list[int], instant: float) -> None:
        """Give every armed failure among ``indices`` the same start instant, before any
        of them is applied (applying one takes long enough to stagger the next)."""
        for i in indices:
            if i in self._armed:
                try:
                    self._armed[i].fire(instant)
                except Exception:  # noqa: BLE001 - its apply reports the problem
                    pass

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def stop(self) -> None:
        """Stop firing and restore every failure still active."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for t in self._measuring:
            t.join()
        for i, armed in self._armed.items():  # armed, never applied
            # prepare() armed only failures with arm() and disarm()
            armable = cast(Armable, self.timeline.events[i].action)
            try:
                armable.disarm(self.fab, armed)
            except Exception as e:  # noqa: BLE001 - teardown continues; the error is logged
                self.record({"action": "disarm_at_stop",
                             **armable.describe(), "error": repr(e)})
        self._armed.clear()
        for f, handle in reversed(list(self.active.items())):
            try:
                f.restore(self.fab, handle)
            except Exception as e:  # noqa: BLE001 - teardown continues; the error is logged
                self.record({"action": "restore_at_stop", **f.describe(), "error": repr(e)})
        self.active.clear()

    def _run(self) -> None:
        assert self.t0 is not None  # start() sets it before starting this thread
        events = list(enumerate(self.timeline.events))
        while events:
            at_s = events[0][1].at
            assert at_s is not None  # not gated: every event is by time (validated)
            group = [(i, ev) for i, ev in events if ev.at == at_s]
            events = events[len(group):]
            instant = self.t0 + at_s
            armed = [i for i, _ in group if i in self._armed]
            if armed:  # handed their instant ahead of it, so they start on it
                if self._stop.wait(max(0.0, instant - ARM_LEAD_S - time.monotonic())):
                    return
                self._hand_instant(armed, max(instant, time.monotonic() + ARM_LEAD_S / 5))
            if self._stop.wait(max(0.0, instant - time.monotonic())):
                return
            for i, ev in group:
                late = round((time.monotonic() - instant) * 1000, 3)
                self._fire(i, ev, {"late_ms": late})

    def _fire(self, index: int, ev: Event, extra: dict) -> dict:
        """Apply or restore ``ev``'s failure now; record it (with ``extra``) and return it."""
        assert self.t0 is not None  # fired only after start()
        fired = time.monotonic() - self.t0
        restoring = isinstance(ev.action, Restore)
        f = ev.action.failure if isinstance(ev.action, Restore) else ev.action
        rec = {**({"at": ev.at} if ev.at is not None else {}), "fired": round(fired, 6),
               **extra, "action": "restore" if restoring else "apply", **f.describe()}
        try:
            if restoring:
                measured = f.restore(self.fab, self.active.pop(f))
                if isinstance(measured, dict):
                    rec.update(measured)
            else:
                armed = self._armed.pop(index, None)
                # prepare() armed only failures with arm() (and an apply taking what it gave)
                handle = self.active[f] = (self._apply(index, f) if armed is None
                                           else cast(Armable, f).apply(self.fab, armed))
                if hasattr(handle, "record"):  # what the failure chose when it fired
                    rec.update(handle.record())
        except Exception as e:  # noqa: BLE001 - a failed event is logged, the run goes on
            rec["error"] = repr(e)
        # When the change took effect: applying can take a while (a busiest-link
        # sample, burst senders starting), and the failure is only active from here.
        rec["applied"] = round(time.monotonic() - self.t0, 6)
        self.record(rec)
        if not restoring and "error" not in rec and self.after_apply is not None:
            self._measure(ev.at, f)
        return rec

    def _apply(self, index: int, f: Failure) -> object:
        base = self._baseline.pop(index, None)
        if base is None:
            return f.apply(self.fab)
        assert isinstance(f, BusiestUplinkDown)  # start() takes a baseline for no other
        from emu.counters import interface_packets

        # BusiestUplinkDown's rule (the leaves' spine port that received the most), over
        # the training so far instead of a sample taken while the ranks are held.
        ups = f.links(self.fab.spec)
        leaves = f.leaves()
        port = {lk.name: (lk.a if lk.a.node in leaves else lk.b) for lk in ups}
        now = {leaf: interface_packets(self.fab.kernels[leaf]) for leaf in leaves}
        rx = {name: now[p.node][p.ifname][0] - base[p.node][p.ifname][0]
              for name, p in port.items()}
        name = max(rx, key=lambda n: rx[n])
        LinkDown(name).apply(self.fab)
        return ChosenLink(name, rx[name], sum(rx.values()))

    def _measure(self, at_s: float | None, f: Failure) -> None:
        after_apply, t0 = self.after_apply, self.t0
        assert after_apply is not None and t0 is not None  # see _fire, the only caller

        def run() -> None:
            rec = {"at": at_s, "action": "measured", **f.describe()}
            try:
                rec.update(after_apply(f))
            except Exception as e:  # noqa: BLE001 - logged with the event
                rec["error"] = repr(e)
            rec["fired"] = round(time.monotonic() - t0, 6)
            self.record(rec)

        t = threading.Thread(target=run, name="timeline-measure", daemon=True)
        self._measuring.append(t)
        t.start()
