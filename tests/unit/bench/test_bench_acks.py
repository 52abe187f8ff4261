"""What coalescing ACKs does to MRC's loss detection (commands/bench/acks.py), on the fake
network in virtual time: the engine's ACK policy (one per wake-up or per 16 packets,
cores woken once per 1 ms tick) against ACKs per packet, on the same paths and seeds.
Seeded and virtual: the same figures on any machine."""

from __future__ import annotations

import pytest

from commands.bench.acks import run_once

SEEDS = range(5)
MIB = 1 << 20


@pytest.mark.parametrize("scenario", ["loss", "dead_ev"])
def test_coalesced_acks_detect_losses_as_per_packet_acks_do(scenario):
    """Random loss and a path dying mid-transfer: with a quarter of the ACKs or fewer,
    every loss is still found by the ACKs (no RTO without evidence, no spurious
    retransmission), the dead EV is retired, and the transfer ends within 10 % of the
    per-packet ACKs' time. ``run_once`` raises if a byte differs."""
    for seed in SEEDS:
        pp = run_once("per_packet", scenario, seed, size=MIB)
        wk = run_once("wakeup", scenario, seed, size=MIB)
        assert wk["acks_per_packet"] <= 0.6 * pp["acks_per_packet"], seed
        assert wk["rto_silent"] == 0 and wk["tx_retx_spurious"] == 0, (seed, wk)
        assert wk["completion_s"] <= 1.1 * pp["completion_s"], (seed, pp, wk)
        if scenario == "dead_ev":  # found, retired and its packets resent
            assert wk["ev_retired"] >= 1 and wk["tx_retx"] >= 1, (seed, wk)


def test_ticks_alone_keep_per_packet_acks():
    """The ``tick`` variant (woken once per tick, the old ACK policy) answers the same
    data with as many ACKs as per-packet handling or more: what cuts the ACKs is the
    wake-up policy, not the tick."""
    for seed in SEEDS:
        pp = run_once("per_packet", "clean", seed, size=MIB)
        tk = run_once("tick", "clean", seed, size=MIB)
        wk = run_once("wakeup", "clean", seed, size=MIB)
        assert tk["acks_per_packet"] >= 0.9 * pp["acks_per_packet"]
        assert wk["acks_per_packet"] <= 0.6 * tk["acks_per_packet"]
        assert wk["wakeups_b"] >= 1 and wk["data_packets"] == pp["data_packets"]


def test_the_first_rto_allows_the_ticks_a_coalesced_ack_may_wait():
    """Reordering (20 % of packets up to 3 ms late): the first round trip is ~9.2 ms here
    (8000 B at 12.5 Mbit/s per EV), and a coalesced ACK may wait up to a tick at each end.
    With the class default of 10 ms before any RTT sample, seed 4 (the one of 0-19) gets a
    silent RTO and sends 16 tail probes for packets that were only waiting (it cost over a
    tenth more time while a sample alone could cut NSCC's window; with the filtered delay
    it costs the probes).
    The engine's 12 ms (transports/registry.py) leaves room for both ticks: none of that,
    on every seed, and no more spurious retransmissions than per-packet ACKs make."""
    pp = run_once("per_packet", "reorder", 4, size=MIB)
    bad = run_once("wakeup_init10", "reorder", 4, size=MIB)
    assert bad["rto_silent"] == 1 and bad["tx_tail_probe"] > 0 and pp["tx_tail_probe"] == 0
    spurious = {"per_packet": 0, "wakeup": 0}  # reordering makes a few, whatever the ACKs
    for seed in range(20):
        pp = run_once("per_packet", "reorder", seed, size=MIB)
        wk = run_once("wakeup", "reorder", seed, size=MIB)
        assert wk["rto_silent"] == 0, (seed, wk)
        assert wk["completion_s"] <= 1.1 * pp["completion_s"], (seed, pp, wk)
        spurious["per_packet"] += pp["tx_retx_spurious"]
        spurious["wakeup"] += wk["tx_retx_spurious"]
    assert spurious["wakeup"] <= spurious["per_packet"], spurious


def test_the_engines_run_defaults_are_the_benchs_wakeup_variant():
    from commands.bench.acks import VARIANTS
    from transports import registry

    tick, acks = VARIANTS["wakeup"]
    for name in ("mrc", "rc", "dblp"):
        cfg = registry.get(name).plan_config()
        assert {k: cfg[k] for k in acks} == acks, name
