"""Multi-plane Clos fabric description: parameters, nodes, ports and links.

A host has one NIC per plane; each plane is an independent two-tier Clos
(``leaves`` leaves, one per rack, and ``spines`` spines, every leaf linked once
to every spine of its plane).  Everything here is derived data: nothing touches
the kernel, and all derived tuples are computed lazily and cached.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from ipaddress import IPv6Address, IPv6Interface, IPv6Network
from typing import TYPE_CHECKING

from topologies import addressing, naming
from topologies.errors import TopologyError
from topologies.roles import Role
from topologies.validate import (
    MAX_QUEUE_PACKETS,
    MAX_RATE_MBIT,
    MIN_RATE_MBIT,
    check_int,
    check_number,
)

if TYPE_CHECKING:
    from topologies.paths import Path

__all__ = ["Link", "LinkSpec", "MultiPlaneClos", "Node", "Port", "Role"]


@dataclass(frozen=True)
class LinkSpec:
    """Shaping parameters of one emulated link (applied to both directions).

    ``rate_mbit`` is the emulated (scaled-down) rate; ``nominal_gbit`` records
    the real-world rate it stands for (an 800G NIC split 8x100G by default),
    so results can be scaled back.  ``queue_packets`` is the egress FIFO depth,
    i.e. the switch buffer per port.
    """

    rate_mbit: float
    queue_packets: int
    nominal_gbit: float = 100.0

    def __post_init__(self) -> None:
        check_number("rate_mbit", self.rate_mbit, MIN_RATE_MBIT, MAX_RATE_MBIT)
        check_int("queue_packets", self.queue_packets, 1, MAX_QUEUE_PACKETS)
        check_number("nominal_gbit", self.nominal_gbit, 0.0, lo_open=True)


@dataclass(frozen=True)
class Node:
    """A host or switch.

    ``index`` is the global host index (``rack * hosts_per_leaf + local``) for
    hosts, the rack for leaves and the spine number for spines.  ``plane`` is
    None for hosts (they attach to every plane).  ``rack`` is the host's or
    leaf's rack and None for spines (they serve all racks).
    """

    name: str
    role: Role
    dc: int
    plane: int | None
    index: int
    rack: int | None = None


@dataclass(frozen=True)
class Port:
    """One interface of a node, with its address and prefix length."""

    node: str
    ifname: str
    address: IPv6Interface


@dataclass(frozen=True)
class Link:
    """A point-to-point link; ``a`` is the lower-tier end (host or leaf)."""

    a: Port
    b: Port
    spec: LinkSpec
    tier: str  # "host" (host <-> leaf) or "fabric" (leaf <-> spine)
    plane: int

    @property
    def name(self) -> str:
        """``"{a.node}-{b.node}"``, e.g. ``h3-p0l0``; unique within a fabric."""
        return f"{self.a.node}-{self.b.node}"


_DEFAULT_LINK = LinkSpec(100.0, 100)


class GraphLookup:
    """Name lookups over ``self.nodes`` and ``self.links``, shared by every topology."""

    if TYPE_CHECKING:  # provided by each topology (a property or a cached_property)

        @property
        def nodes(self) -> tuple[Node, ...]: ...

        @property
        def links(self) -> tuple[Link, ...]: ...

    @cached_property
    def _nodes_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def _links_by_name(self) -> dict[str, Link]:
        return {link.name: link for link in self.links}

    @cached_property
    def _ports_by_node(self) -> dict[str, tuple[Port, ...]]:
        ports: dict[str, list[Port]] = {n.name: [] for n in self.nodes}
        for link in self.links:
            ports[link.a.node].append(link.a)
            ports[link.b.node].append(link.b)
        return {name: tuple(p) for name, p in ports.items()}

    def node(self, name: str) -> Node:
        """The node called ``name``; TopologyError listing valid names otherwise."""
        try:
            return self._nodes_by_name[name]
        except (KeyError, TypeError):
            raise TopologyError(_unknown("node", name, self._nodes_by_name)) from None

    def link(self, name: str) -> Link:
        """The link called ``name`` (``"{a}-{b}"``); TopologyError otherwise."""
        try:
            return self._links_by_name[name]
        except (KeyError, TypeError):
            raise TopologyError(_unknown("link", name, self._links_by_name)) from None

    def _host(self, name: str) -> Node:
        node = self.node(name)
        if node.role is not Role.HOST:
            raise TopologyError(f"{name!r} is a {node.role.value}, not a host")
        return node

    def _switch(self, name: str) -> Node:
        node = self.node(name)
        if node.role is Role.HOST:
            raise TopologyError(f"{name!r} is a host, not a switch")
        return node

    def ports(self, node_name: str) -> tuple[Port, ...]:
        """Every interface of a node, in link order (hosts: one per plane; leaves: hosts
        then spines; a spine's DCI port after its leaf ports)."""
        return self._ports_by_node[self.node(node_name).name]


@dataclass(frozen=True)
class MultiPlaneClos(GraphLookup):
    """Parameters of one multi-plane Clos fabric, validated on construction.

    Derived views (nodes, links, ports, paths) are computed lazily and cached
    with ``functools.cached_property`` (it writes the instance ``__dict__``
    directly, so it works on frozen dataclasses); equality and hashing still
    use the parameters only.
    """

    planes: int = 2
    spines: int = 4
    leaves: int = 4
    hosts_per_leaf: int = 4
    host_link: LinkSpec = _DEFAULT_LINK
    fabric_link: LinkSpec = _DEFAULT_LINK
    leaf_ports: int = 64
    spine_ports: int = 64
    mtu: int = 9000
    dc: int = 0

    def __post_init__(self) -> None:
        # Ranges keep every index inside one 16-bit address group and every
        # interface name short; they are also far beyond what one host emulates.
        check_int("planes", self.planes, 1, 16)
        check_int("spines", self.spines, 1, 64)
        check_int("leaves", self.leaves, 1, 64)
        check_int("hosts_per_leaf", self.hosts_per_leaf, 1, 64)
        check_int("leaf_ports", self.leaf_ports, 2, 1024)
        check_int("spine_ports", self.spine_ports, 1, 1024)
        check_int("mtu", self.mtu, 1280, 9000)  # 1280: IPv6 minimum link MTU
        check_int("dc", self.dc, 0, 255)  # one byte of the address plan
        for name in ("host_link", "fabric_link"):
            value = getattr(self, name)
            if not isinstance(value, LinkSpec):
                raise TopologyError(f"{name}={value!r} is invalid: must be a LinkSpec")
        used = self.hosts_per_leaf + self.spines
        if used > self.leaf_ports:
            raise TopologyError(
                f"hosts_per_leaf={self.hosts_per_leaf} + spines={self.spines} = {used} "
                f"exceeds leaf_ports={self.leaf_ports} "
                "(a leaf needs one port per host and one per spine)"
            )
        if self.leaves > self.spine_ports:
            raise TopologyError(
                f"leaves={self.leaves} exceeds spine_ports={self.spine_ports} "
                "(a spine needs one port per leaf of its plane)"
            )

    # --- naming ---------------------------------------------------------------

    @property
    def prefix(self) -> str:
        """Node-name prefix: ``""`` for DC 0, ``d{dc}`` otherwise."""
        return naming.dc_prefix(self.dc)

    @property
    def host_count(self) -> int:
        """Number of hosts (``leaves * hosts_per_leaf``)."""
        return self.leaves * self.hosts_per_leaf

    @property
    def switch_count(self) -> int:
        """Number of switches over all planes."""
        return self.planes * (self.leaves + self.spines)

    # --- nodes ---------------------------------------------------------------

    @cached_property
    def hosts(self) -> tuple[Node, ...]:
        """Hosts ordered by global index."""
        hpl = self.hosts_per_leaf
        return tuple(
            Node(naming.host_name(self.dc, n), Role.HOST, self.dc, None, n, n // hpl)
            for n in range(self.host_count)
        )

    # ``leaves``/``spines`` are the count parameters, hence ``leaf_nodes``/``spine_nodes``.
    @cached_property
    def leaf_nodes(self) -> tuple[Node, ...]:
        """Leaf switches, plane-major then rack."""
        return tuple(
            Node(naming.leaf_name(self.dc, p, r), Role.LEAF, self.dc, p, r, r)
            for p in range(self.planes)
            for r in range(self.leaves)
        )

    @cached_property
    def spine_nodes(self) -> tuple[Node, ...]:
        """Spine switches, plane-major then spine index."""
        return tuple(
            Node(naming.spine_name(self.dc, p, s), Role.SPINE, self.dc, p, s)
            for p in range(self.planes)
            for s in range(self.spines)
        )

    @property
    def switches(self) -> tuple[Node, ...]:
        """All leaves, then all spines."""
        return self.leaf_nodes + self.spine_nodes

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Hosts, then switches."""
        return self.hosts + self.switches

    def leaf_of(self, host: str, plane: int) -> Node:
        """The leaf that ``host`` attaches to in ``plane``."""
        rack = self.rack_of(host)
        check_int("plane", plane, 0, self.planes - 1)
        return self._nodes_by_name[naming.leaf_name(self.dc, plane, rack)]

    def rack_of(self, host: str) -> int:
        """Rack (= leaf index) of ``host``."""
        node = self._host(host)
        assert node.rack is not None  # hosts always have a rack
        return node.rack

    # --- links and ports -----------------------------------------------------

    @cached_property
    def links(self) -> tuple[Link, ...]:
        """Host links (plane, rack, local order), then fabric links (plane, leaf, spine)."""
        out: list[Link] = []
        hpl = self.hosts_per_leaf
        for p in range(self.planes):
            for r in range(self.leaves):
                leaf = naming.leaf_name(self.dc, p, r)
                for h in range(hpl):
                    n = r * hpl + h
                    host_end, leaf_end = addressing.host_link_ends(self, p, r, h)
                    out.append(
                        Link(
                            Port(naming.host_name(self.dc, n), naming.host_ifname(p), host_end),
                            Port(leaf, naming.leaf_host_ifname(n), leaf_end),
                            self.host_link,
                            "host",
                            p,
                        )
                    )
        for p in range(self.planes):
            for r in range(self.leaves):
                leaf = naming.leaf_name(self.dc, p, r)
                for s in range(self.spines):
                    leaf_end, spine_end = addressing.fabric_link_ends(self, p, r, s)
                    out.append(
                        Link(
                            Port(leaf, naming.leaf_spine_ifname(s), leaf_end),
                            Port(
                                naming.spine_name(self.dc, p, s),
                                naming.spine_leaf_ifname(r),
                                spine_end,
                            ),
                            self.fabric_link,
                            "fabric",
                            p,
                        )
                    )
        return tuple(out)

    # --- addresses -------------------------------------------------------------

    def address(self, host_name: str) -> IPv6Address:
        """Plane-independent loopback address of a host."""
        return addressing.host_address(self, self._host(host_name).index)

    def plane_address(self, host_name: str, plane: int) -> IPv6Address:
        """The host's per-plane source address: traffic from it stays on ``plane``."""
        node = self._host(host_name)
        check_int("plane", plane, 0, self.planes - 1)
        return addressing.host_plane_address(self, node.index, plane)

    def sid_of(self, switch_name: str) -> IPv6Address:
        """SRv6 End SID of a switch."""
        node = self._switch(switch_name)
        assert node.plane is not None
        return addressing.sid(self, node.plane, node.role, node.index)

    def locator_of(self, switch_name: str) -> IPv6Network:
        """SRv6 locator (/80) of a switch."""
        node = self._switch(switch_name)
        assert node.plane is not None
        return addressing.sid_locator(self, node.plane, node.role, node.index)

    # --- paths -----------------------------------------------------------------

    def paths(self, src: str, dst: str) -> tuple[Path, ...]:
        """Every equal-cost path from host ``src`` to host ``dst``, ordered by ev."""
        from topologies.paths import enumerate_paths  # paths.py depends on this module

        return enumerate_paths(self, src, dst)

    def path(self, src: str, dst: str, plane: int, spine: int | None) -> Path:
        """The path via ``plane`` and ``spine`` (``None`` for hosts in the same rack)."""
        from topologies.paths import build_path

        return build_path(self, src, dst, plane, spine)


def _unknown(kind: str, name: object, valid: Mapping[str, object], shown: int = 8) -> str:
    names = list(valid)
    listed = ", ".join(names[:shown])
    if len(names) > shown:
        listed += f", ... ({len(names)} in total)"
    return f"unknown {kind} {name!r}: valid names are {listed}"
