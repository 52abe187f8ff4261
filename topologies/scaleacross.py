"""Several multi-plane Clos fabrics (DCs) joined by DCI links: data and validation.

Building (which switches terminate the DCI links, their addresses, routes)
comes later; this module only describes and checks the parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from topologies._validate import check_int, check_number
from topologies.clos import MultiPlaneClos, Node
from topologies.errors import TopologyError

__all__ = ["DciSpec", "ScaleAcross"]


@dataclass(frozen=True)
class DciSpec:
    """Parameters of the inter-DC (DCI) links.

    ``rate_mbit`` is the emulated rate and ``nominal_gbit`` the real rate it
    stands for; ``queue_packets`` the egress FIFO depth; ``delay_ms`` the
    one-way propagation delay in [0, 1000]; ``loss`` a per-packet loss
    probability in [0, 1].

    ``oversubscription`` (>= 1) is the ratio of one DC's nominal leaf->spine
    capacity (all planes, all leaf-spine links) to its nominal DCI capacity:
    1.0 means the DCI can carry everything the fabric can, 4.0 a quarter of
    it.  See :meth:`ScaleAcross.dci_nominal_gbit`.
    """

    rate_mbit: float
    queue_packets: int = 200
    delay_ms: float = 1.0
    loss: float = 0.0
    oversubscription: float = 1.0
    nominal_gbit: float = 400.0

    def __post_init__(self) -> None:
        check_number("rate_mbit", self.rate_mbit, 0.0, lo_open=True)
        check_int("queue_packets", self.queue_packets, 1)
        check_number("delay_ms", self.delay_ms, 0.0, 1000.0)
        check_number("loss", self.loss, 0.0, 1.0)
        check_number("oversubscription", self.oversubscription, 1.0)
        check_number("nominal_gbit", self.nominal_gbit, 0.0, lo_open=True)


@dataclass(frozen=True)
class ScaleAcross:
    """Two or more DCs, ``dcs[i]`` being DC ``i``, joined by ``dci`` links.

    All DCs must have the same number of planes: a plane is one end-to-end
    failure and load-balancing domain spanning every DC (a host's NIC ``p``
    reaches remote hosts only through plane ``p``), so a plane missing in one
    DC would leave those NICs unable to reach it.
    """

    dcs: tuple[MultiPlaneClos, ...]
    dci: DciSpec

    def __post_init__(self) -> None:
        dcs = self.dcs
        if isinstance(dcs, Sequence) and not isinstance(dcs, (str, bytes)):
            # Accept any sequence but store a tuple so the spec stays hashable.
            object.__setattr__(self, "dcs", tuple(dcs))
        else:
            raise TopologyError(f"dcs={dcs!r} is invalid: must be a sequence of MultiPlaneClos")
        if not 2 <= len(self.dcs) <= 256:
            raise TopologyError(
                f"dcs has {len(self.dcs)} entries, which is invalid: must be in [2, 256] "
                "(one DC needs no DCI; the address plan has one byte for the DC)"
            )
        for i, dc in enumerate(self.dcs):
            if not isinstance(dc, MultiPlaneClos):
                raise TopologyError(f"dcs[{i}]={dc!r} is invalid: must be a MultiPlaneClos")
            if dc.dc != i:
                raise TopologyError(
                    f"dcs[{i}].dc={dc.dc} is invalid: must equal its position {i} "
                    "(the DC index selects names and addresses)"
                )
            if dc.planes != self.dcs[0].planes:
                raise TopologyError(
                    f"dcs[{i}].planes={dc.planes} differs from dcs[0].planes="
                    f"{self.dcs[0].planes}: every DC needs the same planes (a plane spans DCs)"
                )
        if not isinstance(self.dci, DciSpec):
            raise TopologyError(f"dci={self.dci!r} is invalid: must be a DciSpec")

    @property
    def dc_count(self) -> int:
        """Number of DCs."""
        return len(self.dcs)

    @property
    def planes(self) -> int:
        """Planes per DC (equal in every DC)."""
        return self.dcs[0].planes

    @cached_property
    def hosts(self) -> tuple[Node, ...]:
        """Hosts of every DC, DC by DC."""
        return tuple(h for dc in self.dcs for h in dc.hosts)

    @cached_property
    def _dc_by_node(self) -> dict[str, MultiPlaneClos]:
        return {n.name: dc for dc in self.dcs for n in dc.nodes}

    def fabric_of(self, name: str) -> MultiPlaneClos:
        """The DC that node ``name`` belongs to."""
        try:
            return self._dc_by_node[name]
        except (KeyError, TypeError):
            names = list(self._dc_by_node)
            raise TopologyError(
                f"unknown node {name!r}: valid names are {', '.join(names[:8])}, ... "
                f"({len(names)} in total)"
            ) from None

    def node(self, name: str) -> Node:
        """The node called ``name`` in whichever DC holds it."""
        return self.fabric_of(name).node(name)

    def dci_nominal_gbit(self, dc: int) -> float:
        """Nominal DCI capacity of DC ``dc``: its leaf->spine capacity / oversubscription."""
        check_int("dc", dc, 0, self.dc_count - 1)
        fabric = self.dcs[dc]
        links = fabric.planes * fabric.leaves * fabric.spines
        return links * fabric.fabric_link.nominal_gbit / self.dci.oversubscription
