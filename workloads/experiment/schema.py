"""Every key of an experiment file, read from the dataclasses that own it: one schema.

A key's default, the values it takes and what it is are each written once, on the field
of the dataclass the file resolves to: ``[workload]`` on :class:`WorkloadConfig` (knobs,
checked by the table reader), ``[fabric]`` on :class:`FabricConfig` (its bounds are the
topology's, whose validator states them: the rule shown is the validator's own message),
``[transport]`` on :class:`TransportConfig` and the registry (a transport's own table:
its settings dataclass), the top level here (:data:`TOP`). :func:`keys` lists them all,
for ``emu run --keys`` and the reference page (scripts/docs_hooks.py); the table readers
(tables.py) take their key lists from here, so a key the reader accepts is a key the
reference lists, with the default the loader fills in.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from topologies.validate import InvalidValue, int_rule
from transports import registry
from transports.core.knobs import describe, field_doc, field_spec
from workloads.experiment import limits
from workloads.experiment.config import (
    CLOCKS,
    COLLECTIVES,
    TRANSPORTS,
    Experiment,
    FabricConfig,
    TransportConfig,
    WorkloadConfig,
    field_default,
)

__all__ = ["REQUIRED", "TOP", "Key", "describe_keys", "keys", "table_keys"]

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

# What makes each fabric field invalid for its validator to say what it takes.
_PROBE: dict[type, Any] = {int: -1, float: -math.inf, str: ""}


def _fabric_rule(name: str) -> str:
    """The rule FabricConfig's validator (the topology's) states for field ``name``."""
    tp = {f.name: f.type for f in dataclasses.fields(FabricConfig)}[name]
    bad = _PROBE.get({"int": int, "float": float}.get(str(tp), str), "")
    try:
        FabricConfig(**{name: bad})
    except InvalidValue as e:
        return e.rule
    raise AssertionError(f"FabricConfig accepted {name}={bad!r}")


# The bounded-loss policy's keys, by the policy that takes each (the others refuse it).
_POLICY_OF = {"tolerance": "fixed", "margin_ms": "optireduce"}
_DBLP_DOCS = {
    "policy": "how much loss each round may take: phase_aware (by training phase), fixed "
              "(one tolerance) or optireduce (adaptive deadlines)",
    "fill": "what stands in for a chunk that did not arrive",
    "tolerance": "fixed: the fraction of a round's chunks it may lose",
    "deadline_ms": "every round's deadline (optireduce: the first round's)",
    "margin_ms": "optireduce: the margin over the agreed deadline",
    "bounded_gather": "bound the all-gather too (a missing entry is estimated from the "
                      "rank's own gradient, so replicas may drift)",
}


def _probe(table: dict[str, Any]) -> str:
    """The rule the experiment reader states for the one bad key of ``table`` (a minimal
    experiment around it): what the validator itself says the key takes."""
    from emu.errors import EmuError
    from workloads.experiment.loading import parse

    doc = {"name": "probe", "transport": {"name": "dblp", "dblp": table},
           "workload": {"model": "digits_cnn", "workers": 2, "steps": 2, "batch_size": 2}}
    try:
        parse(doc, "probe")
    except EmuError as e:
        said = str(e).split(" is invalid: ", 1)[-1]
        return said.removeprefix("must be ")
    raise AssertionError(f"the reader accepted {table}")


def _dblp_keys() -> list[Key]:
    from workloads.collectives.phase import PhaseAwareConfig
    from workloads.experiment.config import DEFAULT_FIXED_TOLERANCE
    from workloads.experiment.dblp import DblpConfig
    from workloads.experiment.tables import DBLP, PHASE_FIELDS

    out = []
    for name in DBLP:
        policy = _POLICY_OF.get(name, "phase_aware")
        rule = _probe({"policy": policy, name: "?"} if name != "policy" else {name: "?"})
        if name in PHASE_FIELDS:
            default, doc = field_default(PhaseAwareConfig, name), "phase_aware's setting"
        elif name == "tolerance":
            default, doc = DEFAULT_FIXED_TOLERANCE, _DBLP_DOCS[name]
        else:
            default, doc = _default(DblpConfig, name), _DBLP_DOCS.get(name, "")
        out.append(Key(f"transport.dblp.{name}", None if default == REQUIRED else default,
                       rule, doc))
    return out


def table_keys(cls: type) -> tuple[str, ...]:
    """The keys of the table dataclass ``cls`` resolves (its fields, in order)."""
    return tuple(f.name for f in dataclasses.fields(cls))


def _default(cls: type, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return REQUIRED if f.default is dataclasses.MISSING else f.default


def keys() -> tuple[Key, ...]:
    """Every key of an experiment file, table by table (see the module docstring)."""
    out = list(TOP)
    for name in table_keys(FabricConfig):
        out.append(Key(f"fabric.{name}", _default(FabricConfig, name), _fabric_rule(name),
                       field_doc(FabricConfig, name)))
    out.append(Key("transport.name", field_default(TransportConfig, "name"),
                   "one of " + ", ".join(repr(t) for t in TRANSPORTS),
                   "the transport: " + "; ".join(f"{t}: {registry.get(t).summary}"
                                                 for t in TRANSPORTS)))
    out.append(Key("transport.collective", field_default(TransportConfig, "collective"),
                   "one of " + ", ".join(repr(c) for c in COLLECTIVES),
                   "the all-reduce (data parallel only): ring, transpose (the only one a "
                   "bounded-loss transport takes, its default there) or hierarchical "
                   "(inside each DC, then across DCs)"))
    out.extend(_dblp_keys())
    for t in TRANSPORTS:
        decl = registry.get(t)
        for path, value, rule in describe(decl.defaults):
            out.append(Key(f"transport.{t}.{path}", value, rule,
                           f"{t}'s setting (transports/registry.py)"))
    for name in table_keys(WorkloadConfig):
        tp, optional, k = field_spec(WorkloadConfig, name)
        rule = (k.rule(tp) if k is not None else "an array of host names") + (
            " (or unset)" if optional else "")
        out.append(Key(f"workload.{name}", _default(WorkloadConfig, name), rule,
                       field_doc(WorkloadConfig, name)))
    return tuple(out)


def describe_keys() -> str:
    """Every key with its default, rule and meaning, one block per key (``--keys``)."""
    lines = []
    for k in keys():
        default = k.default if k.default == REQUIRED else repr(k.default)
        lines.append(f"{k.path} = {default}\n    {k.rule}" + (f"\n    {k.doc}" if k.doc else ""))
    return "\n".join(lines)
