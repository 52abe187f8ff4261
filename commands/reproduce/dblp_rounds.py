"""Claim 3's gradient rounds: synchronous ~1 MB rounds (131 chunks of 8000 B, the
rounds of `emu bench dblp`) between two hosts, per system, through one impairment.

Systems: the MLT-style fixed tolerance (the DBLP paper's baseline, as its authors'
prototype runs it: a bounded-loss transport at one tolerance, here DBLP's base
tolerance), kernel TCP (Linux as it is: 200 ms RTO floor), reliable MRC (a
tail-optimised multipath transport), and DBLP with its phase-aware tolerance over the
late phase of a training-like schedule (commands/bench/dblp.py's ``late_phase``).
Settings:

* ``bursts``: the bench's microbursts (commands/bench/dblp_rounds.py), on one path
  (a spine downlink) and on all paths (the receiver's port on both planes), shorter
  and longer than a round (lengths in healthy rounds), run by the bench's own
  functions (for TCP ``tcp_burst_rounds``, which puts the one_path burst on the spine
  TCP's one connection drew); every burst's drops at its target are reported;
* ``host_loss``: random loss on the receiver's host links (the ``gray_link`` kind on
  both planes), so every path of the pair loses alike;
* ``cross_dc``: two DCs joined by lossy long-haul links (the userspace delay line's own
  random loss, each direction), one fabric per loss rate, the one-way delay set at run
  time through the ``delay_link`` failure kind, for every delay: the points of the map
  (commands/reproduce/dblp_map.py) at long RTTs.

Every point runs the systems interleaved (rep 0 of each, rep 1 of each, ...).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from commands.bench.dblp import late_phase
from commands.bench.dblp_rounds import BurstPlan, p99, round_transfers
from emu.fabric import Fabric
from transports.testing.harness import TransferResult, run_transfers

SYSTEMS = ("mlt", "tcp", "mrc", "dblp")


@dataclass(frozen=True)
class RoundPlan:
    """How many rounds a run has, the MLT tolerance and DBLP's late-phase bounds."""

    rounds: int
    mlt_tolerance: float

    def bounds(self, system: str) -> tuple[str, list[dict | None]]:
        """(transport, per-round bound) of ``system``."""
        n = self.rounds
        if system == "mrc":
            return "mrc", [None] * n
        if system == "tcp":
            return "tcp", [None] * n
        if system == "mlt":
            return "dblp", [{"tolerance": self.mlt_tolerance, "deadline_s": None}] * n
        if system == "dblp":
            phase, _ = late_phase(n)
            return "dblp", [{"tolerance": b["tolerance"], "deadline_s": b["deadline_s"]}
                            for b in phase]
        raise ValueError(f"system {system!r} is invalid: must be one of {', '.join(SYSTEMS)}")


def stats(res: TransferResult) -> dict[str, Any]:
    """P50 / P99 / max round latency (ms), delivered fraction (mean, min), retransmissions."""
    lat = [m["latency"] * 1000 for m in res.messages]
    frac = [m["delivered"] for m in res.messages]
    retx = sum(st.get("tx_retx", 0) for d in res.drivers.values()
               for st in d.get("stats", {}).values())
    return {"ok": all(m["ok"] for m in res.messages), "rounds": len(lat),
            "p50_ms": round(statistics.median(lat), 3), "p99_ms": round(p99(lat), 3),
            "max_ms": round(max(lat), 3), "delivered_mean": round(statistics.fmean(frac), 4),
            "delivered_min": round(min(frac), 4), "retx": retx}


def rounds(fab: Fabric, src: str, dst: str, system: str, plan: RoundPlan) -> dict[str, Any]:
    """One run of ``plan.rounds`` synchronous rounds of ``system`` from src to dst."""
    transport, bounds = plan.bounds(system)
    res = run_transfers(fab, transport, round_transfers(bounds, src, dst), deadline_s=300)
    row = stats(res)
    if not row["ok"]:
        errs = [e for m in res.messages for e in m.get("errors", [])]
        raise RuntimeError(f"{system} rounds {src} -> {dst} failed: {errs[:2]}")
    return row


def interleaved(systems: Sequence[str], reps: int, one: Callable[[str, int], dict],
                say: Callable[[str], None], where: str) -> list[dict]:
    """``one(system, rep)`` for rep 0 of every system, then rep 1, ...; each row labelled."""
    out = []
    for rep in range(reps):
        for s in systems:
            row = {"setting": where, "system": s, "rep": rep, **one(s, rep)}
            out.append(row)
            say(f"    {where} {s} rep {rep}: p50 {row['p50_ms']:.1f} ms, p99 "
                f"{row['p99_ms']:.1f} ms, delivered {row['delivered_mean']:.3f}"
                + (f", burst drops {row['burst_drops']}" if "burst_drops" in row else ""))
    return out


def cross_dc(delays_ms: Sequence[float], losses: Sequence[float], systems: Sequence[str],
             reps: int, plan: RoundPlan, dci_rate_mbit: float,
             say: Callable[[str], None]) -> list[dict]:
    """The delay x loss sweep over the long haul (module docstring)."""
    from emu.failures import DciDelay
    from topologies import DciSpec, LinkSpec, MultiPlaneClos, ScaleAcross

    out: list[dict] = []
    for loss in losses:
        link = LinkSpec(100.0, 16)
        spec = ScaleAcross(
            dcs=tuple(MultiPlaneClos(planes=2, spines=1, leaves=1, hosts_per_leaf=1,
                                     host_link=link, fabric_link=link, dc=d) for d in range(2)),
            dci=DciSpec(rate_mbit=dci_rate_mbit, queue_packets=64, delay_ms=delays_ms[0],
                        loss=loss))
        dci = [lk.name for lk in spec.links if lk.tier == "dci"]
        with Fabric(spec, name="reprodci", progress=lambda m: say(f"  dci fabric: {m}")) as fab:
            for delay in delays_ms:
                for name in dci:
                    DciDelay(name, delay).apply(fab)
                out += [{**r, "delay_ms": delay, "loss": loss}
                        for r in _sweep_point(fab, systems, reps, plan, say,
                                              f"cross_dc {delay:g} ms {loss:.1%}")]
    return out


def _sweep_point(fab: Fabric, systems: Sequence[str], reps: int, plan: RoundPlan,
                 say: Callable[[str], None], where: str) -> list[dict]:
    src, dst = fab.spec.hosts[0].name, fab.spec.hosts[-1].name
    return interleaved(systems, reps, lambda s, rep: rounds(fab, src, dst, s, plan), say,
                       where)


def host_loss(fab: Fabric, src: str, dst: str, loss: float, systems: Sequence[str],
              reps: int, plan: RoundPlan, say: Callable[[str], None]) -> list[dict]:
    """Random ``loss`` on every host link of ``dst`` (gray links), the rounds through it."""
    from emu.failures import GrayLink

    spec = fab.spec
    grays = [GrayLink(lk.name, loss) for lk in spec.links
             if lk.tier == "host" and dst in (lk.a.node, lk.b.node)]
    for g in grays:
        g.apply(fab)
    try:
        return [{**r, "loss": loss} for r in interleaved(
            systems, reps, lambda s, rep: rounds(fab, src, dst, s, plan), say,
            f"host_loss {loss:.1%}")]
    finally:
        for g in grays:
            g.restore(fab)


def bursts(fab: Fabric, burst: BurstPlan, systems: Sequence[str], reps: int, plan: RoundPlan,
           tcp_config: dict, say: Callable[[str], None]) -> list[dict]:
    """The bench's microbursts of ``burst``, the rounds through them, by the bench's own
    functions; each row has its setting's name, ``ratio`` and ``burst_drops``."""
    from commands.bench.dblp_rounds import setting_rounds

    def one(system: str, rep: int) -> dict:
        transport, bounds = plan.bounds(system)
        row = setting_rounds(fab, burst, transport, bounds, tcp_config)
        keep = ("ok", "rounds", "p50_ms", "p99_ms", "max_ms", "delivered_mean",
                "delivered_min", "burst_drops")
        out = {k: row[k] for k in keep}
        out["retx"] = row.get("cores", {}).get("tx_retx", 0)
        if not out["ok"]:
            raise RuntimeError(f"{system} rounds through {burst.name} bursts failed")
        return out

    return [{**r, "placement": burst.placement, "ratio": burst.ratio, "on_ms": burst.on_ms}
            for r in interleaved(systems, reps, one, say, burst.name)]
