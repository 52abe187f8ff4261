"""Which remote next hops a control plane must withdraw, per failure (no root)."""

from __future__ import annotations

from emu.convergence import expected_withdrawals
from emu.failures import GrayLink, LinkDown, PlaneDown, RateDegrade, SwitchDown
from topologies import MultiPlaneClos
from topologies.routing import originated_prefixes

SPEC = MultiPlaneClos(planes=2, spines=3, leaves=3, hosts_per_leaf=2)


def test_leaf_spine_cut_is_withdrawn_by_the_other_leaves_of_the_plane():
    ws = expected_withdrawals(SPEC, LinkDown("p1l0-p1s2"))
    assert {w.node for w in ws} == {"p1l1", "p1l2"}
    assert {w.ifname for w in ws} == {"s2"}
    assert {w.prefix for w in ws} == set(originated_prefixes(SPEC, "p1l0"))
    assert len(ws) == 2 * SPEC.hosts_per_leaf


def test_host_link_cut_removes_that_host_prefix_everywhere_in_the_plane():
    ws = expected_withdrawals(SPEC, LinkDown("h3-p0l1"))
    assert {w.node for w in ws} == {"p0l0", "p0l2"}
    assert {w.ifname for w in ws} == {"s0", "s1", "s2"}
    (prefix,) = {w.prefix for w in ws}
    assert SPEC.address("h3") in prefix


def test_leaf_down_spine_down_plane_down_and_degradation():
    ws = expected_withdrawals(SPEC, SwitchDown("p0l2"))
    assert {w.node for w in ws} == {"p0l0", "p0l1"}
    assert expected_withdrawals(SPEC, SwitchDown("p0s1")) == ()
    assert expected_withdrawals(SPEC, PlaneDown(1)) == ()
    assert expected_withdrawals(SPEC, RateDegrade("p0l0-p0s0", 10)) == ()
    assert expected_withdrawals(SPEC, GrayLink("p0l0-p0s0", 0.1)) == expected_withdrawals(
        SPEC, LinkDown("p0l0-p0s0"))
