"""Convergence knows the demo's own failure, the busiest-uplink cut (no root).

What it cuts is chosen when it fires, so the withdrawals to wait for are those of the
link it chose: the timeline hands ``after_apply`` that cut (``concrete``), and under BGP
``convergence.measure`` waits for them instead of reporting "no remote route changes
expected". The fabric is a fake: the counters and the link state are patched.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from emu import convergence, frr
from emu.failure_kinds import ports
from emu.failures import BusiestUplinkDown, ChosenLink, LinkDown
from emu.timeline import Timeline, TimelineRunner, at, at_step, restore
from topologies import MultiPlaneClos

SPEC = MultiPlaneClos(planes=2, spines=3, leaves=3, hosts_per_leaf=2)


def test_expected_withdrawals_of_the_chosen_link():
    cut = BusiestUplinkDown("p1l0")
    chosen = ChosenLink("p1l0-p1s2", 90, 100)
    ws = convergence.expected_withdrawals(SPEC, cut, handle=chosen)
    assert ws and ws == convergence.expected_withdrawals(SPEC, LinkDown("p1l0-p1s2"))
    assert {w.node for w in ws} == {"p1l1", "p1l2"} and {w.ifname for w in ws} == {"s2"}
    assert cut.concrete(chosen) == LinkDown("p1l0-p1s2")
    assert convergence.expected_withdrawals(SPEC, cut) == ()  # not chosen yet


class FakeFabric(SimpleNamespace):
    """Leaf p1l0's spine ports received ``rx`` packets more at every sample."""

    def __init__(self, rx: dict[str, int]) -> None:
        super().__init__(spec=SPEC, control_plane="bgp", down=[], up=[], counts={})
        self.rx = rx

    def received(self, node: str) -> dict[str, int]:
        c = self.counts.setdefault(node, dict.fromkeys(self.rx, 0))
        for ifname, more in self.rx.items():
            c[ifname] += more
        return dict(c)


@pytest.fixture
def fake(monkeypatch):
    fab = FakeFabric({"s0": 5, "s1": 50, "s2": 7})
    monkeypatch.setattr(ports, "received", lambda fab, node: fab.received(node))
    monkeypatch.setattr(ports, "set_ports", lambda fab, p, up: (fab.up if up else fab.down)
                        .append(tuple(p)))
    waited: list = []
    monkeypatch.setattr(frr, "wait_withdrawn",
                        lambda fab, node, prefix, ifname, timeout: waited.append(
                            (node, prefix, ifname)))
    fab.waited = waited
    return fab


def test_the_runner_measures_the_link_it_cut_under_bgp(fake):
    cut = BusiestUplinkDown("p1l0", sample_s=0.01)
    recs: list[dict] = []
    run = TimelineRunner(fake, Timeline((at(0.0, cut), at(0.05, restore(cut)))), recs.append,
                         after_apply=lambda f: convergence.measure(fake, f))
    run.start()
    run.join(5)
    run.stop()
    apply = next(r for r in recs if r["action"] == "apply")
    measured = next(r for r in recs if r["action"] == "measured")
    assert apply["chosen"] == "p1l0-p1s1" and "error" not in apply
    assert measured["kind"] == "busiest_uplink_down"  # pairs with its apply record
    wanted = convergence.expected_withdrawals(SPEC, LinkDown("p1l0-p1s1"))
    assert measured["withdrawals"] == len(wanted) > 0, measured
    assert measured["convergence_s"] is not None and sorted(fake.waited) == sorted(
        (w.node, w.prefix, w.ifname) for w in wanted)
    assert fake.down == [(("p1l0", "s1"), ("p1s1", "l0"))] == fake.up


def test_at_a_step_boundary_it_chooses_from_the_traffic_since_the_start(fake):
    cut = BusiestUplinkDown("p1l0")
    recs: list[dict] = []
    run = TimelineRunner(fake, Timeline((at_step(3, cut), at_step(5, restore(cut)))),
                         recs.append, training=True)
    run.start()  # the baseline: one sample
    fake.rx = {"s0": 1, "s1": 0, "s2": 9}  # what the training sent since
    [fired] = run.fire_due(3, 1.0)
    assert fired["chosen"] == "p1l0-p1s2" and fired["chosen_rx_packets"] == 9
    assert fired["all_rx_packets"] == 10
    run.fire_due(5, 2.0)
    run.stop()
    assert fake.down == [(("p1l0", "s2"), ("p1s2", "l0"))] == fake.up
