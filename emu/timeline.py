"""Failure timelines: short Python scripts or TOML files, fired on a monotonic clock.

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

Everything is validated against the topology before a run starts; each event
is logged with its scheduled and actual firing time.
"""

from __future__ import annotations

import math
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from emu.errors import EmuError
from emu.failures import (
    BusiestUplinkDown,
    DciDelay,
    Failure,
    GrayLink,
    LinkDown,
    LinkFlap,
    Microbursts,
    PlaneDown,
    RateDegrade,
    SwitchDown,
)
from emu.microburst import MicroburstSpec
from topologies import MultiPlaneClos


@dataclass(frozen=True)
class Restore:
    """Undo ``failure`` (the same value that was applied)."""

    failure: Failure


@dataclass(frozen=True)
class Event:
    """``action`` (a failure to apply, or a Restore) at ``at`` seconds after the start."""

    at: float
    action: Failure | Restore


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
               seed: int = 0) -> Microbursts:
    """Line-rate bursts of ``on_ms`` every ``every_ms`` from ``sources`` onto egress ``target``
    ("node:ifname", e.g. "p0l3:h13")."""
    return Microbursts(MicroburstSpec(target, tuple(sources), on_ms, every_ms, rate_mbit,
                                      payload=payload, seed=seed))


def delay_link(link: str, delay_ms: float) -> DciDelay:
    """A DCI link's one-way delay set to ``delay_ms`` (DCI links only)."""
    return DciDelay(link, delay_ms)


def restore(failure: Failure) -> Restore:
    """Undo a failure."""
    return Restore(failure)


def at(t: float, action: Failure | Restore) -> Event:
    """Schedule ``action`` at ``t`` seconds."""
    return Event(t, action)


VOCABULARY: dict[str, Callable[..., Failure]] = {
    "fail_link": fail_link, "fail_busiest_uplink": fail_busiest_uplink,
    "fail_switch": fail_switch, "fail_plane": fail_plane,
    "flap_link": flap_link, "gray_link": gray_link, "degrade_link": degrade_link,
    "microburst": microburst, "delay_link": delay_link,
}


@dataclass(frozen=True)
class Timeline:
    """A validated sequence of events."""

    events: tuple[Event, ...]

    def validate(self, spec: MultiPlaneClos) -> None:
        """Check times, order, pairing and overlap; raise EmuError naming the event."""
        active: dict[Failure, float] = {}
        last = 0.0
        for i, ev in enumerate(self.events):
            where = f"event {i} (at {ev.at})"
            if isinstance(ev.at, bool) or not isinstance(ev.at, int | float) or not math.isfinite(
                    ev.at) or ev.at < 0:
                raise EmuError(f"{where}: time must be a finite number of seconds >= 0")
            if ev.at < last:
                raise EmuError(f"{where}: out of order, events must be listed by time "
                               f"(previous event at {last})")
            last = ev.at
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
                               f"t={active[f]}")
            mine = {lk.name for lk in f.links(spec)}
            for other, since in active.items():
                both = mine & {lk.name for lk in other.links(spec)}
                if both:
                    raise EmuError(f"{where}: {f.describe()} overlaps {other.describe()} "
                                   f"(active since t={since}) on {sorted(both)[:3]}")
            active[f] = ev.at

    @property
    def duration(self) -> float:
        return self.events[-1].at if self.events else 0.0


def load(path: str | Path) -> Timeline:
    """Load a timeline from a ``.py`` script (defining ``timeline``) or a ``.toml`` file."""
    p = Path(path)
    if not p.is_file():
        raise EmuError(f"timeline file {str(p)!r} does not exist")
    if p.suffix == ".toml":
        return _from_toml(tomllib.loads(p.read_text()), str(p))
    if p.suffix == ".py":
        scope: dict = {"__name__": "timeline", **VOCABULARY, "at": at, "restore": restore}
        exec(compile(p.read_text(), str(p), "exec"), scope)  # noqa: S102 - user's own script
        events = scope.get("timeline")
        if not isinstance(events, list | tuple) or not all(isinstance(e, Event) for e in events):
            raise EmuError(f"{p}: must define `timeline = [at(t, ...), ...]`")
        return Timeline(tuple(events))
    raise EmuError(f"timeline file {str(p)!r}: use a .py script or a .toml file")


_TOML_ARGS = {"fail_link": {"link"}, "fail_busiest_uplink": {"leaf"},
              "fail_switch": {"switch"}, "fail_plane": {"plane"},
              "flap_link": {"link", "period_s", "duty"}, "gray_link": {"link", "loss"},
              "degrade_link": {"link", "rate_mbit"},
              "delay_link": {"link", "delay_ms"},
              "microburst": {"target", "sources", "on_ms", "every_ms", "rate_mbit", "payload",
                             "seed"}}


def _from_toml(data: dict, where: str) -> Timeline:
    unknown = set(data) - {"event"}
    if unknown:
        raise EmuError(f"{where}: unknown top-level keys {sorted(unknown)}; only [[event]]")
    events = []
    for i, raw in enumerate(data.get("event", [])):
        raw = dict(raw)
        if "at" not in raw or "do" not in raw:
            raise EmuError(f"{where}: event {i} needs `at` and `do`")
        t, do = raw.pop("at"), raw.pop("do")
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
        events.append(Event(t, Restore(failure) if restoring else failure))
    return Timeline(tuple(events))


Record = Callable[[dict], None]
AfterApply = Callable[[Failure], dict]


class TimelineRunner:
    """Fires a timeline's events on a monotonic clock in a thread, logging each one.

    ``record`` receives one dict per event as it fires (scheduled and actual
    time, what happened, any error). ``after_apply`` (e.g. control-plane
    convergence) runs in a thread of its own after each applied failure, so it
    never delays later events, and its result is recorded as an extra
    ``"measured"`` record. Failures still active at ``stop()`` are restored.
    """

    def __init__(self, fab, timeline: Timeline, record: Record,
                 after_apply: AfterApply | None = None) -> None:
        timeline.validate(fab.spec)
        self.fab, self.timeline, self.record = fab, timeline, record
        self.after_apply = after_apply
        self.active: dict[Failure, object] = {}  # failure -> the handle apply() returned
        self.t0: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="timeline", daemon=True)
        self._measuring: list[threading.Thread] = []

    def start(self, t0: float | None = None) -> None:
        """Start firing; ``t0`` (monotonic) is time zero (default: now)."""
        self.t0 = time.monotonic() if t0 is None else t0
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def stop(self) -> None:
        """Stop firing and restore every failure still active."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for t in self._measuring:
            t.join()
        for f, handle in reversed(list(self.active.items())):
            try:
                f.restore(self.fab, handle)
            except Exception as e:  # noqa: BLE001 - teardown continues; the error is logged
                self.record({"action": "restore_at_stop", **f.describe(), "error": repr(e)})
        self.active.clear()

    def _run(self) -> None:
        for ev in self.timeline.events:
            if self._stop.wait(max(0.0, self.t0 + ev.at - time.monotonic())):
                return
            fired = time.monotonic() - self.t0
            restoring = isinstance(ev.action, Restore)
            f = ev.action.failure if restoring else ev.action
            rec = {"at": ev.at, "fired": round(fired, 6),
                   "late_ms": round((fired - ev.at) * 1000, 3),
                   "action": "restore" if restoring else "apply", **f.describe()}
            try:
                if restoring:
                    measured = f.restore(self.fab, self.active.pop(f))
                    if isinstance(measured, dict):
                        rec.update(measured)
                else:
                    handle = self.active[f] = f.apply(self.fab)
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

    def _measure(self, at_s: float, f: Failure) -> None:
        def run() -> None:
            rec = {"at": at_s, "action": "measured", **f.describe()}
            try:
                rec.update(self.after_apply(f))
            except Exception as e:  # noqa: BLE001 - logged with the event
                rec["error"] = repr(e)
            rec["fired"] = round(time.monotonic() - self.t0, 6)
            self.record(rec)

        t = threading.Thread(target=run, name="timeline-measure", daemon=True)
        self._measuring.append(t)
        t.start()
