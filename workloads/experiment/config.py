"""The configuration an experiment file resolves to, as frozen dataclasses (what the runner
consumes), and the vocabularies of its string keys.

Each default is written once, in the dataclass that owns it: the fabric's in the topology
dataclasses (``MultiPlaneClos``, its default ``LinkSpec``, ``DciSpec``), read here through
:func:`field_default`; the workload's and the transport's in :class:`WorkloadConfig` and
:class:`TransportConfig`, which the table readers (tables.py) read the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from emu import timeline as tl
from topologies import DciSpec, LinkSpec, MultiPlaneClos, ScaleAcross
from topologies.addressing import MAX_SCALEACROSS_DCS
from topologies.routing import ECMP_MODES, EcmpMode
from topologies.validate import InvalidValue, check_int
from transports import registry
from transports.core.knobs import check_knobs, documented, knob
from workloads.experiment.dblp import DblpConfig
from workloads.experiment.limits import MAX_STEPS
from workloads.experiment.placement import default_placement
from workloads.experiment.timeline import script_events

__all__ = [
    "CLOCKS", "COLLECTIVES", "COMPUTE_MODES", "CONTROL_PLANES", "DBLP_COLLECTIVE",
    "DEFAULT_FIXED_TOLERANCE", "DEFAULT_MICROBATCHES", "KINDS", "LR_SCHEDULES", "MAX_STAGES",
    "MODELS", "TRANSPORTS", "Experiment", "FabricConfig", "TransportConfig", "WorkloadConfig",
    "field_default",
]

# The transports a training job may use, in the registry's order (transports/registry.py)
TRANSPORTS = registry.names(lambda t: t.caps.training)
COLLECTIVES = ("ring", "transpose", "hierarchical")
KINDS = ("data_parallel", "pipeline")
MODELS = ("digits_cnn", "tiny_lm")
MAX_STAGES = {"digits_cnn": 3, "tiny_lm": 3}  # pipeline stages each model splits into
LR_SCHEDULES = ("cosine", "constant")
COMPUTE_MODES = ("measured", "modelled")
CONTROL_PLANES: tuple[EcmpMode, ...] = ECMP_MODES
CLOCKS = tl.CLOCKS

# Defaults no dataclass field can hold, because they depend on another key: a pipeline's
# microbatches (None for data parallelism), DBLP's collective (the only one it takes) and
# the fixed policy's tolerance (DblpConfig requires one; the file may leave it out).
DEFAULT_MICROBATCHES = 4
DBLP_COLLECTIVE = "transpose"
DEFAULT_FIXED_TOLERANCE = 0.05

_T = TypeVar("_T")


def field_default(cls: type, name: str) -> Any:
    """The default of dataclass ``cls``'s field ``name``: the one place it is written."""
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if f is None or f.default is dataclasses.MISSING:
        raise AssertionError(f"{cls.__name__}.{name} is not a field with a default")
    return f.default


_HOST_LINK: LinkSpec = field_default(MultiPlaneClos, "host_link")
_FABRIC_LINK: LinkSpec = field_default(MultiPlaneClos, "fabric_link")


def _as_field(build: Callable[[], _T], **names: str) -> _T:
    """``build()``, with an InvalidValue of the built object's field renamed to ours."""
    try:
        return build()
    except InvalidValue as e:
        raise InvalidValue(names.get(e.name, e.name), e.value, e.rule) from None


@dataclass(frozen=True, kw_only=True)
class FabricConfig:
    """The ``[fabric]`` table, defaults resolved (``fabric_rate_mbit`` is never None).

    Validated on construction by the topology dataclasses it describes: their checks are
    the only statement of the bounds, and an invalid value raises
    :class:`~topologies.validate.InvalidValue` under this class's field name, which is the
    file's key. A combination no single field makes invalid (more hosts and spines than
    a leaf has ports) raises the topology's own TopologyError.
    """

    planes: int = documented(field_default(MultiPlaneClos, "planes"),
                             doc="planes: independent copies of the fabric, one NIC port each")
    spines: int = documented(field_default(MultiPlaneClos, "spines"), doc="spines per plane")
    leaves: int = documented(field_default(MultiPlaneClos, "leaves"),
                             doc="leaves (racks) per plane")
    hosts_per_leaf: int = documented(field_default(MultiPlaneClos, "hosts_per_leaf"),
                                     doc="hosts per rack")
    rate_mbit: float = documented(_HOST_LINK.rate_mbit, doc="host links' rate, Mbit/s "
                                  "(100 stands for 100 Gbit/s: the emulated clock)")
    fabric_rate_mbit: float = documented(_FABRIC_LINK.rate_mbit, doc="leaf-spine links' "
                                         "rate, Mbit/s (default: rate_mbit)")
    queue_packets: int = documented(_HOST_LINK.queue_packets,
                                    doc="every egress FIFO's depth: the switch buffer")
    control_plane: EcmpMode = documented("static", doc="ECMP routes: static, or learnt by "
                                         "FRR eBGP with BFD (bgp: one DC only)")
    dcs: int = documented(1, doc="data centres; > 1 joins identical DCs by DCI links")
    dci_rate_mbit: float = documented(field_default(DciSpec, "rate_mbit"),
                                      doc="DCI links' rate, Mbit/s (dcs > 1)")
    dci_delay_ms: float = documented(field_default(DciSpec, "delay_ms"),
                                     doc="DCI one-way delay, ms (dcs > 1)")
    dci_loss: float = documented(field_default(DciSpec, "loss"),
                                 doc="DCI random loss fraction (dcs > 1)")

    def __post_init__(self) -> None:
        # dcs first: the spec below builds that many DCs.
        check_int("dcs", self.dcs, 1, MAX_SCALEACROSS_DCS)
        if self.control_plane not in CONTROL_PLANES:
            raise InvalidValue("control_plane", self.control_plane,
                               "one of " + ", ".join(repr(c) for c in CONTROL_PLANES))
        if self.dcs > 1 and self.control_plane == "bgp":
            raise InvalidValue("control_plane", self.control_plane,
                               "'static' when dcs > 1 (scale-across fabrics run static routes: "
                               "no BGP on DCI routers yet)")
        _as_field(self.host_link)  # LinkSpec's rate_mbit and queue_packets: our names too
        _as_field(self.fabric_link, rate_mbit="fabric_rate_mbit")
        # The DCI is checked with dcs = 1 too (where it is unused), so a scale-across file
        # stays valid, and keeps its DCI settings, under the override fabric.dcs=1.
        _as_field(self.dci, rate_mbit="dci_rate_mbit", delay_ms="dci_delay_ms",
                  loss="dci_loss")
        for name in ("rate_mbit", "fabric_rate_mbit", "dci_rate_mbit", "dci_delay_ms",
                     "dci_loss"):  # a TOML integer is a number here
            object.__setattr__(self, name, float(getattr(self, name)))
        self.spec()  # MultiPlaneClos checks planes ... hosts_per_leaf, and the combinations

    def host_link(self) -> LinkSpec:
        return LinkSpec(self.rate_mbit, self.queue_packets)

    def fabric_link(self) -> LinkSpec:
        return LinkSpec(self.fabric_rate_mbit, self.queue_packets)

    def dci(self) -> DciSpec:
        return DciSpec(rate_mbit=self.dci_rate_mbit, delay_ms=self.dci_delay_ms,
                       loss=self.dci_loss)

    def spec(self) -> MultiPlaneClos | ScaleAcross:
        """The topology, as `emu fabric` builds it from the same numbers (commands/cli.py)."""
        dcs = tuple(MultiPlaneClos(
            planes=self.planes, spines=self.spines, leaves=self.leaves,
            hosts_per_leaf=self.hosts_per_leaf, host_link=self.host_link(),
            fabric_link=self.fabric_link(), dc=d) for d in range(self.dcs))
        if self.dcs == 1:
            return dcs[0]
        return ScaleAcross(dcs, self.dci())


@dataclass(frozen=True, kw_only=True)
class TransportConfig:
    """The ``[transport]`` table and the chosen transport's own, ``[transport.<name>]``.

    ``collective`` is None for pipelines (no collective); ``dblp`` the bounded-loss
    policy (a bounded transport's table: policy keys); ``settings`` the transport's
    settings (transports/registry.py: its dataclass, its run defaults with the table's
    keys applied; None here means those defaults).
    """

    name: str = "mrc"
    collective: str | None = "ring"
    dblp: DblpConfig | None = None
    settings: Any = None

    def __post_init__(self) -> None:
        decl = registry.get(self.name)
        if self.settings is None:
            object.__setattr__(self, "settings", decl.defaults)
        elif type(self.settings) is not decl.config:
            raise TypeError(f"TransportConfig.settings is a {type(self.settings).__name__}: "
                            f"transport {self.name!r} takes a {decl.config.__name__}")


@dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    """The ``[workload]`` table, one field per key: its default, the values it takes
    (``knob``: checked on construction and by the table reader) and what it is (``doc``):
    the one statement of each, read by the reader (tables.py), ``emu run --keys`` and the
    reference page (schema.py). Rules between keys (a pipeline's workers, a batch the
    workers divide) are tables.py's. ``microbatches`` is None unless ``kind`` is
    pipeline."""

    kind: str = knob("data_parallel", choices=KINDS, doc="data_parallel: every worker "
                     "trains the whole model on its share of the batch; pipeline: one "
                     "model stage per worker (GPipe)")
    model: str = knob(choices=MODELS, doc="digits_cnn: a small CNN on scikit-learn's "
                      "digits; tiny_lm: a character language model")
    workers: int = knob(lo=1, doc="one worker per host (a pipeline: at least 2, one stage "
                        "each, at most the model's stages)")
    hosts: tuple[str, ...] | None = documented(None, doc="the host of each rank, in rank "
                                               "order (default: spread over racks)")
    steps: int = knob(lo=1, hi=MAX_STEPS, doc="training steps")
    batch_size: int = knob(64, lo=1, doc="the global batch (at most the training set; data "
                           "parallel: divisible by workers, pipeline: by microbatches)")
    microbatches: int | None = knob(None, lo=1, doc="a pipeline's microbatches per step "
                                    f"(default {DEFAULT_MICROBATCHES}; pipelines only)")
    lr: float = knob(0.05, lo=0.0, lo_open=True, doc="the learning rate")
    lr_schedule: str = knob("cosine", choices=LR_SCHEDULES, doc="cosine decay to 0 over "
                            "the steps, or constant")
    target_accuracy: float | None = knob(None, lo=0.0, hi=1.0, lo_open=True,
                                         doc="digits_cnn: the accuracy the time to target "
                                         "is measured to")
    target_loss: float | None = knob(None, lo=0.0, lo_open=True, doc="tiny_lm: the loss "
                                     "the time to target is measured to")
    eval_every: int = knob(10, lo=1, doc="steps between evaluations (rank 0)")
    compute: str = knob("measured", choices=COMPUTE_MODES, doc="measured: the model's real "
                        "forward and backward; modelled: a fixed sleep of compute_ms per step "
                        "(the emulated clock's compute)")
    compute_ms: float | None = knob(None, lo=0.0, lo_open=True, doc="modelled compute per "
                                    "step (a pipeline: per microbatch and stage), ms; at most "
                                    "one hour per step")
    allow_overruns: bool = knob(False, doc="modelled compute only: keep a run whose real "
                                "compute overran the model (else it is refused)")

    def __post_init__(self) -> None:
        check_knobs(self)


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """A validated experiment. Build things from it with the methods below.

    ``events`` is the failure timeline (validated against ``fabric_spec()`` and the
    workload's steps); ``declared_events`` the same as read at validation, or None for a
    .py timeline that only running can read (``events`` runs it, the first time it is
    asked for: ``emu run`` asks before it builds anything); ``clock`` what their ``at``
    counts (wall or modelled training time); ``timeline_file`` the file it came from, if
    any; ``source`` the experiment file (or what ``parse`` was told). ``document`` is the
    input dict, kept for ``with_overrides``; ``overrides`` the dotted keys
    ``with_overrides`` changed in it (empty for a file as is).
    """

    name: str
    description: str = ""
    seed: int = 0
    repetitions: int = 1
    fabric: FabricConfig
    transport: TransportConfig
    workload: WorkloadConfig
    declared_events: tuple[tl.Event, ...] | None = ()
    clock: str = "wall"
    timeline_file: str | None = None
    source: str = "<dict>"
    base_dir: str | None = field(default=None, repr=False, compare=False)
    document: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    overrides: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @cached_property
    def _spec(self) -> MultiPlaneClos | ScaleAcross:
        # Cached so every caller shares one spec and its cached derived views.
        return self.fabric.spec()

    def fabric_spec(self) -> MultiPlaneClos | ScaleAcross:
        """The MultiPlaneClos (dcs = 1) or ScaleAcross (dcs > 1) to build."""
        return self._spec

    @cached_property
    def events(self) -> tuple[tl.Event, ...]:
        """The failure timeline's events (a script timeline runs here, once: see the class
        docstring)."""
        if self.declared_events is not None:
            return self.declared_events
        assert self.timeline_file is not None  # only a script timeline is left unread
        return script_events(self.timeline_file, self.source, self.clock, self.fabric_spec(),
                             self.workload.steps)

    def timeline(self) -> tl.Timeline:
        """The failure timeline (possibly empty): by step, or in seconds from training
        start on ``clock``."""
        return tl.Timeline(self.events)

    def hosts(self) -> tuple[str, ...]:
        """The host of every rank, rank order: ``workload.hosts`` or the default placement."""
        if self.workload.hosts is not None:
            return self.workload.hosts
        return default_placement(self.fabric_spec(), self.workload.workers)

    def seeds(self) -> tuple[int, ...]:
        """The seed of every repetition (``seed + k``)."""
        return tuple(self.seed + k for k in range(self.repetitions))

    def as_record(self) -> dict[str, Any]:
        """The resolved experiment as plain JSON-able data (for the results' meta record)."""
        return {
            "name": self.name, "description": self.description, "seed": self.seed,
            "repetitions": self.repetitions, "source": self.source,
            "fabric": dataclasses.asdict(self.fabric),
            "transport": dataclasses.asdict(self.transport),
            "workload": {**dataclasses.asdict(self.workload),
                         "hosts": list(self.hosts())},
            "timeline_file": self.timeline_file, "overrides": dict(self.overrides),
            "clock": self.clock, "events": [_describe_event(ev) for ev in self.events],
        }


def _describe_event(ev: tl.Event) -> dict[str, Any]:
    when = {"at": ev.at} if ev.step is None else {"at_step": ev.step}
    if isinstance(ev.action, tl.Restore):
        return {**when, "action": "restore", **ev.action.failure.describe()}
    return {**when, "action": "apply", **ev.action.describe()}
