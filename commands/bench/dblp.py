"""`emu bench dblp`: single-round latency of a gradient exchange through microbursts.

A round is one gradient-sized message (256 KiB, 33 chunks of 8000 B) from a host
to a host on another rack; rounds run back to back (the next is posted when the
previous send completes). The fabric has 2 planes x 4 spines, so a host pair has
8 paths. Two microburst settings, each a line-rate incast from two hosts at one
switch egress, 20 ms every 100 ms:

- ``one_path``: spine p0s0's port down to the receiver's leaf (sources on two
  other racks): a bottleneck egress on 1 of the pair's 8 paths;
- ``all_paths``: the receiver's leaf port on both planes (sources: its
  rack-mates): every path of the pair meets a full FIFO.

Compared in each setting, through the same bursts: reliable MRC and RC (every
byte; DEFAULT_CONFIG of transports/testing/harness.py), kernel TCP (every byte; one
connection; Linux as it is: RTO floor 200 ms, RACK-TLP, SACK, CUBIC; TSO/GSO off
on the two hosts' NICs so that a segment is a packet in the FIFOs; ``tcp_burst_rounds``
says how its one path is made to meet the one_path burst), MLT-style fixed
tolerance 0.05, OptiReduce-style deadline-bounded rounds, and DBLP with its phase-aware
tolerance. DBLP's rounds are the late phase of a synthetic training schedule
(cosine LR decay, a gradient-norm jump mid-run): the phase after the critical
period and the critical regime, where its tolerance is 0.12-0.2; the share of
the whole schedule's rounds at tolerance 0 (which run as reliable MRC) is
reported separately. Reported per variant: P50, P99 and max round latency, the
delivered fraction (mean / min), whether every round respected its bound, the
FIFO drops at the burst target, the cores' retransmissions / RTO losses /
parked chunks / DBLP tail-timer losses, TCP's retransmissions and RTOs per round
(TCP_INFO), and the P99 speedups against reliable MRC, RC and TCP. With 80
rounds the P99 is the slowest round (ceil(0.99 * 80) = 80).

RC stripes a round over one QP per plane; the harness posts both parts of round
i + 1 only when both parts of round i completed (a synchronous round), so RC's
round latency is measured like the others' (last part placed - first part posted).
"""

from __future__ import annotations

import math
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

from emu.counters import interface_packets
from emu.errors import require_root
from emu.fabric import Fabric
from emu.microburst import Microburst, MicroburstSpec
from topologies import LinkSpec, MultiPlaneClos
from transports.io.tcp import TCP_PORT
from transports.testing.harness import Transfer, TransferResult, run_transfers
from workloads.collectives.phase import PhaseAware, PhaseAwareConfig, Signals

SPEC = MultiPlaneClos(planes=2, spines=4, leaves=4, hosts_per_leaf=3,
                      host_link=LinkSpec(100.0, 16), fabric_link=LinkSpec(100.0, 16))
SRC, DST = "h0", "h3"  # leaf 0 -> leaf 1
ROUND_BYTES = 256 << 10
BURST_ON_MS, BURST_EVERY_MS = 20.0, 100.0
# setting -> (burst target egresses, burst sources)
SETTINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "one_path": (("p0s0:l1",), ("h6", "h9")),  # spine downlink; sources on racks 2 and 3
    "all_paths": (("p0l1:h3", "p1l1:h3"), ("h4", "h5")),  # leaf ports; h3's rack-mates
}
# The TCP baseline: Linux's TCP as it is (RTO floor 200 ms), with the kernel's default
# congestion control (CUBIC; a host may default its namespaces to another one).
TCP_CONFIG = {"cc": "cubic"}
TCP_SPORTS = range(40000, 40200)  # where a source port onto the burst's plane is sought
TRAIN_ROUNDS = 200  # the synthetic schedule DBLP's rounds are taken from
STAT_KEYS = ("tx_data_pkts", "tx_retx", "tx_retx_spurious", "loss_rto", "rto", "rto_silent",
             "loss_unblamed", "ev_undo", "retx_parked", "retx_unparked_stall",
             "loss_dblp_tail", "late_data", "dup_data")


def tcp_sport(fab: Fabric, plane: int, dport: int = TCP_PORT) -> int:
    """A source port whose TCP connection SRC -> DST leaves on plane ``plane``: the
    host hashes the 5-tuple (fib_multipath_hash_policy 1), asked of its kernel. (The
    leaf's choice of spine is not the port's: a forwarded packet keeps the hash the
    sending socket gave it, its random txhash, so each connection draws its spine.)"""
    src, dst = str(SPEC.address(SRC)), str(SPEC.address(DST))
    for sport in TCP_SPORTS:
        out = subprocess.run(["ip", "netns", "exec", fab.netns(SRC), "ip", "-6", "route",
                              "get", dst, "from", src, "ipproto", "tcp", "sport", str(sport),
                              "dport", str(dport)],
                             capture_output=True, text=True, check=True).stdout.split()
        if out[out.index("dev") + 1] == f"p{plane}":
            return sport
    raise RuntimeError(f"no source port in {TCP_SPORTS} leaves on plane {plane}")


def round_transfers(bounds: Sequence[dict | None], src: str = SRC,
                    dst: str = DST) -> list[Transfer]:
    """Synchronous rounds of ROUND_BYTES src -> dst, one per bound (None: reliable): each
    is posted when the previous one's send completed."""
    return [Transfer(src, dst, ROUND_BYTES, after=i - 1 if i else None, bound=b)
            for i, b in enumerate(bounds)]


def p99(xs: Sequence[float]) -> float:
    """The 99th percentile by rank (with fewer than 100 rounds: the slowest)."""
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def _latencies_ms(res: TransferResult) -> list[float]:
    return [m["latency"] * 1000 for m in res.messages]


def _stats(res: TransferResult, bounds: list[dict | None]) -> dict:
    lat = _latencies_ms(res)
    s = sorted(lat)
    frac = [m["delivered"] for m in res.messages]
    respected = all(
        m["delivered"] >= 1 - (b or {}).get("tolerance", 0.0) - 1e-9 or m["deadline"]
        for m, b in zip(res.messages, bounds, strict=True))
    cores: Counter = Counter()
    for d in res.drivers.values():
        for st in d["stats"].values():
            cores.update(st)
    return {"ok": res.ok, "rounds": len(lat), "p50_ms": round(statistics.median(s), 2),
            "p99_ms": round(p99(s), 2), "max_ms": round(s[-1], 2),
            "delivered_mean": round(statistics.mean(frac), 4),
            "delivered_min": round(min(frac), 4),
            "deadline_rounds": sum(m["deadline"] for m in res.messages),
            "bound_respected": respected,
            "cores": {k: cores[k] for k in STAT_KEYS if cores[k]},
            "latency_ms": [round(x, 1) for x in lat]}


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
        out.append({**rec, "deadline_s": None})
    return out


def late_phase(n: int) -> tuple[list[dict], float]:
    """The last ``n`` rounds of the synthetic schedule (its late phase: tolerance > 0
    throughout) and the share of the whole schedule's rounds at tolerance 0."""
    sched = synthetic_schedule(TRAIN_ROUNDS)
    zero = sum(r["tolerance"] == 0 for r in sched) / len(sched)
    phase = sched[-n:]
    if any(r["tolerance"] == 0 for r in phase):
        raise ValueError(f"the last {n} rounds of the schedule include tolerance-0 rounds")
    return phase, zero


def burst_rounds(fab: Fabric, setting: str, transport: str, bounds: list[dict | None],
                 config: dict | None = None) -> dict:
    """``len(bounds)`` back-to-back rounds SRC -> DST of ``transport`` (round i bounded by
    ``bounds[i]``, None: reliable) through the microbursts of ``setting`` (a key of
    SETTINGS), which run for the whole of them. The row: P50 / P99 / max latency (ms),
    delivered fraction, the bounds' respect, the cores' counters, ``burst_drops`` (FIFO
    drops at the targets) and, for TCP, the kernel's view (``tcp``). TCP with one_path:
    `tcp_burst_rounds`, which puts the burst where the connection is."""
    targets, sources = SETTINGS[setting]
    bursts = [Microburst(fab, MicroburstSpec(t, sources, BURST_ON_MS, BURST_EVERY_MS))
              for t in targets]
    for b in bursts:
        b.start()
    try:
        res = run_transfers(fab, transport, round_transfers(bounds), config=config,
                            deadline_s=120)
    finally:
        for b in bursts:
            b.stop()
    row = _stats(res, bounds)
    row["burst_drops"] = sum(b.report()["target"]["drops"] or 0 for b in bursts)
    if transport == "tcp":
        row["tcp"] = _tcp_stats(res, row["latency_ms"])
    return row


def wire_sized_tcp(fab: Fabric) -> None:
    """TCP segments on the wire, one MSS per packet: TSO/GSO off on both hosts' NICs.
    With them on, the sender hands 64 KB super-packets to its veths, which the switches
    forward whole, and each takes one slot of a 16-packet FIFO (real NICs segment
    before the wire). The UDP transports send one datagram per packet either way."""
    for host in (SRC, DST):
        for plane in range(SPEC.planes):
            subprocess.run(["ip", "netns", "exec", fab.netns(host), "ethtool", "-K",
                            f"p{plane}", "tso", "off", "gso", "off"],
                           capture_output=True, check=True)


def tcp_burst_rounds(fab: Fabric, setting: str, bounds: list[dict | None],
                     config: dict) -> dict:
    """The TCP rounds through the bursts of ``setting`` (`burst_rounds`' row, with
    ``config`` the TCP driver's, e.g. TCP_CONFIG with a source port from `tcp_sport`).
    TCP's one connection lies on one of the pair's 8 paths: its source port picks the
    plane (the hosts hash the 5-tuple), but a leaf forwards a packet on the hash its
    sending socket gave it (a random txhash, drawn anew after an RTO), so the connection
    draws its spine. In one_path the burst is therefore put where TCP is: the
    rounds start, the spine of the burst's plane that receives the connection's packets
    from SRC's leaf is read off the counters (the bursts come from other racks), and the
    same burst (same sources, same pattern) starts at that spine's port to DST's leaf;
    the first rounds (~0.1 s) run without it."""
    if setting != "one_path":
        return burst_rounds(fab, setting, "tcp", bounds, config)
    target, sources = SETTINGS[setting][0][0], SETTINGS[setting][1]
    plane = int(target[1])
    down = target.split(":")[1]
    port = "l" + SPEC.leaf_of(SRC, plane).name.split("l")[-1]
    spines = [n.name for n in SPEC.spine_nodes if n.plane == plane]
    state: dict = {}

    def rx() -> dict[str, int]:
        return {n: interface_packets(fab.kernels[n])[port][0] for n in spines}

    def place_burst() -> None:
        time.sleep(max(0.0, state["t0"] + 0.03 - time.monotonic()))
        before = rx()
        time.sleep(0.05)
        via = {n: c - before[n] for n, c in rx().items()}
        state["spine"] = spine = max(via, key=via.__getitem__)
        state["burst"] = b = Microburst(fab, MicroburstSpec(f"{spine}:{down}", sources,
                                                            BURST_ON_MS, BURST_EVERY_MS))
        b.start()
        state["t_burst"] = time.monotonic() - state["t0"]
        state["before"] = rx()

    def on_start(t0: float) -> None:
        state["t0"] = t0
        state["thread"] = th = threading.Thread(target=place_burst, daemon=True)
        th.start()

    try:
        res = run_transfers(fab, "tcp", round_transfers(bounds), config=config,
                            deadline_s=120, on_start=on_start)
    finally:
        if "thread" in state:
            state["thread"].join(10)
        if "burst" in state:
            state["burst"].stop()
    if "before" not in state:
        raise RuntimeError("the TCP rounds ended before the burst was placed")
    via = {n: c - state["before"][n] for n, c in rx().items()}
    row = _stats(res, bounds)
    row["burst_drops"] = state["burst"].report()["target"]["drops"] or 0
    row["tcp"] = _tcp_stats(res, row["latency_ms"])
    started = sum(1 for m in res.messages if m["posted"] < state["t_burst"])
    row["tcp"].update(burst_target=f"{state['spine']}:{down}",
                      rounds_posted_before_burst=started,
                      share_via_burst_spine=round(via[state["spine"]]
                                                  / max(1, sum(via.values())), 3))
    return row


def setting_rounds(fab: Fabric, setting: str, transport: str, bounds: list[dict | None],
                   tcp_config: dict) -> dict:
    """The rounds of ``transport`` through the bursts of ``setting``: `tcp_burst_rounds`
    (with ``tcp_config``) for "tcp", else `burst_rounds`."""
    if transport == "tcp":
        return tcp_burst_rounds(fab, setting, bounds, tcp_config)
    return burst_rounds(fab, setting, transport, bounds)


def _tcp_stats(res: TransferResult, lat: list[float]) -> dict:
    """The kernel's view of the TCP rounds: per round, the segments retransmitted and
    the RTOs that fired while it was out; per connection, TCP_INFO at the end."""
    sends = sorted((m for m in res.drivers[SRC]["messages"] if m["kind"] == "send"),
                   key=lambda m: m["msg"])
    retx = [m.get("retrans", 0) for m in sends]
    rto = [m.get("rto", 0) for m in sends]
    hit = [x for x, r, o in zip(lat, retx, rto, strict=True) if r or o]
    by_rto = [x for x, o in zip(lat, rto, strict=True) if o]
    (info,) = res.drivers[SRC]["tcp_info"].values()
    return {"rounds_with_retx": sum(1 for r in retx if r),
            "rounds_with_rto": sum(1 for o in rto if o),
            "rto_per_round_max": max(rto, default=0),
            "retx_rounds_ms": [round(x, 1) for x in hit],
            "rto_rounds_min_ms": round(min(by_rto), 1) if by_rto else None,
            "no_rto_rounds_max_ms": round(max((x for x, o in zip(lat, rto, strict=True)
                                               if not o), default=0), 1),
            "per_round_retx": retx, "per_round_rto": rto,
            "tcp_info": {k: info.get(k) for k in (
                "rto_ms", "min_rtt_ms", "rtt_ms", "snd_mss", "snd_cwnd", "total_retrans",
                "total_rto", "total_rto_recoveries", "total_rto_time_ms", "bytes_retrans",
                "dsack_dups", "reord_seen")},
            # the receiver's end (it sends the 8-byte completions) and both namespaces'
            # TCP counters over the run (tail loss probes, timeouts, SACK recoveries)
            "receiver_retrans": sum(i.get("total_retrans", 0)
                                    for i in res.drivers[DST].get("tcp_info_in", [])),
            "netstat_src": res.drivers[SRC].get("netstat", {}),
            "netstat_dst": res.drivers[DST].get("netstat", {})}


def bench_dblp(say: Callable[[str], None] = print, quick: bool = False) -> dict:
    """Run every variant through the same bursts in each setting; returns the results."""
    require_root("emu bench dblp")
    n = 30 if quick else 80
    phase, zero = late_phase(n)
    out: dict = {"round_bytes": ROUND_BYTES, "rounds": n,
                 "topology": "2 planes x 4 spines x 4 leaves x 3 hosts, 100 Mbit/s, "
                             "16-packet FIFOs",
                 "bursts": {"on_ms": BURST_ON_MS, "every_ms": BURST_EVERY_MS,
                            "settings": {k: {"targets": list(t), "sources": list(s)}
                                         for k, (t, s) in SETTINGS.items()}},
                 "dblp_tolerance_range": [round(min(r["tolerance"] for r in phase), 3),
                                          round(max(r["tolerance"] for r in phase), 3)],
                 "schedule_rounds_at_tolerance_0": round(zero, 3),
                 "settings": {}}
    with Fabric(SPEC, name="benchdblp", progress=lambda m: say(f"    fabric: {m}")) as fab:
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
        variants: dict[str, tuple[str, list[dict | None]]] = {
            "mrc_reliable": ("mrc", [None] * n),
            "rc_reliable": ("rc", [None] * n),
            "tcp_reliable": ("tcp", [None] * n),
            "mlt_fixed_0.05": ("dblp", [{"tolerance": 0.05, "deadline_s": None}] * n),
            # Timeout-bounded: every chunk is wanted, but the round ends at the deadline.
            "optireduce": ("dblp", [{"tolerance": 0.0, "deadline_s": deadline_s}] * n),
            "dblp_phase_aware": ("dblp", [{k: b[k] for k in ("tolerance", "deadline_s")}
                                          for b in phase]),
        }
        for setting in SETTINGS:
            say(f"  setting {setting}: bursts at {', '.join(SETTINGS[setting][0])}")
            rows: dict = {}
            for name, (transport, bounds) in variants.items():
                row = rows[name] = setting_rounds(fab, setting, transport, bounds, tcp_config)
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
                        f"receiver retransmissions {t['receiver_retrans']}; nstat "
                        f"{SRC} {t['netstat_src']}")
            res: dict = {"variants": rows}
            for base in ("mrc_reliable", "rc_reliable", "tcp_reliable"):
                ref = rows[base]["p99_ms"]
                res[f"p99_speedup_vs_{base}"] = {k: round(ref / v["p99_ms"], 2)
                                                 for k, v in rows.items()}
            d = res["p99_speedup_vs_mrc_reliable"]["dblp_phase_aware"]
            r = res["p99_speedup_vs_rc_reliable"]["dblp_phase_aware"]
            t = res["p99_speedup_vs_tcp_reliable"]["dblp_phase_aware"]
            say(f"    DBLP P99 speedup: {d}x vs MRC, {r}x vs RC, {t}x vs TCP (target: 5x)")
            out["settings"][setting] = res
    out["dblp_schedule"] = phase
    return out
