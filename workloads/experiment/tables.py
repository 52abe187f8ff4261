"""The rules of each table of an experiment file: ``[fabric]``, ``[workload]``,
``[transport]`` and the chosen transport's own ``[transport.<name>]`` (its settings,
and for dblp its tolerance policy too), each read into its dataclass.

Defaults come from the dataclass that owns them (config.py :func:`field_default`). The
fabric's bounds are not restated: :class:`~workloads.experiment.config.FabricConfig`
validates itself through the topology dataclasses, and its error is re-raised here
naming the key. The rules written here are the experiment's own: what a combination of
keys means, and what this machine can hold (limits.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from emu.errors import EmuError
from topologies import MultiPlaneClos, Role, ScaleAcross, TopologyError
from topologies.validate import InvalidValue, number_rule
from transports import registry
from transports.core.knobs import UnknownKey
from workloads.collectives.fill import FILLS
from workloads.collectives.phase import OptiReduceConfig, PhaseAwareConfig
from workloads.experiment import limits
from workloads.experiment.blocks import check_dblp_blocks
from workloads.experiment.config import (
    COLLECTIVES,
    DBLP_COLLECTIVE,
    DEFAULT_FIXED_TOLERANCE,
    DEFAULT_MICROBATCHES,
    MAX_STAGES,
    TRANSPORTS,
    FabricConfig,
    TransportConfig,
    WorkloadConfig,
    field_default,
)
from workloads.experiment.dblp import POLICIES, DblpConfig
from workloads.experiment.placement import default_placement
from workloads.experiment.reader import Table

__all__ = ["DBLP", "FABRIC", "PHASE_FIELDS", "TRANSPORT", "WORKLOAD", "fabric", "transport",
           "workload"]

Spec = MultiPlaneClos | ScaleAcross

FABRIC = tuple(f.name for f in dataclasses.fields(FabricConfig))
# [transport]'s keys: its own, and one table per transport ([transport.<name>])
TRANSPORT = ("name", "collective", *TRANSPORTS)
PHASE_FIELDS = tuple(f.name for f in dataclasses.fields(PhaseAwareConfig))
# the bounded-loss policy's keys, in a bounded transport's table besides its settings
DBLP = ("policy", "fill", "tolerance", *PHASE_FIELDS, "deadline_ms", "margin_ms",
        "bounded_gather")
assert not {k for n in registry.names(lambda t: t.caps.bounded)
            for k in registry.get(n).keys()} & set(DBLP), "a policy key is also a setting"
WORKLOAD = tuple(f.name for f in dataclasses.fields(WorkloadConfig))


# --------------------------------------------------------------------------------------
# [fabric]
# --------------------------------------------------------------------------------------


def fabric(t: Table) -> FabricConfig:
    """The ``[fabric]`` table: FabricConfig checks it (see the module docstring)."""
    values = dict(t.data)
    if "rate_mbit" in values:  # leaf-spine links run at the host links' rate unless told
        values.setdefault("fabric_rate_mbit", values["rate_mbit"])
    try:
        return FabricConfig(**values)
    except InvalidValue as e:
        if e.name in t.data:
            t.fail(e.name, f"must be {e.rule}", t.data[e.name])
        raise EmuError(f"{t.where}: [{t.path}]: {e}") from None
    except TopologyError as e:  # a combination no single key makes invalid
        raise EmuError(f"{t.where}: [{t.path}]: {e}") from None


# --------------------------------------------------------------------------------------
# [workload]
# --------------------------------------------------------------------------------------

def workload(t: Table, spec: Spec) -> WorkloadConfig:
    """The ``[workload]`` table, checked against the fabric ``spec`` it runs on: each key
    by its field in :class:`WorkloadConfig` (its default and rule), then the rules
    between keys and what this machine holds (limits.py)."""
    W = WorkloadConfig
    kind = t.get_field(W, "kind")
    model = t.get_field(W, "model")
    pipeline = kind == "pipeline"
    n_hosts = len(spec.hosts)
    workers = t.get_field(W, "workers")
    if pipeline and workers < 2:
        t.fail("workers", "must be at least 2 for a pipeline (one stage per worker)", workers)
    if pipeline and workers > MAX_STAGES[model]:
        t.fail("workers", f"must be at most {MAX_STAGES[model]} for a pipeline of {model} "
               "(its stages are whole layers: workloads/models.py stage_groups)", workers)
    if workers > n_hosts:
        t.fail("workers", f"must be at most the fabric's {n_hosts} hosts (one worker per host)",
               workers)
    hosts = t.get_strs("hosts", None)
    if hosts is not None:
        _check_hosts(t, hosts, workers, spec)
    steps = t.data.get("steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > limits.MAX_STEPS:
        t.fail("steps", f"must be an integer in [1, {limits.MAX_STEPS:,}]: "
               + limits.too_long(steps, "steps", limits.MIN_STEP_S), steps)
    steps = t.get_field(W, "steps")
    batch = _batch_size(t, model)
    microbatches = None
    if pipeline:
        microbatches = t.get_field(W, "microbatches", DEFAULT_MICROBATCHES)
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
    compute = t.get_field(W, "compute")
    if compute != "modelled":
        t.refuse("compute_ms", "with compute = 'measured' (only modelled compute takes a time)")
        t.refuse("allow_overruns", "with compute = 'measured' (only modelled compute can be "
                 "overrun)")
    elif pipeline and not t.has("compute_ms"):
        t.fail("compute_ms", "missing: a modelled pipeline needs it (one microbatch's forward "
               "+ backward on one stage, in ms; it is not measured for stages)")
    compute_ms = _compute_ms(t, microbatches, workers)
    return WorkloadConfig(
        kind=kind, model=model, workers=workers, hosts=hosts, steps=steps, batch_size=batch,
        microbatches=microbatches, lr=t.get_field(W, "lr"),
        lr_schedule=t.get_field(W, "lr_schedule"),
        target_accuracy=t.get_field(W, "target_accuracy"),
        target_loss=t.get_field(W, "target_loss"), eval_every=t.get_field(W, "eval_every"),
        compute=compute, compute_ms=compute_ms,
        allow_overruns=t.get_field(W, "allow_overruns"))


def _batch_size(t: Table, model: str) -> int:
    batch: int = t.get_field(WorkloadConfig, "batch_size")
    try:
        most = limits.train_samples(model)
    except limits.TextMissing as e:
        t.fail("model", f"cannot train here: {e}", model)
    if batch > most:  # Shards would refuse it in every worker, after the fabric is built
        t.fail("batch_size", f"must be at most {most}: the global batch is drawn from the "
               f"{model} training set, which has {most} samples", batch)
    return batch


def _compute_ms(t: Table, microbatches: int | None, workers: int) -> float | None:
    # A step of modelled compute sleeps compute_ms (data parallel) or, in a GPipe
    # pipeline, (microbatches + stages - 1) microbatch times: bounded to one hour.
    per_step = 1 if microbatches is None else microbatches + workers - 1
    most = limits.MAX_STEP_COMPUTE_MS / per_step
    ms: float | None = t.get_field(WorkloadConfig, "compute_ms")
    if ms is not None and ms > most:
        why = ("" if per_step == 1 else f"; a step of this pipeline computes {per_step} "
               "microbatch times (microbatches + stages - 1)")
        t.fail("compute_ms", f"must be {number_rule(0.0, most, lo_open=True)}: at most one "
               f"hour of modelled compute per step{why}", ms)
    return ms


def _check_hosts(t: Table, hosts: tuple[str, ...], workers: int, spec: Spec) -> None:
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


# --------------------------------------------------------------------------------------
# [transport] and [transport.<name>]
# --------------------------------------------------------------------------------------


def transport(t: Table, fabric: FabricConfig, workload: WorkloadConfig,
              spec: Spec) -> TransportConfig:
    """The ``[transport]`` table, checked against the fabric and the workload, and the
    chosen transport's own ``[transport.<name>]`` (what it can do decides: the registry's
    capabilities, transports/registry.py)."""
    name = t.get_str("name", field_default(TransportConfig, "name"), TRANSPORTS)
    decl = registry.get(name)
    pipeline = workload.kind == "pipeline"
    if not decl.caps.cross_dc and fabric.dcs > 1:
        t.fail("name", f"{name} runs one QP per plane from per-plane host addresses, which "
               "only single-DC fabrics route: use "
               f"{_or(registry.names(lambda o: o.caps.training and o.caps.cross_dc))} "
               "across DCs", name)
    if pipeline and decl.core is None:
        ours = registry.names(lambda o: o.caps.training and o.core is not None)
        t.fail("name", f"{name} is not available for pipelines (they run over our "
               f"transports: {_or(ours)})", name)
    for other in TRANSPORTS:  # a table of another transport would be ignored: refused
        if other != name:
            o = registry.get(other)
            why = (f"{name} has no bounded loss" if o.caps.bounded and decl.caps.kernel
                   else f"name = {name!r}")
            t.refuse(other, f"with transport.name = {name!r} ([transport.{other}] is for "
                     f"{other} only: {why})")
    collective: str | None
    if pipeline:
        t.refuse("collective", "with workload.kind = 'pipeline' (stages exchange activations "
                 "point to point; there is no collective)")
        collective = None
    else:
        collective = t.get_str("collective", DBLP_COLLECTIVE if decl.caps.bounded
                               else field_default(TransportConfig, "collective"), COLLECTIVES)
        _check_collective(t, decl, collective, fabric, workload, spec)
    dblp = None
    if decl.caps.bounded:  # its table holds the tolerance policy besides its settings
        own = t.table(name, DBLP + decl.keys())
        dblp = _dblp(own)
        settings = _settings(own, decl, skip=DBLP)
        check_dblp_blocks(own, dblp, workload, settings.mtu_payload)  # chunks are packets
    else:
        own = t.table(name, decl.keys())
        settings = _settings(own, decl)
    return TransportConfig(name=name, collective=collective, dblp=dblp, settings=settings)


def _or(names: tuple[str, ...]) -> str:
    """``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _settings(t: Table, decl: registry.Transport, skip: tuple[str, ...] = ()) -> Any:
    """The transport's settings: its run defaults with the table's keys (but ``skip``)
    applied, each checked by its settings dataclass (transports/core/knobs.py)."""
    data = {k: v for k, v in t.data.items() if k not in skip}
    try:
        return decl.settings(data)
    except UnknownKey as e:  # (a nested table's: the table's own keys were checked)
        inner = t.key(e.key).rsplit(".", 1)[0]
        raise EmuError(f"{t.where}: unknown key {t.key(e.key)!r} in [{inner}]; valid keys: "
                       f"{', '.join(e.valid)}") from None
    except InvalidValue as e:
        t.fail(e.name, f"must be {e.rule}", e.value)
    except ValueError as e:  # a rule between keys (rto_min <= rto_max)
        raise EmuError(f"{t.where}: [{t.path}]: {e}") from None


def _check_collective(t: Table, decl: registry.Transport, collective: str | None,
                      fabric: FabricConfig, workload: WorkloadConfig, spec: Spec) -> None:
    name = decl.name
    if decl.caps.bounded and collective != DBLP_COLLECTIVE:
        t.fail("collective", f"must be {DBLP_COLLECTIVE!r} with transport.name = {name!r} "
               "(bounded-loss rounds need every chunk to travel one hop)", collective)
    if decl.caps.own_collective and collective != "ring":
        t.fail("collective", f"must be 'ring' with transport.name = {name!r} ({name} runs "
               "its own all-reduce)", collective)
    if collective != "hierarchical":
        return
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
               f"DC it uses, not {dict(sorted(per_dc.items()))} (workers per DC)", collective)


def _dblp(t: Table) -> DblpConfig:
    policy = t.get_str("policy", field_default(DblpConfig, "policy"), POLICIES)
    # "previous" needs each contributor's last block at the owner, which the transpose
    # all-reduce does not keep: training rounds take the other two.
    fill = t.get_str("fill", field_default(DblpConfig, "fill"),
                     tuple(f for f in FILLS if f != "previous"))
    deadline_ms = t.get_number("deadline_ms", None, 0.0, lo_open=True)
    for k in PHASE_FIELDS:
        if policy != "phase_aware":
            t.refuse(k, f"with policy = {policy!r} (a phase_aware setting)")
    if policy != "fixed":
        t.refuse("tolerance", f"with policy = {policy!r} (a fixed setting; phase_aware sets "
                 "it per round from base and cap, optireduce from the deadline)")
    if policy != "optireduce":
        t.refuse("margin_ms", f"with policy = {policy!r} (an optireduce setting)")
    tolerance = phase = margin = None
    if policy == "fixed":
        tolerance = t.get_number("tolerance", DEFAULT_FIXED_TOLERANCE, 0.0, 1.0, hi_open=True)
    elif policy == "optireduce":
        margin = t.get_number("margin_ms", field_default(OptiReduceConfig, "margin_s") * 1000.0,
                              0.0)
    else:
        phase = _phase(t)
    bounded_gather = t.get_bool("bounded_gather", field_default(DblpConfig, "bounded_gather"))
    return DblpConfig(policy=policy, fill=fill, tolerance=tolerance, phase=phase,
                      deadline_ms=deadline_ms, margin_ms=margin, bounded_gather=bounded_gather)


def _phase(t: Table) -> PhaseAwareConfig:
    d = PhaseAwareConfig()
    values: dict[str, Any] = {
        "base": t.get_number("base", d.base, 0.0, 1.0, hi_open=True),
        "cap": t.get_number("cap", d.cap, 0.0, 1.0, hi_open=True),
        "critical_epochs": t.get_int("critical_epochs", d.critical_epochs, 0),
        "window": t.get_int("window", d.window, 1),
        "eta": t.get_number("eta", d.eta, 0.0, lo_open=True),
        "lr_scaling": t.get_bool("lr_scaling", d.lr_scaling),
        "epoch_steps": t.get_int("epoch_steps", None, 1),
    }
    # The training loop does not feed accuracy to the policy (only rank 0 evaluates,
    # and every rank must pick the same bound): the accuracy-driven phase is off.
    t.refuse("accuracy_gain", "in a training run (the policy gets no accuracy signal: "
             "only rank 0 evaluates)")
    values["accuracy_gain"] = None
    t.refuse("begin_accuracy", "in a training run (the policy gets no accuracy signal)")
    values["begin_accuracy"] = d.begin_accuracy
    missing = set(PHASE_FIELDS) - set(values)
    assert not missing, f"PhaseAwareConfig fields not read here: {sorted(missing)}"
    if values["base"] > values["cap"]:
        t.fail("base", f"must be <= transport.dblp.cap ({values['cap']:g})", values["base"])
    try:
        return PhaseAwareConfig(**values)
    except ValueError as e:
        raise EmuError(f"{t.where}: [{t.path}]: {e}") from None
