"""Reading a whole experiment: ``load(path)`` for a file, ``parse(data, where)`` for a dict
already read. Everything is checked before anything is built (see the package docstring);
the tables' rules are tables.py's, the timeline's timeline.py's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emu import timeline as tl
from emu.errors import EmuError
from emu.tomlfile import read_toml
from workloads.experiment import limits, schema, tables
from workloads.experiment.config import CLOCKS, Experiment, FabricConfig, field_default
from workloads.experiment.reader import Table
from workloads.experiment.timeline import check_clock, read_timeline

__all__ = ["TOP", "load", "parse", "parse_fabric"]

TOP = (*(k.path for k in schema.TOP), "fabric", "transport", "workload", "event")
MAX_SEED = limits.MAX_SEED


def load(path: str | Path) -> Experiment:
    """Read and validate an experiment file (see the package docstring)."""
    p = Path(path)
    data = read_toml(p, "experiment")
    return parse(data, str(p), base_dir=p.resolve().parent)


def parse(data: Mapping[str, Any], where: str = "<experiment>",
          base_dir: str | Path | None = None) -> Experiment:
    """Validate an experiment given as a dict (as ``tomllib`` returns it).

    ``where`` starts every error message (the file name); ``base_dir`` is where a relative
    ``timeline`` path is looked up first (then the working directory).
    """
    top = Table(where, "", data, TOP)
    name = top.get_str("name", pattern=limits.NAME, what=limits.NAME_RULE)
    if len(name) > limits.MAX_NAME_BYTES:  # the pattern is ASCII: a byte a character
        top.fail("name", f"must be {limits.NAME_RULE}: it has {len(name)}", name)
    description = top.get_str("description", field_default(Experiment, "description"))
    seed = top.get_int("seed", field_default(Experiment, "seed"), 0, MAX_SEED)
    repetitions = top.get_int("repetitions", field_default(Experiment, "repetitions"), 1)
    if seed + repetitions - 1 > MAX_SEED:
        top.fail("repetitions", f"seed + repetitions - 1 must be <= {MAX_SEED}", repetitions)
    if "workload" not in data:
        raise EmuError(f"{where}: [workload] is required (at least model, workers and steps)")

    fabric = tables.fabric(top.table("fabric", tables.FABRIC))
    spec = fabric.spec()
    workload = tables.workload(top.table("workload", tables.WORKLOAD), spec)
    if repetitions > limits.MAX_REPETITIONS:
        top.fail("repetitions", f"must be an integer in [1, {limits.MAX_REPETITIONS}]: "
                 + limits.too_long(repetitions * workload.steps, "steps in all",
                                   limits.MIN_STEP_S), repetitions)
    transport = tables.transport(top.table("transport", tables.TRANSPORT), fabric, workload,
                                 spec)
    events, timeline_file = read_timeline(top, spec, base_dir, workload.steps)
    clock = top.get_str("clock", field_default(Experiment, "clock"), CLOCKS)
    if events is not None:  # else checked when the script runs (Experiment.events)
        check_clock(clock, tl.Timeline(events), lambda msg: top.fail("clock", msg, clock))
    return Experiment(
        name=name, description=description, seed=seed, repetitions=repetitions,
        fabric=fabric, transport=transport, workload=workload, declared_events=events,
        clock=clock, timeline_file=timeline_file, source=where,
        base_dir=None if base_dir is None else str(base_dir),
        document=copy.deepcopy(dict(data)))


def parse_fabric(data: Mapping[str, Any], where: str = "<fabric>") -> FabricConfig:
    """Validate a ``[fabric]`` table alone, by the rules ``parse`` holds an experiment's
    to (its ``spec()`` is the topology to build); errors name ``where`` and the key."""
    return tables.fabric(Table(where, "fabric", dict(data), tables.FABRIC))
