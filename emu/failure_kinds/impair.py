"""Impairments of a link that stays up: random loss, a lower rate, a longer DCI delay."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from emu.delayline import check_delay
from emu.errors import EmuError
from emu.failure_kinds import ports
from emu.failure_kinds.base import FailureKind, Topology, Withdrawal, check_link
from emu.failure_kinds.links import link_withdrawals
from emu.failure_kinds.registry import register
from topologies import DciSpec, Link, MultiPlaneClos, ScaleAcross, TopologyError

if TYPE_CHECKING:
    from emu.fabric import Fabric


@register("gray_link")
@dataclass(frozen=True)
class GrayLink(FailureKind):
    """Random loss of ``loss`` of the packets on ``link``, each direction independently:
    nftables ``numgen random`` drop rules in the switch end's namespace. BFD notices a
    gray link too (its packets are lost alike), so routing withdraws it as a cut."""

    kind: ClassVar[str] = "gray_link"
    link: str
    loss: float

    def validate(self, spec: Topology) -> None:
        check_link(spec, self.link)
        if isinstance(self.loss, bool) or not 0 <= self.loss <= 1:
            raise EmuError(f"loss={self.loss!r} is invalid: must be a fraction in [0, 1]")

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return (check_link(spec, self.link),)

    def expected_withdrawals(self, spec: MultiPlaneClos) -> tuple[Withdrawal, ...]:
        return link_withdrawals(spec, self.link)

    def _switch_end(self, spec: Topology) -> tuple[str, str]:
        lk = check_link(spec, self.link)
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
        ports.nft(fab, node, rules)

    def restore(self, fab: Fabric, handle: object = None) -> None:
        node, _ = self._switch_end(fab.spec)
        ports.nft(fab, node, f"delete table inet {self.table(fab.spec)}\n")


@register("degrade_link")
@dataclass(frozen=True)
class RateDegrade(FailureKind):
    """``link`` runs at ``rate_mbit`` (both directions) until restored: its HTB classes
    changed at run time. Routing does not react."""

    kind: ClassVar[str] = "rate_degrade"
    link: str
    rate_mbit: float

    def validate(self, spec: Topology) -> None:
        lk = check_link(spec, self.link)
        try:
            replace(lk.spec, rate_mbit=self.rate_mbit)
        except TopologyError as e:
            raise EmuError(str(e)) from None

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return (check_link(spec, self.link),)

    def apply(self, fab: Fabric) -> None:
        lk = check_link(fab.spec, self.link)
        for port in ports.ends(lk):
            ports.set_rate(fab, port, replace(lk.spec, rate_mbit=self.rate_mbit))

    def restore(self, fab: Fabric, handle: object = None) -> None:
        lk = check_link(fab.spec, self.link)
        for port in ports.ends(lk):
            ports.set_rate(fab, port, lk.spec)


def _dci(fab: Fabric) -> DciSpec:
    spec = fab.spec
    assert isinstance(spec, ScaleAcross)  # DciDelay.supports: only a ScaleAcross has DCI links
    return spec.dci


@register("delay_link")
@dataclass(frozen=True)
class DciDelay(FailureKind):
    """The one-way delay of a long-haul DCI ``link`` becomes ``delay_ms`` until restored
    (a reroute onto a longer fibre path). Only DCI links have delay lines."""

    kind: ClassVar[str] = "dci_delay"
    link: str
    delay_ms: float

    def supports(self, spec: Topology) -> str | None:
        if any(lk.tier == "dci" for lk in spec.links):
            return None
        return ("delay lines exist only on DCI links, and this fabric has none (one DC: "
                "give it dcs > 1)")

    def validate(self, spec: Topology) -> None:
        lk = check_link(spec, self.link)
        if lk.tier != "dci":
            dci = [x.name for x in spec.links if x.tier == "dci"]
            raise EmuError(f"link {self.link!r} is a {lk.tier} link: delay lines exist only on "
                           f"DCI links ({', '.join(dci[:6]) if dci else 'this fabric has none'})")
        try:
            check_delay(self.delay_ms)
        except ValueError as e:
            raise EmuError(str(e)) from None

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return (check_link(spec, self.link),)

    def _set(self, fab: Fabric, delay_ms: float) -> None:
        if fab.delay_backend_used == "userspace":
            fab.delay_lines[self.link].set_delay(delay_ms)
            return
        lk = check_link(fab.spec, self.link)
        for port in ports.ends(lk):
            ports.set_netem(fab, port, delay_ms, _dci(fab).loss, lk.spec.queue_packets)

    def apply(self, fab: Fabric) -> None:
        self._set(fab, self.delay_ms)

    def restore(self, fab: Fabric, handle: object = None) -> None:
        self._set(fab, _dci(fab).delay_ms)
