"""Applying a node's forwarding plan to its namespace over netlink (pyroute2).

One ``NodeKernel`` per namespace holds a netlink socket opened inside it; every
address, neighbour, queue and route of the plan is one netlink request, no
process is spawned.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.ifaddrmsg import IFA_F_NODAD
from pyroute2.netlink.rtnl.ifinfmsg import IFF_MULTICAST, IFF_NOARP, IFF_UP

from emu.errors import EmuError
from emu.netns import entered, write_sysctl
from emu.timeouts import describe, scaled
from topologies import LinkSpec, Role
from topologies.qos import CTRL_TCLASS
from topologies.routing import MAIN_TABLE, NodePlan, Route

NUD_PERMANENT = 0x80
IF_READY = 0x80000000  # IFLA_INET6_FLAGS: IPv6 found the link oper-up with a live qdisc
PORT_READY_TIMEOUT_S = 10.0
ADDRESS_READY_TIMEOUT_S = 10.0
RTN_LOCAL = 2
LOCAL_TABLE = 255
HTB_ROOT = 0x10000  # 1:
HTB_CLASS = 0x10001  # 1:1   the link rate
HTB_CTRL = 0x10010  # 1:10  control traffic (ACKs, NACKs, probes): served first
HTB_DATA = 0x10020  # 1:20  everything else (the default class)
FIFO_HANDLE = 0x20000  # 2:  the data FIFO: the switch buffer whose drops are counted
CTRL_FIFO = 0x30000  # 3:
# A host's NIC queue: a NIC never drops its own packets (it holds back its queue pairs
# while its port is busy). A userspace transport hands the kernel whatever its windows
# allow, across all its connections at once (an all-to-all of 12 connections puts ~200
# packets on a host's two ports at t = 0): with a switch-sized FIFO there, the NIC would
# drop its own packets. The switch buffers (the other end of each link) stay as given.
HOST_NIC_PACKETS = 4096
ETH_P_IPV6 = 0x86DD

# Quiet, deterministic namespaces: no DAD delay, no router solicitations or
# neighbour discovery chatter that would show up in interface counters.
COMMON_SYSCTLS = (
    ("net.ipv6.conf.all.accept_dad", 0),
    ("net.ipv6.conf.default.accept_dad", 0),
    ("net.ipv6.conf.all.accept_ra", 0),
    ("net.ipv6.conf.default.accept_ra", 0),
    ("net.ipv6.conf.all.router_solicitations", 0),
    ("net.ipv6.conf.default.router_solicitations", 0),
    ("net.ipv6.conf.all.seg6_enabled", 1),
    ("net.ipv6.conf.default.seg6_enabled", 1),
    ("net.ipv6.conf.default.addr_gen_mode", 1),  # no link-local address: no MLD for it
    ("net.ipv6.fib_multipath_hash_policy", 1),  # 5-tuple ECMP hashing
)
# A switch stops using a port the instant it loses light (carrier down), as a
# real switch does; remote switches learn of it only through a control plane.
SWITCH_SYSCTLS = (("net.ipv6.conf.all.ignore_routes_with_linkdown", 1),)
# Under a control plane, an admin-down port keeps its addresses (its fe80:: one
# is BGP's next hop), so bringing it back up needs no re-addressing.
CONTROL_PLANE_SYSCTLS = (("net.ipv6.conf.all.keep_addr_on_down", 1),)


@dataclass
class NodeKernel:
    """A handle on one node's namespace: its fd, pid and netlink sockets inside it.

    pyroute2's synchronous IPRoute quietly opens a new socket per thread, in
    that thread's current namespace; ``ipr`` therefore hands each thread its own
    socket, opened inside this node's namespace.
    """

    name: str
    netns: str
    pid: int
    fd: int
    _main_ipr: IPRoute
    role: Role
    ifindex: dict[str, int] = field(default_factory=dict)
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _opened: list[IPRoute] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def ipr(self) -> IPRoute:
        """A netlink socket in this namespace, usable from the calling thread."""
        if threading.current_thread() is threading.main_thread():
            return self._main_ipr
        ipr = getattr(self._local, "ipr", None)
        if ipr is None:
            with entered(self.fd):
                ipr = IPRoute()
            self._local.ipr = ipr
            with self._lock:
                self._opened.append(ipr)
        return ipr

    @classmethod
    def open(cls, name: str, netns: str, pid: int, role: Role) -> NodeKernel:
        """Open the namespace of ``pid``, set its sysctls and a netlink socket in it."""
        fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        with entered(fd):
            for key, value in COMMON_SYSCTLS + (SWITCH_SYSCTLS if role is not Role.HOST else ()):
                write_sysctl(key, value)
            ipr = IPRoute()
        return cls(name, netns, pid, fd, ipr, role)

    def close(self) -> None:
        """Close the netlink sockets and the namespace fd. A socket whose request a stop
        signal interrupted (its event loop stopped mid-request) cannot finish its close:
        RuntimeError, skipped (the socket goes with the process) so that the teardown
        goes on."""
        try:
            for ipr in [self._main_ipr, *self._opened]:
                try:
                    ipr.close()
                except RuntimeError:
                    pass
        finally:
            os.close(self.fd)

    def socket(self, family: int = socket.AF_INET6, kind: int = socket.SOCK_DGRAM) -> socket.socket:
        """A socket that lives in this node's namespace."""
        with entered(self.fd):
            return socket.socket(family, kind)

    def refresh_ifindex(self) -> None:
        """Learn the index of every interface (one dump)."""
        self.ifindex = {
            link.get_attr("IFLA_IFNAME"): link["index"] for link in self.ipr.get_links()
        }

    def apply(self, plan: NodePlan, specs: dict[str, LinkSpec], mtu: int,
              netem: dict[str, tuple[float, float]] | None = None) -> None:
        """Install addresses, static neighbours, egress queues and routes of ``plan``.

        ``netem`` maps interfaces whose egress also delays to (delay_ms, loss).
        """
        ipr, idx = self.ipr, self.ifindex
        if plan.control_plane:
            with entered(self.fd):
                for key, value in CONTROL_PLANE_SYSCTLS:
                    write_sysctl(key, value)
                # Control-plane ports get the kernel's EUI-64 link-local (the plan's
                # ``link_local``, from the fixed MAC, set first while the port is
                # down): unlike an added one, the kernel regenerates it whenever the
                # port comes back up (keep_addr_on_down never keeps link-locals), so
                # BGP sessions return after a flap.
                for iface in plan.interfaces:
                    if iface.link_local is not None:
                        ipr.link("set", index=idx[iface.ifname], address=iface.mac)
                        write_sysctl(f"net.ipv6.conf.{iface.ifname}.addr_gen_mode", 0)
        ipr.link("set", index=idx["lo"], state="up")
        for lo_addr in ((plan.loopback,) if plan.loopback is not None else ()) + \
                plan.plane_addresses:
            ipr.addr("add", index=idx["lo"], address=str(lo_addr.ip),
                     prefixlen=lo_addr.network.prefixlen, flags=IFA_F_NODAD)
        for rule in plan.rules:
            ipr.rule("add", family=socket.AF_INET6, src=str(rule.src), src_len=128,
                     table=rule.table, priority=1000 + rule.table)
        for iface in plan.interfaces:
            i = idx[iface.ifname]
            # MAC and up here, not at creation: veth peer attributes are not all honoured.
            if iface.link_local is None:
                # No ARP/ND and no multicast: neighbours are static, and MLD reports
                # would otherwise trickle through the counters after every build.
                flags = IFF_UP | IFF_NOARP
            else:
                # A control-plane link: ND, RAs and BFD/BGP to the peer's link-local.
                flags = IFF_UP | IFF_MULTICAST
            ipr.link("set", index=i, address=iface.mac, flags=flags,
                     change=IFF_UP | IFF_NOARP | IFF_MULTICAST)
            ipr.addr("add", index=i, address=str(iface.address.ip),
                     prefixlen=iface.address.network.prefixlen, flags=IFA_F_NODAD)
            spec = specs[iface.ifname]
            if self.role is Role.HOST:  # a NIC holds its own packets: it does not drop them
                spec = replace(spec, queue_packets=max(spec.queue_packets, HOST_NIC_PACKETS))
            set_egress_queue(ipr, i, spec, mtu, (netem or {}).get(iface.ifname))
        for n in plan.neighbors:
            ipr.neigh("add", dst=str(n.address), lladdr=n.mac, ifindex=idx[n.ifname],
                      state=NUD_PERMANENT)
        for route in plan.routes:
            self.install_route(route)
        if self.role is Role.HOST:
            disable_segmentation_offloads(self, [i.ifname for i in plan.interfaces])
        if self.role is not Role.HOST:
            # Forwarding last: turned on while interfaces were multicast-capable it
            # would join all-routers groups and send MLD reports.
            with entered(self.fd):
                write_sysctl("net.ipv6.conf.all.forwarding", 1)

    def wait_addresses_local(self, plan: NodePlan) -> None:
        """Return once every address of ``plan`` is delivered here (see the function)."""
        wait_addresses_local(self.ipr, plan_addresses(plan), self.name)

    # -- run-time changes (failures and impairments) ---------------------------------------

    def set_port_up(self, ifname: str, up: bool) -> None:
        """Admin state of one interface (down: a cut cable as the kernel sees it)."""
        self.ipr.link("set", index=self.ifindex[ifname], state="up" if up else "down")

    def reinstate_port(self, plan: NodePlan, ifname: str) -> None:
        """Put back what admin-down removed from ``ifname``: its address and its permanent
        neighbour entries (its routes: ``reinstall_routes_via``), once the port forwards
        again (``wait_port_ready``; call it after both ends of the cable are up)."""
        self.wait_port_ready(ifname)
        idx = self.ifindex[ifname]
        iface = next(i for i in plan.interfaces if i.ifname == ifname)
        self.ipr.addr("replace", index=idx, address=str(iface.address.ip),
                      prefixlen=iface.address.network.prefixlen)
        for n in plan.neighbors:
            if n.ifname == ifname:
                self.ipr.neigh("replace", dst=str(n.address), lladdr=n.mac, ifindex=idx,
                               state=NUD_PERMANENT)

    def wait_port_ready(self, ifname: str, timeout: float = PORT_READY_TIMEOUT_S) -> None:
        """Return once ``ifname``, admin up with its peer up (carrier), forwards again.

        The end of a veth that came up while its peer was still down gets its carrier
        from the peer's open, but its queue stays the kernel's drop-everything noop
        qdisc until the link-watch worker runs (asynchronously, later on a busy
        machine); the operstate may still read UP from before the cut, so it does not
        tell. IPv6 sets IF_READY (cleared by admin down) only once the link is oper-up
        with a real qdisc, after that worker. A port without carrier cannot forward
        until its peer comes up: nothing to wait for. ``timeout`` scales with
        ``SAE_TIMEOUT_SCALE``.
        """
        deadline = time.monotonic() + scaled(timeout)
        while True:
            link = self.ipr.get_links(self.ifindex[ifname])[0]
            if not link.get_attr("IFLA_CARRIER") or _inet6_flags(link) & IF_READY:
                return
            if time.monotonic() > deadline:
                raise EmuError(
                    f"port {self.name}:{ifname} has carrier but does not forward "
                    f"{describe(timeout)} "
                    f"after coming up (operstate {link.get_attr('IFLA_OPERSTATE')}, IPv6 "
                    f"flags {_inet6_flags(link):#x}, want IF_READY {IF_READY:#x})")
            time.sleep(0.002)  # the worker is usually done within a few milliseconds

    def reinstall_routes_via(self, plan: NodePlan, ifnames: set[str]) -> None:
        """Every planned route with a next hop through one of ``ifnames``, again."""
        for route in plan.routes:
            if any(nh.ifname in ifnames for nh in route.nexthops):
                self.install_route(route, replace=True)

    def change_rate(self, ifname: str, spec: LinkSpec, mtu: int) -> None:
        """The egress of ``ifname`` shaped to ``spec``'s rate (its HTB link and data classes)."""
        for cls, parent in ((HTB_CLASS, HTB_ROOT), (HTB_DATA, HTB_CLASS)):
            self.ipr.tc("change-class", "htb", self.ifindex[ifname], cls, parent=parent,
                        **htb_class(spec, mtu))

    def change_netem(self, ifname: str, delay_ms: float, loss: float, limit: int) -> None:
        """The netem delay line of ``ifname`` changed (``loss`` a fraction)."""
        self.ipr.tc("change", "netem", self.ifindex[ifname], FIFO_HANDLE, parent=HTB_DATA,
                    delay=int(delay_ms * 1000), loss=loss * 100, limit=limit)

    def install_route(self, route: Route, replace: bool = False) -> None:
        """Install one planned route (``replace``: overwrite a route of the same destination).

        Used by ``apply`` and to restore a node's routes through an interface that
        came back up (admin-down deletes single-path routes through the device).
        """
        ipr, idx = self.ipr, self.ifindex
        cmd = "replace" if replace else "add"
        if route.seg6local_end:
            ipr.route(cmd, dst=str(route.dst.network_address), dst_len=route.dst.prefixlen,
                      oif=idx[route.nexthops[0].ifname],
                      encap={"type": "seg6local", "action": "End"})
            return
        extra: dict = {"prefsrc": str(route.src)} if route.src is not None else {}
        if route.table != MAIN_TABLE:
            extra["table"] = route.table
        if len(route.nexthops) == 1:
            nh = route.nexthops[0]
            extra.update(gateway=str(nh.gateway), oif=idx[nh.ifname])
        else:
            extra["multipath"] = [{"gateway": str(nh.gateway), "oif": idx[nh.ifname]}
                                  for nh in route.nexthops]
        ipr.route(cmd, dst=str(route.dst.network_address), dst_len=route.dst.prefixlen,
                  **extra)


def plan_addresses(plan: NodePlan) -> list[str]:
    """Every address ``apply`` gives the node of ``plan``: loopback, plane sources, ports."""
    lo = ((plan.loopback,) if plan.loopback is not None else ()) + plan.plane_addresses
    return [str(a.ip) for a in lo] + [str(i.address.ip) for i in plan.interfaces]


def wait_addresses_local(ipr: IPRoute, addresses: list[str], where: str,
                         timeout: float = ADDRESS_READY_TIMEOUT_S) -> None:
    """Return once every one of ``addresses`` (just added) has its local route.

    The kernel acknowledges an address before that route exists: even without DAD
    it goes in from the address-configuration work queue, a moment later (longer on
    a busy machine), and only once the port is up with carrier. A datagram to the
    address meanwhile meets only the prefix route and is dropped as not ours
    (Ip6InAddrErrors). Call it after both ends of every link are up. ``timeout``
    scales with ``SAE_TIMEOUT_SCALE``.
    """
    deadline = time.monotonic() + scaled(timeout)
    while True:
        local = {r.get_attr("RTA_DST") for r in ipr.get_routes(family=socket.AF_INET6,
                                                               table=LOCAL_TABLE)
                 if r["type"] == RTN_LOCAL}
        missing = [a for a in addresses if a not in local]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise EmuError(f"{where}: address {missing[0]} (and {len(missing) - 1} more) has "
                           f"no local route {describe(timeout)} after it was added")
        time.sleep(0.001)


def _inet6_flags(link: Any) -> int:
    """IFLA_INET6_FLAGS of a pyroute2 link message (0 if the link has no IPv6 state)."""
    af = link.get_attr("IFLA_AF_SPEC")
    inet6 = af.get_attr("AF_INET6") if af is not None else None
    flags = inet6.get_attr("IFLA_INET6_FLAGS") if inet6 is not None else None
    return int(flags or 0)


SIOCETHTOOL = 0x8946
ETHTOOL_STSO, ETHTOOL_SGSO = 0x1F, 0x24
_ETHTOOL_VALUE = struct.Struct("II")


def disable_segmentation_offloads(kernel: NodeKernel, ifnames: list[str]) -> None:
    """TSO and GSO off on a host's NICs: a veth would otherwise hand kernel TCP's 64 KB
    super-packets to the switches, where each takes a single slot of a FIFO sized in
    packets (TCP, and gloo over it, would get many times the buffer of everyone else)."""
    s = kernel.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for name in ifnames:
            for cmd in (ETHTOOL_STSO, ETHTOOL_SGSO):
                value = ctypes.create_string_buffer(_ETHTOOL_VALUE.pack(cmd, 0))
                ifreq = struct.pack("16sP", name.encode(), ctypes.addressof(value))
                fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifreq)
    finally:
        s.close()


def htb_class(spec: LinkSpec, mtu: int) -> dict:
    """HTB class parameters for a link of ``spec``: rate = ceil, and a burst of at
    least two jumbo frames or one timer tick of traffic, which keeps HTB exact at
    these rates without letting a backlog through at once."""
    rate_bps = int(spec.rate_mbit * 1_000_000)
    burst = max(2 * (mtu + 14), rate_bps // 8 // 1000 + mtu + 14)
    return {"rate": f"{rate_bps}bit", "ceil": f"{rate_bps}bit", "burst": burst,
            "cburst": burst, "quantum": mtu + 14}


def set_egress_queue(ipr: IPRoute, index: int, spec: LinkSpec, mtu: int,
                     netem: tuple[float, float] | None = None) -> None:
    """HTB at the link rate feeding a bounded FIFO: the switch buffer, with real drops.

    Under the link's class, control packets (traffic class CTRL_TCLASS) have a
    class of their own with priority over data. ``netem=(delay_ms, loss)``: the
    data FIFO is a netem qdisc of the same depth that also delays (and drops a
    fraction ``loss``), and control packets share it (a DCI link on a kernel with
    netem: nothing may skip the propagation delay).
    """
    ipr.tc("add", "htb", index, HTB_ROOT, default=HTB_DATA & 0xFFFF)  # minor id
    ipr.tc("add-class", "htb", index, HTB_CLASS, parent=HTB_ROOT, **htb_class(spec, mtu))
    ipr.tc("add-class", "htb", index, HTB_DATA, parent=HTB_CLASS, prio=1,
           **htb_class(spec, mtu))
    if netem is None:
        ipr.tc("add", "pfifo", index, FIFO_HANDLE, parent=HTB_DATA, limit=spec.queue_packets)
        ipr.tc("add-class", "htb", index, HTB_CTRL, parent=HTB_CLASS, prio=0,
               **htb_class(spec, mtu))
        ipr.tc("add", "pfifo", index, CTRL_FIFO, parent=HTB_CTRL, limit=256)
        # IPv6 word 0 = version(4) | traffic class(8) | flow label(20)
        ipr.tc("add-filter", "u32", index, parent=HTB_ROOT, prio=1, protocol=ETH_P_IPV6,
               target=HTB_CTRL, keys=[f"0x{CTRL_TCLASS << 20:08x}/0x0ff00000+0"])
    else:
        delay_ms, loss = netem
        ipr.tc("add", "netem", index, FIFO_HANDLE, parent=HTB_DATA,
               delay=int(delay_ms * 1000), loss=loss * 100, limit=spec.queue_packets)


def netem_works(kernel: NodeKernel) -> bool:
    """Whether this kernel has netem, tried on a scratch veth in ``kernel``'s namespace."""
    ipr = kernel.ipr
    ipr.link("add", ifname="saeprobe0", kind="veth", peer={"ifname": "saeprobe1"})
    try:
        index = ipr.link_lookup(ifname="saeprobe0")[0]
        try:
            ipr.tc("add", "netem", index, 0x10000, delay=1000)
        except Exception:  # noqa: BLE001 - pyroute2 NetlinkError: no such qdisc kind
            return False
        return True
    finally:
        ipr.link("del", ifname="saeprobe0")


def create_veths(pairs: list[tuple[str, int, str, int, int]]) -> None:
    """Create veth pairs directly inside their namespaces (no move, no rename).

    Each item: (ifname_a, ns_fd_a, ifname_b, ns_fd_b, mtu).
    """
    with IPRoute() as ipr:
        for name_a, fd_a, name_b, fd_b, mtu in pairs:
            ipr.link("add", ifname=name_a, kind="veth", net_ns_fd=fd_a, mtu=mtu,
                     peer={"ifname": name_b, "net_ns_fd": fd_b, "mtu": mtu})
