"""`emu bench fabric`: build and teardown speed, ours against plain Mininet.

For each reference graph, our build (namespaces, links, queues, every SRv6 and
ECMP route) and teardown are timed next to plain Mininet building and stopping
the same graph with its own Link class and no routes. Both run in this process,
one after the other, so the ratio is what to read on a noisy machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mininet.link import Link
from mininet.net import Mininet
from mininet.node import Host, Node

from emu import interrupts
from emu.errors import require_root
from emu.fabric import Fabric
from emu.mininet_topo import MultiPlaneClosTopo
from emu.netns import ns_inode
from emu.registry import kill_in
from topologies import MultiPlaneClos

REFERENCE = MultiPlaneClos(planes=2, spines=4, leaves=4, hosts_per_leaf=4)
LARGE = MultiPlaneClos(planes=4, spines=8, leaves=8, hosts_per_leaf=4)


class PlainRouter(Node):
    """What a Mininet user writes for a router: a namespace node, nothing else."""

    def __init__(self, name: str, **params: Any) -> None:
        params["inNamespace"] = True
        super().__init__(name, **params)

    def start(self, controllers: Any = None) -> None:
        """No routes: the reference point builds the graph only."""


def _time_ours(spec: MultiPlaneClos) -> dict:
    fab = Fabric(spec, name="bench")
    t0 = time.monotonic()
    try:
        fab.start()
        build = time.monotonic() - t0
        routes = sum(len(p.routes) for p in fab.plans.values())
    finally:
        stop = fab.stop()  # interrupted or not: never leave the fabric behind
    return {"build_s": round(build, 3), "teardown_s": round(stop, 3), "routes": routes}


def _time_plain(spec: MultiPlaneClos) -> dict:
    Mininet.inited = True  # skip Mininet's host-wide sysctl changes (fixLimits)
    topo = MultiPlaneClosTopo(spec, router_cls=PlainRouter)
    t0 = time.monotonic()
    net = Mininet(topo=topo, host=Host, link=Link, controller=None, autoSetMacs=False,
                  build=False)
    t1 = t0
    try:
        net.build()
        net.start()
        build = time.monotonic() - t0
        t1 = time.monotonic()
    finally:
        # interrupted or not, never leave the reference's namespaces behind
        inodes = {i for n in net.hosts + net.switches if (i := ns_inode(n.pid)) is not None}
        with interrupts.uninterrupted():
            try:
                net.stop()
            finally:
                kill_in(inodes)
    return {"build_s": round(build, 3), "teardown_s": round(time.monotonic() - t1, 3)}


def bench_fabric(say: Callable[[str], None] = print, large: bool = True) -> dict:
    """Time both builders on the reference and (optionally) the large graph."""
    require_root("emu bench fabric")
    out: dict = {"graphs": []}
    for label, spec in (("reference", REFERENCE), ("large", LARGE))[: 2 if large else 1]:
        nodes = len(spec.nodes)
        say(f"{label}: {spec.planes} planes x {spec.spines} spines x {spec.leaves} leaves, "
            f"{spec.host_count} hosts ({nodes} namespaces, {len(spec.links)} links)")
        ours = _time_ours(spec)
        say(f"  ours:          build {ours['build_s']:.2f} s (with {ours['routes']} routes), "
            f"teardown {ours['teardown_s']:.2f} s")
        plain = _time_plain(spec)
        say(f"  plain Mininet: build {plain['build_s']:.2f} s (no routes), "
            f"teardown {plain['teardown_s']:.2f} s")
        for d in (ours, plain):
            d["nodes_per_s"] = round(nodes / d["build_s"], 1)
            d["total_s"] = round(d["build_s"] + d["teardown_s"], 3)
        out["graphs"].append({
            "graph": label, "planes": spec.planes, "spines": spec.spines, "leaves": spec.leaves,
            "hosts": spec.host_count, "nodes": nodes, "links": len(spec.links),
            "ours": ours, "plain_mininet": plain,
            "speedup_build": round(plain["build_s"] / ours["build_s"], 2),
            "speedup_teardown": round(plain["teardown_s"] / max(ours["teardown_s"], 1e-3), 1),
            "speedup_total": round(plain["total_s"] / ours["total_s"], 2),
        })
        say(f"  ours is {out['graphs'][-1]['speedup_total']:.1f}x faster end to end")
    return out
