"""The BGP/BFD control plane of a fabric: FRR (zebra, bfdd, bgpd) in every switch namespace.

eBGP as RFC 7938 lays it out for a data-centre Clos:

* One private 4-byte ASN per leaf, and one per plane's spine tier, shared by
  that plane's spines (RFC 7938 5.2.1). Sharing matters on failures: a route
  that went spine -> leaf -> spine carries the spines' own ASN and is dropped
  as a loop, so after a withdrawal a spine never hunts through "valley" paths
  via other leaves (RFC 7938 7.5); a leaf's own ASN keeps its prefixes from
  coming back to it. Planes are disjoint, yet their ASNs differ too, so a
  path's AS list names its plane.
* Unnumbered sessions on every switch-to-switch port (``neighbor IFNAME
  interface``): IPv6 link-local peers found through router advertisements,
  IPv6 next hops (RFC 5549 style, the peer's link-local).
* ``bgp bestpath as-path multipath-relax`` and ``maximum-paths 64``: a leaf
  installs one ECMP route over every spine of its plane for every remote host
  prefix. Leaves originate their hosts' /64s (``network``, which the leaf's
  static kernel route to the host backs).
* BFD on every session, timers from a ``bfd`` profile (``BfdTimers``).

Config rendering (``plan_bgp``, ``SwitchConfig.render``) is pure and tested
without root; ``FrrRunner`` starts, supervises and cleans the daemons; the
netlink probes (``route_nexthops``, ``wait_withdrawn``) time convergence.

Each daemon runs in the foreground (supervised, no fork) inside its switch's
namespace, with every file (config, pid file, vty sockets, zserv socket, log)
under one temp dir of the fabric, ``<tmp>/<switch>/``. FRR 8.4 also keeps a
per-process dir ``/var/tmp/frr/<daemon>.<pid>`` (thread log buffers) that a
killed daemon leaves behind: those are registered as temp dirs of the fabric
too, so teardown and ``emu clean`` remove them.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import IPv6Network
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from emu.errors import EmuError
from emu.netns import entered
from emu.timeouts import describe, scaled
from topologies import MultiPlaneClos, Role, ScaleAcross
from topologies.routing import NodePlan, originated_prefixes

if TYPE_CHECKING:
    from emu.kernel import NodeKernel

log = logging.getLogger(__name__)


class FabricView(Protocol):
    """What the convergence probes read of a running fabric (emu/fabric.py's ``Fabric``)."""

    @property
    def spec(self) -> MultiPlaneClos | ScaleAcross: ...

    def node_kernel(self, name: str) -> NodeKernel: ...

FRR_DIR = Path("/usr/lib/frr")
DAEMONS = ("zebra", "bfdd", "bgpd")
FRR_VAR_TMP = Path("/var/tmp/frr")  # FRR's compiled-in per-process dir (TMPBASEDIR)
VTYSH = "vtysh"
ASN_BASE = 4_200_000_000  # RFC 6996 private 4-byte ASNs: 4200000000-4294967294
RT_TABLE_MAIN = 254
RTNH_F_DEAD = 1
RTNH_F_LINKDOWN = 16


@dataclass(frozen=True)
class BfdTimers:
    """BFD timers of every session: detection time = multiplier x interval."""

    detect_multiplier: int = 3
    receive_ms: int = 100
    transmit_ms: int = 100

    def __post_init__(self) -> None:
        # FRR 8.4's ranges for a bfd profile.
        for name, value, lo, hi in (("detect_multiplier", self.detect_multiplier, 2, 255),
                                    ("receive_ms", self.receive_ms, 10, 60000),
                                    ("transmit_ms", self.transmit_ms, 10, 60000)):
            if type(value) is not int or not lo <= value <= hi:
                raise ValueError(f"{name}={value!r} is invalid: must be an integer in "
                                 f"[{lo}, {hi}]")

    @property
    def detection_s(self) -> float:
        """Seconds without a packet before a session is declared down (both ends alike)."""
        return self.detect_multiplier * max(self.receive_ms, self.transmit_ms) / 1000


DEFAULT_BFD = BfdTimers()


# -- the configuration (pure) ----------------------------------------------------------------


def asn_of(spec: MultiPlaneClos, switch: str) -> int:
    """The ASN of a switch: its own for a leaf, its plane's spine-tier ASN for a spine."""
    node = spec.node(switch)
    if node.role is Role.HOST or node.plane is None:
        raise ValueError(f"{switch!r} is a host: hosts do not run BGP")
    # dc < 256, plane < 16, rack < 64: base + dc*10^5 + plane*10^3 (+ 1 + rack).
    tier = ASN_BASE + spec.dc * 100_000 + node.plane * 1000
    return tier if node.role is Role.SPINE else tier + 1 + node.index


def router_id(spec: MultiPlaneClos, switch: str) -> str:
    """A unique IPv4 router id (the fabric has no IPv4; BGP still needs one)."""
    node = spec.node(switch)
    if node.role is Role.HOST or node.plane is None:
        raise ValueError(f"{switch!r} is a host: hosts do not run BGP")
    last = 1 + node.index if node.role is Role.LEAF else 128 + node.index
    return f"10.{spec.dc}.{node.plane}.{last}"


@dataclass(frozen=True)
class Session:
    """One unnumbered eBGP session: the local port and who is at its other end."""

    ifname: str
    peer_node: str
    peer_ifname: str
    peer_asn: int


@dataclass(frozen=True)
class SwitchConfig:
    """The control-plane configuration of one switch; ``render`` gives FRR's files."""

    node: str
    asn: int
    router_id: str
    sessions: tuple[Session, ...]
    networks: tuple[IPv6Network, ...]
    bfd: BfdTimers

    def render(self) -> dict[str, str]:
        """One config file per daemon (FRR 8.4 reads only its own commands from ``-f``)."""
        b = self.bfd
        # Plain multipath routes, not kernel nexthop objects: with objects, a port
        # going down removes its member from the kernel's group behind zebra's back,
        # and zebra (8.4) reuses the stale group when the path comes back.
        zebra = [f"hostname {self.node}", "no zebra nexthop kernel enable", "!"]
        bfdd = [
            f"hostname {self.node}",
            "bfd",
            " profile fabric",
            f"  detect-multiplier {b.detect_multiplier}",
            f"  receive-interval {b.receive_ms}",
            f"  transmit-interval {b.transmit_ms}",
            " exit",
            "exit",
            "!",
        ]
        bgpd = [
            "frr defaults datacenter",
            f"hostname {self.node}",
            f"router bgp {self.asn}",
            f" bgp router-id {self.router_id}",
            " no bgp ebgp-requires-policy",
            " no bgp default ipv4-unicast",
            " bgp bestpath as-path multipath-relax",
            " neighbor fabric peer-group",
            " neighbor fabric remote-as external",
            " neighbor fabric bfd",
            " neighbor fabric bfd profile fabric",
        ]
        bgpd += [f" neighbor {s.ifname} interface peer-group fabric" for s in self.sessions]
        bgpd += [" address-family ipv6 unicast"]
        bgpd += [f"  network {n}" for n in self.networks]
        bgpd += [
            "  neighbor fabric activate",
            "  maximum-paths 64",
            " exit-address-family",
            "exit",
            "!",
        ]
        return {"zebra": "\n".join(zebra) + "\n", "bfdd": "\n".join(bfdd) + "\n",
                "bgpd": "\n".join(bgpd) + "\n"}


def plan_bgp(spec: MultiPlaneClos, plans: dict[str, NodePlan],
             bfd: BfdTimers = DEFAULT_BFD) -> dict[str, SwitchConfig]:
    """The control-plane configuration of every switch of ``spec`` (hosts run no BGP)."""
    out: dict[str, SwitchConfig] = {}
    for node in spec.switches:
        plan = plans[node.name]
        sessions = tuple(
            Session(i.ifname, i.peer_node, i.peer_ifname, asn_of(spec, i.peer_node))
            for i in plan.interfaces if i.link.tier == "fabric")
        networks = originated_prefixes(spec, node.name) if node.role is Role.LEAF else ()
        out[node.name] = SwitchConfig(node.name, asn_of(spec, node.name),
                                      router_id(spec, node.name), sessions, networks, bfd)
    return out


# -- the daemons (root) ----------------------------------------------------------------------


@dataclass
class Daemon:
    """One running FRR daemon of one switch."""

    node: str
    name: str
    proc: subprocess.Popen
    log: Path

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:]) or "(empty log)"


@dataclass
class FrrRunner:
    """The FRR daemons of a fabric: all files under ``root``, one sub-dir per switch."""

    root: Path
    register_dir: Callable[[list[str]], None]  # records dirs in the fabric's state file
    daemons: list[Daemon] = field(default_factory=list)
    created_var_tmp: bool = False
    sessions: dict[str, tuple[Session, ...]] = field(default_factory=dict)

    @classmethod
    def create(cls, fabric: str, register_dir: Callable[[list[str]], None]) -> FrrRunner:
        """Make (and register, before anything starts) the fabric's FRR temp dir."""
        root = Path(tempfile.mkdtemp(prefix=f"sae-frr-{fabric}-"))
        register_dir([str(root)])
        return cls(root, register_dir, created_var_tmp=not FRR_VAR_TMP.exists())

    def node_dir(self, node: str) -> Path:
        return self.root / node

    def start(self, configs: dict[str, SwitchConfig], kernels: dict[str, NodeKernel],
              timeout: float = 20.0) -> None:
        """Write every config, start zebra everywhere, then bfdd and bgpd once zebra listens."""
        missing = [d for d in DAEMONS if not (FRR_DIR / d).exists()]
        if missing:
            raise EmuError(f"FRR is missing {', '.join(str(FRR_DIR / d) for d in missing)} "
                           "(apt-get install frr)")
        for node, cfg in configs.items():
            self.sessions[node] = cfg.sessions
            d = self.node_dir(node)
            d.mkdir(mode=0o750)
            for daemon, text in cfg.render().items():
                (d / f"{daemon}.conf").write_text(text)
        self._spawn("zebra", configs, kernels)
        deadline = time.monotonic() + timeout
        waiting = set(configs)
        while waiting:
            self.check()
            waiting = {n for n in waiting if not (self.node_dir(n) / "zserv.api").exists()}
            if waiting and time.monotonic() > deadline:
                raise EmuError(f"zebra did not open its socket within {timeout} s on "
                               f"{sorted(waiting)[:5]}")
            time.sleep(0.01)
        self._spawn("bfdd", configs, kernels)
        self._spawn("bgpd", configs, kernels)

    def _spawn(self, daemon: str, configs: dict[str, SwitchConfig],
               kernels: dict[str, NodeKernel]) -> None:
        for node in configs:
            d = self.node_dir(node)
            argv = [str(FRR_DIR / daemon), "-u", "root", "-g", "root",
                    "-f", str(d / f"{daemon}.conf"), "-i", str(d / f"{daemon}.pid"),
                    "-z", str(d / "zserv.api"), "--vty_socket", str(d),
                    "--log", f"file:{d / daemon}.log", "--log-level", "info",
                    # FRR sizes per-fd tables by the fd limit: keep 3 x switches daemons small.
                    "--limit-fds", "1024"]
            if daemon == "bfdd":
                argv += ["--bfdctl", str(d / "bfdd.sock")]
            out = d / f"{daemon}.out"
            with open(out, "wb") as f, entered(kernels[node].fd):
                # Forked from this thread while it is inside the switch's namespace.
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f,
                                        stderr=subprocess.STDOUT, cwd=d, start_new_session=True)
            self.daemons.append(Daemon(node, daemon, proc, d / f"{daemon}.log"))
            # Named by the daemon's pid, so known only once it runs: recorded at once,
            # before the next daemon starts (the daemon creates it while starting up)
            self.register_dir([str(FRR_VAR_TMP / f"{daemon}.{proc.pid}")])

    def check(self) -> None:
        """Raise (with its log tail) if any daemon has exited."""
        for d in self.daemons:
            rc = d.proc.poll()
            if rc is not None:
                out = self.node_dir(d.node) / f"{d.name}.out"
                try:
                    early = out.read_text(errors="replace").strip()[-2000:]
                except OSError:
                    early = ""
                raise EmuError(f"FRR {d.name} of {d.node} exited (status {rc}); log tail:\n"
                               f"{d.tail()}" + (f"\noutput:\n{early}" if early else ""))

    def reap(self) -> None:
        """After the fabric killed every process of its namespaces: reap and remove files."""
        for d in self.daemons:
            try:
                d.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                log.warning("FRR %s of %s (pid %d) did not exit", d.name, d.node, d.proc.pid)
            shutil.rmtree(FRR_VAR_TMP / f"{d.name}.{d.proc.pid}", ignore_errors=True)
        self.daemons.clear()
        shutil.rmtree(self.root, ignore_errors=True)
        if self.created_var_tmp:
            try:
                FRR_VAR_TMP.rmdir()  # only if empty: another FRR may use it meanwhile
            except OSError:
                pass

    def bfd_not_up(self, nodes: list[str]) -> dict[str, list[str]]:
        """Per switch, its BFD sessions that are not up (``peer status``), or all missing."""
        out: dict[str, list[str]] = {}
        for node in nodes:
            want = len(self.sessions.get(node, ()))
            peers = json.loads(self.vtysh(node, "show bfd peers json") or "[]")
            bad = [f"{p.get('interface', p.get('peer'))} {p.get('status')}"
                   for p in peers if p.get("status") != "up"]
            if len(peers) < want:
                bad.append(f"{want - len(peers)} of {want} sessions missing")
            if bad:
                out[node] = bad
        return out

    def vtysh(self, node: str, *commands: str, timeout: float = 10.0) -> str:
        """Run vtysh commands against the daemons of ``node``; returns their output."""
        argv = [VTYSH, "--vty_socket", str(self.node_dir(node))]
        for c in commands:
            argv += ["-c", c]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise EmuError(f"vtysh on {node} failed ({p.returncode}): {p.stderr or p.stdout}")
        return p.stdout


# -- convergence probes (netlink) -----------------------------------------------------------


def route_nexthops(kernel: NodeKernel, prefix: IPv6Network | str) -> set[str]:
    """Egress ifnames of the kernel route for exactly ``prefix`` in ``kernel``'s namespace.

    Empty if there is no such route. Next hops the kernel marks dead or
    link-down are left out (switches ignore link-down next hops). A dump of
    the main table, filtered here: ``ip route get fibmatch`` would be one
    lookup, but for routes sharing a kernel nexthop object (zebra's default)
    it answers with whichever route of that object was looked up first.
    """
    net = IPv6Network(prefix)
    dst = str(net.network_address)
    out: set[str] = set()
    names: dict[int, str] | None = None
    for msg in kernel.ipr.route("dump", family=socket.AF_INET6):
        if msg["dst_len"] != net.prefixlen or msg["table"] != RT_TABLE_MAIN:
            continue
        if (msg.get_attr("RTA_DST") or "::") != dst:
            continue
        names = names or _names(kernel)
        multipath = msg.get_attr("RTA_MULTIPATH")
        hops = ([(nh["oif"], nh["flags"]) for nh in multipath] if multipath
                else [(msg.get_attr("RTA_OIF"), msg["flags"])])
        for oif, flags in hops:
            if oif is not None and not flags & (RTNH_F_DEAD | RTNH_F_LINKDOWN):
                out.add(names.get(oif, str(oif)))
    return out


def _names(kernel: NodeKernel) -> dict[int, str]:
    if not kernel.ifindex:
        kernel.refresh_ifindex()
    return {i: n for n, i in kernel.ifindex.items()}


def wait_withdrawn(fab: FabricView, node: str, prefix: IPv6Network | str, ifname: str,
                   timeout: float = 5.0, interval: float = 0.002) -> float:
    """Seconds until ``ifname`` is no longer a next hop of ``prefix`` on ``node``.

    Polls netlink every ``interval`` s at first, backing off to 5 % of the time
    already waited (a slow convergence is still timed within ~5 %, and a long
    wait does not steal the CPU from the traffic being measured); TimeoutError
    with the route's state otherwise. ``timeout`` scales with ``SAE_TIMEOUT_SCALE``.
    """
    k = fab.node_kernel(node)
    t0 = time.monotonic()
    deadline = t0 + scaled(timeout)
    while True:
        hops = route_nexthops(k, prefix)
        now = time.monotonic()
        if ifname not in hops:
            return now - t0
        if now > deadline:
            raise TimeoutError(f"{node}: {ifname} still a next hop of {prefix} after "
                               f"{describe(timeout)} (next hops: {sorted(hops)})")
        time.sleep(max(interval, 0.05 * (now - t0)))


def expected_routes(spec: MultiPlaneClos) -> dict[str, dict[IPv6Network, set[str]]]:
    """What a converged fabric has: per leaf, every other rack's host prefix over all spines."""
    out: dict[str, dict[IPv6Network, set[str]]] = {}
    for leaf in spec.leaf_nodes:
        spines = {i.ifname for i in spec.ports(leaf.name) if i.ifname.startswith("s")}
        out[leaf.name] = {
            net: set(spines)
            for other in spec.leaf_nodes
            if other.plane == leaf.plane and other.index != leaf.index
            for net in originated_prefixes(spec, other.name)}
    return out


def missing_routes(fab: FabricView) -> dict[str, list[str]]:
    """Per leaf, the expected ECMP routes not (fully) in its kernel yet."""
    out: dict[str, list[str]] = {}
    spec = fab.spec
    assert isinstance(spec, MultiPlaneClos)  # BGP runs only on a MultiPlaneClos (Fabric)
    for leaf, routes in expected_routes(spec).items():
        k = fab.node_kernel(leaf)
        bad = [f"{net} via {sorted(route_nexthops(k, net))}"
               for net, want in routes.items() if route_nexthops(k, net) != want]
        if bad:
            out[leaf] = bad
    return out

