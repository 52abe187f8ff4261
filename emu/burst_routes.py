"""Routing microbursts onto their target egress (pure: topology in, paths out).

Every source gets a destination host and an SRv6 path whose hops cross the
target egress (``plan_routes``). Upstream of the target the paths are spread so
that, where the topology allows it, no other egress is shared by two sources:
the target is then the first queue where the bursts meet, and the only one that
can overflow (``shared_upstream`` lists the exceptions).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emu.burst_sender import FRAME_OVERHEAD, HEADER
from emu.burst_spec import MicroburstError, MicroburstSpec

if TYPE_CHECKING:
    from topologies import Link, MultiPlaneClos, Path, ScaleAcross

Egress = tuple[str, str]


@dataclass(frozen=True)
class BurstRoute:
    """One source's burst: its destination and the SRv6 path that crosses the target."""

    source: str
    path: Path

    @property
    def dst(self) -> str:
        return self.path.dst

    @property
    def egresses(self) -> tuple[Egress, ...]:
        return tuple((h.node, h.out_ifname) for h in self.path.hops)

    def before(self, target: Egress) -> tuple[Egress, ...]:
        """The egresses this burst crosses before ``target`` (its own NIC first)."""
        keys = self.egresses
        return keys[:keys.index(target)]


def parse_target(topo: MultiPlaneClos | ScaleAcross, target: str) -> Egress:
    """``"node:ifname"`` -> (node, ifname), checked against the topology."""
    from topologies import Role, TopologyError

    node_name, _, ifname = target.partition(":")
    try:
        node = topo.node(node_name)
    except TopologyError as e:
        raise MicroburstError(f"target={target!r}: {e}") from None
    if node.role is Role.HOST:
        raise MicroburstError(
            f"target={target!r} is invalid: {node_name} is a host; a microburst targets a "
            "switch egress (a leaf or spine port), e.g. 'p0l0:h1' or 'p0s0:l1'")
    ports = [p.ifname for p in topo.ports(node_name)]
    if ifname not in ports:
        raise MicroburstError(f"target={target!r} is invalid: {node_name} has no port "
                              f"{ifname!r}; valid ports are {', '.join(ports)}")
    return node_name, ifname


def egress_link(topo: MultiPlaneClos | ScaleAcross, egress: Egress) -> Link:
    """The link an egress ``(node, ifname)`` transmits onto (its rate and FIFO depth)."""
    for lk in topo.links:
        if egress in ((lk.a.node, lk.a.ifname), (lk.b.node, lk.b.ifname)):
            return lk
    raise MicroburstError(f"egress {':'.join(egress)!r} is on no link of the fabric")


def plan_routes(topo: MultiPlaneClos | ScaleAcross, spec: MicroburstSpec) -> tuple[BurstRoute, ...]:
    """A destination and a path through the target egress for every source, in source order.

    Sources with the fewest choices are placed first; each takes the path that
    least loads the egresses it crosses before the target (then: a destination
    used least, the least loaded egresses after the target, ``seed`` order).
    """
    from topologies import Role, TopologyError

    target = parse_target(topo, spec.target)
    host_names = [h.name for h in topo.hosts]
    if spec.payload > topo.mtu - 112:
        raise MicroburstError(f"payload={spec.payload} is invalid: must be in "
                              f"[{HEADER.size}, {topo.mtu - 112}] for MTU {topo.mtu}")
    candidates: dict[str, list[Path]] = {}
    for src in spec.sources:
        try:
            node = topo.node(src)
        except TopologyError as e:
            raise MicroburstError(f"sources: {e}") from None
        if node.role is not Role.HOST:
            raise MicroburstError(f"sources: {src!r} is a {node.role.value}, not a host; "
                                  f"hosts are {', '.join(host_names[:8])}"
                                  + (f", ... ({len(host_names)} in total)"
                                     if len(host_names) > 8 else ""))
        cands = [p for dst in host_names if dst != src for p in topo.paths(src, dst)
                 if any((h.node, h.out_ifname) == target for h in p.hops)]
        if not cands:
            able = [h for h in host_names if _reaches(topo, h, target)]
            raise MicroburstError(
                f"source {src!r} has no path through target {spec.target!r}; hosts that have "
                f"one: {', '.join(able[:8]) or 'none'}" + (" ..." if len(able) > 8 else ""))
        random.Random(f"{spec.seed}:{src}").shuffle(cands)
        candidates[src] = cands
    if spec.rate_mbit is not None:
        # The sources' NIC line rate: the slowest host link among the sources (in a
        # ScaleAcross each DC has its own host_link, so it is read per source).
        line_mbit = min(egress_link(topo, (src, port.ifname)).spec.rate_mbit
                        for src in spec.sources for port in topo.ports(src))
        if spec.rate_mbit > line_mbit:
            raise MicroburstError(f"rate_mbit={spec.rate_mbit!r} is invalid: must be in (0, "
                                  f"{line_mbit:g}] (the sources' NIC line rate), "
                                  "or None for line rate")
    up: Counter[Egress] = Counter()
    down: Counter[Egress] = Counter()
    dsts: Counter[str] = Counter()
    chosen: dict[str, Path] = {}
    order = sorted(spec.sources, key=lambda s: len(candidates[s]))  # stable: ties keep order

    def cost(p: Path) -> tuple[int, int, int, int]:
        keys = [(h.node, h.out_ifname) for h in p.hops]
        i = keys.index(target)
        before, after = keys[:i], keys[i + 1:]
        return (max((up[k] for k in before), default=0), dsts[p.dst],
                sum(down[k] for k in after), sum(up[k] for k in before))

    for src in order:
        best = min(candidates[src], key=cost)
        keys = [(h.node, h.out_ifname) for h in best.hops]
        i = keys.index(target)
        up.update(keys[:i])
        down.update(keys[i + 1:])
        dsts[best.dst] += 1
        chosen[src] = best
    return tuple(BurstRoute(s, chosen[s]) for s in spec.sources)


def _reaches(topo: MultiPlaneClos | ScaleAcross, host: str, target: Egress) -> bool:
    return any((h.node, h.out_ifname) == target for dst in topo.hosts if dst.name != host
               for p in topo.paths(host, dst.name) for h in p.hops)


def shared_upstream(routes: tuple[BurstRoute, ...], target: Egress) -> dict[Egress, int]:
    """Egresses before the target that more than one burst crosses (they may drop too)."""
    load: Counter[Egress] = Counter()
    for r in routes:
        load.update(r.before(target))
    return {k: n for k, n in load.items() if n > 1}


def frame_bytes(payload: int, srh_len: int) -> int:
    """Ethernet + IPv6 + SRH + UDP + payload of one burst datagram (what HTB counts)."""
    return FRAME_OVERHEAD + srh_len + payload


def route_frame_bytes(route: BurstRoute, payload: int) -> int:
    """The frame of one source's burst datagrams: the SRH length depends on its path."""
    from emu.srv6 import srh_option

    return frame_bytes(payload, len(srh_option(route.path)))
