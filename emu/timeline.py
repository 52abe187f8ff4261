"""Failure timelines: short Python scripts or TOML files, fired on a clock or at steps.

A script is Python that defines ``timeline``::

    cut = fail_link("p0l0-p0s1")
    timeline = [at(2.0, cut), at(4.0, restore(cut))]

The same as TOML: an event may have an ``id``, and a restore names it::

    [[event]]
    at = 2.0
    do = "fail_link"
    link = "p0l0-p0s1"
    id = "cut"

    [[event]]
    at = 4.0
    do = "restore"
    id = "cut"

(A restore may instead repeat the failure: ``what = "fail_link"`` and its arguments.)

The verbs (``fail_link``, ``fail_busiest_uplink``, ``fail_switch``, ``fail_plane``,
``flap_link``, ``gray_link``, ``degrade_link``, ``delay_link``, ``microburst``, and any
kind registered later) are the failure kinds of emu.failure_kinds, their arguments
those of the kind's signature: TOML events, experiment files and scripts are checked
against it by one parser (emu.timeline_parse) and the verbs themselves. Every verb can
be imported from here (``from emu.timeline import fail_link``).

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

The parts: timeline_events.py (events, Timeline.validate), timeline_parse.py (TOML and
files), timeline_script.py (scripts, read without running them when they only
declare), timeline_runner.py (firing).
"""

from __future__ import annotations

from collections.abc import Callable

from emu.failure_kinds.base import Failure
from emu.failure_kinds.base import check as check_failure
from emu.failure_kinds.registry import VOCABULARY
from emu.timeline_events import (
    CLOCKS,
    Event,
    Restore,
    Timeline,
    at,
    at_step,
    restore,
    step_range_rule,
)
from emu.timeline_parse import load, parse_events
from emu.timeline_runner import ARM_LEAD_S, AfterApply, Armable, Armed, Record, TimelineRunner
from emu.timeline_script import NeedsRun

__all__ = [
    "ARM_LEAD_S", "CLOCKS", "VOCABULARY", "AfterApply", "Armable", "Armed", "Event",
    "NeedsRun", "Record", "Restore", "Timeline", "TimelineRunner", "at", "at_step",
    "check_failure", "load", "parse_events", "restore", "step_range_rule",
]


def __getattr__(name: str) -> Callable[..., Failure]:
    """Every registered verb by its name: ``from emu.timeline import fail_link``."""
    try:
        return VOCABULARY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
