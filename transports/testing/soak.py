"""The soak: continuous MRC and DBLP traffic for minutes under a flapping and a gray link.

    res = run_soak(fab, seconds=120)
    res["ok"]            # nothing lost, and every driver's memory flat after warm-up

Each (source, destination) pair is one *stream* (transports/io/driver.py): the sender
keeps ``window`` messages in flight, posting a new one whenever one completes, until
``seconds`` have passed; the receiver keeps as many receives posted, checks every
message's bytes (SHA-256 against the seed's; for a DBLP round, every chunk that was
placed) and reuses its buffers. Nothing in a driver grows with the number of
messages, so its resident memory (sampled every 0.5 s by the driver itself) must be
flat once warm: ``rss_fit`` fits a line to every driver's samples after
``warmup_s`` and gives the slope (MB per minute) and the change it amounts to over
the window (% of the mean). *Nothing lost*: every message the sender posted was
completed by both ends, the receiver placed it byte-exact, no DBLP round closed
outside its loss bound, no core raised on a datagram, and what is still open at the
end is only the receiver's next posted receives.

The link faults are failure kinds of the public API (emu.failures): ``LinkFlap`` (a
leaf-spine link down ``duty`` of every ``period_s``) and ``GrayLink`` (random loss
on another), applied at the common start and restored at the end, whatever happens.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emu.errors import EmuError
from emu.fabric import Fabric
from emu.failures import GrayLink, LinkFlap
from emu.launch import ChildGroup
from topologies import LinkSpec, MultiPlaneClos
from transports import registry
from transports.core.bound import LossBound
from transports.io.driver import SENT
from transports.plan import conn_spec
from transports.planrecord import ConnPlan, HostPlan, StreamPlan
from transports.testing.harness import driver_results

READY_TIMEOUT_S = 60.0
DRAIN_S = 60.0  # after ``seconds``: for the last messages (a flap may hold one for a while)
SEEDS = 3  # distinct payloads a stream cycles through (consecutive messages differ)
MB = 1 << 20

# The soak's fabric: 2 planes x 2 spines x 2 racks of 2 hosts; 50 Mbit/s links leave
# the 4 drivers, the flapper and the kernel's forwarding room on 2 shared cores.
SOAK_LINK = LinkSpec(50.0, 64)
SOAK_SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2,
                           host_link=SOAK_LINK, fabric_link=SOAK_LINK)


@dataclass(frozen=True)
class Stream:
    """Messages of ``size`` bytes from ``src`` to ``dst`` over ``transport``, ``window`` in
    flight; ``bound``: a DBLP round's LossBound."""

    transport: str
    src: str
    dst: str
    size: int
    window: int = 1
    bound: LossBound | None = None


# MRC: 1 MiB messages, two in flight (the pipe stays full between messages); DBLP:
# 256 KiB rounds one after the other, 5 % of a round's chunks may be lost.
DEFAULT_STREAMS = (Stream("mrc", "h0", "h2", 1 << 20, window=2),
                   Stream("dblp", "h1", "h3", 256 << 10, window=1,
                          bound=LossBound(tolerance=0.05)))
FLAP_LINK, GRAY_LINK = "p0l1-p0s0", "p1l1-p1s1"  # both into the receivers' rack


def stream_plans(spec, streams: tuple[Stream, ...] | list[Stream], seconds: float,
                 seed: int = 0, drain_s: float = DRAIN_S) -> dict[str, HostPlan]:
    """Every host's driver plan for ``streams`` (connection i + 1 for stream i): its
    connections and stream entries (transports/planrecord.py). A host runs one
    transport: two streams of different transports cannot share a host."""
    # host -> (its transport, its connections, its streams), made into plans at the end
    entries: dict[str, tuple[str, list[ConnPlan], list[StreamPlan]]] = {}
    for i, s in enumerate(streams):
        if s.src == s.dst or s.size <= 0 or s.window < 1:
            raise EmuError(f"invalid stream {s}: src != dst, size > 0, window >= 1 required")
        conn = i + 1
        for a, b, kind in ((s.src, s.dst, "send"), (s.dst, s.src, "recv")):
            spec.node(a)
            transport, conns, entry = entries.setdefault(a, (s.transport, [], []))
            if transport != s.transport:
                raise EmuError(f"host {a} would run {transport} and {s.transport}: "
                               "one transport per host (one driver binds its port)")
            conns.append(conn_spec(spec, s.transport, a, b, conn))
            entry.append(StreamPlan(
                conn=conn, kind=kind, size=s.size, msg0=1, window=s.window, bound=s.bound,
                seeds=tuple(seed * 1_000_003 + conn * 101 + j for j in range(SEEDS)),
                until_s=seconds if kind == "send" else None))
    return {a: HostPlan(host=a, addr=str(spec.address(a)), transport=transport,
                        config=registry.get(transport).defaults, seed=seed,
                        deadline_s=seconds + drain_s, timeline_s=1.0, conns=tuple(conns),
                        streams=tuple(st))
            for a, (transport, conns, st) in entries.items()}


def run_streams(fab: Fabric, plans: dict[str, HostPlan], seconds: float,
                on_start: Callable[[float], None] | None = None,
                drain_s: float = DRAIN_S) -> dict[str, dict]:
    """Run the stream plans (one driver per host, one common start) and return every
    driver's result: ``on_start(t0)`` at the start; once every sender said it is done,
    the receivers' stdin is closed and they report."""
    outs: dict[str, dict] = {}
    with ChildGroup() as group:
        children = {host: group.spawn(
            f"driver on {host}", fab.in_netns(host, sys.executable, "-m", "transports.io.driver"),
            config=plan.to_dict()) for host, plan in plans.items()}
        group.wait_ready(READY_TIMEOUT_S)
        t0 = group.start()
        if on_start is not None:
            on_start(t0)
        end = t0 + seconds + drain_s
        for host, plan in plans.items():
            if any(s.kind == "send" for s in plan.streams):
                child = children[host]
                if child.record(SENT, timeout=max(1.0, end - time.monotonic())) is None:
                    raise EmuError(child.why(f"did not finish its send streams within "
                                             f"{seconds + drain_s:.0f} s"))
        for child in group:
            child.close_stdin()
        outs.update(driver_results(children.items(), 60))
    return outs


def reconcile(streams: tuple[Stream, ...] | list[Stream], outs: dict[str, dict],
              seconds: float) -> list[dict]:
    """Per stream: what the sender posted and completed, what the receiver got and how,
    and ``lost``: every way a message could have gone missing, counted (0: nothing
    lost)."""
    rows = []
    for i, s in enumerate(streams):
        conn = i + 1
        snd = next(r for r in outs[s.src]["streams"] if r["conn"] == conn and r["kind"] == "send")
        rcv = next(r for r in outs[s.dst]["streams"] if r["conn"] == conn and r["kind"] == "recv")
        posted = snd["posted"]
        # the receiver's receives still open must be exactly those after the last sent
        stray_open = [m for m in rcv["open"] if m < snd["msg0"] + posted]
        problems = {
            "send_failed": snd["failed"], "send_open": len(snd["open"]),
            "recv_failed": rcv["failed"], "not_exact": rcv["not_exact"],
            "outside_bound": rcv["outside_bound"], "recv_missing": max(0, posted - rcv["ok"]),
            "recv_open_sent": len(stray_open),
            "internal_errors": len(outs[s.src].get("internal_errors", ()))
            + len(outs[s.dst].get("internal_errors", ()))}
        rows.append({
            "transport": s.transport, "src": s.src, "dst": s.dst, "size": s.size,
            "window": s.window,
            "bound": None if s.bound is None else dataclasses.asdict(s.bound),
            "messages": posted,
            "sent_ok": snd["ok"], "received_ok": rcv["ok"],
            "goodput_mbit": round(rcv["bytes"] * 8 / seconds / 1e6, 2),
            "slowest_message_s": snd["slowest_s"],
            "missing_chunks": rcv["missing_chunks"], "deadline_rounds": rcv["deadline_rounds"],
            "delivered_min": rcv["delivered_min"],
            "problems": {k: v for k, v in problems.items() if v},
            "lost": sum(problems.values()),
            "errors": snd["errors"] + rcv["errors"]})
    return rows


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(x, y)`` points (0 for fewer than two distinct x)."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def rss_fit(samples: list[tuple[float, int]] | list[list], warmup_s: float) -> dict:
    """A driver's resident memory after ``warmup_s``: the fitted slope in MB per minute,
    the change it amounts to over the window as a % of the mean (``change_pct``), and
    the spread (max - min) as a % of the minimum; ``None`` figures for fewer than 3
    samples after warm-up."""
    after = [(float(t), float(b)) for t, b in samples if t >= warmup_s]
    out: dict[str, Any] = {"warmup_s": warmup_s, "samples": len(after),
                           "rss_mb_first": round(samples[0][1] / MB, 2) if samples else None}
    if len(after) < 3:
        return {**out, "rss_mb_start": None, "rss_mb_end": None, "slope_mb_per_min": None,
                "change_pct": None, "spread_pct": None}
    b = slope(after)  # bytes per second
    mean = statistics.fmean(y for _, y in after)
    span = after[-1][0] - after[0][0]
    lo, hi = min(y for _, y in after), max(y for _, y in after)
    return {**out, "rss_mb_start": round(after[0][1] / MB, 2),
            "rss_mb_end": round(after[-1][1] / MB, 2),
            "rss_mb_max": round(hi / MB, 2),
            "slope_mb_per_min": round(b * 60 / MB, 4),
            "change_pct": round(b * span / mean * 100, 2),
            "spread_pct": round((hi - lo) / lo * 100, 2)}


def warmup_for(seconds: float) -> float:
    """The warm-up left out of the memory fit: a quarter of the run, at most 30 s."""
    return min(30.0, seconds / 4)


def run_soak(fab: Fabric, seconds: float, say: Callable[[str], None] = print,
             streams: tuple[Stream, ...] = DEFAULT_STREAMS, flap_link: str = FLAP_LINK,
             flap_period_s: float = 2.0, flap_duty: float = 0.5, gray_link: str = GRAY_LINK,
             gray_loss: float = 0.02, warmup_s: float | None = None,
             flat_pct: float = 3.0) -> dict:
    """Streams for ``seconds`` while ``flap_link`` flaps and ``gray_link`` drops
    ``gray_loss`` of its packets; per stream what was sent, received and lost, per
    driver its memory after warm-up. ``ok``: nothing lost and every driver's fitted
    change within ``flat_pct`` % (``flat``)."""
    warm = warmup_for(seconds) if warmup_s is None else warmup_s
    flap = LinkFlap(flap_link, flap_period_s, flap_duty)
    gray = GrayLink(gray_link, gray_loss)
    for f in (flap, gray):
        f.validate(fab.spec)
    plans = stream_plans(fab.spec, streams, seconds)
    active: list[tuple[Any, object]] = []

    def faults(t0: float) -> None:
        active.append((flap, flap.apply(fab)))
        gray.apply(fab)
        active.append((gray, None))

    say(f"  soak: {', '.join(f'{s.transport} {s.src}->{s.dst}' for s in streams)} for "
        f"{seconds:g} s; {flap_link} flapping ({flap_period_s:g} s period, "
        f"{flap_duty:.0%} down), {gray_link} gray ({gray_loss:.0%} loss)")
    t_run = time.monotonic()
    try:
        outs = run_streams(fab, plans, seconds, on_start=faults)
    finally:
        for f, handle in reversed(active):
            f.restore(fab, handle)
    wall = time.monotonic() - t_run
    rows = reconcile(streams, outs, seconds)
    memory = {h: {"transport": o["transport"], **rss_fit(o["rss"], warm),
                  "rss_every_s": o["rss_every_s"], "core_state": o.get("state", {})}
              for h, o in outs.items()}
    flat = all(m["change_pct"] is not None and abs(m["change_pct"]) <= flat_pct
               for m in memory.values())
    lost = sum(r["lost"] for r in rows)
    keys = ("tx_retx", "ev_retired", "ev_readmitted", "rto_silent", "tx_tail_probe",
            "retx_parked", "rx_stop", "crc", "dup_data")
    counters = {h: {k: sum(st.get(k, 0) for st in o["stats"].values()) for k in keys}
                for h, o in outs.items()}
    for r in rows:
        say(f"    {r['transport']} {r['src']}->{r['dst']}: {r['messages']} messages, "
            f"{r['received_ok']} received intact, {r['goodput_mbit']} Mbit/s, slowest "
            f"{r['slowest_message_s']:.2f} s; lost {r['lost']}"
            + (f" {r['problems']}" if r["problems"] else ""))
    for h, m in memory.items():
        say(f"    {h} ({m['transport']}): RSS {m['rss_mb_start']} -> {m['rss_mb_end']} MB "
            f"after {warm:g} s warm-up, slope {m['slope_mb_per_min']} MB/min = "
            f"{m['change_pct']} % over the window (spread {m['spread_pct']} %)")
    return {"ok": lost == 0 and flat, "lost": lost, "flat": flat, "flat_pct": flat_pct,
            "seconds": seconds, "wall_s": round(wall, 1), "warmup_s": warm,
            "faults": {"flap": {"link": flap_link, "period_s": flap_period_s,
                                "duty": flap_duty},
                       "gray": {"link": gray_link, "loss": gray_loss}},
            "streams": rows, "memory": memory, "counters": counters,
            "rss": {h: o["rss"] for h, o in outs.items()}}
