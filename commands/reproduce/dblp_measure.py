"""Claim 3's measurements (see claim_dblp.py): the cross-DC sweep on fabrics of its own,
then, on the bench's one-DC fabric, the host-link loss and microburst rounds and the
training comparison. Returns one JSON-able record (what ``claim_dblp.result`` needs)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from commands.reproduce.claim import ClaimContext

# `emu bench dblp`'s fabric (commands/bench/dblp.py SPEC), as an experiment's [fabric]
FABRIC = {"planes": 2, "spines": 4, "leaves": 4, "hosts_per_leaf": 3, "rate_mbit": 100.0,
          "queue_packets": 16}
# the training bench's phase-aware settings for the LM (commands/bench/training.py)
PHASE = {"base": 0.1, "cap": 0.3, "critical_epochs": 0, "window": 10, "eta": 0.5}


def measure(p: Mapping[str, Any], ctx: ClaimContext) -> dict[str, Any]:
    """Every measurement of the claim; the record."""
    from commands.bench.dblp import (
        BURST_EVERY_MS,
        BURST_ON_MS,
        DST,
        ROUND_BYTES,
        SETTINGS,
        SRC,
        TCP_CONFIG,
        late_phase,
        tcp_sport,
        wire_sized_tcp,
    )
    from commands.reproduce import dblp_rounds as dr
    from commands.reproduce import dblp_training as dt
    from emu.errors import require_root
    from emu.fabric import Fabric
    from topologies.timescale import time_scale
    from workloads.experiment import parse_fabric
    from workloads.experiment.blocks import model_values
    from workloads.experiment.dblp import CHUNK_BYTES, block_chunks

    require_root("the dblp claim")
    say, reps = ctx.say, ctx.repetitions
    systems = list(p["systems"])
    plan = dr.RoundPlan(p["rounds"], float(p["mlt_tolerance"]))
    phase, zero = late_phase(p["rounds"])
    tsys = list(p["training_systems"])
    workload = {"model": p["model"], "workers": 4, "steps": p["training_steps"],
                "batch_size": 16, "lr": 0.003, "lr_schedule": "cosine",
                "target_loss": p["target_loss"], "eval_every": p["eval_every"],
                "compute": "modelled"}
    runs = []
    if tsys:
        events = dt.burst_events(SETTINGS["all_paths"][0], SETTINGS["all_paths"][1],
                                 BURST_ON_MS, BURST_EVERY_MS, p["training_steps"])
        # refused here by the experiments' validation, before any fabric, if a
        # tolerance could not let a chunk go
        runs = dt.plan(FABRIC, tsys, workload, events, PHASE, float(p["fixed_tolerance"]),
                       p["training_reps"])
        chunks = block_chunks(model_values(p["model"]), workload["workers"])
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "reps": reps, "rounds": p["rounds"], "round_bytes": ROUND_BYTES,
        "round_chunks": -(-ROUND_BYTES // CHUNK_BYTES),
        "dblp_tolerance_range": [min(b["tolerance"] for b in phase),
                                 max(b["tolerance"] for b in phase)],
        "schedule_rounds_at_tolerance_0": round(zero, 3), "training": None,
        "burst": {"on_ms": BURST_ON_MS, "every_ms": BURST_EVERY_MS,
                  "settings": {k: {"targets": list(t), "sources": list(s)}
                               for k, (t, s) in SETTINGS.items()}}}
    say(f"  cross-DC sweep: delays {p['delays_ms']} ms x losses {p['losses']}")
    out["cross_dc"] = dr.cross_dc(p["delays_ms"], p["losses"], systems, reps, plan,
                                  float(p["dci_rate_mbit"]), say)
    out["cross_dc_s"] = round(time.monotonic() - t0, 1)
    spec = runs[0][1].fabric_spec() if runs else parse_fabric(FABRIC, "claim dblp").spec()
    ts = time_scale(spec)
    out["time_scale"] = {**ts.as_record(), "describe": ts.describe()}
    with Fabric(spec, name="reprodblp", progress=lambda m: say(f"  fabric: {m}")) as fab:
        plane = int(SETTINGS["one_path"][0][0][1])
        tcp_config = {**TCP_CONFIG, "sport": tcp_sport(fab, plane)}
        wire_sized_tcp(fab)
        out["host_loss"] = dr.host_loss(fab, SRC, DST, float(p["host_loss"]), systems, reps,
                                        plan, say)
        out["bursts"] = []
        for setting in p["burst_settings"]:
            out["bursts"] += dr.bursts(fab, setting, systems, reps, plan, tcp_config, say)
        out["rounds_s"] = round(time.monotonic() - t0, 1)
        if runs:
            say(f"  training: {', '.join(lb for lb, _ in runs)} (blocks of {chunks} chunks)")
            per_rep, agg = dt.run_training(fab, runs, ctx.out_dir / "training", say)
            out["training"] = {"runs": per_rep, "aggregate": agg, "block_chunks": chunks,
                               "model": p["model"], "target_loss": p["target_loss"],
                               "fixed_tolerance": p["fixed_tolerance"], "phase": PHASE}
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out

