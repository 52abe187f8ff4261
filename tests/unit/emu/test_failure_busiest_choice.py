"""The busiest-uplink choice is one function (no root): ``BusiestUplinkDown.busiest_since``
chooses the leaf-spine link that received the most since a sample without cutting it
(the reproduce claim aims other failure kinds with it), and ``apply_since`` cuts exactly
that choice. The fabric is a fake: the counters and the port state are patched."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from emu.failure_kinds import ports
from emu.failures import BusiestUplinkDown, ChosenLink
from topologies import MultiPlaneClos

SPEC = MultiPlaneClos(planes=2, spines=3, leaves=3, hosts_per_leaf=2)


class FakeFabric(SimpleNamespace):
    """Every leaf's spine ports received ``rx[leaf][port]`` packets more at each sample;
    ``down`` / ``up`` record the ports set."""

    def __init__(self, rx: dict[str, dict[str, int]]) -> None:
        super().__init__(spec=SPEC, down=[], up=[], counts={})
        self.rx = rx

    def received(self, node: str) -> dict[str, int]:
        c = self.counts.setdefault(node, dict.fromkeys(self.rx[node], 0))
        for ifname, more in self.rx[node].items():
            c[ifname] += more
        return dict(c)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeFabric:
    fab = FakeFabric({"p0l0": {"s0": 5, "s1": 8, "s2": 7},
                      "p1l0": {"s0": 3, "s1": 2, "s2": 40}})
    monkeypatch.setattr(ports, "received", lambda fab, node: fab.received(node))
    monkeypatch.setattr(ports, "set_ports", lambda fab, p, up: (fab.up if up else fab.down)
                        .append(tuple(p)))
    return fab


def test_busiest_since_chooses_across_the_leaves_without_cutting(fake: FakeFabric) -> None:
    kind = BusiestUplinkDown("p0l0,p1l0")
    before = kind.start_sample(fake)  # type: ignore[arg-type]
    chosen = kind.busiest_since(fake, before)  # type: ignore[arg-type]
    assert chosen == ChosenLink("p1l0-p1s2", 40, 5 + 8 + 7 + 3 + 2 + 40)
    assert fake.down == [] and fake.up == []


def test_apply_since_cuts_the_same_choice(fake: FakeFabric) -> None:
    kind = BusiestUplinkDown("p0l0,p1l0")
    before = kind.start_sample(fake)  # type: ignore[arg-type]
    chosen = kind.apply_since(fake, before)  # type: ignore[arg-type]
    assert chosen.link == "p1l0-p1s2"
    assert fake.down == [(("p1l0", "s2"), ("p1s2", "l0"))]


def test_a_tie_goes_to_the_first_link(fake: FakeFabric) -> None:
    fake.rx = {"p0l0": {"s0": 4, "s1": 9, "s2": 9}}
    kind = BusiestUplinkDown("p0l0")
    chosen = kind.busiest_since(fake, kind.start_sample(fake))  # type: ignore[arg-type]
    assert chosen.link == "p0l0-p0s1"
