"""`emu bench dblp`: single-round latency of a gradient exchange through microbursts.

Rounds of ~1 MB (131 chunks of 8000 B) from h0 to h3 on the DBLP fabric (2 planes x 4
spines, 100 Mbit/s, 16-packet FIFOs), back to back, through microbursts shorter and
longer than a round on one path and on all paths (commands/bench/dblp_rounds.py: the
rounds, the placements, how bursts are sized from the healthy round).

Compared in each setting, through the same bursts: reliable MRC and RC (every byte;
DEFAULT_CONFIG of transports/testing/harness.py), kernel TCP (every byte; one
connection; Linux as it is), the MLT-style fixed tolerance 0.05 (the DBLP paper's
baseline as its authors' prototype runs it: DBLP's base tolerance, without phase
awareness), OptiReduce-style deadline-bounded rounds, DBLP with its phase-aware
tolerance, and DBLP phase-aware with the old close rule (``close = "first_pass"``: a
round waits for the sender's first pass). DBLP's rounds are the late phase of a
synthetic training schedule (`synthetic_schedule`: cosine LR decay, a gradient-norm
jump mid-run): the phase after the critical period and the critical regime, where its
tolerance is 0.14-0.2; the share of the whole schedule's rounds at tolerance 0 (which
run as reliable MRC) is reported separately. Reported per variant: P50, P99 and max
round latency, the delivered fraction (mean / min), whether every round respected its
bound, the FIFO drops at the burst target, the cores' retransmissions / RTO losses /
parked chunks / DBLP tail-timer losses, TCP's retransmissions and RTOs per round
(TCP_INFO), and the P99 speedups against the MLT baseline, reliable MRC, RC and TCP.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from commands.bench.dblp_rounds import (
    ROUND_BYTES,
    SETTINGS,
    SPEC,
    TCP_CONFIG,
    healthy_round_ms,
    plan_bursts,
    round_transfers,
    setting_rounds,
    tcp_sport,
    wire_sized_tcp,
)
from emu.errors import require_root
from emu.fabric import Fabric
from transports import registry
from transports.testing.harness import run_transfers
from workloads.collectives.phase import PhaseAware, PhaseAwareConfig, Signals

TRAIN_ROUNDS = 200  # the shortest synthetic schedule DBLP's rounds are taken from
MLT_TOLERANCE = 0.05  # the schedule's base tolerance
BURST_RATIOS = (0.5, 2.0)  # burst length / healthy round: shorter and longer than a round
BASELINES = ("mlt_fixed", "mrc_reliable", "rc_reliable", "tcp_reliable")


def synthetic_schedule(n: int, rounds_per_epoch: int = 8) -> list[dict]:
    """DBLP's tolerance per round from a training-like schedule: cosine LR decay, a
    gradient norm that settles and jumps once mid-run (a critical regime)."""
    policy = PhaseAware(PhaseAwareConfig(base=MLT_TOLERANCE, cap=0.2, critical_epochs=1,
                                         window=rounds_per_epoch))
    out = []
    jump = (n // 2) // rounds_per_epoch * rounds_per_epoch  # where Accordion's check looks
    for i in range(n):
        lr = 0.001 + 0.5 * (0.1 - 0.001) * (1 + math.cos(math.pi * i / n))
        norm = 1.0 / (1 + 0.05 * i) * (3.0 if jump <= i < jump + 2 else 1.0)
        rec = policy.update(Signals(step=i, epoch=i // rounds_per_epoch, lr=lr, grad_norm=norm))
        out.append({**rec, "deadline_s": None})
    return out


def schedule_rounds(n: int) -> int:
    """The length of the synthetic schedule whose last ``n`` rounds are its late phase:
    2.5 x n, at least TRAIN_ROUNDS."""
    return max(TRAIN_ROUNDS, math.ceil(2.5 * n))


def late_phase(n: int) -> tuple[list[dict], float]:
    """The last ``n`` rounds of the synthetic schedule (`schedule_rounds`; its late
    phase: tolerance > 0 throughout) and the share of the whole schedule's rounds at
    tolerance 0."""
    sched = synthetic_schedule(schedule_rounds(n))
    zero = sum(r["tolerance"] == 0 for r in sched) / len(sched)
    phase = sched[-n:]
    if any(r["tolerance"] == 0 for r in phase):
        raise ValueError(f"the last {n} rounds of the schedule include tolerance-0 rounds")
    return phase, zero


def first_pass_config() -> dict:
    """DBLP's run settings with the old close rule, as a driver plan's config."""
    t = registry.get("dblp")
    return t.plan_config(t.settings({"close": "first_pass"}))


def _variants(n: int, deadline_s: float) -> dict[str, tuple[str, list, dict | None]]:
    """name -> (transport, per-round bounds, transport config or None: run defaults)."""
    phase, _ = late_phase(n)
    dblp = [{k: b[k] for k in ("tolerance", "deadline_s")} for b in phase]
    return {
        "mrc_reliable": ("mrc", [None] * n, None),
        "rc_reliable": ("rc", [None] * n, None),
        "tcp_reliable": ("tcp", [None] * n, None),
        "mlt_fixed": ("dblp", [{"tolerance": MLT_TOLERANCE, "deadline_s": None}] * n, None),
        # Timeout-bounded: every chunk is wanted, but the round ends at the deadline.
        "optireduce": ("dblp", [{"tolerance": 0.0, "deadline_s": deadline_s}] * n, None),
        "dblp_phase_aware": ("dblp", dblp, None),
        "dblp_first_pass": ("dblp", dblp, first_pass_config()),
    }


def bench_dblp(say: Callable[[str], None] = print, quick: bool = False) -> dict:
    """Run every variant through the same bursts in each setting; returns the results."""
    require_root("emu bench dblp")
    n = 60 if quick else 200
    phase, zero = late_phase(n)
    out: dict = {"round_bytes": ROUND_BYTES, "rounds": n,
                 "topology": "2 planes x 4 spines x 4 leaves x 3 hosts, 100 Mbit/s, "
                             "16-packet FIFOs",
                 "dblp_tolerance_range": [round(min(r["tolerance"] for r in phase), 3),
                                          round(max(r["tolerance"] for r in phase), 3)],
                 "schedule_rounds_at_tolerance_0": round(zero, 3), "mlt_tolerance": MLT_TOLERANCE,
                 "settings": {}}
    with Fabric(SPEC, name="benchdblp", progress=lambda m: say(f"    fabric: {m}")) as fab:
        round_ms = healthy_round_ms(fab)
        out["healthy_round_ms"] = round_ms
        # OptiReduce's deadline: each rank proposes elapsed / completion ratio of a
        # calibration round (burst-free); the agreed deadline is the median proposal.
        calib = run_transfers(fab, "dblp", round_transfers([None] * 5))
        proposals = sorted(m["latency"] / m["delivered"] for m in calib.messages)
        deadline_s = round(statistics.median(proposals) * 1.1, 4)
        out["optireduce_deadline_ms"] = round(deadline_s * 1000, 2)
        # TCP's one connection takes one of the pair's 8 paths: its source port puts it
        # on the one_path burst's plane; tcp_burst_rounds puts the burst on its spine.
        plane = int(SETTINGS["one_path"][0][0][1])
        tcp_config = {**TCP_CONFIG, "sport": tcp_sport(fab, plane)}
        wire_sized_tcp(fab)
        out["tcp"] = {"config": tcp_config, "min_rto_ms": 200, "tso_gso": "off"}
        variants = _variants(n, deadline_s)
        for placement in SETTINGS:
            for ratio in BURST_RATIOS:
                plan = plan_bursts(placement, ratio, round_ms)
                say(f"  setting {plan.name}: bursts of {plan.on_ms} ms every "
                    f"{plan.every_ms} ms at {', '.join(SETTINGS[placement][0])}")
                rows = {name: _one(fab, plan, name, t, b, tcp_config, cfg, say)
                        for name, (t, b, cfg) in variants.items()}
                res: dict = {"bursts": plan.as_record(), "variants": rows}
                for base in BASELINES:
                    ref = rows[base]["p99_ms"]
                    res[f"p99_speedup_vs_{base}"] = {k: round(ref / v["p99_ms"], 2)
                                                     for k, v in rows.items()}
                sp = {b: res[f"p99_speedup_vs_{b}"]["dblp_phase_aware"] for b in BASELINES}
                say("    DBLP P99 speedup: " + ", ".join(f"{v}x vs {b}" for b, v in sp.items()))
                out["settings"][plan.name] = res
    out["dblp_schedule"] = phase
    return out


def _one(fab: Fabric, plan, name: str, transport: str, bounds: list, tcp_config: dict,
         config: dict | None, say: Callable[[str], None]) -> dict:
    row = setting_rounds(fab, plan, transport, bounds, tcp_config, config)
    say(f"    {name}: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, max "
        f"{row['max_ms']} ms, delivered {row['delivered_mean']} / "
        f">= {row['delivered_min']}, bound respected: {row['bound_respected']}, "
        f"burst drops {row['burst_drops']}, cores {row['cores']}")
    if "tcp" in row:
        t = row["tcp"]
        via = (f"burst at {t['burst_target']} from round "
               f"{t['rounds_posted_before_burst']}, {t['share_via_burst_spine']} of "
               "its packets via that spine since; " if "burst_target" in t else "")
        say(f"      tcp: {via}{t['rounds_with_retx']} rounds with retransmissions, "
            f"{t['rounds_with_rto']} with an RTO (max {t['rto_per_round_max']} in "
            f"one); RTO rounds >= {t['rto_rounds_min_ms']} ms, others <= "
            f"{t['no_rto_rounds_max_ms']} ms; TCP_INFO {t['tcp_info']}; "
            f"receiver retransmissions {t['receiver_retrans']}")
    return row
