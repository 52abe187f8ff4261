"""`emu demo`: build the default fabric, prove its paths, measure their throughput.

Steps: (1) every SRv6 path of a few host pairs carries a probe, and the probe
is seen on exactly the interfaces of that path (router counters); (2) each
path of one cross-rack pair alone, then all its paths at once, at the link
rate; (3) a rack-to-rack permutation of flows, once hashed by ECMP and once
placed on distinct (plane, spine) paths by source routing. Results go to a
JSON file as each step finishes.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path as FsPath

from emu import safefs
from emu.counters import interface_packets
from emu.fabric import Fabric
from emu.netns import entered
from emu.srv6 import pin_socket
from emu.traffic import Flow, FlowResult, run_flows
from topologies import MultiPlaneClos, Path

PROBES = 20
PORT = 41000


def probe_path(fab: Fabric, path: Path, count: int = PROBES) -> bool:
    """Send ``count`` probes on ``path``; True if all arrived and every hop's
    counters moved by exactly ``count`` (and no other interface moved)."""
    spec = fab.spec
    before = {n: interface_packets(k) for n, k in fab.kernels.items()}
    with entered(fab.node_kernel(path.dst).fd):
        rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with entered(fab.node_kernel(path.src).fd):
        tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        rx.bind((str(spec.address(path.dst)), PORT))
        rx.settimeout(1.0)
        tx.bind((str(spec.address(path.src)), 0))
        pin_socket(tx, path)
        for i in range(count):
            tx.sendto(i.to_bytes(4, "big"), (str(spec.address(path.dst)), PORT))
        got = sorted(int.from_bytes(rx.recv(64), "big") for _ in range(count))
    except TimeoutError:
        return False
    finally:
        rx.close()
        tx.close()
    if got != list(range(count)):
        return False
    after = {n: interface_packets(k) for n, k in fab.kernels.items()}
    expected: dict[tuple[str, str], list[int]] = {}
    for hop in path.hops:
        expected.setdefault((hop.node, hop.out_ifname), [0, 0])[1] += count
        expected.setdefault((hop.next_node, hop.in_ifname), [0, 0])[0] += count
    for node, ifaces in after.items():
        for ifname, (rx_n, tx_n) in ifaces.items():
            if ifname == "lo":
                continue
            d = [rx_n - before[node][ifname][0], tx_n - before[node][ifname][1]]
            if d != expected.get((node, ifname), [0, 0]):
                return False
    return True


def run_demo(out_dir: FsPath, seconds: float = 1.0,
             say: Callable[[str], None] = print) -> dict:
    """Run the demo on the default fabric; returns (and writes) the results."""
    spec = MultiPlaneClos()
    safefs.mkdir_private(out_dir)
    out_file = out_dir / "demo.json"
    results: dict = {"fabric": asdict(spec), "link_rate_mbit": spec.host_link.rate_mbit}

    def save() -> None:
        safefs.write_json(out_file, results, indent=1, default=str)

    hosts = [h.name for h in spec.hosts]
    per_rack = spec.hosts_per_leaf
    pairs = [(hosts[0], hosts[-1]), (hosts[0], hosts[1]),
             (hosts[per_rack + 1], hosts[2 * per_rack])]
    with Fabric(spec, progress=lambda m: say(f"  fabric: {m}")) as fab:
        bt = fab.build_times
        assert bt is not None  # set by a successful start() (the with block)
        results["build_seconds"] = round(bt.total, 3)
        say(f"built {len(spec.nodes)} namespaces, {len(spec.links)} links in {bt.total:.2f} s")

        say("[1/3] every path of a few host pairs, checked on router counters")
        checks = []
        for src, dst in pairs:
            for p in spec.paths(src, dst):
                ok = probe_path(fab, p)
                checks.append({"src": src, "dst": dst, "plane": p.plane, "spine": p.spine,
                               "hops": [h.node for h in p.hops] + [dst], "ok": ok})
        results["path_checks"] = checks
        save()
        bad = [c for c in checks if not c["ok"]]
        say(f"      {len(checks) - len(bad)}/{len(checks)} paths delivered every probe on "
            "exactly their own interfaces")

        src, dst = pairs[0]
        paths = spec.paths(src, dst)
        rate = spec.host_link.rate_mbit
        say(f"[2/3] UDP throughput {src} -> {dst}: each of {len(paths)} paths alone, then all")
        per_path = []
        for i, p in enumerate(paths):
            r = run_flows(fab, [Flow(src, dst, p)], rate_mbit=rate * 1.2, seconds=seconds)[0]
            per_path.append(_row(r, rate, f"plane {p.plane} spine {p.spine}"))
            say(f"      [{i + 1}/{len(paths)}] plane {p.plane} spine {p.spine}: "
                f"{r.goodput_mbit:6.1f} Mbit/s")
        results["per_path"] = per_path
        save()
        # Every path at once: each plane NIC is shared by that plane's spines.
        share = rate * 1.2 / spec.spines
        together = run_flows(fab, [Flow(src, dst, p) for p in paths], rate_mbit=share,
                             seconds=seconds)
        agg = sum(r.goodput_mbit for r in together)
        ideal = spec.planes * together[0].ceiling_mbit(rate)
        results["all_paths"] = {"goodput_mbit": round(agg, 2), "ideal_mbit": round(ideal, 2),
                                "fraction": round(agg / ideal, 3)}
        save()
        say(f"      all {len(paths)} paths together: {agg:.1f} Mbit/s "
            f"({agg / ideal:.0%} of {ideal:.1f}, the {spec.planes} NICs' payload ceiling)")

        say("[3/3] rack-to-rack permutation: ECMP hashing vs one (plane, spine) per flow")
        half = spec.leaves // 2 * per_rack
        srcs, dsts = hosts[:half], hosts[half:2 * half]
        ecmp = run_flows(fab, [Flow(s, d, None, sport=50000 + i)
                               for i, (s, d) in enumerate(zip(srcs, dsts, strict=True))],
                         rate_mbit=rate, seconds=seconds)
        routes = [spec.path(s, d, i % spec.planes, (i // spec.planes) % spec.spines)
                  for i, (s, d) in enumerate(zip(srcs, dsts, strict=True))]
        placed = run_flows(fab, [Flow(s, d, p) for s, d, p in zip(srcs, dsts, routes, strict=True)],
                           rate_mbit=rate, seconds=seconds)
        results["permutation"] = {
            "flows": len(srcs),
            "ecmp": [_row(r, rate, f"{r.flow.src}->{r.flow.dst}") for r in ecmp],
            "srv6_placed": [_row(r, rate, f"{r.flow.src}->{r.flow.dst}") for r in placed],
        }
        for name, rs in (("ecmp", ecmp), ("srv6_placed", placed)):
            tot = sum(r.goodput_mbit for r in rs)
            ideal = sum(r.ceiling_mbit(rate) for r in rs)
            results["permutation"][f"{name}_fraction"] = round(tot / ideal, 3)
        save()
    _print_table(results, say)
    say(f"results: {out_file}")
    return results


def _row(r: FlowResult, rate: float, label: str) -> dict:
    ceiling = r.ceiling_mbit(rate)
    return {"flow": label, "goodput_mbit": round(r.goodput_mbit, 2),
            "ceiling_mbit": round(ceiling, 2), "fraction": round(r.goodput_mbit / ceiling, 3),
            "sent": r.sent, "received": r.received}


def _print_table(res: dict, say: Callable[[str], None]) -> None:
    say("")
    say(f"{'measurement':<34} {'Mbit/s':>8} {'of ceiling':>11}")
    say("-" * 55)
    for row in res["per_path"]:
        say(f"{'path ' + row['flow']:<34} {row['goodput_mbit']:>8.1f} {row['fraction']:>10.0%}")
    a = res["all_paths"]
    say(f"{'all paths of one pair':<34} {a['goodput_mbit']:>8.1f} {a['fraction']:>10.0%}")
    perm = res["permutation"]
    for name, label in (("ecmp", "permutation, ECMP"), ("srv6_placed", "permutation, SRv6 placed")):
        tot = sum(r["goodput_mbit"] for r in perm[name])
        say(f"{label + ' (' + str(perm['flows']) + ' flows)':<34} {tot:>8.1f} "
            f"{perm[name + '_fraction']:>10.0%}")
    ok = sum(c["ok"] for c in res["path_checks"])
    say(f"paths verified on router counters: {ok}/{len(res['path_checks'])}")
