"""A fabric this machine cannot hold is refused before anything is built, naming the
estimate and the limit (emu/capacity.py)."""

import re
from dataclasses import replace

import pytest

from emu import capacity
from emu.errors import EmuError
from topologies import MultiPlaneClos

BIG = capacity.Limits(memory_bytes=64 << 30, processes=100_000, namespaces=100_000)


def test_estimate_counts_nodes_links_and_frr():
    spec = MultiPlaneClos(planes=2, spines=4, leaves=4, hosts_per_leaf=4)  # 16 hosts, 16 switches
    static = capacity.estimate(spec, bgp=False)
    bgp = capacity.estimate(spec, bgp=True)
    assert (static.namespaces, static.veth_pairs, static.processes) == (32, 64, 32)
    assert bgp.processes == 32 + 3 * 16
    assert bgp.memory_bytes == static.memory_bytes + 16 * capacity.FRR_BYTES_PER_SWITCH


def test_a_fabric_that_fits_passes():
    spec = MultiPlaneClos(planes=2, spines=4, leaves=4, hosts_per_leaf=4)
    assert capacity.check(spec, bgp=True, limits=BIG).namespaces == 32


@pytest.mark.parametrize("limits, word", [
    (capacity.Limits(memory_bytes=10 << 20, processes=100_000, namespaces=100_000), "memory"),
    (capacity.Limits(memory_bytes=64 << 30, processes=20, namespaces=100_000), "processes"),
    (capacity.Limits(memory_bytes=64 << 30, processes=100_000, namespaces=20),
     "max_net_namespaces=20"),
])
def test_a_fabric_beyond_a_limit_is_refused_with_the_estimate(limits, word):
    spec = MultiPlaneClos(planes=2, spines=4, leaves=4, hosts_per_leaf=4)
    with pytest.raises(EmuError, match=f"needs about 32 namespaces.*{word}"):
        capacity.check(spec, bgp=False, limits=limits)


def test_counts_match_the_topology():
    from topologies import DciSpec, ScaleAcross

    clos = MultiPlaneClos(planes=2, spines=3, leaves=2, hosts_per_leaf=2)
    two = ScaleAcross((MultiPlaneClos(planes=2, spines=3, leaves=2, hosts_per_leaf=2, dc=0),
                       MultiPlaneClos(planes=2, spines=2, leaves=3, hosts_per_leaf=1, dc=1),
                       MultiPlaneClos(planes=2, spines=1, leaves=1, hosts_per_leaf=1, dc=2)),
                      DciSpec(50.0, queue_packets=300, delay_ms=5.0))
    for spec in (clos, two):
        hosts, switches, links = capacity.counts(spec)
        assert hosts == len(spec.hosts) and hosts + switches == len(spec.nodes)
        assert links == len(spec.links)


def test_a_fabric_of_a_million_namespaces_is_refused_at_once():
    from topologies import DciSpec, ScaleAcross

    big = MultiPlaneClos(planes=16, spines=64, leaves=64, hosts_per_leaf=64, leaf_ports=1024,
                         spine_ports=1024)
    spec = ScaleAcross(tuple(replace(big, dc=i) for i in range(200)),
                       DciSpec(50.0, queue_packets=300, delay_ms=5.0))
    hosts, switches, _ = capacity.counts(spec)
    assert hosts + switches > 1_000_000
    with pytest.raises(EmuError, match="this fabric needs about 1232000 namespaces"):
        capacity.check(spec, bgp=False)


def test_machine_limits_are_read():
    lim = capacity.machine_limits()
    assert lim.memory_bytes > 0 and lim.processes > 0 and lim.namespaces > 0


@pytest.mark.parametrize("kw, word", [
    ({"rate_mbit": 1.5e14, "queue_packets": 100},
     "rate_mbit=150000000000000.0 is invalid: must be a finite number in [0.01, 40000]"),
    ({"rate_mbit": 100.0, "queue_packets": 2**31}, "queue_packets=2147483648"),
])
def test_link_parameters_the_kernel_cannot_encode_are_refused(kw, word):
    from topologies import DciSpec, LinkSpec, TopologyError

    with pytest.raises(TopologyError, match=re.escape(word)):
        LinkSpec(**kw)
    with pytest.raises(TopologyError, match=re.escape(word)):
        DciSpec(**kw)
    assert LinkSpec(40_000.0, 2**31 - 1).queue_packets == 2**31 - 1
