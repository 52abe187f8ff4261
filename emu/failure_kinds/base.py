"""The failure protocol: what a timeline can fire, and the defaults a failure kind inherits.

A failure is a frozen value (what to break) with:

* ``validate(spec)``: raise (EmuError, TopologyError or ValueError) if it cannot happen on
  the topology; called before anything is built.
* ``links(spec)``: the links it takes over; two active failures may not share one.
* ``apply(fab)``: break it; returns a handle (None for most kinds) that ``restore`` gets.
* ``restore(fab, handle)``: undo it; a dict it returns goes into the restore record.
* ``describe()``: what it is, as the records' ``kind`` plus its arguments.

That much is :class:`Failure`, all the timeline needs (tests fire fakes with no more).
:class:`FailureKind`, the base of every registered kind, adds the rest of the protocol
with defaults a kind overrides when they do not fit:

* ``supports(spec)``: None, or why this kind cannot run on such a fabric at all.
* ``expected_withdrawals(spec)``: the remote next hops a converged control plane removes
  (emu.convergence waits for them); none by default (routing does not react).
* ``concrete(handle)``: the failure that ``apply`` actually put in place, for a kind that
  chooses what to break when it fires (the busiest uplink); itself by default.

The module-level ``supports``, ``check``, ``expected_withdrawals`` and ``concrete`` apply
those defaults to any failure, registered or not.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from ipaddress import IPv6Network
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from emu.errors import EmuError
from topologies import Link, MultiPlaneClos, ScaleAcross, TopologyError

if TYPE_CHECKING:
    from emu.fabric import Fabric

Topology = MultiPlaneClos | ScaleAcross  # what a Fabric runs (Fabric.spec)


@dataclass(frozen=True)
class Withdrawal:
    """``node`` must stop using ``ifname`` for ``prefix``."""

    node: str
    prefix: IPv6Network
    ifname: str


class Failure(Protocol):
    """What a timeline fires (see the module docstring)."""

    def validate(self, spec: Topology) -> None: ...

    def links(self, spec: Topology) -> tuple[Link, ...]: ...

    def apply(self, fab: Any) -> object: ...

    def restore(self, fab: Any, handle: object = None) -> object: ...

    def describe(self) -> dict: ...


class FailureKind:
    """Base of the registered failure kinds (frozen dataclasses): the optional part of the
    protocol, with defaults. ``kind`` names the kind in records (``"link_down"``)."""

    kind: ClassVar[str]
    # its ``links`` are down, all of them, while it is active (a cut, not an impairment):
    # what the fabric can still carry is known before the run (topologies/flow_bound.py)
    takes_down: ClassVar[bool] = False

    def supports(self, spec: Topology) -> str | None:
        """None if this kind can run on fabrics like ``spec``, else why not."""
        return None

    def validate(self, spec: Topology) -> None:
        """Raise if this failure cannot happen on ``spec`` (nothing to check by default)."""

    def links(self, spec: Topology) -> tuple[Link, ...]:
        """The links this failure takes over (none: it overlaps no other failure)."""
        return ()

    def apply(self, fab: Fabric) -> object:
        """Break it now; the handle ``restore`` gets back."""
        raise NotImplementedError

    def restore(self, fab: Fabric, handle: object = None) -> object:
        """Undo it (``handle``: what ``apply`` returned)."""
        raise NotImplementedError

    def expected_withdrawals(self, spec: MultiPlaneClos) -> tuple[Withdrawal, ...]:
        """Remote next hops a converged control plane removes after it (none by default)."""
        return ()

    def concrete(self, handle: object) -> Failure:
        """The failure ``apply`` put in place, given its handle (this one by default)."""
        return self

    def describe(self) -> dict:
        """``kind`` and every field, in order (the records' identity of this failure)."""
        fields = dataclasses.fields(self)  # type: ignore[arg-type]  # kinds are dataclasses
        return {"kind": self.kind, **{f.name: getattr(self, f.name) for f in fields}}


def check_link(spec: Topology, name: str) -> Link:
    """The link ``name`` of ``spec``; EmuError (listing valid names) if there is none."""
    try:
        return spec.link(name)
    except TopologyError as e:
        raise EmuError(str(e)) from None


# The protocol's optional part for any failure: a fake or an unregistered class need not
# derive from FailureKind, so the defaults are applied here too.


def supports(f: Failure, spec: Topology) -> str | None:
    """None if ``f``'s kind can run on fabrics like ``spec``, else why not."""
    hook = getattr(f, "supports", None)
    return None if hook is None else hook(spec)


def check(f: Failure, spec: Topology) -> None:
    """``f`` can happen on ``spec``: its kind is supported there and it validates."""
    reason = supports(f, spec)
    if reason is not None:
        raise EmuError(f"not supported on this fabric: {reason}")
    f.validate(spec)


def expected_withdrawals(f: Failure, spec: MultiPlaneClos) -> tuple[Withdrawal, ...]:
    """The remote withdrawals ``f`` needs (none for a failure that does not say)."""
    hook = getattr(f, "expected_withdrawals", None)
    return () if hook is None else hook(spec)


def concrete(f: Failure, handle: object) -> Failure:
    """What ``f`` put in place when applied with ``handle`` as the result."""
    hook = getattr(f, "concrete", None)
    return f if hook is None else hook(handle)
