"""`emu bench dblp`: single-round latency of a gradient exchange through microbursts.

A round is one gradient-sized message from a host to a host on another rack;
rounds run back to back (the next is posted when the previous send completes).
Microbursts hit the receiver's leaf port on every plane (line-rate bursts from
two hosts of its rack), so a share of every round's packets meets a full FIFO.
Compared in one run: reliable MRC and RC (every byte), MLT-style fixed tolerance,
OptiReduce-style deadline-bounded rounds, and DBLP with its phase-aware
tolerance (fed a synthetic training schedule). Reported per variant: P50, P99
and max round latency, the delivered fraction per round, and whether every
round respected its bound.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from emu.errors import require_root
from emu.fabric import Fabric
from emu.microburst import Microburst, MicroburstSpec
from topologies import LinkSpec, MultiPlaneClos
from transports.harness import Transfer, run_transfers
from transports.phase import PhaseAware, PhaseAwareConfig, Signals

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=3,
                      host_link=LinkSpec(100.0, 16), fabric_link=LinkSpec(100.0, 16))
SRC, DST = "h0", "h3"
BURST_SOURCES = ("h4", "h5")  # the receiver's rack-mates: their bursts meet it at its leaf
ROUND_BYTES = 1 << 20
BURST_ON_MS, BURST_EVERY_MS = 20.0, 100.0


def _rounds(n: int, bounds: list[dict | None]) -> list[Transfer]:
    return [Transfer(SRC, DST, ROUND_BYTES, after=i - 1 if i else None, bound=bounds[i])
            for i in range(n)]


def _stats(res, bounds: list[dict | None]) -> dict:
    lat = sorted(m["latency"] * 1000 for m in res.messages)
    frac = [m["delivered"] for m in res.messages]
    respected = all(
        m["delivered"] >= 1 - (b or {}).get("tolerance", 0.0) - 1e-9 or m["deadline"]
        for m, b in zip(res.messages, bounds, strict=True))
    p99 = lat[min(len(lat) - 1, math.ceil(0.99 * len(lat)) - 1)]
    return {"ok": res.ok, "rounds": len(lat), "p50_ms": round(statistics.median(lat), 2),
            "p99_ms": round(p99, 2), "max_ms": round(lat[-1], 2),
            "delivered_min": round(min(frac), 4), "delivered_mean": round(statistics.mean(frac), 4),
            "deadline_rounds": sum(m["deadline"] for m in res.messages),
            "bound_respected": respected}


def _bursts(fab: Fabric) -> list[Microburst]:
    return [Microburst(fab, MicroburstSpec(f"p{p}l1:{DST}", BURST_SOURCES, BURST_ON_MS,
                                           BURST_EVERY_MS)) for p in range(SPEC.planes)]


def synthetic_schedule(n: int, rounds_per_epoch: int = 8) -> list[dict]:
    """DBLP's tolerance per round from a training-like schedule: cosine LR decay, a
    gradient norm that settles and jumps once mid-run (a critical regime)."""
    policy = PhaseAware(PhaseAwareConfig(base=0.05, cap=0.2, critical_epochs=1,
                                         window=rounds_per_epoch))
    out = []
    jump = (n // 2) // rounds_per_epoch * rounds_per_epoch  # where Accordion's check looks
    for i in range(n):
        lr = 0.001 + 0.5 * (0.1 - 0.001) * (1 + math.cos(math.pi * i / n))
        norm = 1.0 / (1 + 0.05 * i) * (3.0 if jump <= i < jump + 2 else 1.0)
        rec = policy.update(Signals(step=i, epoch=i // rounds_per_epoch, lr=lr, grad_norm=norm))
        out.append({**rec, "deadline_s": None, "fill": "zeros"})
    return out


def bench_dblp(say: Callable[[str], None] = print, quick: bool = False) -> dict:
    """Run every variant through the same bursts; returns the results."""
    require_root("emu bench dblp")
    n = 20 if quick else 80
    out: dict = {"round_bytes": ROUND_BYTES, "rounds": n,
                 "bursts": {"on_ms": BURST_ON_MS, "every_ms": BURST_EVERY_MS,
                            "sources": list(BURST_SOURCES)}, "variants": {}}
    with Fabric(SPEC, name="benchdblp", progress=lambda m: say(f"    fabric: {m}")) as fab:
        # OptiReduce's deadline: each rank proposes elapsed / completion ratio of a
        # calibration round; the agreed deadline is the median proposal.
        calib = run_transfers(fab, "dblp", _rounds(5, [None] * 5))
        proposals = sorted(m["latency"] / m["delivered"] for m in calib.messages)
        deadline_s = round(statistics.median(proposals) * 1.1, 4)
        out["optireduce_deadline_ms"] = round(deadline_s * 1000, 2)
        dblp_bounds = synthetic_schedule(n)
        variants = {
            "mrc_reliable": ("mrc", [None] * n),
            "rc_reliable": ("rc", [None] * n),
            "mlt_fixed_0.05": ("dblp", [{"tolerance": 0.05, "deadline_s": None,
                                         "fill": "zeros"}] * n),
            # Timeout-bounded: every chunk is wanted, but the round ends at the deadline.
            "optireduce": ("dblp", [{"tolerance": 0.0, "deadline_s": deadline_s,
                                     "fill": "zeros"}] * n),
            "dblp_phase_aware": ("dblp", [{k: b[k] for k in ("tolerance", "deadline_s", "fill")}
                                          for b in dblp_bounds]),
        }
        out["dblp_schedule"] = dblp_bounds
        for name, (transport, bounds) in variants.items():
            bursts = _bursts(fab)
            for b in bursts:
                b.start()
            try:
                res = run_transfers(fab, transport, _rounds(n, bounds), deadline_s=300)
            finally:
                for b in bursts:
                    b.stop()
            row = _stats(res, bounds)
            row["burst_drops"] = sum(b.report()["target"]["drops"] or 0 for b in bursts)
            out["variants"][name] = row
            say(f"  {name}: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, max "
                f"{row['max_ms']} ms, delivered >= {row['delivered_min']}, "
                f"bound respected: {row['bound_respected']}, burst drops {row['burst_drops']}")
    rel = out["variants"]["mrc_reliable"]["p99_ms"]
    out["p99_speedup_vs_reliable_mrc"] = {
        k: round(rel / v["p99_ms"], 2) for k, v in out["variants"].items()}
    return out
