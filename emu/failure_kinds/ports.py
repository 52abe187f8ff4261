"""The kernel operations failures need on a running fabric, all in this one module.

Failure kinds break ports through these functions, which call public Fabric and
NodeKernel methods: no failure code touches a node's netlink socket or forwarding plan,
or knows how a port is configured.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING

from emu.errors import EmuError
from topologies import Link, LinkSpec

if TYPE_CHECKING:
    from emu.fabric import Fabric

Port = tuple[str, str]  # (node, ifname)


def ends(link: Link) -> tuple[Port, Port]:
    """Both ports of ``link``."""
    return (link.a.node, link.a.ifname), (link.b.node, link.b.ifname)


def set_links(fab: Fabric, links: Sequence[Link], up: bool) -> None:
    """Both ends of every link admin down (a cut cable), or back up with everything
    admin-down removed from them re-installed."""
    set_ports(fab, [p for lk in links for p in ends(lk)], up)


def set_ports(fab: Fabric, ports: Sequence[Port], up: bool) -> None:
    """``ports`` admin down, or up again with their addresses, neighbours and planned
    routes re-installed."""
    fab.set_ports(ports, up)


def set_rate(fab: Fabric, port: Port, spec: LinkSpec) -> None:
    """The port's egress shaped to ``spec``'s rate at run time."""
    node, ifname = port
    fab.node_kernel(node).change_rate(ifname, spec, fab.spec.mtu)


def set_netem(fab: Fabric, port: Port, delay_ms: float, loss: float, limit: int) -> None:
    """The port's netem delay line changed at run time (``loss`` a fraction)."""
    node, ifname = port
    fab.node_kernel(node).change_netem(ifname, delay_ms, loss, limit)


def received(fab: Fabric, node: str) -> dict[str, int]:
    """Packets received so far on every interface of ``node``."""
    from emu.counters import interface_packets

    return {ifname: rx for ifname, (rx, _) in interface_packets(fab.node_kernel(node)).items()}


def nft(fab: Fabric, node: str, script: str) -> None:
    """Run an nftables script inside ``node``'s namespace."""
    p = subprocess.run(fab.in_netns(node, "nft", "-f", "-"),
                       input=script, capture_output=True, text=True)
    if p.returncode != 0:
        raise EmuError(f"nft in {node} failed: {p.stderr.strip()}")
