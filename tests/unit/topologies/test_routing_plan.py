"""The forwarding plan of a fabric, checked as data (no root)."""

from __future__ import annotations

import ipaddress

import pytest

from topologies import MultiPlaneClos, Role
from topologies.addressing import ALL_HOSTS
from topologies.routing import link_macs, plan_fabric


def _lookup(plan, addr):
    """Longest-prefix match over a node's plan (the kernel's choice)."""
    best = None
    for r in plan.routes:
        if addr in r.dst and (best is None or r.dst.prefixlen > best.dst.prefixlen):
            best = r
    return best


@pytest.fixture(scope="module")
def spec():
    return MultiPlaneClos(planes=2, spines=3, leaves=3, hosts_per_leaf=2)


@pytest.fixture(scope="module")
def plans(spec):
    return plan_fabric(spec)


def test_every_node_planned_with_all_its_ports(spec, plans):
    assert set(plans) == {n.name for n in spec.nodes}
    for node in spec.nodes:
        assert {i.ifname for i in plans[node.name].interfaces} == {
            p.ifname for p in spec.ports(node.name)}


def test_macs_unique_and_neighbours_are_the_peer_ends(spec, plans):
    macs = [i.mac for p in plans.values() for i in p.interfaces]
    assert len(macs) == len(set(macs)) == 2 * len(spec.links)
    by_end = {(p.node, i.ifname): i for p in plans.values() for i in p.interfaces}
    for p in plans.values():
        for n in p.neighbors:
            mine = by_end[(p.node, n.ifname)]
            peer = by_end[(mine.peer_node, mine.peer_ifname)]
            assert (n.address, n.mac) == (peer.address.ip, peer.mac)


def test_link_macs_range():
    assert link_macs(0) == ("02:5a:00:00:00:0a", "02:5a:00:00:00:0b")
    with pytest.raises(ValueError):
        link_macs(1 << 24)


def _walk(spec, plans, src, dst_addr, first_hop_plane=None, limit=8):
    """Follow destination routes hop by hop from host src; returns the node names."""
    node, seen = src, [src]
    while len(seen) < limit:
        plan = plans[node]
        if plan.loopback is not None and plan.loopback.ip == dst_addr:
            return seen
        r = _lookup(plan, dst_addr)
        assert r is not None, f"{node} has no route to {dst_addr}"
        if r.seg6local_end:
            return seen
        nh = r.nexthops[first_hop_plane if first_hop_plane is not None and len(seen) == 1
                        and len(r.nexthops) > 1 else 0]
        iface = next(i for i in plan.interfaces if i.ifname == nh.ifname)
        assert iface.peer_node and nh.gateway == next(
            j.address.ip for j in plans[iface.peer_node].interfaces
            if j.ifname == iface.peer_ifname)
        node = iface.peer_node
        seen.append(node)
    raise AssertionError(f"routing loop from {src} to {dst_addr}: {seen}")


def test_ecmp_reaches_every_host_from_every_host(spec, plans):
    for a in spec.hosts:
        for b in spec.hosts:
            if a != b:
                hops = _walk(spec, plans, a.name, spec.address(b.name))
                assert hops[-1] == b.name


def test_multipath_widths(spec, plans):
    for node in spec.nodes:
        r = next(r for r in plans[node.name].routes if r.dst == ALL_HOSTS) \
            if node.role is not Role.SPINE else None
        if node.role is Role.HOST:
            assert len(r.nexthops) == spec.planes
            assert r.src == spec.address(node.name)
        elif node.role is Role.LEAF:
            assert len(r.nexthops) == spec.spines


def test_segments_route_to_the_named_switch(spec, plans):
    """A path's first segment leaves the source by its plane's NIC and ends at its SID."""
    for path in spec.paths("h0", spec.hosts[-1].name) + spec.paths("h0", "h1"):
        first = path.segments[0]
        hops = _walk(spec, plans, "h0", first)
        owner = hops[-1]
        assert spec.sid_of(owner) == first
        assert [h.node for h in path.hops[: len(hops) - 1]] == hops[:-1]
        end = next(r for r in plans[owner].routes if r.seg6local_end)
        assert end.dst == ipaddress.IPv6Network(f"{first}/128")
