"""Path enumeration: completeness, entropy values, segment lists and hop chains."""

from __future__ import annotations

import itertools

import pytest

from topologies import MultiPlaneClos, Path, Role, TopologyError

SPECS = [
    MultiPlaneClos(),
    MultiPlaneClos(planes=4, spines=8, leaves=8, hosts_per_leaf=4),
    MultiPlaneClos(planes=1, spines=1, leaves=2, hosts_per_leaf=1, dc=2),
]


def _check_path(spec: MultiPlaneClos, path: Path) -> None:
    same_rack = spec.rack_of(path.src) == spec.rack_of(path.dst)
    # Segments pin the path: a spine SID across racks, the leaf SID within one.
    if same_rack:
        assert path.spine is None and path.ev == path.plane
        pin = spec.leaf_of(path.src, path.plane)
    else:
        assert path.ev == path.plane * spec.spines + path.spine
        pin = next(s for s in spec.spine_nodes if s.plane == path.plane and s.index == path.spine)
    assert path.segments == (spec.sid_of(pin.name), spec.address(path.dst))
    assert path.srh_addresses() == [path.segments[1], path.segments[0]]

    # Hops chain from src to dst over real links, through the expected nodes.
    hops = path.hops
    assert len(hops) == (2 if same_rack else 4)
    assert hops[0].node == path.src and hops[-1].next_node == path.dst
    for prev, nxt in zip(hops, hops[1:], strict=False):
        assert prev.next_node == nxt.node
    assert pin.name in [h.next_node for h in hops]
    assert len(path.links) == len(hops)
    for hop, link_name in zip(hops, path.links, strict=True):
        link = spec.link(link_name)
        assert link.plane == path.plane
        ends = {(link.a.node, link.a.ifname), (link.b.node, link.b.ifname)}
        assert ends == {(hop.node, hop.out_ifname), (hop.next_node, hop.in_ifname)}
        assert hop.out_ifname in [p.ifname for p in spec.ports(hop.node)]
        assert hop.in_ifname in [p.ifname for p in spec.ports(hop.next_node)]
        for name in (hop.node, hop.next_node):
            node = spec.node(name)
            assert node.role is Role.HOST or node.plane == path.plane


@pytest.mark.parametrize("spec", SPECS)
def test_all_pairs(spec: MultiPlaneClos) -> None:
    hosts = [h.name for h in spec.hosts]
    pairs = list(itertools.permutations(hosts, 2))
    if len(pairs) > 300:  # keep the large fabric quick: every rack pair still covered
        pairs = pairs[::7]
    for src, dst in pairs:
        paths = spec.paths(src, dst)
        same_rack = spec.rack_of(src) == spec.rack_of(dst)
        expected = spec.planes if same_rack else spec.planes * spec.spines
        assert len(paths) == expected
        assert [p.ev for p in paths] == list(range(expected))
        assert len({(p.plane, p.spine) for p in paths}) == expected
        for path in paths:
            assert (path.src, path.dst) == (src, dst)
            _check_path(spec, path)
            assert spec.path(src, dst, path.plane, path.spine) == path


def test_example_path() -> None:
    spec = MultiPlaneClos()
    path = spec.path("h0", "h5", 1, 2)
    assert path.links == ("h0-p1l0", "p1l0-p1s2", "p1l1-p1s2", "h5-p1l1")
    assert [(h.node, h.out_ifname, h.next_node, h.in_ifname) for h in path.hops] == [
        ("h0", "p1", "p1l0", "h0"),
        ("p1l0", "s2", "p1s2", "l0"),
        ("p1s2", "l1", "p1l1", "s2"),
        ("p1l1", "h5", "h5", "p1"),
    ]
    assert path.ev == 6
    same = spec.path("h0", "h1", 1, None)
    assert same.links == ("h0-p1l0", "h1-p1l0")


def test_path_errors() -> None:
    spec = MultiPlaneClos()
    with pytest.raises(TopologyError, match="same host"):
        spec.paths("h0", "h0")
    with pytest.raises(TopologyError, match="unknown node 'h99'"):
        spec.paths("h0", "h99")
    with pytest.raises(TopologyError, match="src='p0l0'"):
        spec.paths("p0l0", "h1")
    with pytest.raises(TopologyError, match="plane=2"):
        spec.path("h0", "h5", 2, 0)
    with pytest.raises(TopologyError, match="spine=4"):
        spec.path("h0", "h5", 0, 4)
    with pytest.raises(TopologyError, match="spine=None"):
        spec.path("h0", "h5", 0, None)
    with pytest.raises(TopologyError, match="spine=0"):
        spec.path("h0", "h1", 0, 0)
