"""Addressing plan: uniqueness, containment in the documented blocks, link subnets."""

from __future__ import annotations

from ipaddress import IPv6Address, IPv6Interface, IPv6Network

import pytest

from topologies import ALL_HOSTS, MultiPlaneClos, Role, TopologyError, addressing

SPECS = [
    MultiPlaneClos(),
    MultiPlaneClos(planes=4, spines=8, leaves=8, hosts_per_leaf=4),
    MultiPlaneClos(planes=16, spines=4, leaves=2, hosts_per_leaf=60, dc=255),
]


def test_documented_examples() -> None:
    spec = MultiPlaneClos(planes=4, spines=8, leaves=8, hosts_per_leaf=4, dc=3)
    assert spec.address("d3h13") == IPv6Address("fd5a:3:3:1::1")
    assert addressing.host_loopback(spec, 13) == IPv6Interface("fd5a:3:3:1::1/128")
    assert addressing.host_prefix(spec, 13) == IPv6Network("fd5a:3:3:1::/64")
    assert addressing.rack_prefix(spec, 3) == IPv6Network("fd5a:3:3::/48")
    assert addressing.dc_host_prefix(spec) == IPv6Network("fd5a:3::/32")
    assert addressing.host_link_subnet(spec, 2, 7, 3) == IPv6Network("fd5a:103:2:7:3::/80")
    assert addressing.fabric_link_subnet(spec, 1, 5, 6) == IPv6Network("fd5a:203:1:5:6::/80")
    assert spec.sid_of("d3p2l7") == IPv6Address("fd5a:503:2:1:7::")
    assert spec.sid_of("d3p2s6") == IPv6Address("fd5a:503:2:2:6::")
    assert spec.locator_of("d3p2s6") == IPv6Network("fd5a:503:2:2:6::/80")
    assert addressing.plane_sid_block(spec, 2) == IPv6Network("fd5a:503:2::/48")
    assert addressing.dc_sid_block(spec) == IPv6Network("fd5a:503::/32")
    assert addressing.sid(spec, 0, "spine", 1) == addressing.sid(spec, 0, Role.SPINE, 1)
    link = spec.link("d3h13-d3p1l3")
    assert link.a.address == IPv6Interface("fd5a:103:1:3:1::1/80")
    assert link.b.address == IPv6Interface("fd5a:103:1:3:1::2/80")


@pytest.mark.parametrize("spec", SPECS)
def test_no_collisions_and_in_blocks(spec: MultiPlaneClos) -> None:
    loopbacks = [spec.address(h.name) for h in spec.hosts]
    ports = [p.address for link in spec.links for p in (link.a, link.b)]
    sids = [spec.sid_of(s.name) for s in spec.switches]
    everything = loopbacks + [p.ip for p in ports] + sids
    assert len(set(everything)) == len(everything)

    for host, lo in zip(spec.hosts, loopbacks, strict=True):
        assert lo in addressing.host_prefix(spec, host.index)
        assert lo in addressing.rack_prefix(spec, host.rack)
        assert lo in addressing.dc_host_prefix(spec)
        assert lo in ALL_HOSTS
    for switch, sid in zip(spec.switches, sids, strict=True):
        assert sid in spec.locator_of(switch.name)
        assert spec.locator_of(switch.name).prefixlen == 80
        assert sid in addressing.plane_sid_block(spec, switch.plane)
        assert sid in addressing.dc_sid_block(spec)
        assert sid in addressing.ALL_SIDS
    for p in ports:
        assert p.ip not in addressing.ALL_HOSTS
        assert p.ip not in addressing.ALL_SIDS


@pytest.mark.parametrize("spec", SPECS)
def test_link_subnets(spec: MultiPlaneClos) -> None:
    subnets = []
    for link in spec.links:
        assert link.a.address.network == link.b.address.network
        assert link.a.address.network.prefixlen == 80
        assert link.a.address.ip != link.b.address.ip
        block = addressing.ALL_HOST_LINKS if link.tier == "host" else addressing.ALL_FABRIC_LINKS
        assert link.a.address.network.subnet_of(block)
        subnets.append(link.a.address.network)
    assert len(set(subnets)) == len(subnets)
    # Aggregates never overlap: a route to one kind can't capture another.
    blocks = [
        addressing.ALL_HOSTS,
        addressing.ALL_HOST_LINKS,
        addressing.ALL_FABRIC_LINKS,
        addressing.ALL_DCI_LINKS,
        addressing.ALL_SIDS,
    ]
    for i, a in enumerate(blocks):
        assert a.subnet_of(addressing.ULA)
        assert not any(a.overlaps(b) for b in blocks[i + 1 :])


def test_dcs_do_not_collide() -> None:
    a, b = MultiPlaneClos(dc=0), MultiPlaneClos(dc=1)

    def addrs(spec: MultiPlaneClos) -> set[IPv6Address]:
        return (
            {spec.address(h.name) for h in spec.hosts}
            | {p.address.ip for link in spec.links for p in (link.a, link.b)}
            | {spec.sid_of(s.name) for s in spec.switches}
        )

    assert not addrs(a) & addrs(b)
    assert not addressing.dc_host_prefix(a).overlaps(addressing.dc_host_prefix(b))
    assert not addressing.dc_sid_block(a).overlaps(addressing.dc_sid_block(b))


def test_index_validation() -> None:
    spec = MultiPlaneClos()
    with pytest.raises(TopologyError, match="host_index=16"):
        addressing.host_address(spec, 16)
    with pytest.raises(TopologyError, match="rack=4"):
        addressing.rack_prefix(spec, 4)
    with pytest.raises(TopologyError, match="plane=2"):
        addressing.host_link_subnet(spec, 2, 0, 0)
    with pytest.raises(TopologyError, match="spine=4"):
        addressing.fabric_link_subnet(spec, 0, 0, 4)
    with pytest.raises(TopologyError, match="tier_role"):
        addressing.sid(spec, 0, Role.HOST, 0)
    with pytest.raises(TopologyError, match="index=True"):
        addressing.sid(spec, 0, Role.LEAF, True)
