"""Gradient rounds through microbursts on the DBLP bench's fabric: what `emu bench dblp`
(commands/bench/dblp.py) and claim 3 of `emu reproduce` run.

A round is one gradient-sized message (``ROUND_BYTES``: 131 chunks of 8000 B, ~1 MB;
whole chunks, so no round ends with a short chunk, whose small RTT NSCC would take for
the path's base RTT) from a host to a host on another rack; rounds run back to back
(the next is posted when the previous send completes). The fabric has 2 planes x 4
spines, so a host pair has 8 paths. Two burst placements, each a line-rate incast from
two hosts at one switch egress:

- ``one_path``: spine p0s0's port down to the receiver's leaf (sources on two
  other racks): a bottleneck egress on 1 of the pair's 8 paths;
- ``all_paths``: the receiver's leaf port on both planes (sources: its
  rack-mates): every path of the pair meets a full FIFO.

A ``BurstPlan`` says how long and how often: its length is a ratio of the healthy round
(reliable MRC's median round, measured first: `healthy_round_ms`), so bursts shorter
and longer than a round are asked for as such; one burst every ``BURST_PERIOD`` x
(burst + round), each start jittered over most of the period (so bursts meet rounds
at every phase; a quarter to a half of the rounds meet one). Every burst is sized to
drop (``mode = "drop"``, checked against the fabric before it starts) and the drops
at its target are counted.

Kernel TCP (Linux as it is: RTO floor 200 ms, RACK-TLP, SACK, CUBIC; TSO/GSO off on the
two hosts' NICs so that a segment is a packet in the FIFOs, ``wire_sized_tcp``) runs
one connection, on one of the 8 paths: ``tcp_burst_rounds`` says how the one_path
burst is put where it is. RC stripes a round over one QP per plane; the harness posts
both parts of round i + 1 only when both parts of round i completed (a synchronous
round), so RC's round latency is measured like the others' (last part placed - first
part posted). With n rounds the P99 is the ceil(0.99 n)-th fastest (200 rounds: the
third slowest).
"""

from __future__ import annotations

import math
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from emu.counters import interface_packets
from emu.fabric import Fabric
from emu.microburst import Microburst, MicroburstSpec
from topologies import LinkSpec, MultiPlaneClos
from transports.io.tcp import TCP_PORT
from transports.testing.harness import Transfer, TransferResult, run_transfers

SPEC = MultiPlaneClos(planes=2, spines=4, leaves=4, hosts_per_leaf=3,
                      host_link=LinkSpec(100.0, 16), fabric_link=LinkSpec(100.0, 16))
SRC, DST = "h0", "h3"  # leaf 0 -> leaf 1
CHUNK = 8000  # the transports' chunk (mtu_payload)
ROUND_BYTES = 131 * CHUNK  # ~1 MB in whole chunks
# placement -> (burst target egresses, burst sources)
SETTINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "one_path": (("p0s0:l1",), ("h6", "h9")),  # spine downlink; sources on racks 2 and 3
    "all_paths": (("p0l1:h3", "p1l1:h3"), ("h4", "h5")),  # leaf ports; h3's rack-mates
}
BURST_PERIOD = 3.0  # a burst every this many (burst + round)
BURST_JITTER = 0.9  # of the period's room (period - burst): where in it a burst starts
HEALTHY_ROUNDS = 20  # reliable MRC's rounds that measure the healthy round
# The TCP baseline: Linux's TCP as it is (RTO floor 200 ms), with the kernel's default
# congestion control (CUBIC; a host may default its namespaces to another one).
TCP_CONFIG = {"cc": "cubic"}
TCP_SPORTS = range(40000, 40200)  # where a source port onto the burst's plane is sought
STAT_KEYS = ("tx_data_pkts", "tx_retx", "tx_retx_spurious", "loss_rto", "rto", "rto_silent",
             "loss_unblamed", "ev_undo", "retx_parked", "retx_unparked_stall",
             "loss_dblp_tail", "late_data", "dup_data")


@dataclass(frozen=True)
class BurstPlan:
    """Microbursts of ``placement`` (a key of SETTINGS): ``on_ms`` long, one every
    ``every_ms``, each start up to ``jitter_ms`` into its slot; ``ratio``: ``on_ms`` over
    the healthy round it was sized from (`plan_bursts`)."""

    placement: str
    on_ms: float
    every_ms: float
    jitter_ms: float
    ratio: float

    @property
    def name(self) -> str:
        """``all_paths x0.5``: the placement and the burst's length in rounds."""
        return f"{self.placement} x{self.ratio:g}"

    def spec(self, target: str) -> MicroburstSpec:
        """The MicroburstSpec at ``target`` (sized to drop: refused if it cannot)."""
        return MicroburstSpec(target, SETTINGS[self.placement][1], self.on_ms, self.every_ms,
                              jitter_ms=self.jitter_ms, mode="drop")

    def as_record(self) -> dict:
        return {"placement": self.placement, "on_ms": self.on_ms, "every_ms": self.every_ms,
                "jitter_ms": self.jitter_ms, "ratio": self.ratio,
                "targets": list(SETTINGS[self.placement][0]),
                "sources": list(SETTINGS[self.placement][1])}


def plan_bursts(placement: str, ratio: float, round_ms: float) -> BurstPlan:
    """Bursts of ``ratio`` x a ``round_ms`` round at ``placement``, one every
    BURST_PERIOD x (burst + round), starts jittered over BURST_JITTER of the room."""
    if placement not in SETTINGS:
        raise ValueError(f"burst placement {placement!r} is invalid: must be one of "
                         f"{', '.join(SETTINGS)}")
    if not ratio > 0 or not round_ms > 0:
        raise ValueError(f"ratio={ratio!r} and round_ms={round_ms!r} must be > 0")
    on = round(ratio * round_ms * 2) / 2  # to 0.5 ms
    every = round(BURST_PERIOD * (on + round_ms))
    return BurstPlan(placement, on, float(every), round(BURST_JITTER * (every - on), 1),
                     ratio)


def healthy_round_ms(fab: Fabric, rounds: int = HEALTHY_ROUNDS) -> float:
    """Reliable MRC's median round (ms, emulated) without bursts: what bursts are sized
    against."""
    res = run_transfers(fab, "mrc", round_transfers([None] * rounds))
    if not res.ok:
        raise RuntimeError(f"the healthy rounds failed: {res.messages[:2]}")
    return round(statistics.median(_latencies_ms(res)), 2)


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


def burst_rounds(fab: Fabric, plan: BurstPlan, transport: str, bounds: list[dict | None],
                 config: dict | None = None) -> dict:
    """``len(bounds)`` back-to-back rounds SRC -> DST of ``transport`` (round i bounded by
    ``bounds[i]``, None: reliable) through the microbursts of ``plan``, which run for
    the whole of them. The row: P50 / P99 / max latency (ms), delivered fraction, the
    bounds' respect, the cores' counters, ``burst_drops`` (FIFO drops at the targets)
    and, for TCP, the kernel's view (``tcp``). TCP with one_path: `tcp_burst_rounds`,
    which puts the burst where the connection is."""
    bursts = [Microburst(fab, plan.spec(t)) for t in SETTINGS[plan.placement][0]]
    for b in bursts:
        b.start()
    try:
        res = run_transfers(fab, transport, round_transfers(bounds), config=config,
                            deadline_s=300)
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


def tcp_burst_rounds(fab: Fabric, plan: BurstPlan, bounds: list[dict | None],
                     config: dict) -> dict:
    """The TCP rounds through the bursts of ``plan`` (`burst_rounds`' row, with
    ``config`` the TCP driver's, e.g. TCP_CONFIG with a source port from `tcp_sport`).
    TCP's one connection lies on one of the pair's 8 paths: its source port picks the
    plane (the hosts hash the 5-tuple), but a leaf forwards a packet on the hash its
    sending socket gave it (a random txhash, drawn anew after an RTO), so the connection
    draws its spine. In one_path the burst is therefore put where TCP is: the
    rounds start, the spine of the burst's plane that receives the connection's packets
    from SRC's leaf is read off the counters (the bursts come from other racks), and the
    same burst (same sources, same pattern) starts at that spine's port to DST's leaf;
    the first rounds (~0.1 s) run without it."""
    if plan.placement != "one_path":
        return burst_rounds(fab, plan, "tcp", bounds, config)
    target = SETTINGS[plan.placement][0][0]
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
        state["burst"] = b = Microburst(fab, plan.spec(f"{spine}:{down}"))
        b.start()
        state["t_burst"] = time.monotonic() - state["t0"]
        state["before"] = rx()

    def on_start(t0: float) -> None:
        state["t0"] = t0
        state["thread"] = th = threading.Thread(target=place_burst, daemon=True)
        th.start()

    try:
        res = run_transfers(fab, "tcp", round_transfers(bounds), config=config,
                            deadline_s=300, on_start=on_start)
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


def setting_rounds(fab: Fabric, plan: BurstPlan, transport: str, bounds: list[dict | None],
                   tcp_config: dict, config: dict | None = None) -> dict:
    """The rounds of ``transport`` through the bursts of ``plan``: `tcp_burst_rounds`
    (with ``tcp_config``) for "tcp", else `burst_rounds` (``config``: the transport's
    settings as a plan's config, None: its run defaults)."""
    if transport == "tcp":
        return tcp_burst_rounds(fab, plan, bounds, tcp_config)
    return burst_rounds(fab, plan, transport, bounds, config)


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
