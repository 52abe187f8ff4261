"""MultiPlaneClos structure, naming and parameter validation (no root needed)."""

from __future__ import annotations

import dataclasses

import pytest

from topologies import LinkSpec, MultiPlaneClos, Role, TopologyError

LARGE = MultiPlaneClos(planes=4, spines=8, leaves=8, hosts_per_leaf=4)


def test_defaults_counts() -> None:
    spec = MultiPlaneClos()
    assert spec.host_count == len(spec.hosts) == 16
    assert spec.switch_count == len(spec.switches) == 2 * (4 + 4)
    assert len(spec.leaf_nodes) == len(spec.spine_nodes) == 8
    assert spec.nodes == spec.hosts + spec.switches
    host_links = [link for link in spec.links if link.tier == "host"]
    fabric_links = [link for link in spec.links if link.tier == "fabric"]
    assert len(host_links) == 2 * 16
    assert len(fabric_links) == 2 * 4 * 4
    assert len(spec.links) == len(host_links) + len(fabric_links)


def test_naming_scheme_and_ports() -> None:
    spec = MultiPlaneClos()
    assert [h.name for h in spec.hosts[:5]] == ["h0", "h1", "h2", "h3", "h4"]
    assert spec.node("h5").rack == 1 and spec.rack_of("h5") == 1
    assert spec.leaf_of("h5", 1).name == "p1l1"
    assert spec.node("p1s3") == spec.spine_nodes[-1]
    assert spec.node("p1s3").role is Role.SPINE and spec.node("p1s3").plane == 1
    assert [p.ifname for p in spec.ports("h5")] == ["p0", "p1"]
    leaf_ifnames = [p.ifname for p in spec.ports("p0l1")]
    assert leaf_ifnames == ["h4", "h5", "h6", "h7", "s0", "s1", "s2", "s3"]
    assert [p.ifname for p in spec.ports("p1s2")] == ["l0", "l1", "l2", "l3"]
    assert spec.link("h3-p0l0").b.ifname == "h3"
    assert spec.link("p0l1-p0s2").a.ifname == "s2"
    assert spec.link("p0l1-p0s2").b.ifname == "l1"
    assert spec.link("p0l1-p0s2").spec == spec.fabric_link


@pytest.mark.parametrize("spec", [MultiPlaneClos(), LARGE, MultiPlaneClos(dc=200)])
def test_names_unique_and_short(spec: MultiPlaneClos) -> None:
    names = [n.name for n in spec.nodes]
    assert len(set(names)) == len(names)
    assert all(n.startswith(spec.prefix) for n in names)
    link_names = [link.name for link in spec.links]
    assert len(set(link_names)) == len(link_names)
    for node in spec.nodes:
        ifnames = [p.ifname for p in spec.ports(node.name)]
        assert len(set(ifnames)) == len(ifnames)
        assert all(len(i) <= 15 for i in ifnames)
        # Each node uses exactly its radix share: hosts one NIC per plane.
        expected = {
            Role.HOST: spec.planes,
            Role.LEAF: spec.hosts_per_leaf + spec.spines,
            Role.SPINE: spec.leaves,
        }[node.role]
        assert len(ifnames) == expected


def test_dc_prefix() -> None:
    assert MultiPlaneClos().prefix == ""
    spec = MultiPlaneClos(dc=7)
    assert spec.prefix == "d7"
    assert spec.hosts[3].name == "d7h3"
    assert spec.leaf_of("d7h3", 1).name == "d7p1l0"
    assert spec.link("d7p0l1-d7p0s2").plane == 0


def test_frozen_hashable_and_cached() -> None:
    spec = MultiPlaneClos()
    assert spec.links is spec.links  # cached_property works on the frozen dataclass
    assert spec == MultiPlaneClos() and hash(spec) == hash(MultiPlaneClos())
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.planes = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"planes": 0}, "planes=0 is invalid: must be an integer in [1, 16]"),
        ({"planes": 17}, "planes=17"),
        ({"planes": True}, "planes=True"),
        ({"planes": 2.0}, "planes=2.0"),
        ({"spines": 65}, "spines=65"),
        ({"leaves": 0}, "leaves=0"),
        ({"hosts_per_leaf": "4"}, "hosts_per_leaf='4'"),
        ({"mtu": 1279}, "mtu=1279"),
        ({"mtu": 9001}, "mtu=9001"),
        ({"dc": -1}, "dc=-1"),
        ({"dc": 256}, "dc=256"),
        ({"leaf_ports": False}, "leaf_ports=False"),
        (
            {"hosts_per_leaf": 62},
            "hosts_per_leaf=62 + spines=4 = 66 exceeds leaf_ports=64 "
            "(a leaf needs one port per host and one per spine)",
        ),
        ({"leaves": 8, "spine_ports": 4}, "leaves=8 exceeds spine_ports=4"),
        ({"host_link": (100.0, 100)}, "host_link="),
    ],
)
def test_invalid_clos_parameters(kwargs: dict, needle: str) -> None:
    with pytest.raises(TopologyError) as exc:
        MultiPlaneClos(**kwargs)
    assert needle in str(exc.value)
    assert isinstance(exc.value, ValueError)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((0, 100), "rate_mbit=0 is invalid"),
        ((-1.0, 100), "rate_mbit=-1.0"),
        ((float("nan"), 100), "rate_mbit=nan"),
        ((True, 100), "rate_mbit=True"),
        (("100", 100), "rate_mbit='100'"),
        ((100.0, 0), "queue_packets=0 is invalid: must be an integer in [1, 2147483647]"),
        ((100.0, True), "queue_packets=True"),
        ((100.0, 10.0), "queue_packets=10.0"),
        ((100.0, 10, 0), "nominal_gbit=0"),
    ],
)
def test_invalid_link_spec(args: tuple, needle: str) -> None:
    with pytest.raises(TopologyError) as exc:
        LinkSpec(*args)
    assert needle in str(exc.value)


def test_link_spec_valid_int_rate() -> None:
    assert LinkSpec(10, 1).rate_mbit == 10


def test_unknown_names() -> None:
    spec = LARGE
    with pytest.raises(TopologyError, match=r"unknown node 'h999'.*h0, h1.*\(96 in total\)"):
        spec.node("h999")
    with pytest.raises(TopologyError, match="unknown link 'h0-p0s0'"):
        spec.link("h0-p0s0")
    with pytest.raises(TopologyError, match="unknown node"):
        spec.ports("nope")
    with pytest.raises(TopologyError, match="not a host"):
        spec.rack_of("p0l0")
    with pytest.raises(TopologyError, match="not a host"):
        spec.address("p0s0")
    with pytest.raises(TopologyError, match="not a switch"):
        spec.sid_of("h0")
    with pytest.raises(TopologyError, match="plane=4"):
        spec.leaf_of("h0", 4)
