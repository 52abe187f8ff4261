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
from topologies.signals import SwitchSignals
from topologies.validate import InvalidValue, check_int
from transports import registry
from workloads.dblpconfig import DblpConfig
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

    planes: int = field_default(MultiPlaneClos, "planes")
    spines: int = field_default(MultiPlaneClos, "spines")
    leaves: int = field_default(MultiPlaneClos, "leaves")
    hosts_per_leaf: int = field_default(MultiPlaneClos, "hosts_per_leaf")
    rate_mbit: float = _HOST_LINK.rate_mbit
    fabric_rate_mbit: float = _FABRIC_LINK.rate_mbit
    queue_packets: int = _HOST_LINK.queue_packets
    control_plane: EcmpMode = "static"
    dcs: int = 1
    dci_rate_mbit: float = field_default(DciSpec, "rate_mbit")
    dci_delay_ms: float = field_default(DciSpec, "delay_ms")
    dci_loss: float = field_default(DciSpec, "loss")
    # what the switch ports mark, trim and buffer (topologies/signals.py); a variant may
    # change them: each run applies its own to the one fabric
    ecn: bool = field_default(SwitchSignals, "ecn")
    ecn_kmin: float = field_default(SwitchSignals, "ecn_kmin")
    ecn_kmax: float = field_default(SwitchSignals, "ecn_kmax")
    ecn_pmax: float = field_default(SwitchSignals, "ecn_pmax")
    trim: bool = field_default(SwitchSignals, "trim")
    lossless: bool = field_default(SwitchSignals, "lossless")

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
        for name in ("ecn_kmin", "ecn_kmax", "ecn_pmax"):
            if isinstance(getattr(self, name), int) and not isinstance(getattr(self, name),
                                                                         bool):
                object.__setattr__(self, name, float(getattr(self, name)))
        self.signals()

    def signals(self) -> SwitchSignals:
        """What every switch port does under congestion (ECN, trimming, lossless)."""
        return SwitchSignals(ecn=self.ecn, ecn_kmin=self.ecn_kmin, ecn_kmax=self.ecn_kmax,
                             ecn_pmax=self.ecn_pmax, trim=self.trim, lossless=self.lossless)

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
    """The ``[workload]`` table. ``microbatches`` is None unless ``kind`` is pipeline."""

    kind: str = "data_parallel"
    model: str
    workers: int
    hosts: tuple[str, ...] | None = None
    steps: int
    batch_size: int = 64
    microbatches: int | None = None
    lr: float = 0.05
    lr_schedule: str = "cosine"
    target_accuracy: float | None = None
    target_loss: float | None = None
    eval_every: int = 10
    compute: str = "measured"
    compute_ms: float | None = None
    allow_overruns: bool = False


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
