"""Claim 3's measurements (see claim_dblp.py): the map in virtual time, the cross-DC
points on fabrics of their own, the bench's one-DC fabric (healthy round, host-link
loss, microbursts shorter and longer than a round), then the training on a fabric of
slower links. Returns one JSON-able record (what ``dblp_report.result`` needs)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from commands.reproduce.claim import ClaimContext

# `emu bench dblp`'s fabric (commands/bench/dblp_rounds.py SPEC), as an experiment's
# [fabric]; the training runs it at ``training_rate_mbit``
FABRIC = {"planes": 2, "spines": 4, "leaves": 4, "hosts_per_leaf": 3, "rate_mbit": 100.0,
          "queue_packets": 16}


def phase_of(p: Mapping[str, Any]) -> dict[str, Any]:
    """DBLP's phase-aware settings in training (its ``[transport.dblp]`` keys)."""
    return {"base": p["phase_base"], "cap": p["phase_cap"],
            "critical_epochs": p["critical_epochs"], "epoch_steps": p["epoch_steps"],
            "window": 10, "eta": 0.5}


def measure(p: Mapping[str, Any], ctx: ClaimContext) -> dict[str, Any]:
    """Every measurement of the claim; the record."""
    from commands.bench.dblp import late_phase
    from commands.bench.dblp_rounds import (
        DST,
        ROUND_BYTES,
        SETTINGS,
        SRC,
        TCP_CONFIG,
        healthy_round_ms,
        plan_bursts,
        tcp_sport,
        wire_sized_tcp,
    )
    from commands.reproduce import dblp_map as dm
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
    tfabric = {**FABRIC, "rate_mbit": float(p["training_rate_mbit"])}
    workload = {"model": p["model"], "workers": 4, "steps": p["training_steps"],
                "batch_size": 16, "lr": 0.003, "lr_schedule": "cosine",
                "target_loss": p["target_loss"], "eval_every": p["eval_every"],
                "compute": "modelled"}
    runs = []
    tphase = phase_of(p)
    if tsys:
        targets, sources = SETTINGS["all_paths"]
        every = float(p["training_burst_every_ms"])
        jitter = round(0.9 * (every - p["training_burst_on_ms"]), 1)
        events = dt.burst_events(targets, sources, float(p["training_burst_on_ms"]), every,
                                 jitter, p["training_steps"])
        # refused here by the experiments' validation, before any fabric, if a
        # tolerance could not let a chunk go or a burst could not drop
        runs = dt.plan(tfabric, tsys, workload, events, tphase,
                       float(p["training_mlt_tolerance"]), p["training_reps"])
        chunks = block_chunks(model_values(p["model"]), workload["workers"])
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "reps": reps, "rounds": p["rounds"], "round_bytes": ROUND_BYTES,
        "round_chunks": -(-ROUND_BYTES // CHUNK_BYTES), "mlt_tolerance": p["mlt_tolerance"],
        "dblp_tolerance_range": [min(b["tolerance"] for b in phase),
                                 max(b["tolerance"] for b in phase)],
        "schedule_rounds_at_tolerance_0": round(zero, 3), "training": None}
    mplan = dm.MapPlan(tuple(p["map_losses"]), tuple(p["map_rtts_ms"]),
                       tuple(p["map_ratios"]), p["map_rounds"], p["map_seeds"], ROUND_BYTES,
                       float(p["mlt_tolerance"]), workers=max(1, min(2, os.cpu_count() or 1)))
    out["map"] = dm.run_map(mplan, say)
    out["map_s"] = round(time.monotonic() - t0, 1)
    say(f"  cross-DC: delays {p['delays_ms']} ms x losses {p['losses']}")
    out["cross_dc"] = dr.cross_dc(p["delays_ms"], p["losses"], systems, reps, plan,
                                  float(p["dci_rate_mbit"]), say)
    out["cross_dc_s"] = round(time.monotonic() - t0, 1)
    spec = parse_fabric(FABRIC, "claim dblp").spec()
    ts = time_scale(spec)
    out["time_scale"] = {**ts.as_record(), "describe": ts.describe()}
    with Fabric(spec, name="reprodblp", progress=lambda m: say(f"  fabric: {m}")) as fab:
        round_ms = healthy_round_ms(fab)
        out["healthy_round_ms"] = round_ms
        say(f"  healthy round (reliable MRC, median): {round_ms} ms")
        plane = int(SETTINGS["one_path"][0][0][1])
        tcp_config = {**TCP_CONFIG, "sport": tcp_sport(fab, plane)}
        wire_sized_tcp(fab)
        out["host_loss"] = dr.host_loss(fab, SRC, DST, float(p["host_loss"]), systems, reps,
                                        plan, say)
        out["bursts"], out["burst_plans"] = [], []
        for placement in p["burst_placements"]:
            for ratio in p["burst_ratios"]:
                bp = plan_bursts(placement, float(ratio), round_ms)
                out["burst_plans"].append(bp.as_record())
                out["bursts"] += dr.bursts(fab, bp, systems, reps, plan, tcp_config, say)
    out["rounds_s"] = round(time.monotonic() - t0, 1)
    if runs:
        tspec = runs[0][1].fabric_spec()
        tts = time_scale(tspec)
        with Fabric(tspec, name="reprodblptr", progress=lambda m: say(f"  fabric: {m}")) as fab:
            say(f"  training: {', '.join(lb for lb, _ in runs)} (blocks of {chunks} chunks, "
                f"links {p['training_rate_mbit']:g} Mbit/s)")
            per_rep, agg = dt.run_training(fab, runs, ctx.out_dir / "training", say)
        out["training"] = {"runs": per_rep, "aggregate": agg, "block_chunks": chunks,
                           "model": p["model"], "target_loss": p["target_loss"],
                           "mlt_tolerance": p["training_mlt_tolerance"], "phase": tphase,
                           "rate_mbit": p["training_rate_mbit"],
                           "bursts": {"on_ms": p["training_burst_on_ms"],
                                      "every_ms": p["training_burst_every_ms"]},
                           "time_scale": tts.describe()}
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out
