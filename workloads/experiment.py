"""Experiment files: one TOML file describes a training run on an emulated fabric.

``load(path)`` reads and validates a file; ``parse(data, where)`` does the same for a dict
already read. Everything is checked before anything is built: unknown keys at any level,
wrong types, impossible values, missing required fields, contradicting options, and the
failure timeline against the fabric it will run on (a link that does not exist fails here,
not minutes later). Every error is an :class:`emu.errors.EmuError` whose message names the
file, the key path (``workload.batch_size``) and what is valid.

Reference (every key; ``#`` gives the default, *required* marks the required ones)::

    name = "digits-mrc-linkcut"    # *required*, [A-Za-z0-9_.-]+ (names result directories)
    description = "..."            # optional free text
    seed = 1                       # 0; repetition k uses seed + k
    repetitions = 1                # 1; >= 1; with several variants (emu run --transports)
                                   # they run interleaved on one fabric: repetition 0 of
                                   # every variant, then repetition 1, ...
    timeline = "../failures/spine_link_cut.py"  # optional failure timeline file (.py/.toml),
                                   # relative to this file, else to the working directory;
                                   # not together with [[event]]
    clock = "wall"                 # "wall" | "modelled": what an event's `at` counts.
                                   # wall: seconds on the wall clock from the start of
                                   # training; modelled: seconds of the training time the
                                   # run reports (modelled compute + exposed communication
                                   # per step; measured compute: the steps' time without
                                   # evaluation), the event firing at the first step
                                   # boundary that reached it, with every rank held there
                                   # until it is applied (record: step, train_s, late_ms).
                                   # Must stay "wall" with `at_step` events (it would
                                   # mean nothing there)

    [fabric]                       # the whole table is optional
    planes = 2                     # 2; [1, 16]
    spines = 4                     # 4; spines per plane, [1, 64]
    leaves = 4                     # 4; leaves (racks) per plane, [1, 64]
    hosts_per_leaf = 4             # 4; [1, 64]
    rate_mbit = 100.0              # 100.0; host links, > 0
    fabric_rate_mbit = 100.0       # rate_mbit; leaf-spine links, > 0
    queue_packets = 100            # 100; egress FIFO depth, >= 1
    control_plane = "static"       # "static" | "bgp" (bgp: one DC only)
    dcs = 1                        # 1; > 1 makes a ScaleAcross of identical DCs
    dci_rate_mbit = 100.0          # 100.0; DCI links (used when dcs > 1)
    dci_delay_ms = 5.0             # 5.0; one-way DCI delay in [0, 1000] (used when dcs > 1)
    dci_loss = 0.0                 # 0.0; DCI random loss in [0, 1] (used when dcs > 1)

    [transport]                    # optional
    name = "mrc"                   # "mrc" | "rc" | "dblp" | "gloo" (torch.distributed on TCP)
    collective = "ring"            # "ring" | "transpose" | "hierarchical"; default "ring",
                                   # "transpose" for dblp (the only one dblp takes);
                                   # hierarchical needs dcs > 1 and workers in >= 2 DCs;
                                   # gloo: "ring" only (its own all-reduce);
                                   # not allowed for pipelines (activations go point to point)

    [transport.dblp]               # only with name = "dblp" (optional there)
    policy = "phase_aware"         # "phase_aware" | "fixed" | "optireduce"
    fill = "error_feedback"        # workloads.fill.FILLS
    tolerance = 0.05               # fixed only: 0.05; in [0, 1)
    base = 0.05                    # phase_aware only: every PhaseAwareConfig field
    cap = 0.2                      #   (base, cap, critical_epochs, window, eta, lr_scaling),
    critical_epochs = 2            #   its defaults and checks; accuracy_gain and
                                   #   begin_accuracy are refused (no accuracy signal)
    window = 10
    eta = 0.5
    deadline_ms = 50.0             # optional, > 0: every round's deadline (optireduce: the
                                   # first round's, later ones adapt)
    margin_ms = 1.0                # optireduce only: 1.0; >= 0
    bounded_gather = false         # false; true bounds the all-gather too: an entry that
                                   # does not arrive is estimated from the rank's own
                                   # gradient, so replicas may drift (see collectives.py)

    [workload]                     # *required*
    kind = "data_parallel"         # "data_parallel" | "pipeline"
    model = "digits_cnn"           # *required*: "digits_cnn" | "tiny_lm"
    workers = 4                    # *required*: data_parallel >= 1, pipeline (stages) >= 2;
                                   # at most the fabric's hosts
    hosts = ["h0", "h3"]           # optional placement: distinct hosts, len == workers
    steps = 200                    # *required*, >= 1
    batch_size = 64                # 64; the global batch: divisible by workers (data_parallel)
                                   # or by microbatches (pipeline)
    microbatches = 4               # pipeline only: 4; >= 1
    lr = 0.05                      # 0.05; > 0
    lr_schedule = "cosine"         # "cosine" | "constant"
    target_accuracy = 0.9          # digits_cnn only, optional: test accuracy in (0, 1]
    target_loss = 2.0              # tiny_lm only, optional: validation loss > 0
    eval_every = 10                # 10; steps between evaluations, >= 1
    compute = "measured"           # "measured" | "modelled"
    compute_ms = 20.0              # modelled only, optional (> 0): absent = calibrated on the
                                   # fabric before the runs, as in the run (a short run with
                                   # measured compute over each variant's transport: the
                                   # 99th percentile of the ranks' forward + backward x 2;
                                   # workloads/runner.py); pipelines: required, one
                                   # microbatch's forward + backward on one stage
    allow_overruns = false         # modelled only: false; a run in which the real compute
                                   # overran the model in more than 5 % of its steps (a step
                                   # overruns when any rank's does) ends with an error after
                                   # its results are written; true accepts it

    [[event]]                      # optional failure timeline, the emu/timeline.py TOML format;
    at = 5.0                       # seconds from the start of training (see `clock`), or
    # at_step = 40                 # instead: after training step 40, before step 41, on
                                   # every rank (an integer in [0, workload.steps - 2]);
                                   # one timeline uses one of the two for every event
    do = "fail_link"               # a verb of emu.timeline, its arguments as keys
    link = "p0l0-p0s1"
    id = "cut"                     # optional; a later event {do = "restore", id = "cut"}
                                   # undoes it (or do = "restore", what = "fail_link" and
                                   # the same arguments)

The default placement (``Experiment.hosts()``) spreads workers over DCs as evenly as
possible (ranks DC by DC, so a ring or a pipeline crosses the DCI as rarely as possible)
and, inside a DC, round-robin over racks (rank 0 on rack 0, rank 1 on rack 1, ...): with
consecutive ranks on different racks, a ring's every hop crosses the spine tier, the part
of the fabric that failures and load balancing are about.

``with_overrides(exp, {"transport.name": "rc"})`` re-validates the experiment's document
with dotted keys replaced (``None`` removes a key), so a command line can vary one
experiment without a second file; ``parse_override("workload.steps=50")`` reads one
``KEY=VALUE`` (VALUE in TOML syntax, a bare word being a string).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any, NoReturn

from emu import timeline as tl
from emu.errors import EmuError
from topologies import DciSpec, LinkSpec, MultiPlaneClos, Role, ScaleAcross, TopologyError
from topologies.addressing import MAX_SCALEACROSS_DCS
from topologies.routing import EcmpMode
from workloads.dblpconfig import POLICIES, DblpConfig
from workloads.fill import DEFAULT_FILL, FILLS
from workloads.phase import PhaseAwareConfig

__all__ = [
    "CLOCKS", "COLLECTIVES", "COMPUTE_MODES", "DblpConfig", "Experiment", "FabricConfig", "KINDS",
    "LR_SCHEDULES", "MODELS", "POLICIES", "TRANSPORTS", "TransportConfig", "WorkloadConfig",
    "default_placement", "load", "parse", "parse_override", "with_overrides",
]

TRANSPORTS = ("mrc", "rc", "dblp", "gloo")
COLLECTIVES = ("ring", "transpose", "hierarchical")
KINDS = ("data_parallel", "pipeline")
MODELS = ("digits_cnn", "tiny_lm")
MAX_STAGES = {"digits_cnn": 3, "tiny_lm": 3}  # pipeline stages each model splits into
LR_SCHEDULES = ("cosine", "constant")
COMPUTE_MODES = ("measured", "modelled")
CONTROL_PLANES = ("static", "bgp")
CLOCKS = tl.CLOCKS

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# Seeds feed numpy (< 2**32) as seed + repetition.
_MAX_SEED = 2**32 - 1
_REQUIRED: Any = object()

# --------------------------------------------------------------------------------------
# The configuration, as frozen dataclasses (what the runner consumes)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FabricConfig:
    """The ``[fabric]`` table, defaults resolved (``fabric_rate_mbit`` is never None)."""

    planes: int = 2
    spines: int = 4
    leaves: int = 4
    hosts_per_leaf: int = 4
    rate_mbit: float = 100.0
    fabric_rate_mbit: float = 100.0
    queue_packets: int = 100
    control_plane: EcmpMode = "static"
    dcs: int = 1
    dci_rate_mbit: float = 100.0
    dci_delay_ms: float = 5.0
    dci_loss: float = 0.0

    def spec(self) -> MultiPlaneClos | ScaleAcross:
        """The topology, as `emu fabric` builds it from the same numbers (commands/cli.py)."""
        dcs = tuple(MultiPlaneClos(
            planes=self.planes, spines=self.spines, leaves=self.leaves,
            hosts_per_leaf=self.hosts_per_leaf,
            host_link=LinkSpec(self.rate_mbit, self.queue_packets),
            fabric_link=LinkSpec(self.fabric_rate_mbit, self.queue_packets),
            dc=d) for d in range(self.dcs))
        if self.dcs == 1:
            return dcs[0]
        return ScaleAcross(dcs, DciSpec(rate_mbit=self.dci_rate_mbit,
                                        delay_ms=self.dci_delay_ms, loss=self.dci_loss))


@dataclass(frozen=True, kw_only=True)
class TransportConfig:
    """The ``[transport]`` table. ``collective`` is None for pipelines (no collective)."""

    name: str = "mrc"
    collective: str | None = "ring"
    dblp: DblpConfig | None = None


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
    .py timeline that only running can read (``events`` runs it, the first time a run
    asks); ``clock`` what their ``at`` counts (wall or modelled
    training time); ``timeline_file`` the file it came from, if any; ``source`` the
    experiment file (or what ``parse`` was told). ``document`` is the input dict, kept
    for ``with_overrides``; ``overrides`` the dotted keys ``with_overrides`` changed in
    it (empty for a file as is).
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
        return _script_events(self)

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
        transport = dataclasses.asdict(self.transport)
        return {
            "name": self.name, "description": self.description, "seed": self.seed,
            "repetitions": self.repetitions, "source": self.source,
            "fabric": dataclasses.asdict(self.fabric), "transport": transport,
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


# --------------------------------------------------------------------------------------
# Reading tables with errors that name the file and the key path
# --------------------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)


class _Table:
    """One TOML table being read: typed getters that name ``path.key`` in every error."""

    def __init__(self, where: str, path: str, data: object, keys: tuple[str, ...]) -> None:
        self.where, self.path = where, path
        if not isinstance(data, Mapping):
            self.fail("", f"must be a table, not {_type_name(data)}", data)
        self.data: Mapping[str, Any] = data
        unknown = [k for k in data if k not in keys]
        if unknown:
            here = f"[{path}]" if path else "the top level"
            raise EmuError(f"{where}: unknown key {self.key(unknown[0])!r} in {here}; "
                           f"valid keys: {', '.join(keys)}")

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path and name else (name or self.path)

    def fail(self, name: str, rule: str, value: object = _REQUIRED) -> NoReturn:
        shown = "" if value is _REQUIRED else f" = {value!r}"
        raise EmuError(f"{self.where}: {self.key(name)}{shown} is invalid: {rule}")

    def has(self, name: str) -> bool:
        return name in self.data

    def _get(self, name: str, default: Any, what: str) -> Any:
        if name in self.data:
            return self.data[name]
        if default is _REQUIRED:
            raise EmuError(f"{self.where}: {self.key(name)} is required ({what})")
        return default

    def get_int(self, name: str, default: Any = _REQUIRED, lo: int | None = None,
            hi: int | None = None) -> Any:
        rule = _int_rule(lo, hi)
        v = self._get(name, default, rule)
        if v is default and default is None:
            return None
        if type(v) is not int or (lo is not None and v < lo) or (hi is not None and v > hi):
            self.fail(name, f"must be {rule}", v)
        return v

    def get_number(self, name: str, default: Any = _REQUIRED, lo: float | None = None,
               hi: float | None = None, lo_open: bool = False, hi_open: bool = False) -> Any:
        rule = _number_rule(lo, hi, lo_open, hi_open)
        v = self._get(name, default, rule)
        if v is default and default is None:
            return None
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        if ok and lo is not None:
            ok = v > lo if lo_open else v >= lo
        if ok and hi is not None:
            ok = v < hi if hi_open else v <= hi
        if not ok:
            self.fail(name, f"must be {rule}", v)
        return float(v)

    def get_str(self, name: str, default: Any = _REQUIRED, choices: tuple[str, ...] | None = None,
            pattern: re.Pattern[str] | None = None, what: str = "") -> Any:
        rule = what or ("one of " + ", ".join(repr(c) for c in choices) if choices
                        else "a string")
        v = self._get(name, default, rule)
        if v is default and default is None:
            return None
        if not isinstance(v, str) or (choices is not None and v not in choices) or (
                pattern is not None and not pattern.fullmatch(v)):
            self.fail(name, f"must be {rule}", v)
        return v

    def get_bool(self, name: str, default: Any = _REQUIRED) -> Any:
        v = self._get(name, default, "true or false")
        if not isinstance(v, bool):
            self.fail(name, "must be true or false", v)
        return v

    def get_strs(self, name: str, default: Any = _REQUIRED) -> Any:
        v = self._get(name, default, "an array of strings")
        if v is default and default is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.fail(name, "must be an array of strings", v)
        return tuple(v)

    def table(self, name: str, keys: tuple[str, ...]) -> _Table:
        """The sub-table ``name`` (an empty one if absent)."""
        return _Table(self.where, self.key(name), self.data.get(name, {}), keys)

    def refuse(self, name: str, why: str) -> None:
        """A key that is known but not allowed in this combination."""
        if name in self.data:
            self.fail(name, f"not allowed {why}", self.data[name])


def _int_rule(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"an integer in [{lo}, {hi}]"
    if lo is not None:
        return f"an integer >= {lo}"
    return "an integer"


def _number_rule(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is not None and hi is not None:
        return f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    if lo is not None:
        return f"a number {'>' if lo_open else '>='} {lo:g}"
    return "a number"


# --------------------------------------------------------------------------------------
# The schema
# --------------------------------------------------------------------------------------

_TOP = ("name", "description", "seed", "repetitions", "timeline", "clock", "fabric",
        "transport", "workload", "event")
_FABRIC = ("planes", "spines", "leaves", "hosts_per_leaf", "rate_mbit", "fabric_rate_mbit",
           "queue_packets", "control_plane", "dcs", "dci_rate_mbit", "dci_delay_ms", "dci_loss")
_TRANSPORT = ("name", "collective", "dblp")
_PHASE_FIELDS = tuple(f.name for f in dataclasses.fields(PhaseAwareConfig))
_DBLP = ("policy", "fill", "tolerance", *_PHASE_FIELDS, "deadline_ms", "margin_ms",
         "bounded_gather")
_WORKLOAD = ("kind", "model", "workers", "hosts", "steps", "batch_size", "microbatches", "lr",
             "lr_schedule", "target_accuracy", "target_loss", "eval_every", "compute",
             "compute_ms", "allow_overruns")


def load(path: str | Path) -> Experiment:
    """Read and validate an experiment file (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise EmuError(f"experiment file {str(p)!r} does not exist")
    if p.suffix != ".toml":
        raise EmuError(f"experiment file {str(p)!r}: must be a .toml file")
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise EmuError(f"{p}: not valid TOML: {e}") from None
    return parse(data, str(p), base_dir=p.resolve().parent)


def parse(data: Mapping[str, Any], where: str = "<experiment>",
          base_dir: str | Path | None = None) -> Experiment:
    """Validate an experiment given as a dict (as ``tomllib`` returns it).

    ``where`` starts every error message (the file name); ``base_dir`` is where a relative
    ``timeline`` path is looked up first (then the working directory).
    """
    top = _Table(where, "", data, _TOP)
    name = top.get_str("name", pattern=_NAME, what="a name of letters, digits, '_', '.' or '-'")
    description = top.get_str("description", "")
    seed = top.get_int("seed", 0, 0, _MAX_SEED)
    repetitions = top.get_int("repetitions", 1, 1)
    if seed + repetitions - 1 > _MAX_SEED:
        top.fail("repetitions", f"seed + repetitions - 1 must be <= {_MAX_SEED}", repetitions)
    if "workload" not in data:
        raise EmuError(f"{where}: [workload] is required (at least model, workers and steps)")

    fabric = _fabric(top.table("fabric", _FABRIC))
    try:
        spec = fabric.spec()
    except TopologyError as e:  # a combination the per-key checks cannot see
        raise EmuError(f"{where}: [fabric]: {e}") from None
    workload = _workload(top.table("workload", _WORKLOAD), spec)
    transport = _transport(top.table("transport", _TRANSPORT), fabric, workload, spec)
    events, timeline_file = _timeline(top, spec, base_dir, workload.steps)
    clock = top.get_str("clock", "wall", CLOCKS)
    if events is not None:  # else checked when the script runs (Experiment.events)
        _check_clock(clock, tl.Timeline(events), lambda msg: top.fail("clock", msg, clock))
    return Experiment(
        name=name, description=description, seed=seed, repetitions=repetitions,
        fabric=fabric, transport=transport, workload=workload, declared_events=events,
        clock=clock,
        timeline_file=timeline_file, source=where,
        base_dir=None if base_dir is None else str(base_dir),
        document=copy.deepcopy(dict(data)))


def _fabric(t: _Table) -> FabricConfig:
    # The bounds MultiPlaneClos/ScaleAcross enforce, checked here so errors name the key.
    rate = t.get_number("rate_mbit", 100.0, 0.0, lo_open=True)
    dcs = t.get_int("dcs", 1, 1, MAX_SCALEACROSS_DCS)
    control_plane = t.get_str("control_plane", "static", CONTROL_PLANES)
    # DCI keys are accepted (and unused) with dcs = 1, so `fabric.dcs=1` can override a
    # scale-across file without also removing its DCI settings.
    if dcs > 1 and control_plane == "bgp":
        t.fail("control_plane", "must be 'static' when dcs > 1 (scale-across fabrics run "
               "static routes: no BGP on DCI routers yet)", control_plane)
    return FabricConfig(
        planes=t.get_int("planes", 2, 1, 16), spines=t.get_int("spines", 4, 1, 64),
        leaves=t.get_int("leaves", 4, 1, 64), hosts_per_leaf=t.get_int("hosts_per_leaf", 4, 1, 64),
        rate_mbit=rate, fabric_rate_mbit=t.get_number("fabric_rate_mbit", rate, 0.0, lo_open=True),
        queue_packets=t.get_int("queue_packets", 100, 1), control_plane=control_plane, dcs=dcs,
        dci_rate_mbit=t.get_number("dci_rate_mbit", 100.0, 0.0, lo_open=True),
        dci_delay_ms=t.get_number("dci_delay_ms", 5.0, 0.0, 1000.0),
        dci_loss=t.get_number("dci_loss", 0.0, 0.0, 1.0))


def _workload(t: _Table, spec: MultiPlaneClos | ScaleAcross) -> WorkloadConfig:
    kind = t.get_str("kind", "data_parallel", KINDS)
    model = t.get_str("model", choices=MODELS)
    pipeline = kind == "pipeline"
    n_hosts = len(spec.hosts)
    workers = t.get_int("workers", lo=2 if pipeline else 1)
    if pipeline and workers > MAX_STAGES[model]:
        t.fail("workers", f"must be at most {MAX_STAGES[model]} for a pipeline of {model} "
               "(its stages are whole layers: workloads/models.py stage_groups)", workers)
    if workers > n_hosts:
        t.fail("workers", f"must be at most the fabric's {n_hosts} hosts (one worker per host)",
               workers)
    hosts = t.get_strs("hosts", None)
    if hosts is not None:
        _check_hosts(t, hosts, workers, spec)
    steps = t.get_int("steps", lo=1)
    batch = t.get_int("batch_size", 64, 1)
    microbatches = None
    if pipeline:
        microbatches = t.get_int("microbatches", 4, 1)
        if batch % microbatches:
            t.fail("batch_size", f"must be divisible by workload.microbatches ({microbatches})",
                   batch)
    else:
        t.refuse("microbatches", "with kind = 'data_parallel' (pipelines only)")
        if batch % workers:
            t.fail("batch_size", f"must be divisible by workload.workers ({workers}): it is "
                   "the global batch, split evenly over the data-parallel workers", batch)
    if model == "digits_cnn":
        t.refuse("target_loss", "with model = 'digits_cnn' (use target_accuracy)")
    else:
        t.refuse("target_accuracy", f"with model = {model!r} (use target_loss)")
    compute = t.get_str("compute", "measured", COMPUTE_MODES)
    if compute != "modelled":
        t.refuse("compute_ms", "with compute = 'measured' (only modelled compute takes a time)")
        t.refuse("allow_overruns", "with compute = 'measured' (only modelled compute can be "
                 "overrun)")
    elif pipeline and not t.has("compute_ms"):
        t.fail("compute_ms", "missing: a modelled pipeline needs it (one microbatch's forward "
               "+ backward on one stage, in ms; it is not measured for stages)")
    return WorkloadConfig(
        kind=kind, model=model, workers=workers, hosts=hosts, steps=steps, batch_size=batch,
        microbatches=microbatches, lr=t.get_number("lr", 0.05, 0.0, lo_open=True),
        lr_schedule=t.get_str("lr_schedule", "cosine", LR_SCHEDULES),
        target_accuracy=t.get_number("target_accuracy", None, 0.0, 1.0, lo_open=True),
        target_loss=t.get_number("target_loss", None, 0.0, lo_open=True),
        eval_every=t.get_int("eval_every", 10, 1), compute=compute,
        compute_ms=t.get_number("compute_ms", None, 0.0, lo_open=True),
        allow_overruns=t.get_bool("allow_overruns", False))


def _check_hosts(t: _Table, hosts: tuple[str, ...], workers: int,
                 spec: MultiPlaneClos | ScaleAcross) -> None:
    if len(hosts) != workers:
        t.fail("hosts", f"must list one host per worker: {len(hosts)} hosts for "
               f"workload.workers = {workers}", list(hosts))
    names = [h.name for h in spec.hosts]
    for h in hosts:
        try:
            node = spec.node(h)
        except TopologyError:
            node = None
        if node is None or node.role is not Role.HOST:
            listed = ", ".join(names[:8]) + (f", ... ({len(names)} in total)"
                                             if len(names) > 8 else "")
            t.fail("hosts", f"{h!r} is not a host of this fabric; hosts are {listed}",
                   list(hosts))
    dup = sorted({h for h in hosts if hosts.count(h) > 1})
    if dup:
        t.fail("hosts", f"{dup} listed more than once (one worker per host)", list(hosts))


def _transport(t: _Table, fabric: FabricConfig, workload: WorkloadConfig,
               spec: MultiPlaneClos | ScaleAcross) -> TransportConfig:
    name = t.get_str("name", "mrc", TRANSPORTS)
    pipeline = workload.kind == "pipeline"
    if name == "rc" and fabric.dcs > 1:
        t.fail("name", "rc runs one QP per plane from per-plane host addresses, which only "
               "single-DC fabrics route: use mrc, dblp or gloo across DCs", name)
    if pipeline and name == "gloo":
        t.fail("name", "gloo is not available for pipelines (they run over our transports: "
               "mrc, rc or dblp)", name)
    if name != "dblp":
        why = "gloo has no bounded loss" if name == "gloo" else f"name = {name!r}"
        t.refuse("dblp", f"with transport.name = {name!r} ([transport.dblp] is for dblp only: "
                 f"{why})")
    collective: str | None
    if pipeline:
        t.refuse("collective", "with workload.kind = 'pipeline' (stages exchange activations "
                 "point to point; there is no collective)")
        collective = None
    else:
        collective = t.get_str("collective", "transpose" if name == "dblp" else "ring",
                           COLLECTIVES)
        if name == "dblp" and collective != "transpose":
            t.fail("collective", "must be 'transpose' with transport.name = 'dblp' (bounded-"
                   "loss rounds need every chunk to travel one hop)", collective)
        if name == "gloo" and collective != "ring":
            t.fail("collective", "must be 'ring' with transport.name = 'gloo' (gloo runs "
                   "its own all-reduce)", collective)
        if collective == "hierarchical":
            if fabric.dcs < 2:
                t.fail("collective", "'hierarchical' needs fabric.dcs > 1 (it reduces inside "
                       "each DC, then across DCs)", collective)
            hosts = workload.hosts or default_placement(spec, workload.workers)
            assert isinstance(spec, ScaleAcross)
            if len({spec.dc_of(h) for h in hosts}) < 2:
                t.fail("collective", "'hierarchical' needs workers in at least two DCs "
                       "(workload.hosts are all in one)", collective)
            per_dc: dict[int, int] = {}
            for h in hosts:
                per_dc[spec.dc_of(h)] = per_dc.get(spec.dc_of(h), 0) + 1
            if len(set(per_dc.values())) > 1:
                t.fail("collective", "'hierarchical' needs the same number of workers in every "
                       f"DC it uses, not {dict(sorted(per_dc.items()))} (workers per DC)",
                       collective)
    dblp = _dblp(t.table("dblp", _DBLP)) if name == "dblp" else None
    return TransportConfig(name=name, collective=collective, dblp=dblp)


def _dblp(t: _Table) -> DblpConfig:
    policy = t.get_str("policy", "phase_aware", POLICIES)
    # "previous" needs each contributor's last block at the owner, which the transpose
    # all-reduce does not keep: training rounds take the other two.
    fill = t.get_str("fill", DEFAULT_FILL, tuple(f for f in FILLS if f != "previous"))
    deadline_ms = t.get_number("deadline_ms", None, 0.0, lo_open=True)
    for k in _PHASE_FIELDS:
        if policy != "phase_aware":
            t.refuse(k, f"with policy = {policy!r} (a phase_aware setting)")
    if policy != "fixed":
        t.refuse("tolerance", f"with policy = {policy!r} (a fixed setting; phase_aware sets "
                 "it per round from base and cap, optireduce from the deadline)")
    if policy != "optireduce":
        t.refuse("margin_ms", f"with policy = {policy!r} (an optireduce setting)")
    tolerance = phase = margin = None
    if policy == "fixed":
        tolerance = t.get_number("tolerance", 0.05, 0.0, 1.0, hi_open=True)
    elif policy == "optireduce":
        margin = t.get_number("margin_ms", 1.0, 0.0)
    else:
        phase = _phase(t)
    bounded_gather = t.get_bool("bounded_gather", False)
    return DblpConfig(policy=policy, fill=fill, tolerance=tolerance, phase=phase,
                      deadline_ms=deadline_ms, margin_ms=margin, bounded_gather=bounded_gather)


def _phase(t: _Table) -> PhaseAwareConfig:
    d = PhaseAwareConfig()
    values: dict[str, Any] = {
        "base": t.get_number("base", d.base, 0.0, 1.0, hi_open=True),
        "cap": t.get_number("cap", d.cap, 0.0, 1.0, hi_open=True),
        "critical_epochs": t.get_int("critical_epochs", d.critical_epochs, 0),
        "window": t.get_int("window", d.window, 1),
        "eta": t.get_number("eta", d.eta, 0.0, lo_open=True),
        "lr_scaling": t.get_bool("lr_scaling", d.lr_scaling),
    }
    # The training loop does not feed accuracy to the policy (only rank 0 evaluates,
    # and every rank must pick the same bound): the accuracy-driven phase is off.
    t.refuse("accuracy_gain", "in a training run (the policy gets no accuracy signal: "
             "only rank 0 evaluates)")
    values["accuracy_gain"] = None
    t.refuse("begin_accuracy", "in a training run (the policy gets no accuracy signal)")
    values["begin_accuracy"] = d.begin_accuracy
    missing = set(_PHASE_FIELDS) - set(values)
    assert not missing, f"PhaseAwareConfig fields not read here: {sorted(missing)}"
    if values["base"] > values["cap"]:
        t.fail("base", f"must be <= transport.dblp.cap ({values['cap']:g})", values["base"])
    try:
        return PhaseAwareConfig(**values)
    except ValueError as e:
        raise EmuError(f"{t.where}: [{t.path}]: {e}") from None


# --------------------------------------------------------------------------------------
# The failure timeline: inline [[event]] tables or a file, validated against the fabric
# --------------------------------------------------------------------------------------

def _timeline(top: _Table, spec: MultiPlaneClos | ScaleAcross, base_dir: str | Path | None,
              steps: int) -> tuple[tuple[tl.Event, ...] | None, str | None]:
    """(the events, the timeline file). The events are None for a .py timeline that only
    running it can read (it does more than declare events): validating never runs a
    script; ``Experiment.events`` runs it when a run asks for the events."""
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


def _check_timeline(context: str, timeline: tl.Timeline, spec: MultiPlaneClos | ScaleAcross,
                    steps: int) -> None:
    # Each failure first, so an error names its event; then times (steps against the
    # workload's), pairing and overlaps.
    for i, ev in enumerate(timeline.events):
        f = ev.action.failure if isinstance(ev.action, tl.Restore) else ev.action
        _validate(f"{context}: event[{i}] ({f.describe().get('kind')})",
                  partial(tl.check_failure, f), spec)
    _validate(context, lambda s: timeline.validate(s, steps), spec)


def _check_clock(clock: str, timeline: tl.Timeline, fail: Callable[[str], NoReturn]) -> None:
    if clock == "modelled" and timeline.by_step:
        fail("must be 'wall' (the default) when events are scheduled by at_step: the clock "
             "only says what `at` counts")


def _script_events(exp: Experiment) -> tuple[tl.Event, ...]:
    """Run the experiment's .py timeline (a run asked for its events) and check them as
    validation checks declared ones."""
    assert exp.timeline_file is not None  # only a script timeline is left unread
    context = f"{exp.source}: timeline = {exp.timeline_file!r}"
    try:
        timeline = tl.load(exp.timeline_file)
    except EmuError as e:
        raise EmuError(f"{context}: {e}") from None
    _check_timeline(context, timeline, exp.fabric_spec(), exp.workload.steps)

    def fail(msg: str) -> NoReturn:
        raise EmuError(f"{exp.source}: clock = {exp.clock!r} is invalid: {msg}")

    _check_clock(exp.clock, timeline, fail)
    return timeline.events


def _validate(context: str, check: Callable[[Any], None],
              spec: MultiPlaneClos | ScaleAcross) -> None:
    try:
        check(spec)
    except (EmuError, TopologyError, ValueError) as e:
        raise EmuError(f"{context}: {e}") from None
    except AttributeError as e:
        # Some failure kinds only know single-DC fabrics; say so instead of a traceback.
        raise EmuError(f"{context}: not supported on this fabric ({e})") from None


def _find(top: _Table, file: str, base_dir: str | Path | None) -> Path:
    p = Path(file)
    tried = [p] if p.is_absolute() else (
        ([Path(base_dir) / p] if base_dir is not None else []) + [Path.cwd() / p])
    for c in tried:
        if c.is_file():
            return c
    top.fail("timeline", "no such file (looked in " + ", ".join(str(c) for c in tried) + ")",
             file)


# --------------------------------------------------------------------------------------
# Placement and overrides
# --------------------------------------------------------------------------------------


def default_placement(spec: MultiPlaneClos | ScaleAcross, workers: int) -> tuple[str, ...]:
    """``workers`` hosts, rank order, spread over DCs then racks (see the module docstring)."""
    dcs = spec.dcs if isinstance(spec, ScaleAcross) else (spec,)
    if not 1 <= workers <= sum(dc.host_count for dc in dcs):
        raise EmuError(f"workers={workers} is invalid: must be in [1, {spec.host_count}]")
    per_dc = [0] * len(dcs)
    left = workers
    while left:  # deal one worker at a time to every DC that still has room
        for d, dc in enumerate(dcs):
            if left and per_dc[d] < dc.host_count:
                per_dc[d] += 1
                left -= 1
    out: list[str] = []
    for dc, n in zip(dcs, per_dc, strict=True):
        by_rack = [[h for h in dc.hosts if h.rack == r] for r in range(dc.leaves)]
        order = [by_rack[r][i] for i in range(dc.hosts_per_leaf) for r in range(dc.leaves)]
        out.extend(h.name for h in order[:n])
    return tuple(out)


def with_overrides(exp: Experiment, overrides: Mapping[str, Any]) -> Experiment:
    """``exp`` with dotted keys of its document replaced, validated like a file.

    ``{"transport.name": "rc", "transport.dblp": None}``: a value None removes the key
    (a dblp experiment switched to rc must drop its [transport.dblp] table; nothing is
    dropped silently). Errors name the file and the overridden keys.
    """
    doc = copy.deepcopy(dict(exp.document))
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if not dotted or not all(parts):
            raise EmuError(f"override {dotted!r}: must be a dotted key such as workload.steps")
        table: dict = doc
        for i, part in enumerate(parts[:-1]):
            nxt = table.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise EmuError(f"override {dotted!r}: {'.'.join(parts[:i + 1])} is "
                               f"{_type_name(nxt)}, not a table")
            table = nxt
        if value is None:
            table.pop(parts[-1], None)
        else:
            table[parts[-1]] = copy.deepcopy(value)
    where = f"{exp.source} (with overrides {', '.join(overrides)})"
    new = parse(doc, where, base_dir=exp.base_dir)
    # ``source`` stays the file; what was changed is recorded next to it.
    return dataclasses.replace(new, source=exp.source,
                               overrides={**exp.overrides, **copy.deepcopy(dict(overrides))})


def parse_override(text: str) -> tuple[str, Any]:
    """``"workload.steps=50"`` -> ``("workload.steps", 50)``; the value is read as TOML
    (``"[\\"h0\\", \\"h3\\"]"``, ``true``, ``0.5``), a bare word as a string (``rc``)."""
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key:
        raise EmuError(f"override {text!r}: must be KEY=VALUE, e.g. workload.steps=50")
    try:
        return key, tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value
