"""Mininet element classes for an emulated fabric.

Mininet owns the nodes (one namespace and shell per host or switch, its CLI),
while links and every bit of kernel state are created in bulk over netlink by
emu.kernel: Mininet's own per-interface shell commands (ip link, ifconfig, tc)
are what make a plain Mininet build slow, so these classes record and skip them.
"""

from __future__ import annotations

from typing import Any

from mininet.link import Intf, Link
from mininet.net import Mininet
from mininet.node import Host, Node


class LinuxRouter(Node):
    """A switch of the fabric: a plain Linux router namespace (no OVS, no controller)."""

    def __init__(self, name: str, **params: Any) -> None:
        # Mininet puts switches in the root namespace by default (OVS); a router
        # must have a namespace of its own.
        params["inNamespace"] = True
        super().__init__(name, **params)

    def start(self, controllers: Any = None) -> None:
        # Only reached when plain Mininet (`mn --custom`) starts the node; the
        # emulator sets forwarding itself over /proc in bulk.
        self.cmd("sysctl -qw net.ipv6.conf.all.forwarding=1")

    def stop(self, deleteIntfs: bool = False) -> None:  # noqa: N803 (Mininet's name)
        self.terminate()


class EmuHost(Host):
    """An end host; one NIC per plane, configured by the emulator, not by Mininet."""


class EmuIntf(Intf):
    """An interface whose configuration is applied in bulk by emu.kernel."""

    def config(self, **params: Any) -> dict:
        # Keep the parameters (link spec etc.) for inspection, run no shell command.
        self.params = params
        return {}

    def delete(self) -> None:
        # The namespace teardown removes the veth; nothing to run per interface.
        self.node.delIntf(self)
        self.link = None


class VethLink(Link):
    """A veth pair declared to Mininet; emu.kernel creates it over netlink."""

    def __init__(self, node1: Node, node2: Node, **params: Any) -> None:
        self.link_name = params.pop("link_name", None)
        self.spec = params.pop("spec", None)
        for key in ("bw", "max_queue_size", "addr1", "addr2", "intf"):
            params.pop(key, None)
        super().__init__(node1, node2, intf=EmuIntf, fast=True, **params)

    @classmethod
    def makeIntfPair(cls, *args: Any, **kwargs: Any) -> None:  # noqa: N802 (Mininet's name)
        """No-op: pairs are created in one netlink batch after Mininet's build."""

    def stop(self) -> None:
        """Nothing to do: the veth dies with its namespaces."""

    def delete(self) -> None:
        """Nothing to do: the veth dies with its namespaces."""


class EmuNet(Mininet):
    """Mininet with host configuration and teardown left to the emulator."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Mininet.init() raises host-wide limits and sysctls (fixLimits); the
        # emulator touches nothing outside its own namespaces, so skip it.
        Mininet.inited = True
        super().__init__(*args, **kwargs)

    def configHosts(self) -> None:  # noqa: N802 (Mininet's name)
        """Skip Mininet's IPv4 ifconfig per host: addressing is IPv6 and applied by netlink."""

    def stop(self) -> None:
        """Teardown is done by emu.fabric.Fabric (one kill of every process in our namespaces)."""
