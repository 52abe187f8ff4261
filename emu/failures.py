"""Failure and impairment primitives on a running fabric.

Each primitive is a frozen dataclass (what to break), validated against the
topology before anything runs, with ``apply(fab)`` and ``restore(fab)``:

* ``LinkDown``: both veth ends down, as a cut cable (local switches see it at
  once; remote switches only through the control plane).
* ``BusiestUplinkDown``: the leaf-spine link carrying the most traffic into a rack, cut.
* ``SwitchDown`` / ``PlaneDown``: every link of a switch / of a plane.
* ``LinkFlap``: a link going down and up with a period and duty cycle.
* ``GrayLink``: random loss of a fraction of packets, both directions, by
  nftables ``numgen random`` in the switch end's namespace.
* ``RateDegrade``: the link's HTB rate changed at run time (both directions).
* ``DciDelay``: a DCI link's one-way delay changed at run time (DCI links only).
* ``Microbursts``: line-rate cross traffic onto one egress FIFO; its senders can be
  armed before the run (``arm``) and fired on a common instant (``apply(fab, armed,
  start)``); records say whether it dropped at its target or only delayed.

Admin-down deletes the routes through the interface, so a restore brings the
interface up and re-installs its addresses, neighbour and planned routes.
``apply`` returns a handle (None for most kinds) that ``restore`` gets back:
a flap's running thread lives there, not in the frozen description.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, replace
from typing import Protocol, cast

from emu.burst_geometry import check_mode, geometry
from emu.burst_report import spread
from emu.delayline import check_delay
from emu.errors import EmuError
from emu.fabric import Fabric
from emu.kernel import FIFO_HANDLE, HTB_CLASS, HTB_DATA, HTB_ROOT, NUD_PERMANENT, htb_class
from emu.microburst import Microburst, MicroburstSpec, plan_routes, start_all
from topologies import DciSpec, Link, LinkSpec, MultiPlaneClos, Role, ScaleAcross, TopologyError

STARTED_WAIT_S = 0.1  # after a burst's first window opens, for its senders to report
MAX_WAIT_S = 1.0  # a first window further away than this is not waited for

Topology = MultiPlaneClos | ScaleAcross  # what a Fabric runs (Fabric.spec)


def _check_link(spec: Topology, name: str) -> Link:
    try:
        return spec.link(name)
    except TopologyError as e:
        raise EmuError(str(e)) from None


def _ends(link: Link) -> tuple[tuple[str, str], tuple[str, str]]:
    return (link.a.node, link.a.ifname), (link.b.node, link.b.ifname)


def _set_links_state(fab: Fabric, links: tuple[Link, ...], up: bool) -> None:
    ends = [end for lk in links for end in _ends(lk)]
    for node, ifname in ends:
        k = fab.kernels[node]
        k.ipr.link("set", index=k.ifindex[ifname], state="up" if up else "down")
    if not up:
        return
    # Admin-down removed addresses, neighbours and routes through these ports. Put
    # back addresses and neighbours everywhere first: a multipath route needs all
    # of its gateways reachable.
    for node, ifname in ends:
        plan, k = fab.plans[node], fab.kernels[node]
        idx = k.ifindex[ifname]
        iface = next(i for i in plan.interfaces if i.ifname == ifname)
        k.ipr.addr("replace", index=idx, address=str(iface.address.ip),
                   prefixlen=iface.address.network.prefixlen)
        for n in plan.neighbors:
            if n.ifname == ifname:
                k.ipr.neigh("replace", dst=str(n.address), lladdr=n.mac, ifindex=idx,
                            state=NUD_PERMANENT)
    for node in dict.fromkeys(node for node, _ in ends):
        ports = {ifname for n, ifname in ends if n == node}
        for route in fab.plans[node].routes:
            if any(nh.ifname in ports for nh in route.nexthops):
                fab.kernels[node].install_route(route, replace=True)


def _links_of_switch(spec: Topology, switch: str) -> tuple[Link, ...]:
    return tuple(lk for lk in spec.links if switch in (lk.a.node, lk.b.node))


class _CutsLinks(Protocol):
    """A failure that takes its ``links`` down (LinkDown, and SwitchDown and PlaneDown,
    which borrow LinkDown's ``apply`` and ``restore``)."""

    def links(self, spec: Topology) -> tuple[Link, ...]: ...


@dataclass(frozen=True)
class LinkDown:
    """A cut cable: both ends of ``link`` (e.g. "p0l0-p0s1" or "h3-p0l0") go down."""

    link: str

    def validate(self, spec: Topology) -> None:
        _check_link(spec, self.link)

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return (_check_link(spec, self.link),)

    def apply(self: _CutsLinks, fab: Fabric) -> None:
        _set_links_state(fab, self.links(fab.spec), up=False)

    def restore(self: _CutsLinks, fab: Fabric, handle: object = None) -> None:
        _set_links_state(fab, self.links(fab.spec), up=True)

    def describe(self) -> dict:
        return {"kind": "link_down", "link": self.link}


@dataclass(frozen=True)
class BusiestUplinkDown:
    """Cut the leaf-spine link carrying the most traffic into a rack.

    ``leaf`` names one leaf ("p0l0") or several, comma-separated ("p0l0,p1l0": the
    rack's leaves on both planes). Which spine an ECMP flow hashes to is the kernel's
    (randomly seeded) choice, and which plane a host sends on is ECMP's too, so a
    fixed link may carry none of a job's flows; this cuts the one that carries the
    most: the packets the leaves' spine ports *received* are sampled ``sample_s``
    apart and the link with the largest increase goes down. Traffic into the rack is
    what a cut hurts longest under ECMP: the leaf reroutes its own uplink traffic at
    once, but the spine has no other way down to this rack and every remote leaf
    keeps hashing flows onto that spine until BGP withdraws the route. The chosen
    link is in the apply record (``chosen``); ``restore`` brings that one back.
    """

    leaf: str
    sample_s: float = 0.2

    def leaves(self) -> list[str]:
        return [n.strip() for n in self.leaf.split(",") if n.strip()]

    def validate(self, spec: Topology) -> None:
        if not self.leaves():
            raise EmuError(f"leaf={self.leaf!r}: name a leaf, e.g. 'p0l0' or 'p0l0,p1l0'")
        for name in self.leaves():
            try:
                node = spec.node(name)
            except TopologyError as e:
                raise EmuError(str(e)) from None
            if node.role is not Role.LEAF:
                raise EmuError(f"{name!r} is not a leaf (e.g. 'p0l0')")
        if not 0 < self.sample_s <= 10:
            raise EmuError(f"sample_s={self.sample_s!r} must be in (0, 10] seconds")

    def links(self, spec: Topology) -> tuple[Link, ...]:
        out = []
        for leaf in self.leaves():
            out += [lk for lk in _links_of_switch(spec, leaf)
                    if spec.node(lk.b.node if lk.a.node == leaf else lk.a.node).role
                    is Role.SPINE]
        return tuple(out)

    def apply(self, fab: Fabric) -> ChosenLink:
        from emu.counters import interface_packets

        ups = self.links(fab.spec)
        leaves = self.leaves()
        # (leaf, its port) of every link
        port = {lk.name: (lk.a if lk.a.node in leaves else lk.b) for lk in ups}
        before = {leaf: interface_packets(fab.kernels[leaf]) for leaf in leaves}
        time.sleep(self.sample_s)
        after = {leaf: interface_packets(fab.kernels[leaf]) for leaf in leaves}
        rx = {name: after[p.node][p.ifname][0] - before[p.node][p.ifname][0]
              for name, p in port.items()}
        name = max(rx, key=lambda n: rx[n])
        chosen = next(lk for lk in ups if lk.name == name)
        _set_links_state(fab, (chosen,), up=False)
        return ChosenLink(name, rx[name], sum(rx.values()))

    def restore(self, fab: Fabric, handle: object = None) -> None:
        if isinstance(handle, ChosenLink):
            _set_links_state(fab, (fab.spec.link(handle.link),), up=True)

    def describe(self) -> dict:
        return {"kind": "busiest_uplink_down", "leaf": self.leaf}


@dataclass(frozen=True)
class ChosenLink:
    """What ``BusiestUplinkDown`` cut, and the packets the leaves received on it and on
    all their spine links during the sample."""

    link: str
    rx_packets: int
    all_rx_packets: int

    def record(self) -> dict:
        return {"chosen": self.link, "chosen_rx_packets": self.rx_packets,
                "all_rx_packets": self.all_rx_packets}


@dataclass(frozen=True)
class SwitchDown:
    """A dead switch: every link of ``switch`` (a leaf or spine name) goes down."""

    switch: str

    def validate(self, spec: Topology) -> None:
        try:
            node = spec.node(self.switch)
        except TopologyError as e:
            raise EmuError(str(e)) from None
        if node.role is Role.HOST:
            valid = ", ".join(n.name for n in spec.switches[:8])
            raise EmuError(f"{self.switch!r} is a host, not a switch; switches: {valid}, ...")

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return _links_of_switch(spec, self.switch)

    apply = LinkDown.apply
    restore = LinkDown.restore

    def describe(self) -> dict:
        return {"kind": "switch_down", "switch": self.switch}


@dataclass(frozen=True)
class PlaneDown:
    """A whole plane fails: every host NIC and fabric link of ``plane``."""

    plane: int

    def validate(self, spec: Topology) -> None:
        if isinstance(self.plane, bool) or not isinstance(self.plane, int) or not (
                0 <= self.plane < spec.planes):
            raise EmuError(f"plane={self.plane!r} is invalid: valid planes are "
                           f"0..{spec.planes - 1}")

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return tuple(lk for lk in spec.links if lk.plane == self.plane)

    apply = LinkDown.apply
    restore = LinkDown.restore

    def describe(self) -> dict:
        return {"kind": "plane_down", "plane": self.plane}


@dataclass(frozen=True)
class LinkFlap:
    """``link`` goes down for ``duty * period_s`` of every ``period_s``, until restored."""

    link: str
    period_s: float
    duty: float = 0.5

    def validate(self, spec: Topology) -> None:
        _check_link(spec, self.link)
        if not 0.02 <= self.period_s <= 3600:
            raise EmuError(f"period_s={self.period_s} is invalid: must be in [0.02, 3600]")
        if not 0 < self.duty < 1:
            raise EmuError(f"duty={self.duty} is invalid: must be in (0, 1) (fraction down)")

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return (_check_link(spec, self.link),)

    def apply(self, fab: Fabric) -> tuple[threading.Event, threading.Thread]:
        lk = _check_link(fab.spec, self.link)
        stop = threading.Event()

        def flap() -> None:
            down, up = self.period_s * self.duty, self.period_s * (1 - self.duty)
            while not stop.is_set():
                _set_links_state(fab, (lk,), up=False)
                if stop.wait(down):
                    break
                _set_links_state(fab, (lk,), up=True)
                stop.wait(up)
            _set_links_state(fab, (lk,), up=True)

        t = threading.Thread(target=flap, name=f"flap-{self.link}", daemon=True)
        t.start()
        return stop, t

    def restore(self, fab: Fabric, handle: object = None) -> None:
        stop, t = cast(tuple[threading.Event, threading.Thread], handle)  # what apply returned
        stop.set()
        t.join()

    def describe(self) -> dict:
        return {"kind": "link_flap", "link": self.link, "period_s": self.period_s,
                "duty": self.duty}


@dataclass(frozen=True)
class GrayLink:
    """Random loss of ``loss`` of the packets on ``link``, each direction independently."""

    link: str
    loss: float

    def validate(self, spec: Topology) -> None:
        _check_link(spec, self.link)
        if isinstance(self.loss, bool) or not 0 <= self.loss <= 1:
            raise EmuError(f"loss={self.loss!r} is invalid: must be a fraction in [0, 1]")

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return (_check_link(spec, self.link),)

    def _switch_end(self, spec: Topology) -> tuple[str, str]:
        lk = _check_link(spec, self.link)
        # Host links: the leaf end (b). Fabric links: the leaf end (a); both see both directions.
        return (lk.b.node, lk.b.ifname) if lk.tier == "host" else (lk.a.node, lk.a.ifname)

    def table(self, spec: Topology) -> str:
        return f"sae_gray_{self._switch_end(spec)[1]}"

    def apply(self, fab: Fabric) -> None:
        node, ifname = self._switch_end(fab.spec)
        threshold = round(self.loss * 1_000_000)
        table = self.table(fab.spec)
        rules = (f"table inet {table} {{\n chain gray {{\n"
                 "  type filter hook forward priority -10; policy accept;\n"
                 f'  iifname "{ifname}" numgen random mod 1000000 < {threshold} counter drop\n'
                 f'  oifname "{ifname}" numgen random mod 1000000 < {threshold} counter drop\n'
                 " }\n}\n")
        _nft(fab, node, rules)

    def restore(self, fab: Fabric, handle: object = None) -> None:
        node, _ = self._switch_end(fab.spec)
        _nft(fab, node, f"delete table inet {self.table(fab.spec)}\n")

    def describe(self) -> dict:
        return {"kind": "gray_link", "link": self.link, "loss": self.loss}


def _nft(fab: Fabric, node: str, script: str) -> None:
    p = subprocess.run(fab.in_netns(node, "nft", "-f", "-"),
                       input=script, capture_output=True, text=True)
    if p.returncode != 0:
        raise EmuError(f"nft in {node} failed: {p.stderr.strip()}")


@dataclass(frozen=True)
class RateDegrade:
    """``link`` runs at ``rate_mbit`` (both directions) until restored."""

    link: str
    rate_mbit: float

    def validate(self, spec: Topology) -> None:
        lk = _check_link(spec, self.link)
        try:
            replace(lk.spec, rate_mbit=self.rate_mbit)
        except TopologyError as e:
            raise EmuError(str(e)) from None

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return (_check_link(spec, self.link),)

    def _set(self, fab: Fabric, spec: LinkSpec) -> None:
        lk = _check_link(fab.spec, self.link)
        for node, ifname in _ends(lk):
            k = fab.kernels[node]
            for cls, parent in ((HTB_CLASS, HTB_ROOT), (HTB_DATA, HTB_CLASS)):
                k.ipr.tc("change-class", "htb", k.ifindex[ifname], cls, parent=parent,
                         **htb_class(spec, fab.spec.mtu))

    def apply(self, fab: Fabric) -> None:
        lk = _check_link(fab.spec, self.link)
        self._set(fab, replace(lk.spec, rate_mbit=self.rate_mbit))

    def restore(self, fab: Fabric, handle: object = None) -> None:
        self._set(fab, _check_link(fab.spec, self.link).spec)

    def describe(self) -> dict:
        return {"kind": "rate_degrade", "link": self.link, "rate_mbit": self.rate_mbit}


def _dci(fab: Fabric) -> DciSpec:
    spec = fab.spec
    assert isinstance(spec, ScaleAcross)  # DciDelay.validate: only a ScaleAcross has DCI links
    return spec.dci


@dataclass(frozen=True)
class DciDelay:
    """The one-way delay of a long-haul DCI ``link`` becomes ``delay_ms`` until restored
    (a reroute onto a longer fibre path). Only DCI links have delay lines."""

    link: str
    delay_ms: float

    def validate(self, spec: Topology) -> None:
        lk = _check_link(spec, self.link)
        if lk.tier != "dci":
            dci = [x.name for x in spec.links if x.tier == "dci"]
            raise EmuError(f"link {self.link!r} is a {lk.tier} link: delay lines exist only on "
                           f"DCI links ({', '.join(dci[:6]) if dci else 'this fabric has none'})")
        try:
            check_delay(self.delay_ms)
        except ValueError as e:
            raise EmuError(str(e)) from None

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return (_check_link(spec, self.link),)

    def _set(self, fab: Fabric, delay_ms: float) -> None:
        if fab.delay_backend_used == "userspace":
            fab.delay_lines[self.link].set_delay(delay_ms)
            return
        lk = _check_link(fab.spec, self.link)
        for node, ifname in _ends(lk):
            k = fab.kernels[node]
            k.ipr.tc("change", "netem", k.ifindex[ifname], FIFO_HANDLE, parent=HTB_DATA,
                     delay=int(delay_ms * 1000), loss=_dci(fab).loss * 100,
                     limit=lk.spec.queue_packets)

    def apply(self, fab: Fabric) -> None:
        self._set(fab, self.delay_ms)

    def restore(self, fab: Fabric, handle: object = None) -> None:
        self._set(fab, _dci(fab).delay_ms)

    def describe(self) -> dict:
        return {"kind": "dci_delay", "link": self.link, "delay_ms": self.delay_ms}


@dataclass(frozen=True)
class Microbursts:
    """Line-rate cross-traffic bursts onto one egress (see emu.microburst) until restored.

    Two ways to run it. Plain: ``apply(fab)`` starts the senders then and there (a few
    hundred ms on a busy machine) and fires them ``START_LEAD_S`` later. Armed: ``arm(fab)``
    before the run starts the senders and leaves them waiting; ``apply(fab, armed,
    start)`` hands them the common CLOCK_MONOTONIC instant ``start`` (or the instant an
    earlier ``armed.fire(t)`` gave), so bursts of several events, on several planes,
    begin together; ``disarm`` ends an armed burst that never fired.

    Bursts due together align only if every one is handed the instant before any is
    applied (``armed.fire(t)`` for each, then ``apply`` each): applying counts FIFOs and
    waits, which holds up the next burst's handing-over by a few ms (tens under load).

    ``apply`` waits (briefly) for every sender's first datagram; its handle's ``record()``
    (the timeline's apply record) holds ``burst_start``: ``armed``, the instant ``t0``
    (CLOCK_MONOTONIC s), each sender's actual start offset from it and their spread (ms),
    how late the instant was handed over, which FIFOs are counted, and the burst's
    geometry (on-time in frame times / RTTs, excess over the buffer, ``can_drop``, with a
    ``note`` when the burst can only delay). ``restore`` stops the senders and returns the
    drops measured at the target FIFO, ``delay_only`` (true: nothing dropped there),
    drops per burst, the final start offsets, and ``burst_start`` again, so that the two
    records pair up (workloads.results matches a restore to its apply by their keys).
    """

    burst: MicroburstSpec

    def validate(self, spec: Topology) -> None:
        check_mode(self.burst, geometry(spec, self.burst, plan_routes(spec, self.burst)))

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return ()  # cross traffic: it breaks nothing, so it overlaps no failure

    def arm(self, fab: Fabric) -> Microburst:
        """Start the senders and leave them waiting for their instant (before the run)."""
        mb = Microburst(fab, self.burst)
        mb.arm()
        return mb

    def disarm(self, fab: Fabric, armed: Microburst) -> None:
        """End an armed burst (fired or not) without a report."""
        armed.stop()

    def apply(self, fab: Fabric, armed: Microburst | None = None,
              start: float | None = None) -> BurstStart:
        """Fire the burst at ``start`` (CLOCK_MONOTONIC; default: the instant ``armed``
        already has, else now + START_LEAD_S) and wait for its senders' first datagrams."""
        if armed is None:
            mb = Microburst(fab, self.burst)
            start_all([mb], start)
        else:
            mb = armed
            if mb.spec != self.burst:
                raise EmuError(f"armed burst {mb!r} is not this one ({self.describe()})")
            if mb.t0 is None:
                mb.fire(start)
            elif start is not None and start != mb.t0:
                raise EmuError(f"the armed burst already fired for t0={mb.t0!r}, not "
                               f"start={start!r}")
            mb.count("paths")  # a few nodes: the next event is not held up
        try:
            return BurstStart(mb, self._started(mb, armed is not None))
        except BaseException:
            if armed is None:  # nobody else holds it
                mb.stop()
            raise

    def _started(self, mb: Microburst, armed: bool) -> dict:
        assert mb.t0 is not None and mb.t_fired is not None
        first = mb.t0 + self.burst.window_start(0) - time.monotonic()
        wait = first + STARTED_WAIT_S if first < MAX_WAIT_S else 0.0
        offsets = mb.started_offsets(max(0.0, wait))
        geo = mb.geometry
        rec = {"armed": armed, "t0": round(mb.t0, 6),
               "start_offsets_ms": offsets, "start_spread_ms": spread(offsets),
               "fired_late_ms": round((mb.t_fired - mb.t0) * 1e3, 4), "counted": mb.scope,
               "geometry": geo.record()}
        if not geo.can_drop:
            rec["note"] = (f"delay-only: {geo.excess_packets:.1f} packets of excess per burst "
                           f"do not fill the {geo.queue_packets}-packet FIFO at "
                           f"{self.burst.target}")
        return rec

    def restore(self, fab: Fabric, handle: object = None) -> dict:
        if not isinstance(handle, BurstStart):  # a bare Microburst: no start record
            handle = BurstStart(cast(Microburst, handle), {})
        h = handle
        h.burst.stop()
        rep = h.burst.report()
        return {"burst_start": h.started,
                "target_drops": rep["target"]["drops"],
                "target_packets": rep["target"]["packets"],
                "delay_only": rep["delay_only"],
                "drops_per_burst": rep["drops_per_burst"],
                "bursts": max((s.get("bursts", 0) for s in rep["sources"].values()),
                              default=0),
                "start_offsets_ms": rep["start_offsets_ms"],
                "start_spread_ms": rep["start_spread_ms"],
                "drops_on_burst_paths": sum(rep["drops_on_burst_paths"].values()),
                "drops_elsewhere": (None if rep["drops_elsewhere"] is None
                                    else sum(rep["drops_elsewhere"].values()))}

    def describe(self) -> dict:
        b = self.burst
        return {"kind": "microburst", "target": b.target, "sources": list(b.sources),
                "on_ms": b.on_ms, "every_ms": b.every_ms, "rate_mbit": b.rate_mbit,
                "mode": b.mode}


@dataclass(frozen=True)
class BurstStart:
    """What ``Microbursts.apply`` returns: the running burst and the record of its start
    (``record()`` goes into the timeline's apply record; ``restore`` repeats it)."""

    burst: Microburst
    started: dict

    def record(self) -> dict:
        return {"burst_start": self.started}


Failure = (LinkDown | BusiestUplinkDown | SwitchDown | PlaneDown | LinkFlap | GrayLink
           | RateDegrade | DciDelay | Microbursts)
