"""Gradient rounds in virtual time (workloads/collectives/rounds_sim.py): the bench pair's
network on the fake network, bursts that drop at the receiver's ports, deterministic runs."""

from __future__ import annotations

import pytest

from transports.core.bound import LossBound
from workloads.collectives.rounds_sim import Bursts, SimFabric, run_rounds

ROUND = 40 * 8000  # 40 whole chunks: small, so the test is quick


def test_healthy_rounds_take_the_line_rate_and_are_deterministic() -> None:
    fab = SimFabric(rtt_ms=0.3)
    a = run_rounds(fab, "mrc", [None] * 4, round_bytes=ROUND, seed=1)
    b = run_rounds(fab, "mrc", [None] * 4, round_bytes=ROUND, seed=1)
    assert a == b
    wire = ROUND / (2 * fab.rate)  # two planes at the line rate
    assert all(wire < x < wire + 0.01 for x in a.latency_s)
    assert a.delivered == (1.0,) * 4 and a.port_drops == 0 and a.burst_drops == 0


def test_bursts_drop_at_the_ports_and_a_bounded_round_closes_early() -> None:
    fab = SimFabric(rtt_ms=0.3)
    healthy = run_rounds(fab, "dblp", [LossBound(0.2)] * 4, round_bytes=ROUND, seed=2)
    reliable = run_rounds(fab, "mrc", [None] * 4, round_bytes=ROUND, seed=2)
    # 40 chunks at tolerance 0.2: the round closes at its 32nd chunk, not at its last
    # (the 8 left behind still cross the NICs' queues: the next round waits for them)
    assert healthy.delivered == (0.8,) * 4 and healthy.retx == 0
    assert max(healthy.latency_s[1:]) < min(reliable.latency_s)
    # bursts shorter than a round (5 ms against ~15), one every 60 ms
    bursts = Bursts(on_ms=5.0, every_ms=60.0, sources=2)
    rel = run_rounds(fab, "mrc", [None] * 20, bursts, ROUND, seed=2)
    dblp = run_rounds(fab, "dblp", [LossBound(0.2)] * 20, bursts, ROUND, seed=2)
    assert rel.burst_drops > 0 and rel.port_drops > 0  # the bursts bite
    assert rel.retx >= 1 and rel.delivered == (1.0,) * 20
    assert all(d >= 0.8 for d in dblp.delivered)  # the bound holds
    assert dblp.retx < rel.retx  # the chunks the bound lets go are not resent
    assert sum(dblp.latency_s) < sum(rel.latency_s)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="loss in"):
        SimFabric(loss=1.0)
    with pytest.raises(ValueError, match="on_ms"):
        Bursts(on_ms=10.0, every_ms=10.0)
    with pytest.raises(ValueError, match="mrc is reliable"):
        run_rounds(SimFabric(), "mrc", [LossBound(0.1)], round_bytes=ROUND)
