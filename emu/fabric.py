"""Build, hold and tear down an emulated multi-plane Clos fabric.

    with Fabric(MultiPlaneClos(planes=2)) as fab:
        fab.node_kernel("h0")        # netlink socket + namespace of host h0
        fab.net                      # the Mininet object (CLI, node.cmd, popen)

Build order (plan, then apply): Mininet starts one shell per node (its
namespace) -> the state file is written -> namespaces get /run/netns names ->
all veths are created over netlink straight into their namespaces -> each
namespace gets sysctls, addresses, static neighbours, HTB + FIFO queues and
routes from ``topologies.routing.plan_fabric``. Teardown kills every process in
our namespaces at once and drops the names; the kernel then frees the
namespaces and their veths.

``control_plane="bgp"``: switches get no static ECMP routes; FRR (zebra, bfdd,
bgpd, emu/frr.py) starts in every switch namespace after the apply, and
``start`` returns once every leaf has its ECMP routes to every other rack.

A ``ScaleAcross`` spec builds every DC and its DCI routers the same way; each
long-haul DCI link is a netem-delayed veth where the kernel has netem, else a
TAP pair joined by a userspace delay line (emu/delayline.py). Either way the
DCI rate and buffer are the HTB class and FIFO on both ends' egress.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

from emu import capacity, frr, interrupts, registry
from emu.delayline import DelayLine
from emu.errors import EmuError, require_root
from emu.frr import DEFAULT_BFD, BfdTimers, FrrRunner
from emu.kernel import NodeKernel, create_veths, netem_works
from emu.mininet_topo import MultiPlaneClosTopo
from emu.netns import NETNS_RUN_DIR, bind_name, ns_inode
from emu.nodes import EmuHost, EmuNet, LinuxRouter, VethLink
from emu.signals import PortSignals, SignalStats
from emu.timeouts import describe, scaled
from topologies import MultiPlaneClos, Role, ScaleAcross
from topologies.routing import ECMP_MODES, EcmpMode, NodePlan, plan_fabric
from topologies.routing_dci import plan_scaleacross
from topologies.signals import PLAIN, SwitchSignals

DELAY_BACKENDS = ("auto", "netem", "userspace")

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuildTimes:
    """Seconds spent in each build phase."""

    nodes: float
    links: float
    config: float
    control_plane: float = 0.0  # FRR start until BGP converged (0 for static routes)

    @property
    def total(self) -> float:
        return self.nodes + self.links + self.config + self.control_plane


class Fabric:
    """A running emulated fabric; a context manager that guarantees teardown."""

    def __init__(self, spec: MultiPlaneClos | ScaleAcross, name: str = "emu",
                 progress: Progress | None = None, control_plane: EcmpMode = "static",
                 bfd: BfdTimers = DEFAULT_BFD, converge_timeout: float = 120.0,
                 delay_backend: str = "auto", signals: SwitchSignals = PLAIN) -> None:
        if not name.isidentifier() or len(name) > 12:
            raise EmuError(f"fabric name {name!r} is invalid: use up to 12 letters, digits or _")
        if control_plane not in ECMP_MODES:
            raise EmuError(f"control_plane={control_plane!r} is invalid: must be one of "
                           f"{', '.join(ECMP_MODES)}")
        if delay_backend not in DELAY_BACKENDS:
            raise EmuError(f"delay_backend={delay_backend!r} is invalid: must be one of "
                           f"{', '.join(DELAY_BACKENDS)}")
        self.spec = spec
        self.name = name
        self.control_plane = control_plane
        self.bfd = bfd
        self.converge_timeout = converge_timeout
        self.delay_backend = delay_backend
        self.delay_lines: dict[str, DelayLine] = {}  # long-haul link name -> its relay
        self.delay_backend_used: str | None = None  # what DCI links got (None: no DCI)
        if isinstance(spec, ScaleAcross):
            if control_plane != "static":
                raise EmuError("control_plane='bgp' is not available for ScaleAcross fabrics "
                               "yet (DCI routers run no BGP): use control_plane='static'")
            self.plans: dict[str, NodePlan] = plan_scaleacross(spec)
            self.bgp: dict[str, frr.SwitchConfig] = {}
        else:
            self.plans = plan_fabric(spec, ecmp=control_plane)
            self.bgp = frr.plan_bgp(spec, self.plans, bfd) if control_plane == "bgp" else {}
        self.frr: FrrRunner | None = None
        self.signals = signals  # what the switch ports mark, trim and buffer
        self.port_signals: PortSignals | None = None  # their program, once attached
        self.net: EmuNet | None = None
        self.kernels: dict[str, NodeKernel] = {}
        self.build_times: BuildTimes | None = None
        self._state: registry.FabricState | None = None
        self._progress = progress or (lambda msg: None)

    def __repr__(self) -> str:
        s = self.spec
        return (f"Fabric({self.name!r}, planes={s.planes}, nodes={len(s.nodes)}, "
                f"hosts={s.host_count}, control_plane={self.control_plane!r}, "
                f"up={self.net is not None})")

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Fabric:
        if self.net is None:  # a fabric already started by the caller is entered as it is
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Build the fabric. On any failure, everything built so far is torn down."""
        require_root("building a fabric")
        capacity.check(self.spec, bool(self.bgp))  # before anything exists: refuse what cannot fit
        self._check_stale()
        try:
            self._build()
        except BaseException:
            self.stop()
            raise

    def _check_stale(self) -> None:
        for st in registry.running_states():
            if st.fabric == self.name:
                raise EmuError(
                    f"a fabric named {self.name!r} is already running (pid {st.owner_pid}); "
                    "stop it, use another name, or run `emu clean --force`")
        report = registry.clean(only=self.name)
        if not report.empty:
            log.warning("removed a stale fabric %r left by a crashed run (%d processes, "
                        "%d namespaces)", self.name, report.processes, len(report.namespaces))
            self._progress(f"cleaned stale fabric {self.name!r} from a crashed run")

    def _build(self) -> None:
        spec = self.spec
        t0 = time.monotonic()
        self._state = registry.FabricState(self.name, os.getpid(),
                                           registry.start_time(os.getpid()) or 0)
        self._state.save()
        self._progress(f"starting {len(spec.nodes)} namespaces")
        topo = MultiPlaneClosTopo(spec, router_cls=LinuxRouter)
        self.net = EmuNet(topo=topo, host=EmuHost, link=VethLink, controller=None,
                          build=False, autoSetMacs=False, cleanup=False)
        self.net.build()
        for node in spec.nodes:
            pid = self.net[node.name].pid
            self._state.namespaces[node.name] = {
                "netns": registry.netns_name(self.name, node.name), "pid": pid,
                "inode": ns_inode(pid)}
        self._state.save()
        own = ns_inode("thread-self")
        shared = [n for n, r in self._state.namespaces.items() if r["inode"] in (None, own)]
        if shared:
            # Never configure (or later kill) anything in the namespace we run in.
            raise EmuError(f"nodes {shared[:5]} did not get a network namespace of their own")
        for node in spec.nodes:
            rec = self._state.namespaces[node.name]
            try:
                bind_name(rec["pid"], rec["netns"])
            except FileExistsError:
                # Not ours: stop() and `emu clean` remove only names bound to our namespaces.
                raise EmuError(
                    f"namespace name {rec['netns']!r} already exists under {NETNS_RUN_DIR} "
                    "and was not created by this fabric: if it is a stale one of yours, "
                    f"remove it (`ip netns delete {rec['netns']}`); otherwise build this "
                    "fabric under another name") from None
            self.kernels[node.name] = NodeKernel.open(node.name, rec["netns"], rec["pid"],
                                                      node.role)
        t1 = time.monotonic()
        self._progress(f"creating {len(spec.links)} links")
        long_haul = [lk for lk in spec.links if lk.tier == "dci"]
        if long_haul:
            self.delay_backend_used = self._choose_delay_backend(long_haul[0].a.node)
        pairs = []
        for plan in self.plans.values():
            for iface in plan.interfaces:
                if iface.link.a.node == plan.node and iface.ifname == iface.link.a.ifname and (
                        iface.link.tier != "dci" or self.delay_backend_used == "netem"):
                    pairs.append((iface.ifname, self.kernels[plan.node].fd, iface.peer_ifname,
                                  self.kernels[iface.peer_node].fd, spec.mtu))
        create_veths(pairs)
        netem: dict[str, dict[str, tuple[float, float]]] = {}
        for index, lk in enumerate(long_haul):
            assert isinstance(spec, ScaleAcross)  # only a ScaleAcross has long-haul links
            if self.delay_backend_used == "netem":
                # Half the loss at each end gives about the configured loss one way.
                for end in (lk.a, lk.b):
                    netem.setdefault(end.node, {})[end.ifname] = (spec.dci.delay_ms,
                                                                  spec.dci.loss)
            else:
                # Started from this (main) thread: the relay dies with it, never earlier.
                self.delay_lines[lk.name] = DelayLine(
                    self.kernels[lk.a.node].fd, lk.a.ifname, self.kernels[lk.b.node].fd,
                    lk.b.ifname, delay_ms=spec.dci.delay_ms, loss=spec.dci.loss, seed=index,
                    mtu=spec.mtu).start()
        t2 = time.monotonic()
        self._progress("installing addresses, queues and routes")
        for name, plan in self.plans.items():
            k = self.kernels[name]
            k.refresh_ifindex()
            specs = {i.ifname: i.link.spec for i in plan.interfaces}
            k.apply(plan, specs, spec.mtu, netem.get(name))
        for name, plan in self.plans.items():
            # Every port is up at both ends now: the local routes follow shortly.
            self.kernels[name].wait_addresses_local(plan)
        if self.signals.active:
            self._progress(f"switch ports: {self.signals.label} (eBPF at every port)")
            self._attach_signals(self.signals)
        t3 = time.monotonic()
        if self.control_plane == "bgp":
            self._start_frr()
        t4 = time.monotonic()
        self.build_times = BuildTimes(t1 - t0, t2 - t1, t3 - t2, t4 - t3)
        self._state.built = True
        self._state.save()

    def _attach_signals(self, signals: SwitchSignals) -> None:
        switch_ports = {}
        host_ports = []
        for name, plan in self.plans.items():
            for iface in plan.interfaces:
                if self.kernels[name].role is Role.HOST:
                    host_ports.append((name, iface.ifname))
                elif iface.link.tier != "dci" or self.delay_backend_used != "netem":
                    switch_ports[(name, iface.ifname)] = iface.link.spec
        self.port_signals = PortSignals(self.kernels, switch_ports, host_ports, self.spec.mtu)
        self.port_signals.attach(signals)

    def set_signals(self, signals: SwitchSignals) -> None:
        """What every switch port marks, trims and buffers from now on (between runs: the
        ports' virtual queues start empty). The ports' program is attached on first use."""
        if self.net is None:
            raise EmuError("set_signals needs a running fabric")
        if self.port_signals is None:
            if not signals.active:
                self.signals = signals
                return
            self._attach_signals(signals)
        else:
            self.port_signals.apply(signals)
        self.signals = signals

    def signal_stats(self) -> dict[tuple[str, str], SignalStats]:
        """Every port's marked, trimmed, dropped and CE-seen counters ({} while no port
        program is attached)."""
        return self.port_signals.stats() if self.port_signals is not None else {}

    def _choose_delay_backend(self, node: str) -> str:
        """netem if asked for or (auto) if this kernel has it, else the userspace delay line."""
        if self.delay_backend != "auto":
            if self.delay_backend == "netem" and not netem_works(self.kernels[node]):
                raise EmuError("delay_backend='netem' but this kernel has no netem qdisc "
                               "(see `emu doctor`): use 'auto' or 'userspace'")
            return self.delay_backend
        return "netem" if netem_works(self.kernels[node]) else "userspace"

    def _register_tmpdirs(self, dirs: list[str]) -> None:
        assert self._state is not None
        self._state.tmpdirs.extend(dirs)
        self._state.save()

    def _start_frr(self) -> None:
        self._progress(f"starting FRR (zebra, bfdd, bgpd) on {len(self.bgp)} switches")
        # The temp dir is in the state file before any daemon starts: `emu clean` finds it.
        self.frr = FrrRunner.create(self.name, self._register_tmpdirs)
        self.frr.start(self.bgp, {n: self.kernels[n] for n in self.bgp})
        self.wait_converged(self.converge_timeout)

    def wait_converged(self, timeout: float = 60.0) -> float:
        """Wait until every leaf has an ECMP route over all its spines to every other rack
        and every BFD session is up (BGP may be faster than BFD).

        Returns the seconds waited; EmuError (with what is missing) after ``timeout``,
        or at once if an FRR daemon died.
        """
        if self.frr is None:
            raise EmuError("wait_converged needs a running fabric with control_plane='bgp'")
        assert isinstance(self.spec, MultiPlaneClos)  # __init__ refuses bgp on a ScaleAcross
        t0 = time.monotonic()
        deadline = t0 + scaled(timeout)
        next_report = t0 + 1.0
        total = sum(len(r) for r in frr.expected_routes(self.spec).values())
        while True:
            self.frr.check()
            missing = frr.missing_routes(self)
            bfd = {} if missing else self.frr.bfd_not_up(sorted(self.bgp))
            now = time.monotonic()
            if not missing and not bfd:
                self._progress(f"BGP converged in {now - t0:.1f} s ({total} leaf ECMP routes, "
                               f"all BFD sessions up)")
                return now - t0
            if now > deadline:
                if missing:
                    detail = "; ".join(f"{leaf}: {', '.join(bad[:3])}"
                                       for leaf, bad in list(missing.items())[:4])
                    raise EmuError(f"BGP did not converge within {describe(timeout)}: "
                                   f"{sum(map(len, missing.values()))} of {total} leaf routes "
                                   f"missing or partial ({detail})")
                detail = "; ".join(f"{n}: {', '.join(b[:3])}" for n, b in list(bfd.items())[:4])
                raise EmuError(f"BFD sessions not up within {describe(timeout)} ({detail})")
            if now >= next_report:
                done = total - sum(map(len, missing.values()))
                self._progress(f"waiting for BGP: {done}/{total} leaf ECMP routes"
                               + (f", BFD down on {len(bfd)} switches" if bfd else ""))
                next_report = now + 1.0
            time.sleep(0.05)

    def stop(self) -> float:
        """Tear everything down (idempotent). Returns the seconds it took. A Ctrl-C,
        SIGTERM or SIGHUP arriving meanwhile is held until the teardown is complete
        (``emu.interrupts``)."""
        with interrupts.uninterrupted():
            return self._teardown()

    def _teardown(self) -> float:
        t0 = time.monotonic()
        for dl in self.delay_lines.values():
            dl.stop()  # final counters stay readable through dl.stats()
        if self.port_signals is not None:
            self.port_signals.close()  # the filters go with the namespaces
        for k in self.kernels.values():
            try:
                k.close()
            except OSError:
                pass
        self.kernels.clear()
        if self._state is not None:
            inodes = {r["inode"] for r in self._state.namespaces.values() if r.get("inode")}
            registry.kill_in(inodes)
            if self.frr is not None:
                self.frr.reap()  # every daemon was in our namespaces: killed above
                self.frr = None
            for d in self._state.tmpdirs:
                shutil.rmtree(d, ignore_errors=True)
            _, stuck = registry.unbind_owned(list(self._state.namespaces.values()))
            if stuck:  # the state file stays: emu clean retries them
                log.warning("could not remove %d namespace names: %s; %s", len(stuck),
                            ", ".join(why for _, why in stuck), registry.STUCK_HINT)
            else:
                self._state.remove()
            self._state = None
        if self.net is not None:
            for node in self.net.hosts + self.net.switches:
                _close_shell(node)
            self.net = None
        return time.monotonic() - t0

    # -- access ----------------------------------------------------------------------------

    def node_kernel(self, name: str) -> NodeKernel:
        """The namespace handle of node ``name`` (validated against the topology)."""
        self.spec.node(name)
        return self.kernels[name]

    def set_ports(self, ports: Sequence[tuple[str, str]], up: bool) -> None:
        """(node, ifname) ports admin down, or up with what admin-down removed put back:
        addresses and neighbours everywhere first (a multipath route needs every gateway
        reachable), then the planned routes through them."""
        for node, ifname in ports:
            self.node_kernel(node).set_port_up(ifname, up)
        if not up:
            return
        for node, ifname in ports:
            self.node_kernel(node).reinstate_port(self.plans[node], ifname)
        for node in dict.fromkeys(n for n, _ in ports):
            self.node_kernel(node).reinstall_routes_via(
                self.plans[node], {i for n, i in ports if n == node})

    def netns(self, name: str) -> str:
        """The /run/netns name of node ``name`` (for `ip netns exec`)."""
        return self.node_kernel(name).netns

    def in_netns(self, name: str, *argv: str) -> list[str]:
        """The command line that runs ``argv`` inside node ``name``'s network namespace."""
        return ["nsenter", f"--net={NETNS_RUN_DIR / self.netns(name)}", *argv]


def _close_shell(node) -> None:
    """Close a Mininet node's pty and reap its (already killed) shell."""
    shell = getattr(node, "shell", None)
    if shell is None:
        return
    for f in (getattr(node, "stdin", None),):
        try:
            if f is not None:
                f.close()
        except OSError:
            pass
    try:
        os.close(node.slave)
    except (OSError, AttributeError):
        pass
    try:
        shell.wait(timeout=2)
    except Exception:  # noqa: BLE001 - a shell that will not die must not block teardown
        log.warning("shell of %s did not exit", node.name)
    node.shell = None
