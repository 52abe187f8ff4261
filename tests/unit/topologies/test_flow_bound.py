"""The cut bound of equal flows on a multi-plane Clos (topologies/flow_bound.py)."""

from __future__ import annotations

import itertools
import math

import pytest

from topologies import LinkSpec, MultiPlaneClos, TopologyError
from topologies.flow_bound import least_time, ring_flows, slowdown

# the cut experiment's fabric: 2 planes x 2 spines, 2 racks of 2 hosts, 100 Mbit/s
CUT = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2,
                     host_link=LinkSpec(100.0, 64), fabric_link=LinkSpec(100.0, 64))
INTERLEAVED = ("h0", "h2", "h1", "h3")  # the default placement: racks alternate
CONTIGUOUS = ("h0", "h1", "h2", "h3")


def test_ring_flows_go_to_the_next_rank_and_back_to_the_first() -> None:
    assert ring_flows(["a", "b", "c"]) == (("a", "b"), ("b", "c"), ("c", "a"))
    assert ring_flows(["a"]) == ()


def test_healthy_ring_is_bound_by_its_nics() -> None:
    # each host sends one flow over two 100 Mbit/s NICs: 1/200 s per Mbit
    for order in (INTERLEAVED, CONTIGUOUS):
        assert least_time(CUT, ring_flows(order)) == pytest.approx(1 / 200)


def test_a_cut_uplink_slows_a_ring_that_crosses_racks_at_every_hop_by_four_thirds() -> None:
    # both flows leaving rack 0 want 200 Mbit/s each; plane 0's leaf keeps one 100 Mbit/s
    # uplink of two: 300 for 400. Reached: each flow 100 in plane 1 and 50 in plane 0.
    assert slowdown(CUT, ring_flows(INTERLEAVED), {"p0l0-p0s1"}) == pytest.approx(4 / 3)


def test_the_same_cut_costs_a_rack_contiguous_ring_nothing() -> None:
    # one flow leaves each rack: plane 0's remaining uplink carries its 100 Mbit/s share
    assert slowdown(CUT, ring_flows(CONTIGUOUS), {"p0l0-p0s1"}) == pytest.approx(1.0)


def test_a_dead_plane_halves_every_nic() -> None:
    plane0 = {lk.name for lk in CUT.links if lk.plane == 0}
    for order in (INTERLEAVED, CONTIGUOUS):
        assert slowdown(CUT, ring_flows(order), plane0) == pytest.approx(2.0)


def test_spines_reachable_from_one_leaf_only_carry_nothing_between_them() -> None:
    # plane 0: rack 0 reaches only spine 0, rack 1 only spine 1; a rack cut still sees
    # 100 Mbit/s of uplinks in plane 0, the pair of racks sees none
    down = {"p0l0-p0s1", "p0l1-p0s0"}
    flows = [("h0", "h2")]
    assert least_time(CUT, flows, down) == pytest.approx(1 / 100)
    assert slowdown(CUT, flows, down) == pytest.approx(2.0)


def test_a_flow_without_a_path_takes_for_ever_and_a_failure_beside_it_nothing() -> None:
    nics = {"h2-p0l1", "h2-p1l1"}
    assert least_time(CUT, [("h0", "h2")], nics) == math.inf
    assert slowdown(CUT, [("h0", "h1")], {"p0l1-p0s0"}) == 1.0
    assert slowdown(CUT, [], {"p0l1-p0s0"}) == 1.0
    # hosts that share no plane that is up, within a rack and across racks (a second flow
    # of the same racks widens what the rack pair could carry, not what this pair can)
    assert least_time(CUT, [("h0", "h1")], {"h0-p0l0", "h1-p1l0"}) == math.inf
    assert least_time(CUT, [("h0", "h2"), ("h1", "h3")], {"h0-p0l0", "h2-p1l1"}) == math.inf


def test_the_bound_never_falls_when_links_go_down() -> None:
    """Monotone: taking more links away never makes the flows' least time shorter."""
    big = MultiPlaneClos(planes=2, spines=3, leaves=3, hosts_per_leaf=2)
    flows = ring_flows([h.name for h in big.hosts])
    fabric = [lk.name for lk in big.links if lk.tier == "fabric"]
    for a, b in itertools.combinations(fabric[:8], 2):
        one, two = least_time(big, flows, {a}), least_time(big, flows, {a, b})
        assert least_time(big, flows) <= one <= two


def test_bad_names_are_refused_naming_them() -> None:
    with pytest.raises(TopologyError, match="p9l0-p9s0"):
        least_time(CUT, ring_flows(CONTIGUOUS), {"p9l0-p9s0"})
    with pytest.raises(TopologyError, match="h9"):
        least_time(CUT, [("h0", "h9")])
