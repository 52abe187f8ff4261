"""Every key of an experiment file, listed from the schema (schema.py) with the rule each
validator states: for ``emu run --keys`` and the reference page (scripts/docs_hooks.py).

Where a bound is the topology's (``[fabric]``) or a rule between keys (a bounded-loss
policy's keys), the rule shown is the validator's own message for a bad value, so the
listing cannot say something the reader does not enforce.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from emu.errors import EmuError
from topologies.validate import InvalidValue
from transports import registry
from transports.core.knobs import describe, field_doc, field_spec
from workloads.collectives.phase import PhaseAwareConfig
from workloads.experiment.config import (
    COLLECTIVES,
    DEFAULT_FIXED_TOLERANCE,
    TRANSPORTS,
    FabricConfig,
    TransportConfig,
    WorkloadConfig,
    field_default,
)
from workloads.experiment.dblp import DblpConfig
from workloads.experiment.loading import parse
from workloads.experiment.schema import REQUIRED, TOP, Key
from workloads.experiment.tables import DBLP, PHASE_FIELDS

__all__ = ["describe_keys", "keys"]

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
    doc = {"name": "probe", "transport": {"name": "dblp", "dblp": table},
           "workload": {"model": "digits_cnn", "workers": 2, "steps": 2, "batch_size": 2}}
    try:
        parse(doc, "probe")
    except EmuError as e:
        said = str(e).split(" is invalid: ", 1)[-1]
        return said.removeprefix("must be ")
    raise AssertionError(f"the reader accepted {table}")


def _dblp_keys() -> list[Key]:
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
