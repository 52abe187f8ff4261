"""Claim 3's map of where DBLP pays: its P99 round-latency gain over each baseline across
loss rate x RTT x (burst length / round length), in virtual time.

The fabric is too slow for a dense map (a point costs minutes of 2 shared cores), so the
map runs the transport cores on the fake network (workloads/collectives/rounds_sim.py: the bench
pair's 2 planes x 4 spines, 100 Mbit/s links, 16-frame FIFOs), which models queues,
drops and delays but not the Python stack's CPU; a few of its points are measured on the
fabric too (claim_dblp.py's settings), and the report sets them side by side.

Per (loss, RTT): reliable MRC's healthy round time (the median of ``CALIBRATION_ROUNDS``
rounds without bursts) fixes the bursts' length, ``ratio`` x that round, each burst at
the receiver's port on both planes (``BURST_SOURCES`` x the line rate: the bench's
all_paths incast), one every ``BURST_PERIOD`` x (burst + round), its start jittered
over the period (so about a quarter to a half of the rounds meet one). Per cell, every
system runs ``rounds`` rounds per seed: reliable MRC, the MLT-style fixed tolerance (the
paper's baseline) and DBLP's late-phase schedule; the gain over a baseline is the
baseline's P99 over DBLP's, paired by seed, "beyond the spread" when every seed's is
above 1. Jobs run in ``workers`` processes (each run is deterministic given its seed).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from transports.core.bound import LossBound

SYSTEMS = ("mrc", "mlt", "dblp")
BASELINES = ("mlt", "mrc")
CALIBRATION_ROUNDS = 20
BURST_SOURCES = 2  # the bench's all_paths incast: two rack-mates at line rate
BURST_PERIOD = 3.0  # bursts every this many (burst + round)


@dataclass(frozen=True)
class MapPlan:
    """The grid and how much of each cell is measured."""

    losses: tuple[float, ...]
    rtts_ms: tuple[float, ...]
    ratios: tuple[float, ...]  # burst length / round length (0: no bursts)
    rounds: int
    seeds: int
    round_bytes: int
    mlt_tolerance: float
    workers: int = 2

    def cells(self) -> list[tuple[float, float, float]]:
        return [(loss, rtt, r) for loss in self.losses for rtt in self.rtts_ms
                for r in self.ratios]


def bounds_of(system: str, rounds: int, mlt_tolerance: float) -> tuple[str, list]:
    """(transport, per-round LossBound or None) of a map system."""
    if system == "mrc":
        return "mrc", [None] * rounds
    if system == "mlt":
        return "dblp", [LossBound(mlt_tolerance)] * rounds
    if system == "dblp":
        from commands.bench.dblp import late_phase

        phase, _ = late_phase(rounds)
        return "dblp", [LossBound(b["tolerance"]) for b in phase]
    raise ValueError(f"map system {system!r} is invalid: must be one of {', '.join(SYSTEMS)}")


def _job(job: dict) -> dict:
    """One run (a process pool's unit of work): ``job`` names the cell, the seed and the
    system; the row is its P50 / P99 (ms, virtual), delivered fraction and drops."""
    from workloads.collectives.rounds_sim import Bursts, SimFabric, run_rounds

    fab = SimFabric(rtt_ms=job["rtt_ms"], loss=job["loss"])
    bursts = None
    if job.get("on_ms"):
        every = BURST_PERIOD * (job["on_ms"] + job["round_ms"])
        bursts = Bursts(job["on_ms"], every, BURST_SOURCES, jitter_ms=0.95 * (every - job["on_ms"]))
    transport, bounds = bounds_of(job["system"], job["rounds"], job["mlt_tolerance"])
    res = run_rounds(fab, transport, bounds, bursts, job["round_bytes"], seed=job["seed"])
    lat = sorted(x * 1e3 for x in res.latency_s)
    from commands.bench.dblp_rounds import p99

    return {**{k: job[k] for k in ("loss", "rtt_ms", "ratio", "seed", "system")},
            "p50_ms": round(statistics.median(lat), 3), "p99_ms": round(p99(lat), 3),
            "delivered_mean": round(statistics.fmean(res.delivered), 4),
            "port_drops": res.port_drops, "burst_drops": res.burst_drops,
            "retx": res.retx}


def _pool_map(jobs: list[dict], workers: int, say: Callable[[str], None],
              what: str) -> list[dict]:
    if workers <= 1 or len(jobs) <= 1:
        return [_job(j) for j in jobs]
    out: list[dict] = []
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        for i, row in enumerate(ex.map(_job, jobs), 1):
            out.append(row)
            if i % max(1, len(jobs) // 10) == 0:
                say(f"    {what}: {i}/{len(jobs)} runs")
    return out


def run_map(plan: MapPlan, say: Callable[[str], None]) -> dict[str, Any]:
    """Every cell of ``plan``: the runs and each cell's gains (see the module docstring)."""
    base = {"rounds": plan.rounds, "round_bytes": plan.round_bytes,
            "mlt_tolerance": plan.mlt_tolerance}
    calib = [{**base, "loss": loss, "rtt_ms": rtt, "ratio": 0.0, "seed": 0, "system": "mrc",
              "rounds": CALIBRATION_ROUNDS}
             for loss in plan.losses for rtt in plan.rtts_ms]
    say(f"  map: calibrating the healthy round at {len(calib)} (loss, RTT) points")
    healthy = {(r["loss"], r["rtt_ms"]): r["p50_ms"]
               for r in _pool_map(calib, plan.workers, say, "calibration")}
    jobs = []
    for loss, rtt, ratio in plan.cells():
        round_ms = healthy[(loss, rtt)]
        for seed in range(1, plan.seeds + 1):
            for system in SYSTEMS:
                jobs.append({**base, "loss": loss, "rtt_ms": rtt, "ratio": ratio,
                             "seed": seed, "system": system, "round_ms": round_ms,
                             "on_ms": round(ratio * round_ms, 3)})
    say(f"  map: {len(plan.cells())} cells x {plan.seeds} seeds x {len(SYSTEMS)} systems "
        f"= {len(jobs)} runs of {plan.rounds} rounds ({plan.workers} processes)")
    runs = _pool_map(jobs, plan.workers, say, "map")
    return {"plan": asdict(plan), "healthy_round_ms": [
        {"loss": k[0], "rtt_ms": k[1], "round_ms": v} for k, v in healthy.items()],
        "burst_sources": BURST_SOURCES, "burst_period": BURST_PERIOD,
        "runs": runs, "cells": cells(runs)}


def _spread(xs: Sequence[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 3), "lo": round(min(xs), 3),
            "hi": round(max(xs), 3)}


def cells(runs: Sequence[dict]) -> list[dict]:
    """Per cell: each baseline's P99 over DBLP's, paired by seed (median, lo, hi; whether
    beyond the spread above 1 or below it), DBLP's delivered fraction and the drops."""
    keys = sorted({(r["loss"], r["rtt_ms"], r["ratio"]) for r in runs})
    out = []
    for key in keys:
        rows = [r for r in runs if (r["loss"], r["rtt_ms"], r["ratio"]) == key]
        by = {s: {r["seed"]: r for r in rows if r["system"] == s} for s in SYSTEMS}
        seeds = sorted(set.intersection(*(set(v) for v in by.values())))
        cell: dict[str, Any] = {"loss": key[0], "rtt_ms": key[1], "ratio": key[2],
                                "seeds": len(seeds)}
        for b in BASELINES:
            g = [by[b][s]["p99_ms"] / by["dblp"][s]["p99_ms"] for s in seeds]
            cell[f"gain_vs_{b}"] = {**_spread(g), "above": min(g) > 1, "below": max(g) < 1}
        for s in SYSTEMS:
            cell[f"p99_{s}"] = _spread([by[s][x]["p99_ms"] for x in seeds])
        cell["dblp_delivered"] = round(statistics.fmean(
            by["dblp"][x]["delivered_mean"] for x in seeds), 4)
        cell["burst_drops"] = statistics.median(by["mrc"][x]["burst_drops"] for x in seeds)
        cell["port_drops_mrc"] = statistics.median(by["mrc"][x]["port_drops"] for x in seeds)
        out.append(cell)
    return out


def _fmt_set(xs: Sequence[float], fmt: Callable[[float], str]) -> str:
    return ", ".join(fmt(x) for x in sorted(xs))


def region(cells_: Sequence[dict], baseline: str) -> str:
    """The cells where DBLP's gain over ``baseline`` exceeds 1 beyond the spread, in
    words: per burst/round ratio, the losses x RTTs (a full product said as one)."""
    hit = [c for c in cells_ if c[f"gain_vs_{baseline}"]["above"]]
    if not hit:
        return "nowhere"
    losses = sorted({c["loss"] for c in cells_})
    rtts = sorted({c["rtt_ms"] for c in cells_})
    parts = []
    for ratio in sorted({c["ratio"] for c in hit}):
        at = {(c["loss"], c["rtt_ms"]) for c in hit if c["ratio"] == ratio}
        what = "no bursts" if ratio == 0 else f"bursts of {ratio:g} round"
        if at == {(x, y) for x in losses for y in rtts}:
            parts.append(f"{what}: everywhere")
            continue
        by_loss = {}
        for x in losses:
            ys = [y for y in rtts if (x, y) in at]
            if ys:
                by_loss[x] = ys
        groups: dict[tuple[float, ...], list[float]] = {}
        for x, ys in by_loss.items():
            groups.setdefault(tuple(ys), []).append(x)
        said = "; ".join(
            f"loss {_fmt_set(xs, lambda v: f'{v:.1%}')} at RTT "
            f"{_fmt_set(ys, lambda v: f'{v:g}')} ms" for ys, xs in groups.items())
        parts.append(f"{what}: {said}")
    return f"{len(hit)} of {len(cells_)} cells ({' | '.join(parts)})"
