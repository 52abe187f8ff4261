"""Mininet Topo construction (pure graph building, no root)."""

from __future__ import annotations

import pytest

pytest.importorskip("mininet.topo")

from emu.mininet_topo import MultiPlaneClosTopo, topos  # noqa: E402
from topologies import MultiPlaneClos  # noqa: E402


class _FakeRouter:  # stands in for emu.nodes.LinuxRouter; never instantiated here
    pass


@pytest.mark.parametrize("router_cls", [None, _FakeRouter])
def test_counts_and_interfaces(router_cls: type | None) -> None:
    spec = MultiPlaneClos(planes=2, spines=3, leaves=2, hosts_per_leaf=3, dc=1)
    topo = MultiPlaneClosTopo(spec, router_cls=router_cls)
    assert sorted(topo.hosts()) == sorted(h.name for h in spec.hosts)
    assert sorted(topo.switches()) == sorted(s.name for s in spec.switches)
    assert len(topo.links()) == len(spec.links)
    for name in topo.switches():
        info = topo.nodeInfo(name)
        assert info["role"] in ("leaf", "spine") and info["plane"] == spec.node(name).plane
        assert ("cls" in info) == (router_cls is not None)
    assert topo.nodeInfo("d1h0") == {"role": "host"}
    # Mininet's graph iterates by node, so match links by endpoints, not order.
    infos = {(a, b): info for a, b, info in topo.links(sort=False, withInfo=True)}
    for link in spec.links:
        info = infos[(link.a.node, link.b.node)]
        assert info["intfName1"] == link.a.ifname and info["intfName2"] == link.b.ifname
        assert info["bw"] == link.spec.rate_mbit
        assert info["max_queue_size"] == link.spec.queue_packets
        assert info["link_name"] == link.name and info["spec"] is link.spec
    # every node gets exactly one interface per port of the spec
    for node in spec.nodes:
        assert len(topo.ports[node.name]) == len(spec.ports(node.name))


def test_links_added_in_spec_order() -> None:
    spec = MultiPlaneClos()
    added: list[str] = []

    class Recording(MultiPlaneClosTopo):
        def addLink(self, node1, node2, **opts):  # noqa: N802 (Mininet's name)
            added.append(opts["link_name"])
            return super().addLink(node1, node2, **opts)

    Recording(spec)
    assert added == [link.name for link in spec.links]


def test_mn_custom_entry_point() -> None:
    assert callable(topos["mpclos"])
