"""IPv6 addressing plan (the only module that knows the address layout).

Everything lives in the ULA prefix ``fd5a::/16``.  The second 16-bit group
selects the address *kind* in its high byte and the DC index in its low byte,
so each kind of address of all DCs fits one /24 and one DC's share is a /32::

    fd5a:00dc::/32   host loopbacks       fd5a:{dc}:{rack}:{local}::1/128
    fd5a:01dc::/32   host <-> leaf links  fd5a:{100+dc}:{plane}:{rack}:{local}::/80
    fd5a:02dc::/32   leaf <-> spine links fd5a:{200+dc}:{plane}:{leaf}:{spine}::/80
    fd5a:03dc::/32   spine <-> DCI router fd5a:{300+dc}:{plane}:{spine}::/80
    fd5a:03ff::/32   DCI long-haul links  fd5a:3ff:{plane}:{dc_a}:{dc_b}::/80 (dc_a < dc_b)
    fd5a:05dc::/32   SRv6 SIDs            fd5a:{500+dc}:{plane}:{tier}:{index}::

(``fd5a:03ff::/32`` would be DC 255's spine <-> DCI share, so a ScaleAcross
has at most 255 DCs, 0..254; a lone MultiPlaneClos may still be DC 255.)

All indices are 0-based and written as hex groups.  Hosts own a
plane-independent loopback so a peer can reach them through any plane; the
per-plane link addresses only serve next-hop resolution.  One SID per switch
(tier 1 = leaf indexed by rack, tier 2 = spine, tier 3 = the plane's DCI
router of a ScaleAcross, index 0) with a /80 locator, so a /48 per plane lets
hosts steer traffic into a plane with a single route.

``spec`` arguments are :class:`~topologies.clos.MultiPlaneClos` instances
(only ``dc``, ``planes``, ``spines``, ``leaves`` and ``hosts_per_leaf`` are
read).  Index arguments are range-checked against the spec.
"""

from __future__ import annotations

from ipaddress import IPv6Address, IPv6Interface, IPv6Network
from typing import TYPE_CHECKING

from topologies.errors import TopologyError
from topologies.roles import Role

if TYPE_CHECKING:
    from topologies.clos import MultiPlaneClos

ULA = IPv6Network("fd5a::/16")
ALL_HOSTS = IPv6Network("fd5a::/24")
"""Loopbacks of every host of every DC (second group 0x0000-0x00ff)."""
ALL_HOST_LINKS = IPv6Network("fd5a:100::/24")
ALL_FABRIC_LINKS = IPv6Network("fd5a:200::/24")
ALL_DCI_LINKS = IPv6Network("fd5a:300::/24")
"""Spine <-> DCI router links of every DC and the long-haul DCI links."""
DCI_LONG_HAUL = IPv6Network("fd5a:3ff::/32")
"""The long-haul links between DCI routers of different DCs."""
ALL_SIDS = IPv6Network("fd5a:500::/24")

_HOST_KIND = 0x000
_HOST_LINK_KIND = 0x100
_FABRIC_LINK_KIND = 0x200
_DCI_LINK_KIND = 0x300
_LONG_HAUL_GROUP = 0x3FF
MAX_SCALEACROSS_DCS = _LONG_HAUL_GROUP - _DCI_LINK_KIND  # 255: DCs 0..254
_SID_KIND = 0x500
_SID_TIER = {Role.LEAF: 1, Role.SPINE: 2, Role.DCI: 3}


def _addr(*groups: int) -> IPv6Address:
    """Address whose leading 16-bit groups are ``groups`` (the rest zero)."""
    value = 0
    for i, g in enumerate(groups):
        value |= g << (112 - 16 * i)
    return IPv6Address(value)


def _net(prefixlen: int, *groups: int) -> IPv6Network:
    return IPv6Network((_addr(*groups), prefixlen))


def _index(name: str, value: int, count: int) -> int:
    if type(value) is not int or not 0 <= value < count:
        raise TopologyError(f"{name}={value!r} is invalid: must be an integer in [0, {count - 1}]")
    return value


def _host_groups(spec: MultiPlaneClos, host_index: int) -> tuple[int, int, int]:
    _index("host_index", host_index, spec.leaves * spec.hosts_per_leaf)
    rack, local = divmod(host_index, spec.hosts_per_leaf)
    return _HOST_KIND + spec.dc, rack, local


# --- hosts -----------------------------------------------------------------


def host_address(spec: MultiPlaneClos, host_index: int) -> IPv6Address:
    """Loopback address of a host, reachable via every plane."""
    return _addr(0xFD5A, *_host_groups(spec, host_index), 0, 0, 0, 1)


def host_loopback(spec: MultiPlaneClos, host_index: int) -> IPv6Interface:
    """:func:`host_address` as the ``/128`` interface configured on ``lo``."""
    return IPv6Interface((host_address(spec, host_index), 128))


def host_plane_address(spec: MultiPlaneClos, host_index: int, plane: int) -> IPv6Address:
    """A host's address for traffic kept on ``plane`` (``::100+plane`` in its /64): a
    per-port source address, as an RDMA NIC port has its own GID."""
    return _addr(0xFD5A, *_host_groups(spec, host_index), 0, 0, 0, 0x100 + plane)


def host_prefix(spec: MultiPlaneClos, host_index: int) -> IPv6Network:
    """The /64 owned by a host (contains its loopback)."""
    return _net(64, 0xFD5A, *_host_groups(spec, host_index))


def rack_prefix(spec: MultiPlaneClos, rack: int) -> IPv6Network:
    """The /48 aggregating the loopbacks of all hosts in ``rack``."""
    _index("rack", rack, spec.leaves)
    return _net(48, 0xFD5A, _HOST_KIND + spec.dc, rack)


def dc_host_prefix(spec: MultiPlaneClos) -> IPv6Network:
    """The /32 aggregating every host loopback of the fabric."""
    return _net(32, 0xFD5A, _HOST_KIND + spec.dc)


# --- links -----------------------------------------------------------------


def host_link_subnet(spec: MultiPlaneClos, plane: int, rack: int, local: int) -> IPv6Network:
    """The /80 of the link between host ``(rack, local)`` and its leaf in ``plane``."""
    _index("plane", plane, spec.planes)
    _index("rack", rack, spec.leaves)
    _index("local", local, spec.hosts_per_leaf)
    return _net(80, 0xFD5A, _HOST_LINK_KIND + spec.dc, plane, rack, local)


def host_link_ends(
    spec: MultiPlaneClos, plane: int, rack: int, local: int
) -> tuple[IPv6Interface, IPv6Interface]:
    """``(host end ::1, leaf end ::2)`` of a host link, with prefix length."""
    return _ends(host_link_subnet(spec, plane, rack, local))


def fabric_link_subnet(spec: MultiPlaneClos, plane: int, leaf: int, spine: int) -> IPv6Network:
    """The /80 of the link between leaf ``leaf`` and spine ``spine`` of ``plane``."""
    _index("plane", plane, spec.planes)
    _index("leaf", leaf, spec.leaves)
    _index("spine", spine, spec.spines)
    return _net(80, 0xFD5A, _FABRIC_LINK_KIND + spec.dc, plane, leaf, spine)


def fabric_link_ends(
    spec: MultiPlaneClos, plane: int, leaf: int, spine: int
) -> tuple[IPv6Interface, IPv6Interface]:
    """``(leaf end ::1, spine end ::2)`` of a fabric link, with prefix length."""
    return _ends(fabric_link_subnet(spec, plane, leaf, spine))


def _ends(subnet: IPv6Network) -> tuple[IPv6Interface, IPv6Interface]:
    base = subnet.network_address
    return (
        IPv6Interface((base + 1, subnet.prefixlen)),
        IPv6Interface((base + 2, subnet.prefixlen)),
    )


# --- SRv6 --------------------------------------------------------------------


def dc_sid_block(spec: MultiPlaneClos) -> IPv6Network:
    """The /32 holding every SID of the fabric."""
    return _net(32, 0xFD5A, _SID_KIND + spec.dc)


def plane_sid_block(spec: MultiPlaneClos, plane: int) -> IPv6Network:
    """The /48 holding the SIDs of every switch of ``plane``."""
    _index("plane", plane, spec.planes)
    return _net(48, 0xFD5A, _SID_KIND + spec.dc, plane)


def sid_locator(spec: MultiPlaneClos, plane: int, tier_role: Role, index: int) -> IPv6Network:
    """The /80 locator of a switch; ``index`` is the rack for leaves, the spine for spines
    and 0 for a DCI router (one per DC and plane)."""
    _index("plane", plane, spec.planes)
    role = _sid_role(tier_role)
    count = {Role.LEAF: spec.leaves, Role.SPINE: spec.spines, Role.DCI: 1}[role]
    tier = _SID_TIER[role]
    _index("index", index, count)
    return _net(80, 0xFD5A, _SID_KIND + spec.dc, plane, tier, index)


def sid(spec: MultiPlaneClos, plane: int, tier_role: Role, index: int) -> IPv6Address:
    """The End SID of a switch (the first address of its locator)."""
    return sid_locator(spec, plane, tier_role, index).network_address


def _sid_role(tier_role: object) -> Role:
    # Accept the plain strings "leaf"/"spine"/"dci" too (Role is a str enum).
    if tier_role not in ("leaf", "spine", "dci"):
        raise TopologyError(
            f"tier_role={tier_role!r} is invalid: must be Role.LEAF, Role.SPINE or Role.DCI"
        )
    return Role(tier_role)


def tier_sid_block(spec: MultiPlaneClos, plane: int, tier_role: Role) -> IPv6Network:
    """The /64 holding the SIDs of every leaf (or spine, or the DCI router) of ``plane``."""
    _index("plane", plane, spec.planes)
    return _net(64, 0xFD5A, _SID_KIND + spec.dc, plane, _SID_TIER[_sid_role(tier_role)])


# --- ScaleAcross: DCI links ---------------------------------------------------


def _scaleacross_dc(spec: MultiPlaneClos) -> int:
    if spec.dc >= MAX_SCALEACROSS_DCS:
        raise TopologyError(
            f"dc={spec.dc} is invalid for DCI links: must be in [0, {MAX_SCALEACROSS_DCS - 1}] "
            f"(fd5a:{_LONG_HAUL_GROUP:x}::/32 holds the long-haul links)"
        )
    return spec.dc


def dci_up_link_subnet(spec: MultiPlaneClos, plane: int, spine: int) -> IPv6Network:
    """The /80 of the link between spine ``spine`` of ``plane`` and the plane's DCI router."""
    dc = _scaleacross_dc(spec)
    _index("plane", plane, spec.planes)
    _index("spine", spine, spec.spines)
    return _net(80, 0xFD5A, _DCI_LINK_KIND + dc, plane, spine)


def dci_up_link_ends(
    spec: MultiPlaneClos, plane: int, spine: int
) -> tuple[IPv6Interface, IPv6Interface]:
    """``(spine end ::1, DCI router end ::2)`` of a spine <-> DCI router link."""
    return _ends(dci_up_link_subnet(spec, plane, spine))


def dci_link_subnet(planes: int, plane: int, dc_a: int, dc_b: int) -> IPv6Network:
    """The /80 of the long-haul link joining the ``plane`` DCI routers of DCs ``dc_a < dc_b``.

    ``planes`` is the plane count of the ScaleAcross (for the range check).
    """
    _index("plane", plane, planes)
    _index("dc_a", dc_a, MAX_SCALEACROSS_DCS)
    _index("dc_b", dc_b, MAX_SCALEACROSS_DCS)
    if dc_a >= dc_b:
        raise TopologyError(
            f"dc_a={dc_a}, dc_b={dc_b} is invalid: a long-haul link is named lower DC first"
        )
    return _net(80, 0xFD5A, _LONG_HAUL_GROUP, plane, dc_a, dc_b)


def dci_link_ends(
    planes: int, plane: int, dc_a: int, dc_b: int
) -> tuple[IPv6Interface, IPv6Interface]:
    """``(dc_a end ::1, dc_b end ::2)`` of a long-haul DCI link."""
    return _ends(dci_link_subnet(planes, plane, dc_a, dc_b))
