"""An experiment's failure timeline: inline ``[[event]]`` tables or a timeline file, read by
the emulator's own parser (emu.timeline) and checked against the fabric and the steps.

Validating never runs a Python timeline: one that only declares events is read from its
syntax tree; any other is code, which runs (as root, in ``emu run``) only when a run asks
for the events (:func:`script_events`, called by ``Experiment.events``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from emu import timeline as tl
from emu.errors import EmuError
from topologies import MultiPlaneClos, ScaleAcross, TopologyError
from workloads.experiment.reader import Table

__all__ = ["check_clock", "read_timeline", "script_events"]

Spec = MultiPlaneClos | ScaleAcross


def read_timeline(top: Table, spec: Spec, base_dir: str | Path | None,
                  steps: int) -> tuple[tuple[tl.Event, ...] | None, str | None]:
    """(the events, the timeline file) of the experiment's top-level table ``top``. The
    events are None for a .py timeline that only running it can read (it does more than
    declare events)."""
    where = top.where
    if top.has("timeline") and top.has("event"):
        top.fail("timeline", "not allowed together with [[event]] tables (give the timeline "
                 "once: inline or as a file)", top.data["timeline"])
    file = top.get_str("timeline", None, what="a path to a .py or .toml timeline")
    if file is not None:
        path = _find(top, file, base_dir)
        context = f"{where}: timeline = {file!r}"
        try:
            timeline = tl.load(path, run_scripts=False)
        except tl.NeedsRun:
            return None, str(path.resolve())
        except EmuError as e:
            raise EmuError(f"{context}: {e}") from None
    else:
        # The timeline's own parser: inline events and timeline files mean the same.
        timeline = tl.parse_events(top.data.get("event", []), where, steps, "workload.steps")
        context = f"{where}: [[event]]"
    _check_timeline(context, timeline, spec, steps)
    return timeline.events, (str(path.resolve()) if file is not None else None)


def check_clock(clock: str, timeline: tl.Timeline, fail: Callable[[str], NoReturn]) -> None:
    """``fail`` unless ``clock`` can time ``timeline`` (steps need the wall clock)."""
    if clock == "modelled" and timeline.by_step:
        fail("must be 'wall' (the default) when events are scheduled by at_step: the clock "
             "only says what `at` counts")


def script_events(timeline_file: str, source: str, clock: str, spec: Spec,
                  steps: int) -> tuple[tl.Event, ...]:
    """Run the .py timeline ``timeline_file`` (a run asked for its events: this is the
    user's code, running with the run's privileges) and check its events as validation
    checks declared ones. ``source`` names the experiment in errors."""
    context = f"{source}: timeline = {timeline_file!r}"
    try:
        timeline = tl.load(timeline_file)
    except EmuError as e:
        raise EmuError(f"{context}: {e}") from None
    _check_timeline(context, timeline, spec, steps)

    def fail(msg: str) -> NoReturn:
        raise EmuError(f"{source}: clock = {clock!r} is invalid: {msg}")

    check_clock(clock, timeline, fail)
    return timeline.events


def _check_timeline(context: str, timeline: tl.Timeline, spec: Spec, steps: int) -> None:
    # Each failure first, so an error names its event; then times (steps against the
    # workload's), pairing and overlaps.
    for i, ev in enumerate(timeline.events):
        f = ev.action.failure if isinstance(ev.action, tl.Restore) else ev.action
        _validate(f"{context}: event[{i}] ({f.describe().get('kind')})",
                  partial(tl.check_failure, f), spec)
    _validate(context, lambda s: timeline.validate(s, steps), spec)


def _validate(context: str, check: Callable[[Any], None], spec: Spec) -> None:
    try:
        check(spec)
    except (EmuError, TopologyError, ValueError) as e:
        raise EmuError(f"{context}: {e}") from None
    except AttributeError as e:
        # Some failure kinds only know single-DC fabrics; say so instead of a traceback.
        raise EmuError(f"{context}: not supported on this fabric ({e})") from None


def _find(top: Table, file: str, base_dir: str | Path | None) -> Path:
    p = Path(file)
    tried = [p] if p.is_absolute() else (
        ([Path(base_dir) / p] if base_dir is not None else []) + [Path.cwd() / p])
    for c in tried:
        if c.is_file():
            return c
    top.fail("timeline", "no such file (looked in " + ", ".join(str(c) for c in tried) + ")",
             file)
