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


# --- ScaleAcross: DCI routers ------------------------------------------------


def dci_name(dc: int, plane: int) -> str:
    """The DCI router of ``plane`` in DC ``dc`` (one per DC and plane)."""
    return f"{dc_prefix(dc)}p{plane}x"


def spine_dci_ifname() -> str:
    """A spine's port towards its plane's DCI router (every spine has one)."""
    return "x"


def dci_spine_ifname(spine: int) -> str:
    """A DCI router's port towards spine ``spine`` of its plane and DC."""
    return f"s{spine}"


def dci_peer_ifname(dc: int) -> str:
    """A DCI router's long-haul port towards the DCI router of DC ``dc`` (same plane)."""
    return f"d{dc}"
