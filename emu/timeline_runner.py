"""Firing a timeline: on the wall clock in a thread, or at training-step boundaries.

See emu.timeline for the clocks and TimelineRunner for the records.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from emu.errors import EmuError
from emu.failure_kinds.base import Failure, concrete
from emu.timeline_events import CLOCKS, Event, Restore, Timeline

ARM_LEAD_S = 0.05  # an armed failure is handed its start instant this long before it

Record = Callable[[dict], None]
AfterApply = Callable[[Failure], dict]


class Armed(Protocol):
    """What an armable failure's ``arm(fab)`` returns (Microbursts: a Microburst)."""

    def fire(self, t0: float) -> object: ...


class Sampled(Protocol):
    """A failure whose choice needs traffic before it fires (BusiestUplinkDown): at a step
    boundary the ranks are held, so the runner samples at the start and chooses since."""

    def start_sample(self, fab: Any) -> Any: ...

    def apply_since(self, fab: Any, before: Any) -> object: ...


class Stepped(Protocol):
    """A failure applied in pieces at step boundaries (step-locked microbursts): after it
    is applied at a boundary, the runner calls ``open_window`` at that boundary and every
    ``every_steps``-th one after it, with the instant the ranks resume at."""

    every_steps: int

    def open_window(self, fab: Any, handle: Any, t_resume: float) -> dict: ...


def every_steps(f: object) -> int:
    """A step-locked failure's ``every_steps`` (0 for any other)."""
    return int(getattr(f, "every_steps", 0) or 0)


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
    ``"measured"`` record; it is handed the failure as applied (its ``concrete``
    failure: the link a busiest-uplink cut chose). Failures still active at
    ``stop()`` are restored.

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

    A step-locked failure (one with ``every_steps`` > 0, see ``Stepped``; only in a
    timeline by step) gets its pieces at step boundaries too: the boundary it was applied
    at and every ``every_steps``-th after it are gates, and once the runner knows when the
    ranks resume from one (``resumed(step, t_resume)``) it opens the piece due there
    relative to that instant, so every transport meets it at the same point of the step.
    Each piece is recorded (``action`` "window": its number, ``resumed`` and ``opens``
    in seconds from time zero).

    ``fab`` needs only ``spec`` here (a fake will do); the failures use the rest.
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
        for ev in timeline.events:
            if not isinstance(ev.action, Restore) and every_steps(ev.action) \
                    and ev.step is None:
                raise EmuError(f"{ev.action.describe()} is locked to training steps "
                               "(every_steps): schedule it by step (at_step), not by time")
        self.active: dict[Failure, object] = {}  # failure -> the handle apply() returned
        self._stepped: dict[Failure, int] = {}  # step-locked failure -> its next boundary
        self._opening: list[Failure] = []  # step-locked failures due at the current gate
        self.t0: float | None = None
        # gated events not fired yet, in order, with their index in the timeline
        self._pending = list(enumerate(timeline.events))
        self._baseline: dict[int, object] = {}  # event index -> its failure's start_sample
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
        # A failure that samples traffic to choose (the busiest uplink) cannot sample at a
        # step boundary (the ranks are held): it chooses from what happened since now.
        for i, ev in self._pending:
            f = ev.action
            if not isinstance(f, Restore) and hasattr(f, "start_sample") and \
                    hasattr(f, "apply_since"):
                self._baseline[i] = cast(Sampled, f).start_sample(self.fab)

    def next_gate(self, after: int) -> int | None:
        """The first step >= ``after`` at whose end the ranks must wait for ``fire_due``
        (None: no event is left to fire at a boundary)."""
        if not self.gated:
            return None
        due = [max(after, n) for n in self._stepped.values()]
        if self._pending:
            ev = self._pending[0][1]
            # modelled time: due at a boundary not known in advance
            due.append(after if ev.step is None else max(after, ev.step))
        return min(due, default=None)

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
        # step-locked failures (just applied, or due again) open their piece on resuming
        self._opening = [f for f, n in self._stepped.items() if n <= step]
        for f in self._opening:
            self._stepped[f] = step + cast(Stepped, f).every_steps
        return out

    def resumed(self, step: int, t_resume: float) -> None:
        """The ranks resume from the boundary after ``step`` at ``t_resume``
        (CLOCK_MONOTONIC): open the step-locked pieces due there, then record them."""
        assert self.t0 is not None  # gates come after start()
        opened = []
        for f in self._opening:
            rec: dict = {"action": "window", **f.describe(), "step": step,
                         "resumed": round(t_resume - self.t0, 6)}
            try:
                got = cast(Stepped, f).open_window(self.fab, self.active[f], t_resume)
                rec |= {**got, "opens": round(got["opens"] - self.t0, 6)}
            except Exception as e:  # noqa: BLE001 - a failed piece is logged, the run goes on
                rec["error"] = repr(e)
            opened.append(rec)
        self._opening = []
        for rec in opened:
            rec["fired"] = round(time.monotonic() - self.t0, 6)
            self.record(rec)

    def _hand_instant(self, indices: list[int], instant: float) -> None:
        """Give every armed failure among ``indices`` the same start instant, before any
        of them is applied (applying one takes long enough to stagger the next)."""
        for i in indices:
            # a step-locked failure's pieces are timed from the resume instant instead
            if i in self._armed and not every_steps(self.timeline.events[i].action):
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
            # recorded like a scheduled restore, with what it measured: a burst that ran to
            # the end reports its drops at the target here (or nowhere)
            rec: dict = {"action": "restore_at_stop", **f.describe()}
            try:
                measured = f.restore(self.fab, handle)
                if isinstance(measured, dict):
                    rec.update(measured)
            except Exception as e:  # noqa: BLE001 - teardown continues; the error is logged
                rec["error"] = repr(e)
            if self.t0 is not None:
                rec["fired"] = round(time.monotonic() - self.t0, 6)
            self.record(rec)
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
                self._stepped.pop(f, None)
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
                if every_steps(f):  # its first piece: at this very boundary
                    self._stepped[f] = extra["step"]
        except Exception as e:  # noqa: BLE001 - a failed event is logged, the run goes on
            rec["error"] = repr(e)
        # When the change took effect: applying can take a while (a busiest-link
        # sample, burst senders starting), and the failure is only active from here.
        rec["applied"] = round(time.monotonic() - self.t0, 6)
        self.record(rec)
        if not restoring and "error" not in rec and self.after_apply is not None:
            self._measure(ev.at, f, self.active[f])
        return rec

    def _apply(self, index: int, f: Failure) -> object:
        if index not in self._baseline:
            return f.apply(self.fab)
        base = self._baseline.pop(index)
        return cast(Sampled, f).apply_since(self.fab, base)  # start() sampled only these

    def _measure(self, at_s: float | None, f: Failure, handle: object) -> None:
        after_apply, t0 = self.after_apply, self.t0
        assert after_apply is not None and t0 is not None  # see _fire, the only caller

        def run() -> None:
            rec = {"at": at_s, "action": "measured", **f.describe()}
            try:
                # What it put in place: for the busiest uplink, the link it chose.
                rec.update(after_apply(concrete(f, handle)))
            except Exception as e:  # noqa: BLE001 - logged with the event
                rec["error"] = repr(e)
            rec["fired"] = round(time.monotonic() - t0, 6)
            self.record(rec)

        t = threading.Thread(target=run, name="timeline-measure", daemon=True)
        self._measuring.append(t)
        t.start()
