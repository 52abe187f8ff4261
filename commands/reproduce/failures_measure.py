"""Claim 1's measurements on one fabric: the transfers through every failure kind, then
the training comparison (see claim_failures.py). Returns one JSON-able record, which is
all ``claim_failures.result`` needs (so the report can be rebuilt from recorded runs)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from commands.reproduce.claim import ClaimContext

FABRIC = {"planes": 2, "spines": 4, "leaves": 4, "hosts_per_leaf": 4, "rate_mbit": 100.0,
          "queue_packets": 100, "control_plane": "bgp"}


def measure(p: Mapping[str, Any], ctx: ClaimContext) -> dict[str, Any]:
    """Build the fabric, measure, tear down; the record (``transfers``: one dict per run;
    ``training``: per-repetition summaries and the aggregate, or None)."""
    from commands.reproduce.failures_project import FullScale
    from commands.reproduce.failures_training import plan, run_training
    from commands.reproduce.failures_transfers import (
        TransferPlan,
        endpoints,
        probe_rtt,
        run_transfers_plan,
    )
    from emu.errors import require_root
    from emu.fabric import Fabric
    from topologies import MultiPlaneClos
    from topologies.timescale import time_scale
    from workloads.experiment import parse_fabric

    require_root("the failures claim")
    say = ctx.say
    systems = list(p["systems"])
    runs = plan(FABRIC, systems, list(p["training_kinds"]), p["training_steps"],
                p["fail_step"], p["restore_step"], p["gray_loss"], p["training_reps"])
    spec = runs[0][1].fabric_spec() if runs else parse_fabric(FABRIC, "claim failures").spec()
    assert isinstance(spec, MultiPlaneClos)  # the claim's fabric is one DC
    tp = TransferPlan(tuple(p["kinds"]), tuple(systems), p["transfer_mib"] << 20,
                      float(p["outage_s"]), float(p["fire_at"]), float(p["gray_loss"]),
                      float(p["flap_period_s"]), float(p["flap_duty"]))
    fs = FullScale.explorer_defaults()
    ts = time_scale(spec)
    src, dst, _ = endpoints(spec)
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "reps": ctx.repetitions, "src": src, "dst": dst,
        "fabric": (f"{spec.planes} planes x {spec.spines} spines x {spec.leaves} racks x "
                   f"{spec.hosts_per_leaf} hosts, {spec.host_link.rate_mbit:g} Mbit/s links, "
                   f"{spec.host_link.queue_packets}-packet FIFOs"),
        "time_scale": {**ts.as_record(), "describe": ts.describe()},
        "full_scale": {"rtt_s": fs.rtt_s, "convergence_s": fs.convergence_s,
                       "rto_s": fs.rto_s, "interruption_s": fs.interruption_s},
        "full_scale_text": (f"RTT {fs.rtt_s * 1e6:g} us, BFD+BGP+FIB convergence "
                            f"{fs.convergence_s:g} s, RTO RC {fs.rto_s['rc']:g} s / TCP "
                            f"{fs.rto_s['tcp']:g} s, RC interruption {fs.interruption_s:g} s"),
        "training": None}
    with Fabric(spec, name="reprofail", control_plane="bgp",
                progress=lambda m: say(f"  fabric: {m}")) as fab:
        out["rtt_s"] = probe_rtt(fab)
        say(f"  RTT of a full data packet {src} -> {dst}: {out['rtt_s'] * 1000:.3f} ms")
        say(f"  transfers: {', '.join(tp.kinds)} x {', '.join(systems)}, "
            f"{ctx.repetitions} repetitions")
        out["transfers"] = [r.record() for r in
                            run_transfers_plan(fab, tp, ctx.repetitions, say)]
        out["transfers_s"] = round(time.monotonic() - t0, 1)
        if runs:
            say(f"  training: {', '.join(lb for lb, _ in runs)}")
            per_rep, agg = run_training(fab, runs, ctx.out_dir / "training", None, say)
            out["training"] = {"runs": per_rep, "aggregate": agg,
                               "kinds": list(p["training_kinds"])}
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out

