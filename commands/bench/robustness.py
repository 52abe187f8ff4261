"""`emu bench robustness`: what load this machine holds, as figures.

1. **Hostile datagrams** (transports/testing/hostile.py): for each kind, a barrage sender in
   another host's namespace sends datagrams of that kind at a paced rate to the UDP
   port of a host receiving an MRC transfer, for exactly the transfer's duration (it
   starts on the transfer's start instant). Rates climb a doubling ladder; each
   barrage run follows a clean run of the same transfer (interleaved: clean, hostile,
   clean, hostile, ...), and a rate *holds* when the transfer keeps >= 90 % of the
   clean goodput (the median of the clean runs so far). A rate that does not hold is
   run once more and judged on the mean of both runs (2 shared cores are noisy). The
   ladder stops at the first rate that does not hold, or when the barrage sender
   cannot reach its rate (it is then the limit, and the figure is a lower bound).
   Per step: the rate the sender reached, the datagrams the receiver counted as that
   kind and per second (its core's and driver's counters: they arrived and were
   dropped), and its share of a core.

   The fabric: hosts on 1000 Mbit/s links, the leaf-spine links at 100 Mbit/s, the
   transfer from another rack (bounded by the spine links, 4 paths: ~390 Mbit/s),
   and the barrage from a host in the receiver's rack: it shares the receiver's NIC
   link (600 Mbit/s to spare) but no spine link, so what gives first is CPU (the
   receiver's, and the machine's 2 cores), not the emulated link rate, which is scaled
   down 1000x while datagram rates are not.
2. **Soak** (transports/testing/soak.py): continuous MRC and DBLP streams under a flapping
   and a gray link: messages lost, and every driver's resident memory after warm-up
   (slope in MB per minute and the change it amounts to, %).
3. **Largest fabric**: MultiPlaneClos fabrics of growing size are built (static
   routes) until emu/capacity.py refuses one, a build fails, one takes more than
   ``build_bound_s`` or the ladder ends; per size the namespaces, links, routes, the
   build and teardown seconds, and the memory it took (MemAvailable before and while
   it is up) against emu/capacity.py's estimate.

Everything it creates is torn down on exit and on Ctrl-C (Fabric and ChildGroup
context managers).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from commands.bench.cpu import summary
from emu import capacity
from emu.errors import EmuError, require_root
from emu.fabric import Fabric
from emu.launch import ChildGroup
from topologies import LinkSpec, MultiPlaneClos
from transports.core.wire import UDP_PORT
from transports.testing.harness import Transfer, TransferResult, run_transfers
from transports.testing.hostile import KINDS, counted
from transports.testing.soak import SOAK_SPEC, run_soak

KEEP = 0.9  # a rate holds while the transfer keeps this fraction of its clean goodput
SHORTFALL = 0.8  # a sender reaching less than this of its rate is the limit
READY_TIMEOUT_S = 30.0
PREDICT_SKIP = 1.5  # a size whose extrapolated build exceeds this x the bound is not built
MB = 1 << 20

HOSTILE_SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2,
                              host_link=LinkSpec(1000.0, 64), fabric_link=LinkSpec(100.0, 64))
SENDER, RECEIVER, ATTACKER = "h0", "h3", "h2"  # the attacker shares the receiver's rack
CONN = 1  # run_transfers' connection between the one pair

# (planes, spines, leaves, hosts per leaf), about 2-3x the namespaces each step
FABRIC_LADDER = ((2, 2, 2, 2), (2, 4, 4, 4), (4, 8, 8, 4), (4, 8, 16, 8), (8, 16, 16, 8),
                 (8, 16, 32, 8), (8, 32, 32, 16), (8, 32, 64, 16), (16, 32, 64, 16))


# -- the rate ladder (pure) --------------------------------------------------------------


def ladder(lo: int, hi: int, factor: float = 2.0) -> list[int]:
    """Rates ``lo``, ``lo * factor``, ... up to ``hi`` (included if reached)."""
    if lo <= 0 or factor <= 1 or hi < lo:
        raise ValueError(f"ladder({lo}, {hi}, {factor}): need 0 < lo <= hi and factor > 1")
    out, r = [], float(lo)
    while r <= hi * (1 + 1e-9):
        out.append(int(round(r)))
        r *= factor
    return out


def search_rate(rates: list[int], measure: Callable[[int], dict], keep: float = KEEP,
                shortfall: float = SHORTFALL) -> dict:
    """Climb ``rates`` with ``measure(rate) -> {"fraction": goodput / clean, "achieved":
    datagrams per second the sender reached, ...}``.

    A rate holds when its fraction is >= ``keep``; one that does not is measured once
    more and judged on the mean of both. The climb stops at the first rate that does
    not hold (``limited_by = "goodput"``), after a held rate the sender reached less than
    ``shortfall`` of (``"sender"``: the figure is a lower bound), or at the top
    (``"ladder"``). ``held``: the highest target rate that held (None: not even the
    first), ``held_achieved``: what the sender reached there."""
    steps: list[dict] = []
    held: int | None = None
    held_achieved: float | None = None
    failed: int | None = None
    limited = "ladder"
    for rate in rates:
        runs = [measure(rate)]
        if runs[0]["fraction"] < keep:
            runs.append(measure(rate))
        fraction = statistics.fmean(r["fraction"] for r in runs)
        achieved = statistics.fmean(r["achieved"] for r in runs)
        steps.append({"rate": rate, "fraction": round(fraction, 3),
                      "achieved": round(achieved, 1), "holds": fraction >= keep, "runs": runs})
        if fraction < keep:
            failed, limited = rate, "goodput"
            break
        held, held_achieved = rate, round(achieved, 1)
        if achieved < shortfall * rate:
            limited = "sender"
            break
    return {"held": held, "held_achieved": held_achieved, "failed": failed,
            "limited_by": limited, "steps": steps}


# -- hostile datagrams ------------------------------------------------------------------


def _hostile_counts(r: TransferResult, kind: str | None) -> dict:
    """The receiver's view: its counters (core's, plus the driver's unknown_conn) and,
    for ``kind``, how many it counted as that kind, per second of the transfer (the
    barrage starts on the transfer's start instant; the receiver reads its socket until
    the message is complete, then stops)."""
    d = r.drivers[RECEIVER]
    stats = dict(d["stats"].get(str(CONN), {}))  # JSON: connection ids as strings
    stats["unknown_conn"] = d.get("unknown_conn", 0)
    out = {"receiver_share": round(d["cpu_s"] / d["wall_s"], 3) if d.get("wall_s") else None,
           "completion_s": round(r.completion_s, 4)}
    if kind is not None:
        n = counted(kind, stats)
        out.update(counted=n, counted_per_s=round(n / r.completion_s, 1))
    noise = ("rx_data_bytes", "rx_data_pkts", "tx_ack", "tx_nack")
    out["receiver_counters"] = {k: v for k, v in stats.items() if v and k not in noise}
    return out


def hostile_run(fab: Fabric, kind: str, rate: int, size: int, seed: int = 1) -> dict:
    """One MRC transfer SENDER -> RECEIVER while ATTACKER sends ``kind`` at ``rate`` per
    second to RECEIVER's transport port, from the transfer's start instant to its end."""
    spec = fab.spec
    cfg = {"kind": kind, "rate": rate, "dst": str(spec.address(RECEIVER)), "port": UDP_PORT,
           "src": str(spec.address(ATTACKER)), "conn": CONN,
           "evs": len(spec.paths(RECEIVER, SENDER)), "seed": seed}
    with ChildGroup() as group:
        child = group.spawn(f"hostile {kind} sender on {ATTACKER}",
                            fab.in_netns(ATTACKER, sys.executable, "-m",
                                         "transports.testing.hostile"),
                            config=cfg)
        group.wait_ready(READY_TIMEOUT_S)
        r = run_transfers(fab, "mrc", [Transfer(SENDER, RECEIVER, size)], deadline_s=60,
                          on_start=group.start_at)
        child.close_stdin()
        sent = child.record("result", timeout=10)
        child.wait(10)
    if sent is None:
        raise EmuError(child.why("ended without a result"))
    if not r.ok:
        raise EmuError(f"MRC under {kind} at {rate}/s lost data: {r.messages}")
    counts = _hostile_counts(r, kind)
    return {"goodput_mbit": round(r.goodput_mbit, 2), "achieved": sent["rate"],
            # of what the sender sent during the transfer, the share the receiver counted
            "counted_fraction": round(counts["counted_per_s"] / sent["rate"], 3)
            if sent["rate"] else None,
            "sender_cpu_share": round(sent["cpu_s"] / sent["seconds"], 3)
            if sent["seconds"] else None,
            "offered_mbit": round(sent["bytes"] * 8 / sent["seconds"] / 1e6, 2)
            if sent["seconds"] else None,
            "send_errors": sent["eagain"] + sent["errors"], **counts}


def clean_run(fab: Fabric, size: int) -> dict:
    r = run_transfers(fab, "mrc", [Transfer(SENDER, RECEIVER, size)], deadline_s=60)
    if not r.ok:
        raise EmuError(f"clean MRC transfer lost data: {r.messages}")
    return {"goodput_mbit": round(r.goodput_mbit, 2), **_hostile_counts(r, None)}


def hostile_bench(say: Callable[[str], None], quick: bool) -> dict:
    """Every hostile kind's highest rate that keeps >= KEEP of the clean goodput."""
    size = (16 if quick else 32) << 20
    rates = ladder(4000, 256_000, 4.0) if quick else ladder(4000, 256_000, 2.0)
    out: dict[str, Any] = {"transfer": {"src": SENDER, "dst": RECEIVER, "bytes": size,
                                        "transport": "mrc"},
                           "attacker": ATTACKER, "keep": KEEP, "rates": rates, "kinds": {}}
    clean: list[float] = []
    with Fabric(HOSTILE_SPEC, name="benchrob",
                progress=lambda m: say(f"    fabric: {m}")) as fab:
        for _ in range(2):  # the reference before the first barrage
            clean.append(clean_run(fab, size)["goodput_mbit"])
        for kind in KINDS:
            def measure(rate: int, kind: str = kind) -> dict:
                clean.append(clean_run(fab, size)["goodput_mbit"])
                ref = statistics.median(clean)
                row = hostile_run(fab, kind, rate, size)
                row["fraction"] = round(row["goodput_mbit"] / ref, 3)
                row["clean_mbit"] = ref
                say(f"    {kind} at {rate}/s (reached {row['achieved']:.0f}/s, "
                    f"{row['offered_mbit']} Mbit/s): goodput {row['goodput_mbit']:.0f} Mbit/s "
                    f"= {row['fraction']:.2f} of clean; receiver counted "
                    f"{row['counted']} ({row['counted_per_s']:.0f}/s) as {kind}, "
                    f"{row['receiver_share']:.0%} of a core (the barrage sender "
                    f"{row['sender_cpu_share']:.0%})")
                return row
            res = search_rate(rates, measure)
            top = next((s for s in reversed(res["steps"]) if s["holds"]), None)
            res["absorbed_per_s"] = (round(statistics.fmean(r["counted_per_s"]
                                                             for r in top["runs"]), 1)
                                     if top else None)
            out["kinds"][kind] = res
            say(f"  {kind}: holds {res['held_achieved'] or 0:.0f}/s "
                f"(limited by {res['limited_by']}"
                + (f"; {res['failed']}/s did not hold" if res["failed"] else "") + ")")
    out["clean_goodput_mbit"] = summary(clean)
    out["clean_runs"] = len(clean)
    return out


# -- the largest fabric -----------------------------------------------------------------


def mem_available() -> int:
    """MemAvailable, bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def settled_mem_available(timeout_s: float = 30.0, tolerance: int = 8 * MB,
                          every_s: float = 0.5) -> int:
    """MemAvailable once it stops moving (a torn-down fabric's namespaces are freed by
    the kernel after the teardown returns): two readings ``every_s`` apart within
    ``tolerance``, or the last reading after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    last = mem_available()
    while time.monotonic() < end:
        time.sleep(every_s)
        now = mem_available()
        if abs(now - last) <= tolerance:
            return now
        last = now
    return last


def predict_build_s(done: list[dict], links: int) -> float | None:
    """The build time of a fabric of ``links`` links, extrapolated from the last two
    builds by a power law in links (None with fewer than two)."""
    built = [r for r in done if "total_s" in r and r["total_s"] > 0]
    if len(built) < 2:
        return None
    a, b = built[-2], built[-1]
    if b["links"] <= a["links"]:
        return None
    k = max(1.0, math.log(b["total_s"] / a["total_s"]) / math.log(b["links"] / a["links"]))
    return b["total_s"] * (links / b["links"]) ** k


def fabric_sizes(ladder_: tuple[tuple[int, int, int, int], ...] = FABRIC_LADDER
                 ) -> list[MultiPlaneClos]:
    return [MultiPlaneClos(planes=p, spines=s, leaves=n, hosts_per_leaf=h,
                           leaf_ports=max(64, s + h), spine_ports=max(64, n))
            for p, s, n, h in ladder_]


def largest_fabric(say: Callable[[str], None], build_bound_s: float,
                   sizes: list[MultiPlaneClos] | None = None) -> dict:
    """Build growing fabrics until capacity refuses, a build fails or exceeds
    ``build_bound_s``; the largest built within the bound, and every size's figures."""
    rows: list[dict] = []
    stop = "ladder ended"
    for spec in sizes or fabric_sizes():
        hosts, switches, links = capacity.counts(spec)
        row: dict[str, Any] = {
            "shape": f"{spec.planes}x{spec.spines}x{spec.leaves}x{spec.hosts_per_leaf}",
            "namespaces": hosts + switches, "hosts": hosts, "links": links}
        try:
            est = capacity.check(spec, bgp=False)
        except EmuError as e:
            row["refused"] = str(e)
            rows.append(row)
            stop = "capacity refused"
            say(f"  {row['shape']}: {row['namespaces']} namespaces refused by emu/capacity.py")
            break
        row["estimate_mb"] = round(est.memory_bytes / MB)
        guess = predict_build_s(rows, links)
        if guess is not None and guess > PREDICT_SKIP * build_bound_s:
            row["predicted_s"] = round(guess)
            rows.append(row)
            stop = (f"the next build ({row['shape']}) would take about {guess:.0f} s "
                    f"(extrapolated from the last two), more than {PREDICT_SKIP:g} x the bound")
            say(f"  {row['shape']}: not built, {stop}")
            break
        say(f"  {row['shape']}: {row['namespaces']} namespaces, {links} links ...")
        before = settled_mem_available()
        t0 = time.monotonic()
        fab = Fabric(spec, name="benchbig")
        try:
            row["plan_s"] = round(time.monotonic() - t0, 2)
            t1 = time.monotonic()
            fab.start()
            row["build_s"] = round(time.monotonic() - t1, 2)
            row["total_s"] = round(time.monotonic() - t0, 2)
            row["routes"] = sum(len(p.routes) for p in fab.plans.values())
            up = settled_mem_available(timeout_s=5.0)
            row["memory_mb"] = round((before - up) / MB)
            row["mb_per_namespace"] = round((before - up) / MB / row["namespaces"], 2)
        except (EmuError, OSError) as e:
            row["failed"] = f"{type(e).__name__}: {e}"[:500]
            stop = "build failed"
        finally:
            row["teardown_s"] = round(fab.stop(), 2)
        row["memory_after_teardown_mb"] = round((before - settled_mem_available()) / MB)
        rows.append(row)
        if "failed" in row:
            say(f"    failed: {row['failed']}")
            break
        say(f"    built in {row['build_s']:.1f} s (+{row['plan_s']:.1f} s planning, "
            f"{row['routes']} routes), {row['memory_mb']} MB "
            f"({row['mb_per_namespace']} per namespace; estimate {row['estimate_mb']} MB), "
            f"torn down in {row['teardown_s']:.1f} s")
        if row["total_s"] > build_bound_s:
            stop = f"build took more than {build_bound_s:g} s"
            break
    ok = [r for r in rows if "build_s" in r and r["total_s"] <= build_bound_s]
    return {"build_bound_s": build_bound_s, "stopped": stop, "sizes": rows,
            "largest": ok[-1] if ok else None}


# -- the whole bench --------------------------------------------------------------------


def bench_robustness(say: Callable[[str], None] = print, quick: bool = False) -> dict:
    """Run the robustness benchmark: per hostile kind the datagrams per second a receiver
    absorbs while an MRC transfer keeps >= 90 % of its clean goodput, the soak's memory
    slope and losses (MRC and DBLP streams under a flapping and a gray link), and the
    largest fabric this machine builds (namespaces, build seconds, memory). ``quick``:
    a coarser rate ladder and smaller transfers, a 60 s soak instead of 180 s, fabrics
    up to a 30 s build instead of 120 s. Returns the results (JSON-ready)."""
    require_root("emu bench robustness")
    out: dict[str, Any] = {"quick": quick}
    t0 = time.monotonic()
    say("hostile datagrams at the receiver of an MRC transfer")
    out["hostile"] = hostile_bench(say, quick)
    soak_s = 60.0 if quick else 180.0
    say(f"soak ({soak_s:g} s)")
    with Fabric(SOAK_SPEC, name="benchsoak",
                progress=lambda m: say(f"    fabric: {m}")) as fab:
        soak = run_soak(fab, soak_s, say=say)
    soak.pop("rss")  # the fit is the figure; the raw samples stay out of the JSON
    out["soak"] = soak
    bound = 30.0 if quick else 120.0
    say(f"largest fabric (build bound {bound:g} s)")
    out["largest_fabric"] = largest_fabric(say, bound)
    out["summary"] = _summary(out)
    out["wall_s"] = round(time.monotonic() - t0, 1)
    for line in _summary_lines(out["summary"]):
        say(line)
    return out


def _summary(out: dict) -> dict:
    kinds = out["hostile"]["kinds"]
    soak = out["soak"]
    big = out["largest_fabric"]["largest"]
    slopes = [m["slope_mb_per_min"] for m in soak["memory"].values()
              if m["slope_mb_per_min"] is not None]
    changes = [m["change_pct"] for m in soak["memory"].values() if m["change_pct"] is not None]
    return {
        "hostile_held_per_s": {k: {"rate": v["held_achieved"], "limited_by": v["limited_by"],
                                   "absorbed_per_s": v["absorbed_per_s"]}
                               for k, v in kinds.items()},
        "soak_lost": soak["lost"], "soak_ok": soak["ok"],
        "soak_worst_slope_mb_per_min": max(slopes, key=abs) if slopes else None,
        "soak_worst_change_pct": max(changes, key=abs) if changes else None,
        "largest_fabric": ({k: big[k] for k in ("shape", "namespaces", "links", "total_s",
                                                "memory_mb")} if big else None)}


def _summary_lines(s: dict) -> list[str]:
    lines = ["summary:"]
    for k, v in s["hostile_held_per_s"].items():
        lines.append(f"  {k}: {v['rate'] or 0:.0f}/s held ({v['limited_by']}), receiver "
                     f"absorbed {v['absorbed_per_s'] or 0:.0f}/s")
    lines.append(f"  soak: lost {s['soak_lost']}, worst RSS slope "
                 f"{s['soak_worst_slope_mb_per_min']} MB/min ({s['soak_worst_change_pct']} %)")
    b = s["largest_fabric"]
    lines.append(f"  largest fabric: {b['shape']} ({b['namespaces']} namespaces, "
                 f"{b['links']} links) in {b['total_s']} s, {b['memory_mb']} MB"
                 if b else "  largest fabric: none built within the bound")
    return lines
