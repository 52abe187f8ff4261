"""The forwarding state of a ScaleAcross (several DCs joined by DCI routers), as data.

Each DC keeps exactly the routes ``plan_fabric`` gives it on its own; this
module adds what crosses DCs (static routes only, no control plane yet):

* spines: every other DC's host /32 and SID /32, and their own DC's DCI router
  locator (of their plane), via their DCI port ``x``;
* leaves: their plane's DCI router locator over all their spines (so hosts can
  name a DCI router SID; no path uses it today);
* DCI routers: their own DC's hosts (/32) and their plane's leaf SIDs (one /64)
  over every spine of their plane, each spine's locator over its direct port,
  every other DC's host /32 and SID /32 over the long-haul port ``d{dc}``, and
  their own SID (End).

Hosts need nothing new: their route to ``ALL_HOSTS`` (``fd5a::/24``) already
covers every DC.  A destination-routed packet to a remote DC goes host -> leaf
-> (ECMP) spine -> DCI router -> remote DCI router -> (ECMP) spine -> leaf ->
host, staying in the plane the source host's NIC chose.

Interfaces, MACs and neighbours are computed here from the global link list
``ScaleAcross.links`` (``plan_fabric`` numbers each DC's links from 0, so its
MACs collide across DCs and are not reused).
"""

from __future__ import annotations

from dataclasses import replace
from ipaddress import IPv6Address, IPv6Network

from topologies.addressing import (
    dc_host_prefix,
    dc_sid_block,
    sid_locator,
    tier_sid_block,
)
from topologies.roles import Role
from topologies.routing import (
    ECMP_MODES,
    EcmpMode,
    InterfacePlan,
    Neighbor,
    NextHop,
    NodePlan,
    Route,
    link_macs,
    plan_fabric,
)
from topologies.scaleacross import ScaleAcross

__all__ = ["plan_scaleacross"]


def plan_scaleacross(sa: ScaleAcross, ecmp: EcmpMode = "static") -> dict[str, NodePlan]:
    """The complete forwarding state of ``sa``, per node name (every DC's nodes and
    every DCI router).

    Only ``ecmp="static"`` exists today; ``"bgp"`` raises NotImplementedError.
    """
    if ecmp == "bgp":
        raise NotImplementedError(
            "ecmp='bgp' is not implemented for a ScaleAcross yet (no BGP sessions to or "
            "between DCI routers): use ecmp='static'"
        )
    if ecmp not in ECMP_MODES:
        raise ValueError(f"ecmp={ecmp!r} is invalid: must be one of {', '.join(ECMP_MODES)}")

    ifaces: dict[str, list[InterfacePlan]] = {n.name: [] for n in sa.nodes}
    for index, link in enumerate(sa.links):
        mac_a, mac_b = link_macs(index)
        ifaces[link.a.node].append(
            InterfacePlan(link.a.ifname, link.a.address, mac_a, link.b.node, link.b.ifname, link)
        )
        ifaces[link.b.node].append(
            InterfacePlan(link.b.ifname, link.b.address, mac_b, link.a.node, link.a.ifname, link)
        )
    by_end = {(node, i.ifname): i for node, mine in ifaces.items() for i in mine}

    def peer_of(i: InterfacePlan) -> InterfacePlan:
        return by_end[(i.peer_node, i.peer_ifname)]

    base: dict[str, NodePlan] = {}
    for dc in sa.dcs:
        base.update(plan_fabric(dc))

    plans: dict[str, NodePlan] = {}
    for node in sa.nodes:
        mine = tuple(ifaces[node.name])
        by_peer = {i.peer_node: i for i in mine}

        def hop(peer: str, _by_peer: dict[str, InterfacePlan] = by_peer) -> NextHop:
            i = _by_peer[peer]
            return NextHop(i.ifname, peer_of(i).address.ip)

        fabric = sa.dcs[node.dc]
        others = [d for d in sa.dcs if d.dc != node.dc]
        own = base.get(node.name)
        routes = list(own.routes) if own is not None else []
        if node.role is Role.LEAF:
            assert node.plane is not None
            spines = [s.name for s in fabric.spine_nodes if s.plane == node.plane]
            x = sa.dci_router(node.dc, node.plane).name
            routes.append(Route(sa.locator_of(x), tuple(hop(s) for s in spines)))
        elif node.role is Role.SPINE:
            assert node.plane is not None
            x = sa.dci_router(node.dc, node.plane).name
            up = (hop(x),)
            for other in others:
                routes.append(Route(dc_host_prefix(other), up))
                routes.append(Route(dc_sid_block(other), up))
            routes.append(Route(sa.locator_of(x), up))
        elif node.role is Role.DCI:
            assert node.plane is not None
            spines = [s.name for s in fabric.spine_nodes if s.plane == node.plane]
            down = tuple(hop(s) for s in spines)
            routes.append(Route(dc_host_prefix(fabric), down))
            routes.append(Route(tier_sid_block(fabric, node.plane, Role.LEAF), down))
            for s in spines:
                routes.append(Route(sa.locator_of(s), (hop(s),)))
            for other in others:
                far = (hop(sa.dci_router(other.dc, node.plane).name),)
                routes.append(Route(dc_host_prefix(other), far))
                routes.append(Route(dc_sid_block(other), far))
            routes.append(_end(sid_locator(fabric, node.plane, Role.DCI, 0), mine[0].ifname))
        neighbors = tuple(Neighbor(i.ifname, peer_of(i).address.ip, peer_of(i).mac) for i in mine)
        if own is not None:
            plans[node.name] = replace(own, interfaces=mine, routes=tuple(routes),
                                       neighbors=neighbors)
        else:
            plans[node.name] = NodePlan(node.name, node.role, mine, None, tuple(routes),
                                        neighbors)
    return plans


def _end(locator: IPv6Network, ifname: str) -> Route:
    # As routing.py: the kernel wants a device on a seg6local route; which one does
    # not matter (after End the next segment is looked up in the main table).
    sid = locator.network_address
    return Route(IPv6Network(f"{sid}/128"), (NextHop(ifname, IPv6Address("::")),), True)
