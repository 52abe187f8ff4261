"""The one timeline parser: TOML ``[[event]]`` tables (a timeline file, or an experiment
file's inline events) and timeline files of either kind, checked before anything runs.

Every event's arguments are checked against its verb's signature (the failure kind's,
emu.failure_kinds.registry): unknown or missing keys and wrong types name the key
(``event[2].plane = '0' is invalid: must be an integer``). Whether the failures exist
on a topology is ``Timeline.validate``'s part.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TypeGuard

from emu.errors import EmuError
from emu.failure_kinds.base import Failure
from emu.failure_kinds.registry import VOCABULARY
from emu.timeline_events import Event, Restore, Timeline, step_range_rule
from emu.timeline_script import read_script
from emu.tomlfile import read_toml


def type_name(value: object) -> str:
    """What ``value`` is, in the words of a TOML file (for error messages)."""
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)


def _is_time(v: object) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            and v >= 0)


def parse_events(raw: object, where: str, steps: int | None = None,
                 steps_key: str = "steps") -> Timeline:
    """The timeline of ``raw``, a list of event tables as ``tomllib`` reads ``[[event]]``.

    An event has ``at`` (seconds) or ``at_step`` (the training step after which it fires),
    ``do`` (a verb of the vocabulary, or ``"restore"``) and the verb's arguments; it may
    have an ``id``. A restore names the event it undoes by that id (``id = "cut"``), or
    repeats its verb (``what = "fail_link"``) and arguments. ``steps``: the run's steps,
    which every ``at_step`` must fall inside (its name in messages: ``steps_key``).
    Errors start with ``where`` and name the key (``event[1].link``).
    """
    if not isinstance(raw, list):
        raise EmuError(f"{where}: event is invalid: must be an array of tables ([[event]]), "
                       f"not {type_name(raw)}")
    verbs = ", ".join(sorted(VOCABULARY))
    named: dict[str, tuple[int, Failure]] = {}  # id -> (event index, its failure)
    events = []
    for i, ev in enumerate(raw):
        path = f"event[{i}]"
        if not isinstance(ev, Mapping):
            raise EmuError(f"{where}: {path} is invalid: must be a table, not {type_name(ev)}")
        t, k = _when(where, path, ev, steps, steps_key)
        when = "at" if t is not None else "at_step"
        do = ev["do"]
        if do == "restore" and "id" in ev:
            events.append(Event(t, Restore(_named(where, path, ev, named, when)), k))
            continue
        if do == "restore":
            do = ev.get("what")
            if not _known(do):
                raise EmuError(f"{where}: {path}.what = {do!r} is invalid: must be one of "
                               f"{verbs} (the failure to restore), or give id = the id of "
                               "the event that applied it")
            failure = _failure(where, path, do, ev, [when, "do", "what"], [])
            events.append(Event(t, Restore(failure), k))
            continue
        if not _known(do):
            raise EmuError(f"{where}: {path}.do = {do!r} is invalid: must be one of "
                           f"{verbs}, or 'restore' with id = ...")
        failure = _failure(where, path, do, ev, [when, "do"], ["id"])
        ref = ev.get("id")
        if ref is not None:
            if not isinstance(ref, str) or not ref:
                raise EmuError(f"{where}: {path}.id = {ref!r} is invalid: must be a "
                               "non-empty string")
            if ref in named:
                raise EmuError(f"{where}: {path}.id = {ref!r} is invalid: event"
                               f"[{named[ref][0]}] has that id already")
            named[ref] = (i, failure)
        events.append(Event(t, failure, k, id=ref))
    return Timeline(tuple(events))


def _known(do: object) -> TypeGuard[str]:
    return isinstance(do, str) and do in VOCABULARY


def _when(where: str, path: str, ev: Mapping, steps: int | None,
          steps_key: str) -> tuple[float | None, int | None]:
    """(at, at_step) of an event table, exactly one of them given and valid."""
    if "at" in ev and "at_step" in ev:
        raise EmuError(f"{where}: {path}.at_step is not allowed together with {path}.at "
                       "(an event fires at a time or after a step: it has both `at` and "
                       "`at_step`; give one)")
    when = "at_step" if "at_step" in ev else "at"
    for key in (when, "do"):
        if key not in ev:
            raise EmuError(f"{where}: {path}.{key} is required (every event needs `at`, "
                           "seconds from the start, or `at_step`, the training step after "
                           "which it fires, and `do`)")
    if when == "at":
        if not _is_time(ev["at"]):
            raise EmuError(f"{where}: {path}.at = {ev['at']!r} is invalid: must be a number "
                           ">= 0 (seconds from the start)")
        return ev["at"], None
    k = ev["at_step"]
    if type(k) is not int or k < 0:
        raise EmuError(f"{where}: {path}.at_step = {k!r} is invalid: must be an integer "
                       ">= 0 (the training step after which it fires)")
    if steps is not None and k > steps - 2:
        raise EmuError(f"{where}: {path}.at_step = {k!r} is invalid: "
                       f"{step_range_rule(steps)} ({steps_key} = {steps})")
    return None, k


def _named(where: str, path: str, ev: Mapping, named: Mapping[str, tuple[int, Failure]],
           when: str) -> Failure:
    """The failure a restore by id undoes."""
    for key in ev:
        if key not in (when, "do", "id"):
            raise EmuError(f"{where}: unknown key {path + '.' + key!r} for a restore by id; "
                           f"valid keys: {when}, do, id")
    ref = ev["id"]
    if ref not in named:
        known = ", ".join(repr(n) for n in named) or "none"
        raise EmuError(f"{where}: {path}.id = {ref!r} is invalid: must be the id of an "
                       f"earlier event (ids so far: {known})")
    return named[ref][1]


def _failure(where: str, path: str, do: str, ev: Mapping, before: list[str],
             after: list[str]) -> Failure:
    """Verb ``do`` of the vocabulary applied to the event's arguments, each checked (the
    event's other valid keys: ``before`` and ``after`` its arguments)."""
    verb = VOCABULARY[do]
    names = [p.name for p in verb.params]
    valid = [*before, *names, *after]
    for key in ev:
        if key not in valid:
            raise EmuError(f"{where}: unknown key {path + '.' + key!r} for {do}; valid keys: "
                           f"{', '.join(valid)}")
    for p in verb.params:
        if p.required and p.name not in ev:
            raise EmuError(f"{where}: {path}.{p.name} is required for {do}")
        if p.name in ev and not p.accepts(ev[p.name]):
            raise EmuError(f"{where}: {path}.{p.name} = {ev[p.name]!r} is invalid: must be "
                           f"{p.what}")
    try:
        return verb.make(**{n: ev[n] for n in names if n in ev})
    except (EmuError, TypeError, ValueError) as e:  # the kind refused a value
        raise EmuError(f"{where}: {path} ({do}): {e}") from None


def load(path: str | Path, run_scripts: bool = True) -> Timeline:
    """Load a timeline from a ``.toml`` file (``[[event]]`` tables) or a ``.py`` script
    (defining ``timeline``).

    A script that only declares events (assignments of verb calls, ``at``/``at_step``/
    ``restore`` and literals) is read without running it. Any other script is run, or,
    with ``run_scripts=False`` (validating, not running), refused with
    ``emu.timeline_script.NeedsRun`` (an EmuError naming the line).
    """
    p = Path(path)
    if not p.is_file():
        raise EmuError(f"timeline file {str(p)!r} does not exist")
    if p.suffix == ".toml":
        data = read_toml(p, "timeline")
        unknown = set(data) - {"event"}
        if unknown:
            raise EmuError(f"{p}: unknown top-level keys {sorted(unknown)}; only [[event]]")
        return parse_events(data.get("event", []), str(p))
    if p.suffix == ".py":
        return read_script(p, run=run_scripts)
    raise EmuError(f"timeline file {str(p)!r}: use a .py script or a .toml file")
