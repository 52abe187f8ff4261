"""ScaleAcross as a buildable topology: graph, addressing, paths and route plan (no root)."""

from __future__ import annotations

import ipaddress
import itertools

import pytest

from topologies import (
    ALL_HOSTS,
    DciSpec,
    LinkSpec,
    MultiPlaneClos,
    Role,
    ScaleAcross,
    TopologyError,
    addressing,
)
from topologies.paths import CrossDcPath
from topologies.routing_dci import plan_scaleacross

DCI = DciSpec(50.0, queue_packets=300, delay_ms=5.0, nominal_gbit=800.0)
# Two DCs of different shape, and three DCs (one with a single spine and host).
TWO = ScaleAcross(
    (
        MultiPlaneClos(planes=2, spines=3, leaves=2, hosts_per_leaf=2, dc=0),
        MultiPlaneClos(planes=2, spines=2, leaves=3, hosts_per_leaf=1, dc=1),
    ),
    DCI,
)
THREE = ScaleAcross(
    (
        MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2, dc=0),
        MultiPlaneClos(planes=2, spines=1, leaves=1, hosts_per_leaf=1, dc=1),
        MultiPlaneClos(planes=2, spines=3, leaves=2, hosts_per_leaf=1, dc=2),
    ),
    DCI,
)
SPECS = [TWO, THREE]
IDS = ["two", "three"]


@pytest.fixture(scope="module", params=SPECS, ids=IDS)
def sa(request) -> ScaleAcross:
    return request.param


@pytest.fixture(scope="module")
def plans(sa):
    return plan_scaleacross(sa)


# --- graph ----------------------------------------------------------------------------


def test_nodes_and_links_extend_every_dc(sa: ScaleAcross) -> None:
    assert sa.hosts == tuple(h for dc in sa.dcs for h in dc.hosts)
    assert sa.host_count == len(sa.hosts) == sum(dc.host_count for dc in sa.dcs)
    assert [n.name for n in sa.dci_nodes] == [
        f"{dc.prefix}p{p}x" for dc in sa.dcs for p in range(sa.planes)
    ]
    assert all(n.role is Role.DCI and n.index == 0 for n in sa.dci_nodes)
    assert sa.switches == sa.leaf_nodes + sa.spine_nodes + sa.dci_nodes
    assert sa.nodes == sa.hosts + sa.switches
    assert sa.switch_count == sum(dc.switch_count for dc in sa.dcs) + sa.dc_count * sa.planes
    dc_links = tuple(link for dc in sa.dcs for link in dc.links)
    ups = [link for link in sa.links if link.tier == "dci-up"]
    assert sa.links == dc_links + sa.dci_up_links + sa.dci_links
    assert len(ups) == sa.planes * sum(dc.spines for dc in sa.dcs)
    n = sa.dc_count
    assert len(sa.dci_links) == sa.planes * n * (n - 1) // 2
    assert sa.mtu == 9000 and sa.planes == 2
    for link in ups:
        dc = sa.fabric_of(link.a.node)
        assert link.spec == dc.fabric_link
        assert sa.node(link.a.node).role is Role.SPINE and link.a.ifname == "x"
        assert sa.node(link.b.node).role is Role.DCI
        assert link.b.ifname == f"s{sa.node(link.a.node).index}"
        assert sa.node(link.a.node).plane == sa.node(link.b.node).plane == link.plane
    for link in sa.dci_links:
        a, b = sa.node(link.a.node), sa.node(link.b.node)
        assert a.role is b.role is Role.DCI and a.plane == b.plane == link.plane
        assert a.dc < b.dc and link.a.ifname == f"d{b.dc}" and link.b.ifname == f"d{a.dc}"
        assert link.spec == LinkSpec(DCI.rate_mbit, DCI.queue_packets, DCI.nominal_gbit)
        assert link.tier == "dci"


def test_names_unique_and_short(sa: ScaleAcross) -> None:
    names = [n.name for n in sa.nodes]
    assert len(set(names)) == len(names)
    link_names = [link.name for link in sa.links]
    assert len(set(link_names)) == len(link_names)
    for name in link_names:
        assert sa.link(name).name == name
    for node in sa.nodes:
        ifnames = [p.ifname for p in sa.ports(node.name)]
        assert len(set(ifnames)) == len(ifnames)
        assert all(0 < len(i) <= 15 for i in ifnames)
        dc = sa.fabric_of(node.name)
        assert sa.dc_of(node.name) == node.dc == dc.dc
        expected = {
            Role.HOST: sa.planes,
            Role.LEAF: dc.hosts_per_leaf + dc.spines,
            Role.SPINE: dc.leaves + 1,
            Role.DCI: dc.spines + sa.dc_count - 1,
        }[node.role]
        assert len(ifnames) == expected
    assert len(max((p.ifname for n in sa.nodes for p in sa.ports(n.name)), key=len)) <= 15


def test_lookups() -> None:
    sa = THREE
    assert sa.node("d2p1x").dc == 2 and sa.dc_of("d2p1x") == 2
    assert sa.fabric_of("p0x") is sa.dcs[0]
    assert sa.dci_router(1, 1).name == "d1p1x"
    assert sa.leaf_of("d2h1", 1).name == "d2p1l1" and sa.rack_of("d2h1") == 1
    assert [p.ifname for p in sa.ports("d1p0s0")] == ["l0", "x"]
    assert [p.ifname for p in sa.ports("d1p0x")] == ["s0", "d0", "d2"]
    assert sa.link("p1x-d2p1x").b.node == "d2p1x"
    assert sa.sid_of("d2p1x") == ipaddress.IPv6Address("fd5a:502:1:3::")
    assert sa.locator_of("d2p1x") == ipaddress.IPv6Network("fd5a:502:1:3::/80")
    assert sa.sid_of("d2p1s2") == sa.dcs[2].sid_of("d2p1s2")
    assert sa.address("d2h1") == ipaddress.IPv6Address("fd5a:2:1:0::1")
    for bad, needle in [
        (lambda: sa.node("d3h0"), "unknown node 'd3h0'"),
        (lambda: sa.link("p0x-d1p1x"), "unknown link"),
        (lambda: sa.address("p0x"), "'p0x' is a dci, not a host"),
        (lambda: sa.sid_of("d1h0"), "is a host, not a switch"),
        (lambda: sa.rack_of("p0x"), "not a host"),
        (lambda: sa.dci_router(3, 0), "dc=3"),
        (lambda: sa.spines, "spines differs between DCs"),
    ]:
        with pytest.raises(TopologyError, match=needle):
            bad()
    uniform = ScaleAcross((MultiPlaneClos(dc=0), MultiPlaneClos(dc=1)), DCI)
    assert (uniform.spines, uniform.leaves, uniform.hosts_per_leaf) == (4, 4, 4)
    hash(TWO)
    assert TWO == ScaleAcross(TWO.dcs, DCI)


# --- addressing -----------------------------------------------------------------------


def _all_addresses(sa: ScaleAcross) -> list[ipaddress.IPv6Address]:
    out = [sa.address(h.name) for h in sa.hosts]
    out += [sa.sid_of(s.name) for s in sa.switches]
    out += [end.address.ip for link in sa.links for end in (link.a, link.b)]
    return out


def test_addresses_unique_and_links_in_one_subnet(sa: ScaleAcross) -> None:
    addrs = _all_addresses(sa)
    assert len(addrs) == len(set(addrs))
    assert all(a in addressing.ULA for a in addrs)
    subnets = []
    for link in sa.links:
        assert link.a.address.network == link.b.address.network
        assert link.a.address.ip != link.b.address.ip
        subnets.append(link.a.address.network)
    for x, y in itertools.combinations(subnets, 2):
        assert not x.overlaps(y), (x, y)
    # Nothing but host loopbacks in ALL_HOSTS; every link in its kind's /24.
    for a in addrs:
        assert (a in ALL_HOSTS) == (a in {sa.address(h.name) for h in sa.hosts})
    for link in sa.links:
        block = {
            "host": addressing.ALL_HOST_LINKS,
            "fabric": addressing.ALL_FABRIC_LINKS,
            "dci-up": addressing.ALL_DCI_LINKS,
            "dci": addressing.DCI_LONG_HAUL,
        }[link.tier]
        assert link.a.address.network.subnet_of(block)
    # SIDs and locators: each switch's /80 is disjoint from every other's.
    locs = [sa.locator_of(s.name) for s in sa.switches]
    for x, y in itertools.combinations(locs, 2):
        assert not x.overlaps(y)
    assert all(loc.subnet_of(addressing.ALL_SIDS) for loc in locs)


def test_addressing_plan_values() -> None:
    dc1 = THREE.dcs[1]
    assert addressing.dci_up_link_subnet(dc1, 1, 0) == ipaddress.IPv6Network("fd5a:301:1:0::/80")
    spine, x = addressing.dci_up_link_ends(THREE.dcs[2], 1, 2)
    assert (str(spine), str(x)) == ("fd5a:302:1:2::1/80", "fd5a:302:1:2::2/80")
    a, b = addressing.dci_link_ends(2, 1, 0, 2)
    assert (str(a), str(b)) == ("fd5a:3ff:1:0:2::1/80", "fd5a:3ff:1:0:2::2/80")
    assert addressing.tier_sid_block(dc1, 1, Role.LEAF) == ipaddress.IPv6Network(
        "fd5a:501:1:1::/64"
    )
    with pytest.raises(TopologyError, match="dc_a=2, dc_b=1"):
        addressing.dci_link_subnet(2, 0, 2, 1)
    with pytest.raises(TopologyError, match="dc=255"):
        addressing.dci_up_link_subnet(MultiPlaneClos(dc=255), 0, 0)
    with pytest.raises(TopologyError, match="index=1"):
        addressing.sid(dc1, 0, Role.DCI, 1)


# --- route plan -----------------------------------------------------------------------


def _lookup(plan, addr):
    """Longest-prefix match over a node's plan (the kernel's choice)."""
    best = None
    for r in plan.routes:
        if addr in r.dst and (best is None or r.dst.prefixlen > best.dst.prefixlen):
            best = r
    return best


def _walk(plans, src, dst_addr, choose=0, limit=12):
    """Follow destination routes hop by hop from ``src``; returns the node names.

    ``choose`` picks the next hop of multipath routes (modulo their width).
    Stops at the node owning ``dst_addr`` (loopback or local End SID).
    """
    node, seen = src, [src]
    while len(seen) < limit:
        plan = plans[node]
        if plan.loopback is not None and plan.loopback.ip == dst_addr:
            return seen
        r = _lookup(plan, dst_addr)
        assert r is not None, f"{node} has no route to {dst_addr} (path {seen})"
        if r.seg6local_end:
            return seen
        nh = r.nexthops[choose % len(r.nexthops)]
        iface = next(i for i in plan.interfaces if i.ifname == nh.ifname)
        peer = next(j for j in plans[iface.peer_node].interfaces if j.ifname == iface.peer_ifname)
        assert nh.gateway == peer.address.ip
        node = iface.peer_node
        seen.append(node)
    raise AssertionError(f"routing loop from {src} to {dst_addr}: {seen}")


def test_every_node_planned_with_all_its_ports(sa, plans) -> None:
    assert set(plans) == {n.name for n in sa.nodes}
    for node in sa.nodes:
        plan = plans[node.name]
        assert plan.role is node.role
        assert {i.ifname for i in plan.interfaces} == {p.ifname for p in sa.ports(node.name)}
        assert (plan.loopback is not None) == (node.role is Role.HOST)


def test_macs_unique_and_neighbours_are_the_peer_ends(sa, plans) -> None:
    macs = [i.mac for p in plans.values() for i in p.interfaces]
    assert len(macs) == len(set(macs)) == 2 * len(sa.links)
    by_end = {(p.node, i.ifname): i for p in plans.values() for i in p.interfaces}
    for p in plans.values():
        assert len(p.neighbors) == len(p.interfaces)
        for n in p.neighbors:
            mine = by_end[(p.node, n.ifname)]
            peer = by_end[(mine.peer_node, mine.peer_ifname)]
            assert (n.address, n.mac) == (peer.address.ip, peer.mac)


def test_every_host_reaches_every_host(sa, plans) -> None:
    """Destination routing, over every choice of multipath next hop (up to the width)."""
    for a, b in itertools.permutations(sa.hosts, 2):
        for choose in range(6):
            hops = _walk(plans, a.name, sa.address(b.name), choose)
            assert hops[-1] == b.name
            if a.dc != b.dc:
                # host, leaf, spine, DCI, DCI, spine, leaf, host; one plane throughout.
                assert len(hops) == 8
                assert [sa.node(n).role for n in hops[1:-1]] == [
                    Role.LEAF, Role.SPINE, Role.DCI, Role.DCI, Role.SPINE, Role.LEAF,
                ]  # fmt: skip
                assert len({sa.node(n).plane for n in hops[1:-1]}) == 1


def test_segments_route_to_the_named_sids(sa, plans) -> None:
    """Every cross-DC path: each segment routes from where the last ended to its owner,
    and the hops so walked are exactly the path's hops."""
    pairs = [(a, b) for a, b in itertools.permutations(sa.hosts, 2) if a.dc != b.dc]
    for a, b in pairs[:: max(1, len(pairs) // 40)]:
        paths = sa.paths(a.name, b.name)
        fa, fb = sa.dcs[a.dc], sa.dcs[b.dc]
        assert len(paths) == sa.planes * fa.spines * fb.spines
        assert [p.ev for p in paths] == list(range(len(paths)))
        for path in paths:
            assert isinstance(path, CrossDcPath) and path.src_dc == a.dc
            assert path.dst_dc == b.dc
            assert path.ev == (path.plane * fa.spines + path.spine) * fb.spines + path.dst_spine
            owners = [
                f"{fa.prefix}p{path.plane}s{path.spine}",
                f"{fb.prefix}p{path.plane}s{path.dst_spine}",
                b.name,
            ]
            assert path.segments == (
                sa.sid_of(owners[0]),
                sa.sid_of(owners[1]),
                sa.address(b.name),
            )
            assert path.srh_addresses() == list(reversed(path.segments))
            walked = [a.name]
            for seg, owner in zip(path.segments, owners, strict=True):
                # The first segment leaves the host by its plane's NIC (no multipath);
                # later ones are forwarded by switches, which must not need a choice.
                hops = _walk(plans, walked[-1], seg)
                assert hops[-1] == owner, (path, seg, hops)
                if seg != path.segments[-1]:
                    end = next(r for r in plans[owner].routes if r.seg6local_end)
                    assert end.dst == ipaddress.IPv6Network(f"{seg}/128")
                walked += hops[1:]
            assert walked == [h.node for h in path.hops] + [b.name]
            # Hops chain over real links of the plane, named as the topology names them.
            for prev, nxt in zip(path.hops, path.hops[1:], strict=False):
                assert prev.next_node == nxt.node
            for hop, name in zip(path.hops, path.links, strict=True):
                link = sa.link(name)
                assert link.plane == path.plane
                ends = {(link.a.node, link.a.ifname), (link.b.node, link.b.ifname)}
                assert ends == {(hop.node, hop.out_ifname), (hop.next_node, hop.in_ifname)}
            assert sa.path(a.name, b.name, path.plane, path.spine, path.dst_spine) == path


def test_segment_walk_is_unique(sa, plans) -> None:
    """Past the source host, SRv6 transit never meets a multipath choice that matters:
    whichever next hop is taken, the walk to each named SID is the same."""
    a, b = sa.hosts[0], sa.hosts[-1]
    for path in sa.paths(a.name, b.name):
        for choose in range(4):
            assert _walk(plans, path.hops[1].node, path.segments[0], choose)[-1] == (
                path.hops[2].node
            )
            assert _walk(plans, path.hops[2].node, path.segments[1], choose)[-1] == (
                path.hops[4].next_node
            )


def test_within_a_dc_paths_are_the_dcs_own(sa, plans) -> None:
    for dc in sa.dcs:
        hosts = [h.name for h in dc.hosts]
        for src, dst in itertools.permutations(hosts[:3], 2):
            assert sa.paths(src, dst) == dc.paths(src, dst)
            for path in sa.paths(src, dst):
                assert sa.path(src, dst, path.plane, path.spine) == path
                hops = _walk(plans, src, path.segments[0])
                assert sa.sid_of(hops[-1]) == path.segments[0]


def test_dci_routes() -> None:
    sa = THREE
    plans = plan_scaleacross(sa)
    x = plans["d1p1x"]
    by_dst = {str(r.dst): r for r in x.routes}
    assert len(by_dst["fd5a:1::/32"].nexthops) == sa.dcs[1].spines
    assert [n.ifname for n in by_dst["fd5a::/32"].nexthops] == ["d0"]
    assert [n.ifname for n in by_dst["fd5a:502::/32"].nexthops] == ["d2"]
    assert by_dst["fd5a:501:1:3::/128"].seg6local_end
    spine = {str(r.dst): r for r in plans["d2p0s1"].routes}
    for dst in ("fd5a::/32", "fd5a:1::/32", "fd5a:500::/32", "fd5a:501::/32",
                "fd5a:502:0:3::/80"):  # fmt: skip
        assert [n.ifname for n in spine[dst].nexthops] == ["x"]
    leaf = {str(r.dst): r for r in plans["d2p0l0"].routes}
    assert len(leaf["fd5a:502:0:3::/80"].nexthops) == sa.dcs[2].spines
    # The plane's DCI router SID is reachable from a host of its DC.
    assert _walk(plans, "d2h0", sa.sid_of("d2p1x"))[-1] == "d2p1x"


def test_bgp_not_yet() -> None:
    with pytest.raises(NotImplementedError, match="ScaleAcross"):
        plan_scaleacross(TWO, ecmp="bgp")
    with pytest.raises(ValueError, match="ecmp='ospf'"):
        plan_scaleacross(TWO, ecmp="ospf")  # type: ignore[arg-type]


# --- validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dcs", "needle"),
    [
        ((MultiPlaneClos(dc=0), MultiPlaneClos(dc=1, planes=3)), "dcs[1].planes=3 differs"),
        ((MultiPlaneClos(dc=0), MultiPlaneClos(dc=1, mtu=1500)), "dcs[1].mtu=1500 differs"),
        ((MultiPlaneClos(dc=1), MultiPlaneClos(dc=0)), "dcs[0].dc=1 is invalid"),
        ((MultiPlaneClos(dc=0), MultiPlaneClos(dc=0)), "dcs[1].dc=0 is invalid"),
        ((MultiPlaneClos(dc=0), MultiPlaneClos(dc=1), MultiPlaneClos(dc=3)), "dcs[2].dc=3"),
        (
            (MultiPlaneClos(dc=0), MultiPlaneClos(dc=1, leaves=4, spine_ports=4)),
            "dcs[1].leaves=4 + 1 DCI port exceeds dcs[1].spine_ports=4",
        ),
        (
            tuple(
                MultiPlaneClos(dc=d, planes=1, spines=1, leaves=1, hosts_per_leaf=1)
                for d in range(256)
            ),
            "dcs has 256 entries",
        ),  # fmt: skip
        ("ab", "dcs='ab' is invalid"),
    ],
)
def test_invalid(dcs, needle: str) -> None:
    with pytest.raises(TopologyError) as exc:
        ScaleAcross(dcs, DCI)
    assert needle in str(exc.value)


def test_path_argument_errors() -> None:
    with pytest.raises(TopologyError, match="dst_spine=None is invalid"):
        TWO.path("h0", "d1h0", 0, 0)
    with pytest.raises(TopologyError, match="dst_spine=1 is invalid: h0 and h1"):
        TWO.path("h0", "h1", 0, None, 1)
    with pytest.raises(TopologyError, match="dst_spine=2"):
        TWO.path("h0", "d1h0", 0, 0, 2)  # DC 1 has 2 spines
    with pytest.raises(TopologyError, match="plane=2"):
        TWO.path("h0", "d1h0", 2, 0, 0)
    with pytest.raises(TopologyError, match="src='p0x' is invalid"):
        TWO.paths("p0x", "h0")


def test_mininet_topo_builds_from_scaleacross() -> None:
    pytest.importorskip("mininet.topo")
    from emu.mininet_topo import MultiPlaneClosTopo, topos

    sa = THREE
    topo = MultiPlaneClosTopo(sa)
    assert sorted(topo.hosts()) == sorted(h.name for h in sa.hosts)
    assert sorted(topo.switches()) == sorted(s.name for s in sa.switches)
    assert len(topo.links()) == len(sa.links)
    assert topo.nodeInfo("d1p1x") == {"isSwitch": True, "role": "dci", "plane": 1}
    infos = {(a, b): info for a, b, info in topo.links(sort=False, withInfo=True)}
    for link in sa.links:
        info = infos[(link.a.node, link.b.node)]
        assert info["intfName1"] == link.a.ifname and info["intfName2"] == link.b.ifname
        assert info["link_name"] == link.name and info["spec"] is link.spec
        if link.tier == "dci":
            assert info["delay"] == "5ms" and info["loss"] == 0.0
        else:
            assert "delay" not in info
    for node in sa.nodes:
        assert len(topo.ports[node.name]) == len(sa.ports(node.name))
    assert callable(topos["scaleacross"])
