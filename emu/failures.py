"""Failure and impairment primitives on a running fabric (the public names).

Each kind is a frozen dataclass (what to break), validated against the topology before
anything runs, with ``apply(fab)`` and ``restore(fab, handle)``; the protocol and its
defaults are in emu.failure_kinds.base, the kinds in emu.failure_kinds:

* ``LinkDown``: both veth ends down, as a cut cable (local switches see it at once;
  remote switches only through the control plane).
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

``apply`` returns a handle (None for most kinds) that ``restore`` gets back: a flap's
running thread lives there, not in the frozen description. Every kind registers itself
as a timeline verb (emu.failure_kinds.registry): ``fail_link``, ``fail_busiest_uplink``,
``fail_switch``, ``fail_plane``, ``flap_link``, ``gray_link``, ``degrade_link``,
``delay_link``, ``microburst``.
"""

from __future__ import annotations

from emu.failure_kinds.base import Failure, FailureKind, Topology, Withdrawal
from emu.failure_kinds.bursts import BurstStart, Microbursts
from emu.failure_kinds.impair import DciDelay, GrayLink, RateDegrade
from emu.failure_kinds.links import (
    BusiestUplinkDown,
    ChosenLink,
    LinkDown,
    LinkFlap,
    PlaneDown,
    SwitchDown,
)
from emu.failure_kinds.registry import register

__all__ = [
    "BurstStart", "BusiestUplinkDown", "ChosenLink", "DciDelay", "Failure", "FailureKind",
    "GrayLink", "LinkDown", "LinkFlap", "Microbursts", "PlaneDown", "RateDegrade",
    "SwitchDown", "Topology", "Withdrawal", "register",
]
