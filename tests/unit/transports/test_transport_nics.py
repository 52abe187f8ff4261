"""MRC keeps every NIC (plane) busy when some of its paths fail: the fake network, and
the connection plans that tell each EV's NIC."""

from __future__ import annotations

import random

import pytest

from topologies import MultiPlaneClos
from transports.core import wire
from transports.core.mrc import EV_GOOD, MrcConfig, MrcCore
from transports.plan import conn_spec
from transports.registry import make_core
from transports.testing.fakenet import FakeNet, PathSpec, exchange

FAST = MrcConfig(rto_min=200e-6, rto_init=1e-3, probe_min=200e-6, probe_max=5e-3)
NICS = [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_dead_path_moves_its_load_to_its_own_nic(seed):
    a, b = (MrcCore(7, 8, FAST, seed * 2 + i, nics=NICS) for i in (1, 2))
    net = FakeNet(seed)
    net.connect("a", a, "b", b, [PathSpec(delay=10e-6, rate=50e6)] * 8)
    net.kill("a", "b", 0, at=1e-3)
    data = random.Random(seed).randbytes(600 * FAST.mtu_payload)
    bufs = exchange(net, "a", "b", {1: data}, until=5.0)
    assert bufs[1] == data
    assert a.state[0] != EV_GOOD  # the dead path was taken out of service
    # once it was, NIC 0's three live paths carry what NIC 1's four do
    out = min(r.t for r in net.log if r.src == "a" and r.ev == 0 and r.fate != "delivered")
    late = [r for r in net.log if r.src == "a" and r.kind == wire.DATA and r.t > out + 5e-3]
    per_nic = [sum(1 for r in late if NICS[r.ev] == n) for n in (0, 1)]
    assert len(late) > 200 and abs(per_nic[0] - per_nic[1]) <= 0.05 * len(late), per_nic


def test_without_nics_the_load_follows_the_live_paths():
    a, b = MrcCore(7, 8, FAST, 3), MrcCore(7, 8, FAST, 4)
    net = FakeNet(1)
    net.connect("a", a, "b", b, [PathSpec(delay=10e-6, rate=50e6)] * 8)
    net.kill("a", "b", 0, at=1e-3)
    data = random.Random(1).randbytes(600 * FAST.mtu_payload)
    assert exchange(net, "a", "b", {1: data}, until=5.0)[1] == data
    out = min(r.t for r in net.log if r.src == "a" and r.ev == 0 and r.fate != "delivered")
    late = [r for r in net.log if r.src == "a" and r.kind == wire.DATA and r.t > out + 5e-3]
    nic1 = sum(1 for r in late if NICS[r.ev] == 1) / len(late)
    assert nic1 == pytest.approx(4 / 7, abs=0.03)  # what the NIC balance corrects


def test_connection_plans_name_each_evs_nic():
    spec = MultiPlaneClos(planes=2, spines=4, leaves=2, hosts_per_leaf=1)
    c = conn_spec(spec, "mrc", "h0", "h1", 1)
    assert c.nics is not None
    assert list(c.nics) == [p.plane for p in spec.paths("h0", "h1")] == NICS
    assert len(c.nics) == len(c.paths)
    core = make_core("mrc", 1, c.evs, {}, 0, c.nics)
    assert core.spray.nic_of == NICS
    assert conn_spec(spec, "rc", "h0", "h1", 1).nics is None
    with pytest.raises(ValueError, match="nics has 3 entries for 8 EVs"):
        MrcCore(1, 8, FAST, 0, nics=[0, 0, 1])
