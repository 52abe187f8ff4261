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
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv6Address
from typing import TYPE_CHECKING

from topologies import addressing, naming
from topologies._validate import check_int
from topologies.errors import TopologyError
from topologies.roles import Role

if TYPE_CHECKING:
    from topologies.clos import MultiPlaneClos

__all__ = ["Hop", "Path", "build_path", "enumerate_paths"]


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
    s_node, d_node = _endpoints(spec, src, dst)
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
    s_node, d_node = _endpoints(spec, src, dst)
    if s_node.rack == d_node.rack:
        return tuple(build_path(spec, src, dst, p, None) for p in range(spec.planes))
    return tuple(
        build_path(spec, src, dst, p, s) for p in range(spec.planes) for s in range(spec.spines)
    )


def _endpoints(spec: MultiPlaneClos, src: str, dst: str):
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
