"""What the explorer's best configuration is compared with, per scenario.

* **production** (a production-like default, as Llama-3-style jobs are run): TP = the
  NVLink domain (the largest degree the model's heads allow), CP 1, microbatch 1, the
  smallest PP that fits with selective recomputation, data parallelism outermost and
  across DCs, hierarchical all-reduce, distributed optimizer, 1F1B, overlap on, RC over
  ECMP with the best queue pairs per connection of the space, no DBLP.
* **sota** (a state-of-the-art heuristic): the better, under the full model, of
  (a) a single-DC optimizer that sees the DCI only as bandwidth: the search over every
  placement and schedule axis with the DCI's delay and loss set to zero, its best point
  then re-scored with the real DCI; and (b) a cross-DC pipeline optimizer (CrossPipe-like):
  pipeline stages across DCs, tuning the schedule, chunks, warm-up, microbatch size and
  PP under the same memory limit. Both run RC over ECMP without DBLP: they optimise
  placement and schedule, not the network.
* **ablation**: from the production default, search only the placement axes, only the
  schedule axes, only the network axes (transport, flows per connection, DBLP), or all
  of them jointly (the explorer's result).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from explorer.calibration import Calibration
from explorer.model import evaluate
from explorer.model_breakdown import Breakdown
from explorer.search import search_scenario, with_axes
from explorer.spec import Config
from explorer.specfile import Space, build_config

__all__ = ["ABLATIONS", "Baseline", "ablation", "production", "sota"]

PRODUCTION = {
    "placement.cp": 1, "placement.microbatch": 1, "placement.cross": "dp",
    "placement.dc_group": 2, "schedule.pipeline": "1f1b", "schedule.virtual_stages": 1,
    "schedule.warmup_extra": 0, "schedule.recompute": "selective",
    "schedule.sequence_parallel": True, "schedule.optimizer": "distributed",
    "schedule.overlap": True, "schedule.allreduce": "hierarchical",
    "schedule.dblp_tolerance": 0.0, "network.transport": "rc",
}
PLACEMENT_KEYS = ("placement.tp", "placement.cp", "placement.pp", "placement.microbatch",
                  "placement.cross", "placement.dc_group")
NETWORK_KEYS = ("network.transport", "network.qps_per_connection", "schedule.dblp_tolerance")
ABLATIONS = ("placement", "schedule", "network", "joint")


@dataclass(frozen=True)
class Baseline:
    """A baseline's configuration and projection (config None: none could run)."""

    name: str
    config: Config | None
    breakdown: Breakdown | None
    note: str = ""


def _scenario_values(dec: Space) -> dict[str, Any]:
    """The fixed values of a scenario's decision space, decision axes at their first."""
    values = dict(dec.fixed)
    for a in dec.axes:
        values[a.key] = a.values[0]
    return values


def production(dec: Space, cal: Calibration) -> Baseline:
    """The production-like default of a scenario (see the module docstring)."""
    values = _scenario_values(dec) | PRODUCTION
    probe = build_config(values)
    heads, kv = probe.model.heads, probe.model.kv
    tp = probe.gpu.nvlink_domain
    while tp > 1 and (heads % tp or probe.gpu.nvlink_domain % tp
                      or (kv % tp if tp <= kv else tp % kv)):
        tp //= 2
    values["placement.tp"] = max(tp, 1)
    # An operator tunes the queue pairs per connection (NCCL_IB_QPS_PER_CONNECTION):
    # production takes the best of the space's values.
    ax = dec.axis("network.qps_per_connection")
    qps_values = ax.values if ax else (values.get("network.qps_per_connection",
                                                  probe.network.qps_per_connection),)
    last = None
    for pp in range(1, probe.model.layers + 1):
        found = []
        for qps in qps_values:
            cfg = build_config(values | {"placement.pp": pp,
                                         "network.qps_per_connection": qps})
            b = evaluate(cfg, cal)
            last = b.reason
            if b.feasible:
                found.append((b.time_to_train_s, cfg, b))
        if found:
            _, cfg, b = min(found, key=lambda x: x[0])
            return Baseline("production", cfg, b)
    return Baseline("production", None, None, f"no PP fits ({last})")


def _best(space: Space, cal: Calibration, name: str) -> Baseline:
    res = search_scenario(space, {}, cal, top_k=1)
    if res.best is None:
        return Baseline(name, None, None, "nothing feasible")
    cfg = res.config(res.best)
    return Baseline(name, cfg, evaluate(cfg, cal))


def _decision_axes(dec: Space, keys: tuple[str, ...] | None = None,
                   exclude: tuple[str, ...] = ()) -> dict[str, tuple]:
    return {a.key: a.values for a in dec.axes
            if (keys is None or a.key in keys) and a.key not in exclude}


def sota(dec: Space, cal: Calibration, prod: Baseline) -> Baseline:
    """The better of the single-DC and cross-DC pipeline optimizers (module docstring)."""
    rc_only = {"network.transport": "rc", "schedule.dblp_tolerance": 0.0}
    # (a) single-DC view: the DCI is bandwidth only
    blind = with_axes(dec, fixed=rc_only | {"dci.delay_ms": 0.0, "dci.loss": 0.0})
    a = _best(blind, cal, "single-DC optimizer")
    if a.config is not None:
        real = a.config.replace({"dci.delay_ms": dec.config().dci.delay_ms,
                                 "dci.loss": dec.config().dci.loss})
        a = Baseline(a.name, real, evaluate(real, cal))
    # (b) cross-DC pipeline optimizer
    fixed: dict[str, Any] = dict(rc_only)
    if prod.config is not None:
        fixed["placement.tp"] = prod.config.placement.tp
    fixed |= {k: PRODUCTION[k] for k in ("placement.cp", "schedule.recompute",
                                         "schedule.optimizer", "schedule.allreduce",
                                         "schedule.overlap")}
    if dec.config().cluster.dcs > 1:
        fixed["placement.cross"] = "pp"
    tuned = ("placement.pp", "placement.microbatch", "schedule.pipeline",
             "schedule.virtual_stages", "schedule.warmup_extra")
    axes = _decision_axes(dec, tuned)
    prod_flat = prod.config.flat() if prod.config is not None else {}
    others = {a.key: prod_flat.get(a.key, a.values[0]) for a in dec.axes
              if a.key not in axes and a.key not in fixed}
    pipe_space = with_axes(dec, fixed=others | fixed, axes=axes)
    b = _best(pipe_space, cal, "cross-DC pipeline optimizer")
    found = [x for x in (a, b) if x.breakdown is not None and x.breakdown.feasible]
    if not found:
        return Baseline("sota", None, None, "neither heuristic found a feasible point")
    best = min(found, key=lambda x: x.breakdown.time_to_train_s)  # type: ignore[union-attr]
    return Baseline("sota", best.config, best.breakdown, best.name)


def ablation(dec: Space, cal: Calibration, prod: Baseline, which: str) -> Baseline:
    """Search one group of decision axes from the production default (``ABLATIONS``)."""
    if which == "joint":
        return _best(dec, cal, "joint")
    if prod.config is None:
        return Baseline(which, None, None, "no production default to start from")
    flat = prod.config.flat()
    if which == "placement":
        keys: tuple[str, ...] = PLACEMENT_KEYS
    elif which == "network":
        keys = NETWORK_KEYS
    else:
        keys = tuple(a.key for a in dec.axes if a.key.startswith("schedule.")
                     and a.key not in NETWORK_KEYS)
    axes = _decision_axes(dec, keys)
    fixed = {a.key: flat[a.key] for a in dec.axes if a.key not in axes and a.key in flat}
    space = with_axes(dec, fixed=fixed | _prod_fixed(flat, dec, axes), axes=axes)
    return _best(space, cal, which)


def _prod_fixed(flat: Mapping[str, Any], dec: Space, axes: Mapping[str, Any]) -> dict:
    """Production's values of the decision keys that are not searched."""
    keys = set(PRODUCTION) | {"placement.tp", "placement.pp"}
    return {k: flat[k] for k in keys if k not in axes}
