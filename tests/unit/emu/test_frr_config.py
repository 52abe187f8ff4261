"""The BGP/BFD control plane as data: the bgp route plan and FRR configs (no root)."""

from __future__ import annotations

import re
from ipaddress import IPv6Network

import pytest

from emu.frr import BfdTimers, asn_of, expected_routes, plan_bgp, router_id
from topologies import MultiPlaneClos, Role
from topologies.addressing import ALL_HOSTS
from topologies.routing import link_local, originated_prefixes, plan_fabric


@pytest.fixture(scope="module")
def spec():
    return MultiPlaneClos(planes=2, spines=3, leaves=4, hosts_per_leaf=2)


@pytest.fixture(scope="module")
def static(spec):
    return plan_fabric(spec)


@pytest.fixture(scope="module")
def bgp(spec):
    return plan_fabric(spec, ecmp="bgp")


@pytest.fixture(scope="module")
def configs(spec, bgp):
    return plan_bgp(spec, bgp, BfdTimers(4, 150, 200))


# -- the route plan under a control plane ----------------------------------------------------


def test_plan_rejects_unknown_mode(spec):
    with pytest.raises(ValueError, match="ecmp='ospf'"):
        plan_fabric(spec, ecmp="ospf")


def test_bgp_plan_drops_exactly_the_switches_ecmp_routes(spec, static, bgp):
    for node in spec.nodes:
        s, b = set(static[node.name].routes), set(bgp[node.name].routes)
        assert b <= s
        dropped = s - b
        if node.role is Role.HOST:
            assert dropped == set()  # hosts run no BGP: their multipath route stays
        elif node.role is Role.LEAF:
            assert {r.dst for r in dropped} == {ALL_HOSTS}
        else:
            assert {r.dst for r in dropped} == {
                IPv6Network(f"fd5a:0:{rack:x}::/48") for rack in range(spec.leaves)}
        # SRv6 stays static everywhere: End SIDs and locators over direct links.
        sids = IPv6Network("fd5a:500::/24")
        srv6 = [r for r in static[node.name].routes if r.seg6local_end or r.dst.overlaps(sids)]
        assert srv6 and srv6 == [r for r in bgp[node.name].routes
                                 if r.seg6local_end or r.dst.overlaps(sids)]


def test_control_plane_flag_and_link_locals(spec, static, bgp):
    for node in spec.nodes:
        assert not static[node.name].control_plane
        assert bgp[node.name].control_plane == (node.role is not Role.HOST)
        for i in static[node.name].interfaces:
            assert i.link_local is None  # the quiet static fabric is untouched
        for i in bgp[node.name].interfaces:
            if i.link.tier == "fabric":
                assert i.link_local is not None and i.link_local.ip.is_link_local
                assert i.link_local == link_local(i.mac)
            else:
                assert i.link_local is None
    lls = [i.link_local for p in bgp.values() for i in p.interfaces if i.link_local]
    assert len(lls) == len(set(lls)) == 2 * spec.planes * spec.leaves * spec.spines


def test_link_local_is_modified_eui64():
    assert str(link_local("02:5a:00:00:01:0a").ip) == "fe80::5a:ff:fe00:10a"


def test_leaves_originate_their_hosts_prefixes(spec, bgp):
    for leaf in spec.leaf_nodes:
        nets = originated_prefixes(spec, leaf.name)
        assert len(nets) == spec.hosts_per_leaf
        # Each is backed by the leaf's static route to that host (BGP's import check).
        assert set(nets) <= {r.dst for r in bgp[leaf.name].routes}
    with pytest.raises(ValueError):
        originated_prefixes(spec, "p0s0")


# -- ASNs and router ids ----------------------------------------------------------------------


def test_asns_rfc7938(spec, configs):
    leaves = [asn_of(spec, n.name) for n in spec.leaf_nodes]
    tiers = {p: {asn_of(spec, n.name) for n in spec.spine_nodes if n.plane == p}
             for p in range(spec.planes)}
    assert len(set(leaves)) == len(leaves)  # one per leaf
    assert all(len(t) == 1 for t in tiers.values())  # one per plane's spine tier
    tier_asns = [next(iter(t)) for t in tiers.values()]
    assert len(set(tier_asns)) == spec.planes
    assert not set(leaves) & set(tier_asns)
    assert all(4_200_000_000 <= a <= 4_294_967_294 for a in leaves + tier_asns)
    assert {c.asn for c in configs.values()} == set(leaves) | set(tier_asns)


def test_asns_fit_the_largest_fabric():
    big = MultiPlaneClos(planes=16, spines=64, leaves=64, hosts_per_leaf=1, dc=255,
                         leaf_ports=128)
    asns = {asn_of(big, n.name) for n in big.switches}
    assert len(asns) == 16 * 64 + 16
    assert max(asns) <= 4_294_967_294


def test_router_ids_unique(spec):
    ids = [router_id(spec, n.name) for n in spec.switches]
    assert len(set(ids)) == len(ids)
    with pytest.raises(ValueError):
        router_id(spec, "h0")


# -- sessions and rendered configs ----------------------------------------------------------


def test_every_fabric_link_has_a_session_on_both_ends(spec, configs):
    assert set(configs) == {n.name for n in spec.switches}
    ends = {(c.node, s.ifname, s.peer_node, s.peer_ifname)
            for c in configs.values() for s in c.sessions}
    fabric_links = [lk for lk in spec.links if lk.tier == "fabric"]
    assert len(ends) == 2 * len(fabric_links)
    for lk in fabric_links:
        assert (lk.a.node, lk.a.ifname, lk.b.node, lk.b.ifname) in ends
        assert (lk.b.node, lk.b.ifname, lk.a.node, lk.a.ifname) in ends
    for c in configs.values():
        for s in c.sessions:
            assert s.peer_asn == configs[s.peer_node].asn != c.asn  # eBGP
        bgpd = c.render()["bgpd"]
        declared = re.findall(r"^ neighbor (\S+) interface peer-group fabric$", bgpd, re.M)
        assert sorted(declared) == sorted(s.ifname for s in c.sessions)


def test_bgpd_config(spec, configs):
    leaf = configs["p1l2"].render()["bgpd"]
    lines = leaf.splitlines()
    assert lines[0] == "frr defaults datacenter"
    assert f"router bgp {asn_of(spec, 'p1l2')}" in lines
    for want in (" bgp bestpath as-path multipath-relax", "  maximum-paths 64",
                 " neighbor fabric remote-as external", " neighbor fabric bfd",
                 " neighbor fabric bfd profile fabric", "  neighbor fabric activate",
                 f" bgp router-id {router_id(spec, 'p1l2')}"):
        assert want in lines, want
    nets = sorted(re.findall(r"^  network (\S+)$", leaf, re.M))
    assert nets == sorted(str(n) for n in originated_prefixes(spec, "p1l2"))
    assert re.findall(r"^  network ", configs["p1s0"].render()["bgpd"], re.M) == []
    # One daemon's file holds only that daemon's commands (FRR 8.4 rejects the others).
    assert "\nbfd\n" not in leaf and "router bgp" not in configs["p1l2"].render()["bfdd"]


def test_bfd_timers_applied(configs):
    for c in configs.values():
        bfdd = c.render()["bfdd"].splitlines()
        assert bfdd[1:6] == ["bfd", " profile fabric", "  detect-multiplier 4",
                             "  receive-interval 150", "  transmit-interval 200"]


def test_bfd_timers_validated_and_detection_time():
    assert BfdTimers().detection_s == pytest.approx(0.3)
    assert BfdTimers(5, 50, 20).detection_s == pytest.approx(0.25)
    for bad in ({"detect_multiplier": 1}, {"receive_ms": 5}, {"transmit_ms": 70000},
                {"receive_ms": 100.0}):
        with pytest.raises(ValueError):
            BfdTimers(**bad)


def test_expected_routes(spec):
    exp = expected_routes(spec)
    assert set(exp) == {n.name for n in spec.leaf_nodes}
    for leaf, routes in exp.items():
        assert len(routes) == (spec.leaves - 1) * spec.hosts_per_leaf
        assert all(v == {f"s{s}" for s in range(spec.spines)} for v in routes.values())
        assert not set(originated_prefixes(spec, leaf)) & set(routes)
