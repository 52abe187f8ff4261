"""Failures that take links down: a cut cable, the busiest uplink, a switch, a plane, a flap.

Admin-down deletes the routes through the interface, so a restore brings the interface
up and re-installs its addresses, neighbours and planned routes (emu.failure_kinds.ports).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, cast

from emu.errors import EmuError
from emu.failure_kinds import ports
from emu.failure_kinds.base import (
    Failure,
    FailureKind,
    Topology,
    Withdrawal,
    check_link,
)
from emu.failure_kinds.registry import register
from topologies import Link, MultiPlaneClos, Role, TopologyError
from topologies.routing import originated_prefixes

if TYPE_CHECKING:
    from emu.fabric import Fabric


def link_withdrawals(spec: MultiPlaneClos, name: str) -> tuple[Withdrawal, ...]:
    """What the other leaves of the plane withdraw once link ``name`` stops carrying."""
    lk = spec.link(name)
    if lk.tier == "fabric":  # leaf (a) - spine (b): the other leaves of the plane
        leaf, spine = spec.node(lk.a.node), spec.node(lk.b.node)
        return tuple(
            Withdrawal(other.name, net, f"s{spine.index}")
            for other in spec.leaf_nodes if other.plane == leaf.plane and other != leaf
            for net in originated_prefixes(spec, leaf.name))
    # host (a) - leaf (b): the host's prefix disappears from the plane's other leaves
    host, leaf = spec.node(lk.a.node), spec.node(lk.b.node)
    net = next(n for n in originated_prefixes(spec, leaf.name)
               if spec.address(host.name) in n)
    return tuple(Withdrawal(other.name, net, f"s{s}")
                 for other in spec.leaf_nodes if other.plane == leaf.plane and other != leaf
                 for s in range(spec.spines))


def _links_of_switch(spec: Topology, switch: str) -> tuple[Link, ...]:
    return tuple(lk for lk in spec.links if switch in (lk.a.node, lk.b.node))


class _Cut(FailureKind):
    """A failure whose ``links`` go down while it is active."""

    takes_down: ClassVar[bool] = True

    def apply(self, fab: Fabric) -> object:
        ports.set_links(fab, self.links(fab.spec), up=False)
        return None

    def restore(self, fab: Fabric, handle: object = None) -> object:
        ports.set_links(fab, self.links(fab.spec), up=True)
        return None


@register("fail_link")
@dataclass(frozen=True)
class LinkDown(_Cut):
    """A cut cable: both ends of ``link`` (e.g. "p0l0-p0s1" or "h3-p0l0") go down."""

    kind: ClassVar[str] = "link_down"
    link: str

    def validate(self, spec: Topology) -> None:
        check_link(spec, self.link)

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return (check_link(spec, self.link),)

    def expected_withdrawals(self, spec: MultiPlaneClos) -> tuple[Withdrawal, ...]:
        return link_withdrawals(spec, self.link)


@register("fail_busiest_uplink")
@dataclass(frozen=True)
class BusiestUplinkDown(FailureKind):
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
    link is in the apply record (``chosen``); ``restore`` brings that one back, and
    ``concrete`` is the cut of that link (whose withdrawals convergence waits for).

    At a step boundary the ranks are held, so there is no traffic to sample: the
    timeline takes ``start_sample`` when the run starts and ``apply_since`` chooses
    from what the leaves received since then.
    """

    kind: ClassVar[str] = "busiest_uplink_down"
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

    def start_sample(self, fab: Fabric) -> dict[str, dict[str, int]]:
        """What the leaves received so far, per interface (the baseline of a choice)."""
        return {leaf: ports.received(fab, leaf) for leaf in self.leaves()}

    def busiest_since(self, fab: Fabric, before: dict[str, dict[str, int]]) -> ChosenLink:
        """The spine link that received the most since ``before`` (start_sample), chosen
        without cutting it (the first in ``links`` order on a tie)."""
        leaves = self.leaves()
        # (leaf, its port) of every link
        port = {lk.name: (lk.a if lk.a.node in leaves else lk.b) for lk in self.links(fab.spec)}
        now = self.start_sample(fab)
        rx = {name: now[p.node][p.ifname] - before[p.node][p.ifname]
              for name, p in port.items()}
        name = max(rx, key=lambda n: rx[n])
        return ChosenLink(name, rx[name], sum(rx.values()))

    def apply_since(self, fab: Fabric, before: dict[str, dict[str, int]]) -> ChosenLink:
        """Cut the spine link that received the most since ``before`` (`busiest_since`)."""
        chosen = self.busiest_since(fab, before)
        LinkDown(chosen.link).apply(fab)
        return chosen

    def apply(self, fab: Fabric) -> ChosenLink:
        before = self.start_sample(fab)
        time.sleep(self.sample_s)
        return self.apply_since(fab, before)

    def restore(self, fab: Fabric, handle: object = None) -> None:
        if isinstance(handle, ChosenLink):
            LinkDown(handle.link).restore(fab)

    def concrete(self, handle: object) -> Failure:
        return LinkDown(handle.link) if isinstance(handle, ChosenLink) else self

    def describe(self) -> dict:
        return {"kind": self.kind, "leaf": self.leaf}


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


@register("fail_switch")
@dataclass(frozen=True)
class SwitchDown(_Cut):
    """A dead switch: every link of ``switch`` (a leaf or spine name) goes down."""

    kind: ClassVar[str] = "switch_down"
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

    def expected_withdrawals(self, spec: MultiPlaneClos) -> tuple[Withdrawal, ...]:
        node = spec.node(self.switch)
        if node.role is not Role.LEAF:
            return ()  # a dead spine is seen locally by every leaf (loss of light)
        # its racks' prefixes vanish from the plane
        return tuple(Withdrawal(other.name, net, f"s{s}")
                     for other in spec.leaf_nodes if other.plane == node.plane
                     and other != node
                     for net in originated_prefixes(spec, node.name)
                     for s in range(spec.spines))


@register("fail_plane")
@dataclass(frozen=True)
class PlaneDown(_Cut):
    """A whole plane fails: every host NIC and fabric link of ``plane``. No withdrawals
    are expected: there is no alternative inside the plane, and hosts see their NIC go
    down locally."""

    kind: ClassVar[str] = "plane_down"
    plane: int

    def validate(self, spec: Topology) -> None:
        if isinstance(self.plane, bool) or not isinstance(self.plane, int) or not (
                0 <= self.plane < spec.planes):
            raise EmuError(f"plane={self.plane!r} is invalid: valid planes are "
                           f"0..{spec.planes - 1}")

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return tuple(lk for lk in spec.links if lk.plane == self.plane)


@register("flap_link")
@dataclass(frozen=True)
class LinkFlap(FailureKind):
    """``link`` goes down for ``duty * period_s`` of every ``period_s``, until restored."""

    kind: ClassVar[str] = "link_flap"
    link: str
    period_s: float
    duty: float = 0.5

    def validate(self, spec: Topology) -> None:
        check_link(spec, self.link)
        if not 0.02 <= self.period_s <= 3600:
            raise EmuError(f"period_s={self.period_s} is invalid: must be in [0.02, 3600]")
        if not 0 < self.duty < 1:
            raise EmuError(f"duty={self.duty} is invalid: must be in (0, 1) (fraction down)")

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return (check_link(spec, self.link),)

    def expected_withdrawals(self, spec: MultiPlaneClos) -> tuple[Withdrawal, ...]:
        return link_withdrawals(spec, self.link)  # its first down phase

    def apply(self, fab: Fabric) -> tuple[threading.Event, threading.Thread]:
        lk = (check_link(fab.spec, self.link),)
        stop = threading.Event()

        def flap() -> None:
            down, up = self.period_s * self.duty, self.period_s * (1 - self.duty)
            while not stop.is_set():
                ports.set_links(fab, lk, up=False)
                if stop.wait(down):
                    break
                ports.set_links(fab, lk, up=True)
                stop.wait(up)
            ports.set_links(fab, lk, up=True)

        t = threading.Thread(target=flap, name=f"flap-{self.link}", daemon=True)
        t.start()
        return stop, t

    def restore(self, fab: Fabric, handle: object = None) -> None:
        stop, t = cast(tuple[threading.Event, threading.Thread], handle)  # what apply returned
        stop.set()
        t.join()
