"""IPv6 addressing plan (the only module that knows the address layout).

Everything lives in the ULA prefix ``fd5a::/16``.  The second 16-bit group
selects the address *kind* in its high byte and the DC index in its low byte,
so each kind of address of all DCs fits one /24 and one DC's share is a /32::

    fd5a:00dc::/32   host loopbacks       fd5a:{dc}:{rack}:{local}::1/128
    fd5a:01dc::/32   host <-> leaf links  fd5a:{100+dc}:{plane}:{rack}:{local}::/80
    fd5a:02dc::/32   leaf <-> spine links fd5a:{200+dc}:{plane}:{leaf}:{spine}::/80
    fd5a:03dc::/32   reserved for DCI links
    fd5a:05dc::/32   SRv6 SIDs            fd5a:{500+dc}:{plane}:{tier}:{index}::

All indices are 0-based and written as hex groups.  Hosts own a
plane-independent loopback so a peer can reach them through any plane; the
per-plane link addresses only serve next-hop resolution.  One SID per switch
(tier 1 = leaf indexed by rack, tier 2 = spine) with a /80 locator, so a
/48 per plane lets hosts steer traffic into a plane with a single route.

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
"""Reserved for inter-DC links; nothing here allocates from it yet."""
ALL_SIDS = IPv6Network("fd5a:500::/24")

_HOST_KIND = 0x000
_HOST_LINK_KIND = 0x100
_FABRIC_LINK_KIND = 0x200
_SID_KIND = 0x500
_SID_TIER = {Role.LEAF: 1, Role.SPINE: 2}


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
    """The /80 locator of a switch; ``index`` is the rack for leaves, the spine for spines."""
    _index("plane", plane, spec.planes)
    # Accept the plain strings "leaf"/"spine" too (Role is a str enum).
    role = Role(tier_role) if tier_role in ("leaf", "spine") else None
    if role is None:
        raise TopologyError(f"tier_role={tier_role!r} is invalid: must be Role.LEAF or Role.SPINE")
    tier = _SID_TIER[role]
    count = spec.leaves if role is Role.LEAF else spec.spines
    _index("index", index, count)
    return _net(80, 0xFD5A, _SID_KIND + spec.dc, plane, tier, index)


def sid(spec: MultiPlaneClos, plane: int, tier_role: Role, index: int) -> IPv6Address:
    """The End SID of a switch (the first address of its locator)."""
    return sid_locator(spec, plane, tier_role, index).network_address
