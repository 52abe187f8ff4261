"""The grid of a sweep: its points, each a validated experiment with a stable id.

``expand(sweep)`` turns a :class:`~commands.sweep.sweepfile.SweepFile` into points: the
base experiment with ``[set]`` (and, with ``quick``, ``[quick]``) overrides, one value of
every axis and the sweep's repetitions, validated by the experiment's own
``with_overrides`` (the checks of ``emu run --set``). An invalid point fails the whole
sweep before anything runs, its message naming the point (index and axis values) and,
from the experiment's validator, the key.

A point's id (:func:`point_id`) is a hash of its *resolved* experiment (every value the
run depends on, defaults filled in, the placement of its workers, its failure timeline),
not of how it was written: the same experiment reached by other overrides, another order
of axes or another sweep has the same id, so a results directory knows which points it
already holds. The experiment's name, description and file are not part of it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commands.sweep.sweepfile import SweepFile
from emu.errors import EmuError
from topologies import TopologyError
from workloads import experiment
from workloads.experiment import Experiment

__all__ = ["ID_FORMAT", "Point", "canonical", "expand", "point_id", "resolve", "show"]

ID_FORMAT = "scaleacross-emu/sweep-point/1"  # changes every id if what is hashed changes
ID_HEX = 16


@dataclass(frozen=True)
class Point:
    """One point of a grid: its position (``index``, in expansion order), its ``id``, the
    axis values that make it (``values``, axis order) and every override its experiment
    is the base file with (``overrides``: ``emu run --set`` keys)."""

    index: int
    id: str
    values: tuple[tuple[str, Any], ...]
    overrides: Mapping[str, Any] = field(default_factory=dict)
    transport: str = ""

    @property
    def label(self) -> str:
        """``fabric.dci_delay_ms=5.0, transport.name=rc``: the point in words."""
        return ", ".join(f"{k}={show(v)}" for k, v in self.values)

    def as_record(self) -> dict[str, Any]:
        """The point as plain JSON-able data."""
        return {"index": self.index, "id": self.id, "values": dict(self.values),
                "overrides": dict(self.overrides), "transport": self.transport}


def show(value: Any) -> str:
    """A value as in a TOML file (strings unquoted where plain)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def canonical(obj: Any) -> Any:
    """``obj`` as JSON-able data that two equal values share: a dataclass becomes its type
    name and its compared fields, a mapping sorted by key, a tuple a list."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__type__": type(obj).__name__,
                **{f.name: canonical(getattr(obj, f.name))
                   for f in dataclasses.fields(obj) if f.compare}}
    if isinstance(obj, Mapping):
        return {str(k): canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [canonical(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    return repr(obj)


def resolve(exp: Experiment) -> dict[str, Any]:
    """Everything the run of ``exp`` depends on, as plain data (what :func:`point_id`
    hashes). A Python timeline that must run to be read is identified by its bytes."""
    if exp.declared_events is not None:
        timeline: Any = canonical(exp.declared_events)
    else:
        assert exp.timeline_file is not None  # only a script timeline is left unread
        timeline = {"script_sha256": hashlib.sha256(
            Path(exp.timeline_file).read_bytes()).hexdigest()}
    return {
        "seed": exp.seed, "repetitions": exp.repetitions, "clock": exp.clock,
        "fabric": canonical(exp.fabric), "transport": canonical(exp.transport),
        "workload": {**canonical(exp.workload), "hosts": list(exp.hosts())},
        "timeline": timeline,
    }


def point_id(exp: Experiment) -> str:
    """The stable id of the run ``exp`` makes (see the module docstring)."""
    text = json.dumps([ID_FORMAT, resolve(exp)], sort_keys=True, separators=(",", ":"),
                      allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:ID_HEX]


def point_overrides(sweep: SweepFile, values: Mapping[str, Any],
                    quick: bool = False) -> dict[str, Any]:
    """The overrides of the base experiment that make the point of axis ``values``."""
    ov: dict[str, Any] = dict(sweep.fixed)
    if quick:
        ov.update(sweep.quick)
    ov.update(values)
    if quick:
        ov["repetitions"] = 1
    elif sweep.repetitions is not None:
        ov["repetitions"] = sweep.repetitions
    return ov


def expand(sweep: SweepFile, quick: bool = False) -> tuple[Point, ...]:
    """Every point of the grid (the product of the axes, the first axis varying slowest),
    each validated; EmuError naming the point and the key at the first invalid one, or
    naming two points that resolve to the same experiment."""
    base = experiment.load(sweep.base)
    keys = [k for k, _ in sweep.axes]
    points: list[Point] = []
    seen: dict[str, Point] = {}
    for index, combo in enumerate(itertools.product(*(vals for _, vals in sweep.axes))):
        values = tuple(zip(keys, combo, strict=True))
        ov = point_overrides(sweep, dict(values), quick)
        probe = Point(index, "", values, ov)
        try:
            exp = experiment.with_overrides(base, ov)
        except (EmuError, TopologyError) as e:  # TopologyError: a combination of keys
            raise EmuError(f"{sweep.source}: point {index} ({probe.label}): {e}") from None
        pid = point_id(exp)
        point = Point(index, pid, values, ov, exp.transport.name)
        if pid in seen:
            other = seen[pid]
            raise EmuError(f"{sweep.source}: points {other.index} ({other.label}) and {index} "
                           f"({point.label}) are the same experiment (id {pid}): an axis "
                           "has two values that make no difference there (e.g. 1 and 1.0)")
        seen[pid] = point
        points.append(point)
    return tuple(points)
