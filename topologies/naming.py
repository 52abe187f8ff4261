"""Node and interface naming scheme (the only place that knows it).

Node names are Mininet node names; interface names are unique per node and
stay far below the 15-character Linux limit (longest: ``h4095``).  Names of
fabric ``dc`` carry the prefix ``d{dc}`` (none for DC 0) so several fabrics
can share one Mininet instance without clashes.
"""

from __future__ import annotations


def dc_prefix(dc: int) -> str:
    """Name prefix of every node of fabric ``dc``: ``""`` for DC 0, else ``d{dc}``."""
    return "" if dc == 0 else f"d{dc}"


def host_name(dc: int, host: int) -> str:
    """Host with global index ``host`` (rack * hosts_per_leaf + local)."""
    return f"{dc_prefix(dc)}h{host}"


def leaf_name(dc: int, plane: int, rack: int) -> str:
    """Leaf of ``plane`` serving ``rack``."""
    return f"{dc_prefix(dc)}p{plane}l{rack}"


def spine_name(dc: int, plane: int, spine: int) -> str:
    """Spine number ``spine`` of ``plane``."""
    return f"{dc_prefix(dc)}p{plane}s{spine}"


def host_ifname(plane: int) -> str:
    """A host's NIC attached to ``plane``."""
    return f"p{plane}"


def leaf_host_ifname(host: int) -> str:
    """A leaf's port towards host ``host`` (global index)."""
    return f"h{host}"


def leaf_spine_ifname(spine: int) -> str:
    """A leaf's port towards spine ``spine`` of the same plane."""
    return f"s{spine}"


def spine_leaf_ifname(rack: int) -> str:
    """A spine's port towards the leaf of ``rack`` in the same plane."""
    return f"l{rack}"
