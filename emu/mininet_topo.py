"""Mininet ``Topo`` for a :class:`~topologies.clos.MultiPlaneClos` or a
:class:`~topologies.scaleacross.ScaleAcross` (same interface; DCI routers are
switches with ``role="dci"``).

Usable from Python (``MultiPlaneClosTopo(spec, router_cls=...)``) and from
the command line::

    mn --custom emu/mininet_topo.py --topo mpclos,2,4,4,4
    mn --custom emu/mininet_topo.py --link tc --topo scaleacross,2,2,4,4,4

``mn --custom`` execs this file with a bare globals dict and then copies
*every* global into its own namespace, so module-level names here are kept
few and underscore-prefixed to avoid shadowing mn's (e.g. its ``Link``).
"""

from __future__ import annotations

import os as _os
import sys as _sys

from mininet.topo import Topo as _Topo

if __name__ == "builtins":  # exec'd by ``mn --custom``: no package context
    # Make ``topologies`` (and ``emu``) importable from the repository root.
    _sys.path.insert(
        0, _os.path.dirname(_os.path.dirname(_os.path.abspath(_sys._getframe().f_code.co_filename)))
    )

from topologies import clos as _clos  # noqa: E402  (after the path fix above)
from topologies import scaleacross as _sa  # noqa: E402


class MultiPlaneClosTopo(_Topo):
    """One Mininet node per host/switch and one link per :class:`~topologies.clos.Link`.

    Hosts carry ``role="host"``; switches are added with ``isSwitch=True``,
    ``role`` and ``plane`` (and ``cls=router_cls`` when given).  Each link
    carries its interface names, its ``LinkSpec`` as ``spec``, the TCLink
    shaping parameters ``bw``/``max_queue_size`` and its ``link_name``; a
    ScaleAcross's long-haul links (tier ``"dci"``) also carry TCLink's
    ``delay``/``loss`` from ``spec.dci`` (plain Mininet applies them with netem;
    the emulator's builder uses a delay line instead).
    """

    def build(
        self, spec: _clos.MultiPlaneClos | _sa.ScaleAcross, router_cls: type | None = None
    ) -> None:
        """Populate the topology from ``spec`` (called by ``Topo.__init__``)."""
        self.spec = spec
        for host in spec.hosts:
            self.addHost(host.name, role="host")
        for switch in spec.switches:
            extra = {} if router_cls is None else {"cls": router_cls}
            self.addNode(
                switch.name, isSwitch=True, role=switch.role.value, plane=switch.plane, **extra
            )
        for link in spec.links:
            netem: dict[str, str | float] = {}
            if link.tier == "dci" and isinstance(spec, _sa.ScaleAcross):
                netem = {"delay": f"{spec.dci.delay_ms:g}ms", "loss": spec.dci.loss * 100.0}
            self.addLink(
                link.a.node,
                link.b.node,
                intfName1=link.a.ifname,
                intfName2=link.b.ifname,
                spec=link.spec,
                bw=link.spec.rate_mbit,
                max_queue_size=link.spec.queue_packets,
                link_name=link.name,
                **netem,
            )


def _mpclos(
    planes: int = 2, spines: int = 4, leaves: int = 4, hosts_per_leaf: int = 4
) -> MultiPlaneClosTopo:
    """``--topo mpclos,planes,spines,leaves,hosts_per_leaf`` with Linux routers as switches."""
    from emu.nodes import LinuxRouter  # imported lazily: needs the emulator, not just data

    spec = _clos.MultiPlaneClos(
        planes=planes, spines=spines, leaves=leaves, hosts_per_leaf=hosts_per_leaf
    )
    return MultiPlaneClosTopo(spec, router_cls=LinuxRouter)


def _scaleacross(
    dcs: int = 2,
    planes: int = 2,
    spines: int = 4,
    leaves: int = 4,
    hosts_per_leaf: int = 4,
    dci_mbit: float = _sa.DciSpec().rate_mbit,
    delay_ms: float = _sa.DEFAULT_DCI_DELAY_MS,
) -> MultiPlaneClosTopo:
    """``--topo scaleacross,dcs,planes,spines,leaves,hosts_per_leaf[,dci_mbit,delay_ms]``:
    ``dcs`` equal DCs joined by DCI routers, Linux routers as switches."""
    from emu.nodes import LinuxRouter

    spec = _sa.ScaleAcross(
        tuple(
            _clos.MultiPlaneClos(
                planes=planes, spines=spines, leaves=leaves, hosts_per_leaf=hosts_per_leaf, dc=d
            )
            for d in range(dcs)
        ),
        _sa.DciSpec(float(dci_mbit), delay_ms=float(delay_ms)),
    )
    return MultiPlaneClosTopo(spec, router_cls=LinuxRouter)


topos = {"mpclos": _mpclos, "scaleacross": _scaleacross}
