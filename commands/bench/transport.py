"""`emu bench transport`: MRC against RC over ECMP and kernel TCP, in one run.

1. One connection h0 -> last host at 1000 Mbit/s links, 3 repetitions interleaved
   (MRC, RC, TCP, MRC, ...): goodput as a fraction of the bound (all of the
   source's plane NICs at line rate, less header bytes) and CPU per packet.
2. Permutation: every host sends to a distinct host off its leaf; aggregate
   goodput as a fraction of the ideal (every NIC of every host busy), at the rate
   16 drivers fit on 2 cores, then at 10x it (the fast data path's target), with
   the whole machine's CPU during each run.
3. Failure ride-through under BFD + BGP: a long transfer while the leaf-spine
   link carrying the transport's plane-0 traffic is cut at 40 % of it; goodput
   timeline, and the time lost: completion time with the cut minus without.
4. CPU (commands/bench/cpu.py): microseconds of driver CPU per data packet
   (user and system), the packet rate one core would sustain, each driver process's
   share of a core, the ACKs per data packet, next to the kernel's own cost of the same
   datagram on the same path (a bare paced ``sendto`` / ``recv_into`` pair) and a bare
   ``sendto`` to loopback.
5. Scale: the permutation at the target rate on fabrics of 1, 2, ... hosts per rack:
   the most hosts at which MRC still reaches ``PERM_TARGET`` of ideal on this machine.

The userspace transports' hosts are served by one engine process per core of the
machine (transports/io/driver.py), waking at most once per tick (transports/io/tick.py).

The permutation's link rate is scaled so that its 16 Python drivers fit on 2
shared cores (see BENCHMARKS.md); figures are ratios measured in one run.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from commands.bench.cpu import MachineCpu, bare_path, bare_permutation, driver_cpu, summary
from emu.counters import interface_packets
from emu.errors import EmuError, require_root
from emu.fabric import Fabric
from emu.failures import LinkDown
from emu.netns import entered
from topologies import LinkSpec, MultiPlaneClos
from transports import registry
from transports.core.wire import HEADER_LEN
from transports.testing.harness import Transfer, TransferResult, run_transfers

# Every reliable transport the transfer driver runs (transports/registry.py)
TRANSPORTS = registry.names(lambda t: t.caps.transfers and t.caps.reliable)
# Links of the single connection: 10x the 100 Mbit/s of the demo's fabric, where the
# drivers' CPU is what limits a transport. The permutation's 16 drivers share 2 cores.
RATE_SINGLE = 1000.0
RATE_PERM = 5.0
# The fast data path's target: the permutation at 10x RATE_PERM, MRC at >= 0.90 of ideal
# (issue 34; one engine process per core serves the hosts, each may use its core whole).
RATE_PERM_TARGET = 50.0
PERM_TARGET = 0.90
PAYLOAD = 8000
WIRE_OVERHEAD = 14 + 40 + 8 + HEADER_LEN  # Ethernet, IPv6, UDP, our header (SRH aside)


def payload_efficiency() -> float:
    """The share of a link's rate that carries payload (8000-byte datagrams)."""
    return PAYLOAD / (PAYLOAD + WIRE_OVERHEAD)


def bench_spec(rate: float, hosts_per_leaf: int = 4, queue: int = 64) -> MultiPlaneClos:
    """The transport bench's fabric: 2 planes x 4 spines x 4 racks, ``rate`` Mbit/s links."""
    link = LinkSpec(rate, queue)
    return MultiPlaneClos(planes=2, spines=4, leaves=4, hosts_per_leaf=hosts_per_leaf,
                          host_link=link, fabric_link=link)


def single(fab: Fabric, size: int, say: Callable[[str], None], reps: int = 3) -> dict:
    """One transfer per transport from the first to the last host, ``reps`` times,
    interleaved (MRC, RC, TCP, MRC, ...): goodput against the bound and CPU per packet,
    each as median [min-max]."""
    spec = fab.spec
    assert isinstance(spec, MultiPlaneClos)  # the bench's fabric (bench_spec)
    src, dst = spec.hosts[0].name, spec.hosts[-1].name
    rate = spec.host_link.rate_mbit
    bound = spec.planes * rate * payload_efficiency()
    out: dict = {"src": src, "dst": dst, "bytes": size, "rate_mbit": rate,
                 "bound_mbit": round(bound, 2), "reps": reps}
    runs: dict[str, list[dict]] = {t: [] for t in TRANSPORTS}
    for rep in range(reps):
        for t in TRANSPORTS:
            r = run_transfers(fab, t, [Transfer(src, dst, size)], deadline_s=120)
            row = {**_row(r, bound), "cpu": driver_cpu(r), "process": _process_of(r)}
            runs[t].append(row)
            cpu = row["cpu"].get("us_per_packet")
            say(f"  single {t} rep {rep}: {row['goodput_mbit']:.1f} Mbit/s = "
                f"{row['fraction']:.3f} of {bound:.1f}"
                + (f"; {cpu:.1f} us CPU per packet" if cpu is not None else ""))
    for t, rows in runs.items():
        cpus = [x["cpu"] for x in rows]
        out[t] = {"runs": rows,
                  "fraction": summary([x["fraction"] for x in rows]),
                  "goodput_mbit": summary([x["goodput_mbit"] for x in rows]),
                  "sender_share": summary([x["cpu"]["share"].get(x["process"].get(src))
                                           for x in rows]),
                  "receiver_share": summary([x["cpu"]["share"].get(x["process"].get(dst))
                                             for x in rows])}
        for k in ("us_per_packet", "user_us", "sys_us", "packets_per_core_s",
                  "wakeups_per_packet", "acks_per_packet"):
            if any(k in c for c in cpus):
                out[t][k] = summary([c.get(k) for c in cpus])
    return out


def _process_of(r: TransferResult) -> dict[str, str]:
    """The process each host ran in, as ``driver_cpu``'s shares name it (an engine, or
    the host's own process)."""
    return {h: f"engine {d['engine']}" if "engine" in d else h for h, d in r.drivers.items()}


# MRC's path selectors compared on the permutation (oblivious is MRC's default).
SELECTORS = ("bitmap", "reps")


def _permutation(spec: MultiPlaneClos, size: int) -> tuple[list[Transfer], float]:
    """Every host sends ``size`` bytes to the host ``hosts_per_leaf`` places on (the next
    rack); the ideal aggregate goodput (every NIC of every host busy)."""
    hosts = [h.name for h in spec.hosts]
    k = spec.hosts_per_leaf
    transfers = [Transfer(hosts[i], hosts[(i + k) % len(hosts)], size) for i in range(len(hosts))]
    return transfers, len(hosts) * spec.planes * spec.host_link.rate_mbit * payload_efficiency()


def _permutation_run(fab: Fabric, t: str, transfers: list[Transfer], ideal: float,
                     config: dict | None = None) -> dict:
    """One permutation run: goodput against the ideal, each driver's share of a core and
    the whole machine's CPU during it (a CPU-bound run shows as a busy share near 1)."""
    machine = MachineCpu()
    r = run_transfers(fab, t, transfers, config=config, deadline_s=180, on_start=machine.start)
    row = _row(r, ideal)
    row["machine_cpu"] = machine.stop()
    cpu = driver_cpu(r)
    row["max_driver_share"] = max((v for v in cpu["share"].values() if v is not None),
                                  default=None)
    row["us_per_packet"] = cpu.get("us_per_packet")
    if cpu.get("data_packets"):  # the whole machine's CPU per data packet, kernel included
        row["machine_us_per_packet"] = round(
            row["machine_cpu"]["cpu_s"] / cpu["data_packets"] * 1e6, 1)
    row["completions_s"] = sorted(round(m["t"], 3) for m in r.messages)
    return row


def permutation(fab: Fabric, size: int, say: Callable[[str], None]) -> dict:
    """The permutation once per transport and per MRC path selector: with every NIC busy,
    each leaf's uplinks are exactly full."""
    spec = fab.spec
    assert isinstance(spec, MultiPlaneClos)  # the bench's fabric (bench_spec)
    transfers, ideal = _permutation(spec, size)
    out: dict[str, Any] = {"flows": len(transfers), "bytes_each": size,
                           "ideal_mbit": round(ideal, 2)}
    runs = [(t, t, None) for t in TRANSPORTS] + [
        (f"mrc_{sel}", "mrc", registry.get("mrc").plan_config(
            registry.get("mrc").settings({"selector": sel}))) for sel in SELECTORS]
    for label, t, config in runs:
        row = out[label] = _permutation_run(fab, t, transfers, ideal, config)
        say(f"  permutation {label}: {row['goodput_mbit']:.1f} Mbit/s = "
            f"{row['fraction']:.2f} of ideal {ideal:.1f}; busiest driver "
            f"{row['max_driver_share'] or 0:.0%} of a core; machine "
            f"{row['machine_cpu']['busy']:.0%} busy")
    return out


def permutation_target(fab: Fabric, size: int, say: Callable[[str], None],
                       reps: int = 3) -> dict:
    """The permutation at the fast data path's target rate, ``reps`` times interleaved
    (MRC, RC, TCP, MRC, ...): the fraction of ideal and the busiest driver process's share
    of a core as median [min-max], and whether MRC met its target (>= ``PERM_TARGET`` of
    ideal)."""
    spec = fab.spec
    assert isinstance(spec, MultiPlaneClos)  # the bench's fabric (bench_spec)
    transfers, ideal = _permutation(spec, size)
    out: dict[str, Any] = {"flows": len(transfers), "bytes_each": size, "reps": reps,
                           "rate_mbit": spec.host_link.rate_mbit, "ideal_mbit": round(ideal, 2)}
    runs: dict[str, list[dict]] = {t: [] for t in TRANSPORTS}
    kernel: list[dict] = []
    for rep in range(reps):
        k = bare_permutation(fab, [(x.src, x.dst) for x in transfers], PAYLOAD)
        kernel.append(k)
        say(f"  permutation, the kernel alone, rep {rep}: {k['delivered_fraction']:.2f} of "
            f"line rate delivered; {k['machine_us_per_packet']:.0f} us of machine CPU per "
            f"datagram; machine {k['machine_cpu']['busy']:.0%} busy")
        for t in TRANSPORTS:
            row = _permutation_run(fab, t, transfers, ideal)
            runs[t].append(row)
            say(f"  permutation {t} rep {rep}: {row['fraction']:.2f} of ideal; last flow "
                f"{row['completions_s'][-1]:.2f} s; busiest driver "
                f"{row['max_driver_share'] or 0:.0%} of a core; machine "
                f"{row['machine_cpu']['busy']:.0%} busy")
    for t, rows in runs.items():
        out[t] = {"runs": rows,
                  "fraction": summary([x["fraction"] for x in rows]),
                  "max_driver_share": summary([x["max_driver_share"] for x in rows]),
                  "machine_busy": summary([x["machine_cpu"]["busy"] for x in rows]),
                  "machine_us_per_packet": summary([x.get("machine_us_per_packet")
                                                    for x in rows])}
    out["kernel"] = {"runs": kernel,
                     "delivered_fraction": summary([k["delivered_fraction"] for k in kernel]),
                     "machine_us_per_packet": summary([k["machine_us_per_packet"]
                                                       for k in kernel])}
    # What the target leaves a transport: the machine's CPU per datagram at PERM_TARGET
    # of the ideal rate, less what the kernel alone spends carrying each datagram.
    pps = PERM_TARGET * ideal * 1e6 / (PAYLOAD * 8)
    budget = (os.cpu_count() or 1) / pps * 1e6
    floor = out["kernel"]["machine_us_per_packet"]["median"]
    mrc = out["mrc"]
    out["budget"] = {"machine_us_per_packet_at_target": round(budget, 1),
                     "kernel_us": floor, "left_for_transport_us": round(budget - floor, 1),
                     "mrc_transport_us": round(mrc["machine_us_per_packet"]["median"] - floor, 1)
                     if mrc["machine_us_per_packet"]["median"] is not None else None}
    out["mrc_target_met"] = bool(mrc["fraction"]["median"] >= PERM_TARGET)
    return out


def scale(say: Callable[[str], None], size: int, rate: float = RATE_PERM_TARGET,
          most_per_leaf: int = 8, reps: int = 2, transport: str = "mrc") -> dict:
    """The permutation at ``rate`` on fabrics of 1, 2, ... ``most_per_leaf`` hosts per rack
    (4 racks): the fraction of ideal per size, median [min-max] over ``reps``, up to the
    first size whose median falls below ``PERM_TARGET`` (after one that reached it); the
    most hosts that reached it (``most_hosts``, 0: none did)."""
    out: dict[str, Any] = {"rate_mbit": rate, "target": PERM_TARGET, "transport": transport,
                           "bytes_each": size, "reps": reps, "sizes": {}, "most_hosts": 0}
    for k in range(1, most_per_leaf + 1):
        spec = bench_spec(rate, hosts_per_leaf=k)
        with Fabric(spec, name="benchsc", progress=lambda m: say(f"    fabric: {m}")) as fab:
            transfers, ideal = _permutation(spec, size)
            rows = [_permutation_run(fab, transport, transfers, ideal) for _ in range(reps)]
        hosts = len(spec.hosts)
        frac = summary([r["fraction"] for r in rows])
        out["sizes"][hosts] = {"fraction": frac,
                               "machine_busy": summary([r["machine_cpu"]["busy"] for r in rows]),
                               "max_driver_share": summary([r["max_driver_share"]
                                                            for r in rows])}
        say(f"  scale: {hosts} hosts, {transport} {frac['median']:.2f} "
            f"[{frac['min']:.2f}-{frac['max']:.2f}] of ideal")
        if frac["median"] >= PERM_TARGET:
            out["most_hosts"] = hosts
        elif out["most_hosts"]:
            break
    return out


def _row(r: TransferResult, bound: float) -> dict:
    return {"ok": r.ok, "completion_s": round(r.completion_s, 4),
            "goodput_mbit": round(r.goodput_mbit, 2),
            "fraction": round(r.goodput_mbit / bound, 3), "cpu_s": round(r.cpu_s(), 3)}


def bare_sendto(fab: Fabric, seconds: float = 1.0) -> dict:
    """Datagrams per second of a bare Python sendto loop (8000 B, to a local discard)."""
    k = fab.node_kernel(fab.spec.hosts[0].name)
    with entered(k.fd):
        rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        rx.bind(("::1", 0))
        dst = rx.getsockname()[:2]
        buf = bytes(PAYLOAD)
        n = 0
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            for _ in range(100):
                try:
                    tx.sendto(buf, dst)
                except OSError:
                    pass
            n += 100
        return {"datagrams_per_s": round(n / seconds),
                "us_per_datagram": round(1e6 * seconds / n, 2)}
    finally:
        rx.close()
        tx.close()


def ride_through(size: int, rate: float, say: Callable[[str], None], reps: int = 3) -> dict:
    """RC vs MRC under BGP while the leaf-spine link under the transport's plane-0 traffic
    is cut, ``reps`` times interleaved (RC, MRC, RC, ...); time lost against the same
    transfer uncut in the same repetition, median [min-max]."""
    spec = bench_spec(rate, hosts_per_leaf=1)
    out: dict = {"bytes": size, "rate_mbit": rate, "reps": reps}
    runs: dict[str, list[dict]] = {"rc": [], "mrc": []}
    with Fabric(spec, name="ridethru", control_plane="bgp",
                progress=lambda m: say(f"    fabric: {m}")) as fab:
        for rep in range(reps):
            for t in runs:
                runs[t].append(_ride_through_once(fab, t, size, rate))
                run = runs[t][-1]
                say(f"  ride-through {t} rep {rep}: cut {run['cut']['link']} at "
                    f"{run['cut']['at']} s; done in {run['completion_s']:.2f} s vs "
                    f"{run['clean_completion_s']:.2f} s without: "
                    f"{run['time_lost_s'] * 1000:.0f} ms lost")
                fab.wait_converged(30)
    for t, rs in runs.items():
        out[t] = {"time_lost_s": summary([r["time_lost_s"] for r in rs]),
                  "longest_stall_s": summary([r["longest_stall_s"] for r in rs]), "runs": rs}
    return out


def _ride_through_once(fab: Fabric, t: str, size: int, rate: float) -> dict:
    spec = fab.spec
    src, dst = spec.hosts[0].name, spec.hosts[-1].name
    dst_leaf = spec.leaf_of(dst, 0).name
    clean = run_transfers(fab, t, [Transfer(src, dst, size)], deadline_s=120)
    # cut at 40 % of the clean transfer (less the 0.2 s traffic sample that picks the
    # busiest spine): mid-transfer whatever the size
    cut_at = max(0.0, 0.4 * clean.completion_s - 0.2)
    cut: dict = {}
    cutters: list[threading.Thread] = []

    def cut_under_traffic(t0: float) -> None:
        def run() -> None:
            time.sleep(max(0.0, t0 + cut_at - time.monotonic()))
            spine = _busiest_spine(fab, 0, dst_leaf)
            link = LinkDown(f"{dst_leaf}-{spine}")
            cut["link"], cut["at"] = link.link, round(time.monotonic() - t0, 3)
            link.apply(fab)
            cut["failure"] = link
        cutters.append(threading.Thread(target=run, daemon=True))
        cutters[-1].start()

    r = run_transfers(fab, t, [Transfer(src, dst, size)], deadline_s=120,
                      on_start=cut_under_traffic)
    for th in cutters:
        th.join(30)
    if "failure" in cut:
        cut.pop("failure").restore(fab)
    if cut.get("at") is None or cut["at"] >= r.completion_s:
        raise EmuError(f"ride-through {t}: the cut (at {cut.get('at')} s) came after the "
                       f"transfer ended ({r.completion_s:.2f} s)")
    timeline = r.drivers[dst]["timeline"]
    return {**_row(r, spec.planes * rate * payload_efficiency()), "cut": cut,
            "clean_completion_s": round(clean.completion_s, 4),
            "time_lost_s": round(r.completion_s - clean.completion_s, 3),
            "longest_stall_s": longest_stall(timeline, digits=3), "timeline": timeline}


def _busiest_spine(fab: Fabric, plane: int, leaf: str) -> str:
    """The spine of ``plane`` sending the most packets into ``leaf`` over the next 0.2 s."""
    spines = [s.name for s in fab.spec.spine_nodes if s.plane == plane]
    port = "l" + leaf.split("l")[-1]
    before = {s: interface_packets(fab.kernels[s])[port][1] for s in spines}
    time.sleep(0.2)
    after = {s: interface_packets(fab.kernels[s])[port][1] for s in spines}
    return max(spines, key=lambda s: after[s] - before[s])


def longest_stall(timeline: Sequence[Sequence[float]], digits: int = 4) -> float:
    """Longest time in which the receiver placed no byte (after its first), from its
    ``timeline`` of (t, bytes placed) samples; rounded to ``digits`` decimals."""
    longest, since = 0.0, None
    for (t_prev, b_prev), (t, b) in zip(timeline, timeline[1:], strict=False):
        if b == b_prev and b_prev > 0:
            since = t_prev if since is None else since
            longest = max(longest, t - since)
        else:
            since = None
    return round(longest, digits)


def bench_transport(say: Callable[[str], None] = print, quick: bool = False,
                    rate_single: float = RATE_SINGLE, rate_perm: float = RATE_PERM) -> dict:
    """Run the whole transport benchmark; returns the results."""
    require_root("emu bench transport")
    out: dict = {}
    with Fabric(bench_spec(rate_single), name="benchtp",
                progress=lambda m: say(f"    fabric: {m}")) as fab:
        say(f"single connection ({rate_single:g} Mbit/s links)")
        out["single"] = single(fab, (8 if quick else 32) << 20, say, reps=2 if quick else 3)
        out["bare_sendto"] = bare_sendto(fab)
        src, dst = out["single"]["src"], out["single"]["dst"]
        out["bare_path"] = bare_path(fab, src, dst, rate_single * 0.9, PAYLOAD)
        say(f"  bare path {src} -> {dst}: {out['bare_path']['us_per_packet']:.1f} us of "
            f"kernel CPU per datagram (send {out['bare_path']['tx_us']:.1f}, receive "
            f"{out['bare_path']['rx_us']:.1f})")
    with Fabric(bench_spec(rate_perm), name="benchtp",
                progress=lambda m: say(f"    fabric: {m}")) as fab:
        say(f"permutation ({rate_perm:g} Mbit/s links)")
        out["permutation"] = permutation(fab, (1 if quick else 3) << 20, say)
    with Fabric(bench_spec(RATE_PERM_TARGET), name="benchtp",
                progress=lambda m: say(f"    fabric: {m}")) as fab:
        say(f"permutation at the target rate ({RATE_PERM_TARGET:g} Mbit/s links)")
        # 8 MiB: 0.68 s at the ideal rate, so the start is not most of the run
        pt = out["permutation_target"] = permutation_target(
            fab, (3 if quick else 8) << 20, say, reps=2 if quick else 3)
        f, b = pt["mrc"]["fraction"], pt["budget"]
        say(f"  MRC {f['median']:.2f} [{f['min']:.2f}-{f['max']:.2f}] of ideal against "
            f"{PERM_TARGET:.2f}: {'met' if pt['mrc_target_met'] else 'not met'}. At "
            f"{PERM_TARGET:.2f} of ideal this machine has {b['machine_us_per_packet_at_target']}"
            f" us of CPU per datagram; the kernel alone takes {b['kernel_us']}, leaving "
            f"{b['left_for_transport_us']}; MRC's drivers took {b['mrc_transport_us']}")
    say(f"scale: the most hosts at {PERM_TARGET:.2f} of ideal ({RATE_PERM_TARGET:g} Mbit/s)")
    out["scale"] = scale(say, (3 if quick else 8) << 20, most_per_leaf=4 if quick else 8)
    say(f"  scale: {out['scale']['most_hosts']} hosts")
    say("failure ride-through (BFD + BGP)")
    out["ride_through"] = ride_through((8 if quick else 24) << 20, 50.0, say,
                                       reps=2 if quick else 3)
    bare = out["bare_path"]["us_per_packet"]
    out["cpu"] = {"bare_sendto_loopback": out["bare_sendto"], "bare_path_us": bare}
    for t in registry.names(lambda t: t.core is not None and t.caps.reliable):  # ours
        us = out["single"][t]["us_per_packet"]["median"]
        out["cpu"][t] = {
            "us_per_packet": us, "user_us": out["single"][t]["user_us"]["median"],
            "sys_us": out["single"][t]["sys_us"]["median"],
            "packets_per_core_s": out["single"][t]["packets_per_core_s"]["median"],
            "over_bare_path_us": round(us - bare, 2) if us is not None else None,
            "x_bare_path": round(us / bare, 2) if us and bare else None}
        say(f"  {t}: {us} us CPU per packet (user {out['cpu'][t]['user_us']}, system "
            f"{out['cpu'][t]['sys_us']}); {out['cpu'][t]['x_bare_path']} x the bare path")
    return out
