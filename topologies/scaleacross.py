"""Several multi-plane Clos fabrics (DCs) joined by DCI routers and long-haul links.

A :class:`ScaleAcross` describes the whole multi-DC graph with the same
interface as :class:`~topologies.clos.MultiPlaneClos` (nodes, links, ports,
addresses, SIDs, paths), so the fabric builder takes either.  On top of the DCs'
own nodes and links:

* each DC ``d`` and plane ``p`` has one DCI router (``Role.DCI``), named
  ``{prefix}p{p}x`` (prefix ``""`` for DC 0, ``d{d}`` otherwise), linked to
  every spine of its plane in its DC (tier ``"dci-up"``, the DC's
  ``fabric_link``; spine port ``x``, DCI router port ``s{spine}``);
* the DCI routers of one plane are fully meshed across DCs by long-haul links
  (tier ``"dci"``, the :class:`DciSpec` rate/queue; DCI router of DC a's port
  towards DC b is ``d{b}``).  Their delay and loss live on ``ScaleAcross.dci``:
  the builder realises these links as a delay line, not as veths.

Addresses, SIDs and routes: topologies/addressing.py and topologies/routing_dci.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from ipaddress import IPv6Address, IPv6Network
from typing import TYPE_CHECKING

from topologies import addressing, naming
from topologies.clos import GraphLookup, Link, LinkSpec, MultiPlaneClos, Node, Port
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

__all__ = ["DEFAULT_DCI_DELAY_MS", "DciSpec", "ScaleAcross"]


# The DCI's one-way delay when nobody says otherwise: 5 ms (about 1000 km of fibre), the
# value the experiment files, `emu fabric` and the demos and benches were measured with.
# DciSpec owns it; the command line, experiment files and the Mininet export read it here.
DEFAULT_DCI_DELAY_MS = 5.0


@dataclass(frozen=True)
class DciSpec:
    """Parameters of the inter-DC (DCI) links; the one owner of their defaults.

    ``rate_mbit`` is the emulated rate (default 100, the fabric's default link
    rate) and ``nominal_gbit`` the real rate it stands for; ``queue_packets``
    the egress FIFO depth; ``delay_ms`` the one-way propagation delay in
    [0, 1000] (default ``DEFAULT_DCI_DELAY_MS``); ``loss`` a per-packet loss
    probability in [0, 1].

    ``oversubscription`` (>= 1) is the ratio of one DC's nominal leaf->spine
    capacity (all planes, all leaf-spine links) to its nominal DCI capacity:
    1.0 means the DCI can carry everything the fabric can, 4.0 a quarter of
    it.  See :meth:`ScaleAcross.dci_nominal_gbit`.
    """

    rate_mbit: float = 100.0
    queue_packets: int = 200
    delay_ms: float = DEFAULT_DCI_DELAY_MS
    loss: float = 0.0
    oversubscription: float = 1.0
    nominal_gbit: float = 400.0

    def __post_init__(self) -> None:
        check_number("rate_mbit", self.rate_mbit, MIN_RATE_MBIT, MAX_RATE_MBIT)
        check_int("queue_packets", self.queue_packets, 1, MAX_QUEUE_PACKETS)
        check_number("delay_ms", self.delay_ms, 0.0, 1000.0)
        check_number("loss", self.loss, 0.0, 1.0)
        check_number("oversubscription", self.oversubscription, 1.0)
        check_number("nominal_gbit", self.nominal_gbit, 0.0, lo_open=True)


@dataclass(frozen=True)
class ScaleAcross(GraphLookup):
    """Two or more DCs, ``dcs[i]`` being DC ``i``, joined by ``dci`` links.

    All DCs must have the same number of planes: a plane is one end-to-end
    failure and load-balancing domain spanning every DC (a host's NIC ``p``
    reaches remote hosts only through plane ``p``), so a plane missing in one
    DC would leave those NICs unable to reach it.  All DCs must also share the
    MTU (one MTU end to end, no fragmentation in IPv6 routers).

    Derived views are cached like MultiPlaneClos's; equality and hashing use
    ``dcs`` and ``dci`` only.
    """

    dcs: tuple[MultiPlaneClos, ...]
    dci: DciSpec

    def __post_init__(self) -> None:
        dcs = self.dcs
        if isinstance(dcs, Sequence) and not isinstance(dcs, (str, bytes)):
            # Accept any sequence but store a tuple so the spec stays hashable.
            object.__setattr__(self, "dcs", tuple(dcs))
        else:
            raise TopologyError(f"dcs={dcs!r} is invalid: must be a sequence of MultiPlaneClos")
        most = addressing.MAX_SCALEACROSS_DCS
        if not 2 <= len(self.dcs) <= most:
            raise TopologyError(
                f"dcs has {len(self.dcs)} entries, which is invalid: must be in [2, {most}] "
                "(one DC needs no DCI; the address plan has one byte for the DC, and "
                "its last value holds the long-haul links)"
            )
        for i, dc in enumerate(self.dcs):
            if not isinstance(dc, MultiPlaneClos):
                raise TopologyError(f"dcs[{i}]={dc!r} is invalid: must be a MultiPlaneClos")
            if dc.dc != i:
                raise TopologyError(
                    f"dcs[{i}].dc={dc.dc} is invalid: must equal its position {i} "
                    "(the DC index selects names and addresses)"
                )
            if dc.planes != self.dcs[0].planes:
                raise TopologyError(
                    f"dcs[{i}].planes={dc.planes} differs from dcs[0].planes="
                    f"{self.dcs[0].planes}: every DC needs the same planes (a plane spans DCs)"
                )
            if dc.mtu != self.dcs[0].mtu:
                raise TopologyError(
                    f"dcs[{i}].mtu={dc.mtu} differs from dcs[0].mtu={self.dcs[0].mtu}: "
                    "every DC needs the same MTU (packets cross DCs unfragmented)"
                )
            if dc.leaves + 1 > dc.spine_ports:
                raise TopologyError(
                    f"dcs[{i}].leaves={dc.leaves} + 1 DCI port exceeds dcs[{i}].spine_ports="
                    f"{dc.spine_ports} (a spine needs one port per leaf and one to its DCI router)"
                )
        if not isinstance(self.dci, DciSpec):
            raise TopologyError(f"dci={self.dci!r} is invalid: must be a DciSpec")

    # --- parameters shared by every DC ------------------------------------------

    @property
    def dc_count(self) -> int:
        """Number of DCs."""
        return len(self.dcs)

    @property
    def planes(self) -> int:
        """Planes per DC (equal in every DC)."""
        return self.dcs[0].planes

    @property
    def mtu(self) -> int:
        """MTU of every link (equal in every DC)."""
        return self.dcs[0].mtu

    @property
    def spines(self) -> int:
        """Spines per plane, if every DC has the same; TopologyError otherwise."""
        return self._uniform("spines")

    @property
    def leaves(self) -> int:
        """Leaves (racks) per plane, if every DC has the same; TopologyError otherwise."""
        return self._uniform("leaves")

    @property
    def hosts_per_leaf(self) -> int:
        """Hosts per leaf, if every DC has the same; TopologyError otherwise."""
        return self._uniform("hosts_per_leaf")

    def _uniform(self, name: str) -> int:
        values: list[int] = [getattr(dc, name) for dc in self.dcs]
        if len(set(values)) != 1:
            listed = ", ".join(f"dcs[{i}].{name}={v}" for i, v in enumerate(values))
            raise TopologyError(
                f"{name} differs between DCs ({listed}): use dcs[i].{name} of one DC"
            )
        return values[0]

    @property
    def host_count(self) -> int:
        """Number of hosts over all DCs."""
        return sum(dc.host_count for dc in self.dcs)

    @property
    def switch_count(self) -> int:
        """Number of switches over all DCs, DCI routers included."""
        return len(self.switches)

    @cached_property
    def dci_link_spec(self) -> LinkSpec:
        """Shaping of every long-haul link (delay and loss are on :attr:`dci`)."""
        return LinkSpec(self.dci.rate_mbit, self.dci.queue_packets, self.dci.nominal_gbit)

    # --- nodes ------------------------------------------------------------------------

    @cached_property
    def hosts(self) -> tuple[Node, ...]:
        """Hosts of every DC, DC by DC."""
        return tuple(h for dc in self.dcs for h in dc.hosts)

    @cached_property
    def leaf_nodes(self) -> tuple[Node, ...]:
        """Leaves of every DC, DC by DC (plane-major within a DC)."""
        return tuple(n for dc in self.dcs for n in dc.leaf_nodes)

    @cached_property
    def spine_nodes(self) -> tuple[Node, ...]:
        """Spines of every DC, DC by DC (plane-major within a DC)."""
        return tuple(n for dc in self.dcs for n in dc.spine_nodes)

    @cached_property
    def dci_nodes(self) -> tuple[Node, ...]:
        """DCI routers, DC-major then plane (index 0: one per DC and plane)."""
        return tuple(
            Node(naming.dci_name(dc.dc, p), Role.DCI, dc.dc, p, 0)
            for dc in self.dcs
            for p in range(self.planes)
        )

    @cached_property
    def switches(self) -> tuple[Node, ...]:
        """All leaves, then all spines, then all DCI routers."""
        return self.leaf_nodes + self.spine_nodes + self.dci_nodes

    @cached_property
    def nodes(self) -> tuple[Node, ...]:
        """Hosts, then switches."""
        return self.hosts + self.switches

    def dc_of(self, name: str) -> int:
        """Index of the DC that node ``name`` belongs to."""
        return self.node(name).dc

    def fabric_of(self, name: str) -> MultiPlaneClos:
        """The DC that node ``name`` belongs to (a DCI router belongs to its DC)."""
        return self.dcs[self.dc_of(name)]

    def dci_router(self, dc: int, plane: int) -> Node:
        """The DCI router of ``plane`` in DC ``dc``."""
        check_int("dc", dc, 0, self.dc_count - 1)
        check_int("plane", plane, 0, self.planes - 1)
        return self._nodes_by_name[naming.dci_name(dc, plane)]

    def leaf_of(self, host: str, plane: int) -> Node:
        """The leaf that ``host`` attaches to in ``plane``."""
        return self.fabric_of(self._host(host).name).leaf_of(host, plane)

    def rack_of(self, host: str) -> int:
        """Rack of ``host`` within its own DC (racks of different DCs share numbers)."""
        return self.fabric_of(self._host(host).name).rack_of(host)

    # --- links and ports --------------------------------------------------------------

    @cached_property
    def dci_up_links(self) -> tuple[Link, ...]:
        """Spine <-> DCI router links: DC, plane, spine order; ``a`` is the spine."""
        out = []
        for dc in self.dcs:
            for p in range(self.planes):
                x = naming.dci_name(dc.dc, p)
                for s in range(dc.spines):
                    spine_end, dci_end = addressing.dci_up_link_ends(dc, p, s)
                    out.append(
                        Link(
                            Port(
                                naming.spine_name(dc.dc, p, s), naming.spine_dci_ifname(), spine_end
                            ),
                            Port(x, naming.dci_spine_ifname(s), dci_end),
                            dc.fabric_link,
                            "dci-up",
                            p,
                        )
                    )
        return tuple(out)

    @cached_property
    def dci_links(self) -> tuple[Link, ...]:
        """Long-haul links: plane, then DC pair (a < b); ``a`` is DC a's DCI router."""
        out = []
        for p in range(self.planes):
            for a in range(self.dc_count):
                for b in range(a + 1, self.dc_count):
                    end_a, end_b = addressing.dci_link_ends(self.planes, p, a, b)
                    out.append(
                        Link(
                            Port(naming.dci_name(a, p), naming.dci_peer_ifname(b), end_a),
                            Port(naming.dci_name(b, p), naming.dci_peer_ifname(a), end_b),
                            self.dci_link_spec,
                            "dci",
                            p,
                        )
                    )
        return tuple(out)

    @cached_property
    def links(self) -> tuple[Link, ...]:
        """Every DC's links (DC by DC), then the dci-up links, then the long-haul links."""
        return (
            tuple(link for dc in self.dcs for link in dc.links) + self.dci_up_links + self.dci_links
        )

    # --- addresses ----------------------------------------------------------------------

    def address(self, host_name: str) -> IPv6Address:
        """Plane-independent loopback address of a host."""
        return self.fabric_of(self._host(host_name).name).address(host_name)

    def sid_of(self, switch_name: str) -> IPv6Address:
        """SRv6 End SID of a switch (leaf, spine or DCI router)."""
        return self.locator_of(switch_name).network_address

    def locator_of(self, switch_name: str) -> IPv6Network:
        """SRv6 locator (/80) of a switch (leaf, spine or DCI router)."""
        node = self._switch(switch_name)
        assert node.plane is not None
        return addressing.sid_locator(self.dcs[node.dc], node.plane, node.role, node.index)

    # --- paths ------------------------------------------------------------------------

    def paths(self, src: str, dst: str) -> tuple[Path, ...]:
        """Every equal-cost path from host ``src`` to host ``dst``, ordered by ev.

        Within a DC: that DC's paths.  Across DCs:
        :class:`~topologies.paths.CrossDcPath` per (plane, src spine, dst spine).
        """
        from topologies.paths import endpoints, enumerate_cross_dc_paths  # imports clos

        a, b = (n.dc for n in endpoints(self, src, dst))
        if a == b:
            return self.dcs[a].paths(src, dst)
        return enumerate_cross_dc_paths(self, src, dst)

    def path(
        self, src: str, dst: str, plane: int, spine: int | None, dst_spine: int | None = None
    ) -> Path:
        """The path via ``plane`` and ``spine`` (``None`` within a rack) and, across DCs,
        the destination DC's ``dst_spine`` (required then, None otherwise)."""
        from topologies.paths import build_cross_dc_path, endpoints

        a, b = (n.dc for n in endpoints(self, src, dst))
        if a == b:
            if dst_spine is not None:
                raise TopologyError(
                    f"dst_spine={dst_spine!r} is invalid: {src} and {dst} are both in DC {a} "
                    "(pass None)"
                )
            return self.dcs[a].path(src, dst, plane, spine)
        for label, value in (("spine", spine), ("dst_spine", dst_spine)):
            if value is None:
                raise TopologyError(
                    f"{label}=None is invalid: {src} (DC {a}) and {dst} (DC {b}) are in "
                    "different DCs, so spine and dst_spine are both required"
                )
        assert spine is not None and dst_spine is not None
        return build_cross_dc_path(self, src, dst, plane, spine, dst_spine)

    def dci_nominal_gbit(self, dc: int) -> float:
        """Nominal DCI capacity of DC ``dc``: its leaf->spine capacity / oversubscription."""
        check_int("dc", dc, 0, self.dc_count - 1)
        fabric = self.dcs[dc]
        links = fabric.planes * fabric.leaves * fabric.spines
        return links * fabric.fabric_link.nominal_gbit / self.dci.oversubscription
