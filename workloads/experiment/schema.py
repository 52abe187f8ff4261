"""Every key of an experiment file, read from the dataclasses that own it: one schema.

A key's default, the values it takes and what it is are each written once, on the field
of the dataclass the file resolves to: ``[workload]`` on :class:`WorkloadConfig` (knobs,
checked by the table reader), ``[fabric]`` on :class:`FabricConfig` (its bounds are the
topology's, whose validator states them), ``[transport]`` on :class:`TransportConfig`
and the registry (a transport's own table: its settings dataclass), the top level here
(:data:`TOP`). reference.py lists them all, for ``emu run --keys`` and the reference
page; the loader and the table readers take their key lists from the same dataclasses,
so a key the reader accepts is a key the reference lists, with the default the loader
fills in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from topologies.validate import int_rule
from workloads.experiment import limits
from workloads.experiment.config import (
    CLOCKS,
    Experiment,
    field_default,
)

__all__ = ["REQUIRED", "TOP", "Key"]

REQUIRED = "*required*"


@dataclass(frozen=True)
class Key:
    """One key of an experiment file: its dotted path, default (``REQUIRED`` when it has
    none), the values it takes and what it is."""

    path: str
    default: Any
    rule: str
    doc: str


def _exp_default(name: str) -> Any:
    return field_default(Experiment, name)


# The top level's own keys (the tables are below): (key, default, rule, doc).
TOP: tuple[Key, ...] = (
    Key("name", REQUIRED, limits.NAME_RULE, "the experiment; names its results directory"),
    Key("description", _exp_default("description"), "a string", "free text"),
    Key("seed", _exp_default("seed"), int_rule(0, limits.MAX_SEED),
        "repetition k uses seed + k"),
    Key("repetitions", _exp_default("repetitions"), int_rule(1, limits.MAX_REPETITIONS),
        "runs of the experiment; with several variants (emu run --transports) they run "
        "interleaved on one fabric"),
    Key("timeline", None, "a .py or .toml file, relative to this file, else to the "
        "working directory", "the failure timeline (or [[event]] tables here, not both); "
        "a .py one that does more than declare events is code, run as root by `emu run`"),
    Key("clock", _exp_default("clock"), "one of " + ", ".join(repr(c) for c in CLOCKS),
        "what an event's `at` counts: seconds on the wall clock from the start of "
        "training, or of the modelled training time (the event fires at the first step "
        "boundary that reached it); `at_step` events need wall"),
)
