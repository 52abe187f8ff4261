"""Equal-cost paths between two hosts and their SRv6 segment lists.

Each (plane, spine) pair is one path between hosts in different racks, and
each plane is one path between hosts of the same rack.  Segment lists use
loose source routing with as few segments as pin the path:

* cross rack: ``(spine SID, dst loopback)``.  A leaf has exactly one link to
  each spine of its plane, so naming the spine fixes both plane and spine;
  the leaves on either side simply forward by destination.
* same rack: ``(leaf SID, dst loopback)``.  There is no spine to name; the
  leaf SID pins the plane because the source host's route to that plane's SID
  block leaves through its NIC in that plane.
* across DCs of a :class:`~topologies.scaleacross.ScaleAcross`:
  ``(source-DC spine SID, destination-DC spine SID, dst loopback)``, one path
  per (plane, source spine, destination spine).  Each DC has one DCI router
  per plane and they are fully meshed, so the two spines pin the whole path.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv6Address
from typing import TYPE_CHECKING

from topologies import addressing, naming
from topologies.errors import TopologyError
from topologies.roles import Role
from topologies.validate import check_int

if TYPE_CHECKING:
    from topologies.clos import GraphLookup, MultiPlaneClos, Node
    from topologies.scaleacross import ScaleAcross

__all__ = [
    "CrossDcPath",
    "Hop",
    "Path",
    "build_cross_dc_path",
    "build_path",
    "enumerate_cross_dc_paths",
    "enumerate_paths",
]


@dataclass(frozen=True)
class Hop:
    """One transmission over one link: ``node:out_ifname -> next_node:in_ifname``."""

    node: str
    out_ifname: str
    next_node: str
    in_ifname: str


@dataclass(frozen=True)
class Path:
    """One equal-cost path from host ``src`` to host ``dst``.

    ``spine`` is None for hosts under the same leaf.  ``ev`` (entropy value)
    numbers the paths of a host pair densely from 0: ``plane * spines + spine``
    across racks, ``plane`` within a rack.  ``segments`` are in travel order
    (last = destination loopback); ``hops`` go src NIC -> leaf [-> spine ->
    leaf] -> dst (2 hops within a rack, 4 across racks).
    """

    src: str
    dst: str
    plane: int
    spine: int | None
    ev: int
    segments: tuple[IPv6Address, ...]
    hops: tuple[Hop, ...]

    @property
    def links(self) -> tuple[str, ...]:
        """Names of the links traversed, in travel order.

        Paths climb for the first half of their hops and descend for the
        second, and a link is named lower-tier end first.
        """
        half = len(self.hops) // 2
        return tuple(
            f"{h.node}-{h.next_node}" if i < half else f"{h.next_node}-{h.node}"
            for i, h in enumerate(self.hops)
        )

    def srh_addresses(self) -> list[IPv6Address]:
        """Segments in SRH order (last segment first), as for scapy's
        ``IPv6ExtHdrSegmentRouting(addresses=...)``."""
        return list(reversed(self.segments))


def build_path(spec: MultiPlaneClos, src: str, dst: str, plane: int, spine: int | None) -> Path:
    """The path from ``src`` to ``dst`` via ``plane`` and ``spine``.

    ``spine`` must be None when both hosts share a rack and a valid spine
    index otherwise.
    """
    s_node, d_node = endpoints(spec, src, dst)
    check_int("plane", plane, 0, spec.planes - 1)
    s_rack, d_rack = s_node.rack, d_node.rack
    assert s_rack is not None and d_rack is not None
    dc = spec.dc
    src_leaf = naming.leaf_name(dc, plane, s_rack)
    dst_loopback = addressing.host_address(spec, d_node.index)
    up = Hop(src, naming.host_ifname(plane), src_leaf, naming.leaf_host_ifname(s_node.index))

    if s_rack == d_rack:
        if spine is not None:
            raise TopologyError(
                f"spine={spine!r} is invalid: {src} and {dst} share rack {s_rack}, "
                "so the path crosses no spine (pass None)"
            )
        down = Hop(src_leaf, naming.leaf_host_ifname(d_node.index), dst, naming.host_ifname(plane))
        first = addressing.sid(spec, plane, Role.LEAF, s_rack)
        return Path(src, dst, plane, None, plane, (first, dst_loopback), (up, down))

    if spine is None:
        raise TopologyError(
            f"spine=None is invalid: {src} and {dst} are in different racks, "
            f"so a spine in [0, {spec.spines - 1}] is required"
        )
    check_int("spine", spine, 0, spec.spines - 1)
    spine_node = naming.spine_name(dc, plane, spine)
    dst_leaf = naming.leaf_name(dc, plane, d_rack)
    hops = (
        up,
        Hop(
            src_leaf, naming.leaf_spine_ifname(spine), spine_node, naming.spine_leaf_ifname(s_rack)
        ),
        Hop(
            spine_node, naming.spine_leaf_ifname(d_rack), dst_leaf, naming.leaf_spine_ifname(spine)
        ),
        Hop(dst_leaf, naming.leaf_host_ifname(d_node.index), dst, naming.host_ifname(plane)),
    )
    first = addressing.sid(spec, plane, Role.SPINE, spine)
    ev = plane * spec.spines + spine
    return Path(src, dst, plane, spine, ev, (first, dst_loopback), hops)


def enumerate_paths(spec: MultiPlaneClos, src: str, dst: str) -> tuple[Path, ...]:
    """Every path from ``src`` to ``dst``, ordered by ``ev``.

    ``planes * spines`` paths across racks, ``planes`` within a rack.
    """
    s_node, d_node = endpoints(spec, src, dst)
    if s_node.rack == d_node.rack:
        return tuple(build_path(spec, src, dst, p, None) for p in range(spec.planes))
    return tuple(
        build_path(spec, src, dst, p, s) for p in range(spec.planes) for s in range(spec.spines)
    )


def endpoints(spec: GraphLookup, src: str, dst: str) -> tuple[Node, Node]:
    """Validate ``src``/``dst`` as two distinct hosts and return their nodes."""
    nodes = []
    for label, name in (("src", src), ("dst", dst)):
        node = spec.node(name)
        if node.role is not Role.HOST:
            raise TopologyError(
                f"{label}={name!r} is invalid: it is a {node.role.value}, paths run between hosts"
            )
        nodes.append(node)
    if src == dst:
        raise TopologyError(f"src={src!r} and dst={dst!r} are the same host: no path")
    return nodes[0], nodes[1]


# --- ScaleAcross: paths between DCs --------------------------------------------


@dataclass(frozen=True)
class CrossDcPath(Path):
    """A path from host ``src`` in DC ``src_dc`` to host ``dst`` in DC ``dst_dc``.

    ``spine`` is the source DC's spine, ``dst_spine`` the destination DC's (both
    in ``plane``).  ``ev = (plane * S_src + spine) * S_dst + dst_spine`` with
    ``S_*`` the spines per plane of each DC.  ``segments`` are ``(SID of the
    source spine, SID of the destination spine, dst loopback)``; ``hops`` go
    src -> leaf -> spine -> DCI router -> remote DCI router -> spine -> leaf ->
    dst (7 hops).
    """

    src_dc: int
    dst_dc: int
    dst_spine: int

    @property
    def links(self) -> tuple[str, ...]:
        """Names of the links traversed, in travel order.

        Three hops climb to the DCI router, the middle one crosses the
        long-haul link (named lower DC first), three descend.
        """
        out = []
        for i, h in enumerate(self.hops):
            if i < 3 or (i == 3 and self.src_dc < self.dst_dc):
                out.append(f"{h.node}-{h.next_node}")
            else:
                out.append(f"{h.next_node}-{h.node}")
        return tuple(out)


def build_cross_dc_path(
    sa: ScaleAcross, src: str, dst: str, plane: int, spine: int, dst_spine: int
) -> CrossDcPath:
    """The path from ``src`` to ``dst`` (hosts of different DCs of ``sa``) via ``plane``,
    source-DC spine ``spine`` and destination-DC spine ``dst_spine``."""
    s_node, d_node = endpoints(sa, src, dst)
    a, b = s_node.dc, d_node.dc
    if a == b:
        raise TopologyError(
            f"{src} and {dst} are both in DC {a}: not a cross-DC path (use ScaleAcross.path)"
        )
    fa, fb = sa.dcs[a], sa.dcs[b]
    check_int("plane", plane, 0, sa.planes - 1)
    check_int("spine", spine, 0, fa.spines - 1)
    check_int("dst_spine", dst_spine, 0, fb.spines - 1)
    s_rack, d_rack = s_node.rack, d_node.rack
    assert s_rack is not None and d_rack is not None
    src_leaf = naming.leaf_name(a, plane, s_rack)
    src_spine = naming.spine_name(a, plane, spine)
    x_a, x_b = naming.dci_name(a, plane), naming.dci_name(b, plane)
    dst_spine_name = naming.spine_name(b, plane, dst_spine)
    dst_leaf = naming.leaf_name(b, plane, d_rack)
    hops = (
        Hop(src, naming.host_ifname(plane), src_leaf, naming.leaf_host_ifname(s_node.index)),
        Hop(src_leaf, naming.leaf_spine_ifname(spine), src_spine, naming.spine_leaf_ifname(s_rack)),
        Hop(src_spine, naming.spine_dci_ifname(), x_a, naming.dci_spine_ifname(spine)),
        Hop(x_a, naming.dci_peer_ifname(b), x_b, naming.dci_peer_ifname(a)),
        Hop(x_b, naming.dci_spine_ifname(dst_spine), dst_spine_name, naming.spine_dci_ifname()),
        Hop(
            dst_spine_name,
            naming.spine_leaf_ifname(d_rack),
            dst_leaf,
            naming.leaf_spine_ifname(dst_spine),
        ),
        Hop(dst_leaf, naming.leaf_host_ifname(d_node.index), dst, naming.host_ifname(plane)),
    )
    segments = (
        addressing.sid(fa, plane, Role.SPINE, spine),
        addressing.sid(fb, plane, Role.SPINE, dst_spine),
        addressing.host_address(fb, d_node.index),
    )
    ev = (plane * fa.spines + spine) * fb.spines + dst_spine
    return CrossDcPath(src, dst, plane, spine, ev, segments, hops, a, b, dst_spine)


def enumerate_cross_dc_paths(sa: ScaleAcross, src: str, dst: str) -> tuple[CrossDcPath, ...]:
    """Every path between hosts of two different DCs, ordered by ``ev``:
    ``planes * S_src * S_dst`` of them."""
    s_node, d_node = endpoints(sa, src, dst)
    s_sp, d_sp = sa.dcs[s_node.dc].spines, sa.dcs[d_node.dc].spines
    return tuple(
        build_cross_dc_path(sa, src, dst, p, s, t)
        for p in range(sa.planes)
        for s in range(s_sp)
        for t in range(d_sp)
    )
