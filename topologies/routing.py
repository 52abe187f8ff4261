"""The forwarding state of a fabric, computed as data (plan), applied by emu/ (apply).

Two kinds of routes coexist on every fabric:

* Static SRv6 (as MRC's production fabric): every switch owns one SID with the
  classic SRH ``End`` behaviour; hosts reach each plane's SIDs through that
  plane's NIC; switches reach every other switch's locator over their direct
  link. A path is chosen by the sender's segment list alone.
* Destination ECMP (the baseline): hosts spread over their plane NICs, leaves
  over their spines, by a 5-tuple hash (``fib_multipath_hash_policy=1``).
  With ``ecmp="static"`` every switch's ECMP routes are planned here; with
  ``ecmp="bgp"`` leaves and spines learn them from eBGP (emu/frr.py) and the
  plan keeps only what no control plane carries: hosts' routes, leaves' routes
  to their own hosts (which BGP originates) and all SRv6 state. Switch-to-switch
  interfaces then also get a link-local address (unnumbered BGP, RFC 5549).

Nothing here touches the kernel, so the plan is tested without root.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv6Address, IPv6Interface, IPv6Network
from typing import Literal

from topologies.addressing import ALL_HOSTS, plane_sid_block, rack_prefix
from topologies.clos import Link, MultiPlaneClos, Role

EcmpMode = Literal["static", "bgp"]
ECMP_MODES: tuple[EcmpMode, ...] = ("static", "bgp")


MAIN_TABLE = 254


def plane_table(plane: int) -> int:
    """The routing table a host uses for traffic sourced from its plane-``plane`` address."""
    return 100 + plane


@dataclass(frozen=True)
class NextHop:
    """One way out: an interface and the neighbour's address on it."""

    ifname: str
    gateway: IPv6Address


@dataclass(frozen=True)
class Route:
    """A route of one node. Several next hops make an ECMP multipath route.

    ``seg6local_end`` marks a local SID: packets to ``dst`` get the SRH End
    behaviour (advance to the next segment, forward by the new destination).
    """

    dst: IPv6Network
    nexthops: tuple[NextHop, ...]
    seg6local_end: bool = False
    src: IPv6Address | None = None  # preferred source (hosts: their plane-independent address)
    table: int = MAIN_TABLE

    def __str__(self) -> str:
        if self.seg6local_end:
            return f"{self.dst} seg6local End dev {self.nexthops[0].ifname}"
        via = " ".join(f"via {n.gateway} dev {n.ifname}" for n in self.nexthops)
        return f"{self.dst} {via}"


@dataclass(frozen=True)
class Rule:
    """Source-address policy routing: packets from ``src`` use ``table``."""

    src: IPv6Address
    table: int


@dataclass(frozen=True)
class Neighbor:
    """A permanent neighbour entry: no neighbour discovery traffic on the fabric."""

    ifname: str
    address: IPv6Address
    mac: str


@dataclass(frozen=True)
class InterfacePlan:
    """One interface of a node: its address and MAC (fixed, so neighbours are static)."""

    ifname: str
    address: IPv6Interface
    mac: str
    peer_node: str
    peer_ifname: str
    link: Link
    # Set on switch-to-switch links under a control plane (ecmp="bgp"): the
    # interface keeps multicast and ND and carries this fe80:: address (the
    # kernel's EUI-64 one of ``mac``), the next hop BGP learns (RFC 5549).
    # None: the quiet static interface, no link-local address.
    link_local: IPv6Interface | None = None


@dataclass(frozen=True)
class NodePlan:
    """Everything the builder installs in one node's namespace."""

    node: str
    role: Role
    interfaces: tuple[InterfacePlan, ...]
    loopback: IPv6Interface | None
    routes: tuple[Route, ...]
    neighbors: tuple[Neighbor, ...]
    ecmp: EcmpMode = "static"
    plane_addresses: tuple[IPv6Interface, ...] = ()  # hosts: per-plane sources on lo
    rules: tuple[Rule, ...] = ()

    @property
    def control_plane(self) -> bool:
        """True for a switch whose ECMP routes come from BGP, not from this plan."""
        return self.ecmp == "bgp" and self.role is not Role.HOST


def link_macs(index: int) -> tuple[str, str]:
    """Locally administered MACs of the two ends of link number ``index``."""
    if not 0 <= index < 1 << 24:
        raise ValueError(f"link index {index} out of range [0, 2**24)")
    mid = f"{index >> 16 & 0xFF:02x}:{index >> 8 & 0xFF:02x}:{index & 0xFF:02x}"
    return f"02:5a:{mid}:0a", f"02:5a:{mid}:0b"


def link_local(mac: str) -> IPv6Interface:
    """The modified EUI-64 link-local address of ``mac`` (what the kernel would generate)."""
    b = [int(x, 16) for x in mac.split(":")]
    eui = [b[0] ^ 0x02, *b[1:3], 0xFF, 0xFE, *b[3:]]
    iid = int.from_bytes(bytes(eui), "big")
    return IPv6Interface((IPv6Address((0xFE80 << 112) | iid), 64))


def plan_fabric(spec: MultiPlaneClos, ecmp: EcmpMode = "static") -> dict[str, NodePlan]:
    """The complete forwarding state of ``spec``, per node name.

    ``ecmp="static"``: every ECMP route is planned (no control plane).
    ``ecmp="bgp"``: switches' ECMP routes are left to BGP (see the module doc).
    """
    if ecmp not in ECMP_MODES:
        raise ValueError(f"ecmp={ecmp!r} is invalid: must be one of {', '.join(ECMP_MODES)}")
    bgp = ecmp == "bgp"
    ifaces: dict[str, list[InterfacePlan]] = {n.name: [] for n in spec.nodes}
    for index, link in enumerate(spec.links):
        mac_a, mac_b = link_macs(index)
        ll = bgp and link.tier == "fabric"
        ifaces[link.a.node].append(
            InterfacePlan(link.a.ifname, link.a.address, mac_a, link.b.node, link.b.ifname, link,
                          link_local(mac_a) if ll else None)
        )
        ifaces[link.b.node].append(
            InterfacePlan(link.b.ifname, link.b.address, mac_b, link.a.node, link.a.ifname, link,
                          link_local(mac_b) if ll else None)
        )
    peers = {
        (link.a.node, link.a.ifname): link.b.address.ip for link in spec.links
    } | {(link.b.node, link.b.ifname): link.a.address.ip for link in spec.links}
    macs = {(i.peer_node, i.peer_ifname): i.mac for node in ifaces.values() for i in node}

    plans: dict[str, NodePlan] = {}
    for node in spec.nodes:
        mine = tuple(ifaces[node.name])
        by_peer = {i.peer_node: i for i in mine}

        def hop(peer: str, _by_peer: dict[str, InterfacePlan] = by_peer,
                _n: str = node.name) -> NextHop:
            i = _by_peer[peer]
            return NextHop(i.ifname, peers[(_n, i.ifname)])

        routes: list[Route] = []
        loopback = None
        plane_addrs: tuple[IPv6Interface, ...] = ()
        rules: tuple[Rule, ...] = ()
        if node.role is Role.HOST:
            loopback = IPv6Interface(f"{spec.address(node.name)}/128")
            uplinks = tuple(hop(spec.leaf_of(node.name, p).name) for p in range(spec.planes))
            # Sources are the loopback, so replies may come back over any plane.
            routes.append(Route(ALL_HOSTS, uplinks, src=loopback.ip))
            for p in range(spec.planes):
                routes.append(Route(plane_sid_block(spec, p), (uplinks[p],), src=loopback.ip))
            # One source address per plane (an RDMA port's GID): what is sent from it
            # leaves by that plane's NIC, and ECMP only picks among that plane's spines.
            plane_addrs = tuple(IPv6Interface(f"{spec.plane_address(node.name, p)}/128")
                                for p in range(spec.planes))
            rules = tuple(Rule(a.ip, plane_table(p)) for p, a in enumerate(plane_addrs))
            for p, a in enumerate(plane_addrs):
                routes.append(Route(ALL_HOSTS, (uplinks[p],), src=a.ip, table=plane_table(p)))
        elif node.role is Role.LEAF:
            spines = [s for s in spec.spine_nodes if s.plane == node.plane]
            if not bgp:
                routes.append(Route(ALL_HOSTS, tuple(hop(s.name) for s in spines)))
            for host in spec.hosts:
                if spec.rack_of(host.name) == node.index:
                    routes.append(Route(_host_prefix(spec, host.name), (hop(host.name),)))
            for s in spines:
                routes.append(Route(spec.locator_of(s.name), (hop(s.name),)))
            routes.append(_end(spec, node.name, mine[0].ifname))
        else:
            leaves = [leaf for leaf in spec.leaf_nodes if leaf.plane == node.plane]
            for leaf in leaves:
                if not bgp:
                    routes.append(Route(rack_prefix(spec, leaf.index), (hop(leaf.name),)))
                routes.append(Route(spec.locator_of(leaf.name), (hop(leaf.name),)))
            routes.append(_end(spec, node.name, mine[0].ifname))
        neighbors = tuple(
            Neighbor(i.ifname, peers[(node.name, i.ifname)], macs[(node.name, i.ifname)])
            for i in mine
        )
        plans[node.name] = NodePlan(node.name, node.role, mine, loopback, tuple(routes), neighbors,
                                    ecmp, plane_addrs, rules)
    return plans


def originated_prefixes(spec: MultiPlaneClos, leaf: str) -> tuple[IPv6Network, ...]:
    """The prefixes a leaf originates into BGP: the /64 of each host of its rack."""
    node = spec.node(leaf)
    if node.role is not Role.LEAF:
        raise ValueError(f"{leaf!r} is a {node.role.value}, not a leaf")
    return tuple(_host_prefix(spec, h.name) for h in spec.hosts if h.rack == node.rack)


def _end(spec: MultiPlaneClos, switch: str, ifname: str) -> Route:
    sid = spec.sid_of(switch)
    # The kernel wants a device on a seg6local route; after End the lookup of the
    # next segment uses the main table, so which port is named does not matter.
    return Route(IPv6Network(f"{sid}/128"), (NextHop(ifname, IPv6Address("::")),), True)


def _host_prefix(spec: MultiPlaneClos, host: str) -> IPv6Network:
    return IPv6Network(f"{spec.address(host)}/64", strict=False)
