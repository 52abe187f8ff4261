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


@pytest.mark.xfail(strict=True, reason=(
    "measured, not fixed: the coalesced ACK's hold (up to a tick) puts the first ACK past "
    "rto_init (10 ms) where the first round trip is ~9.2 ms (8000 B at 12.5 Mbit/s per EV); "
    "a silent RTO and 16 tail probes follow and the window shrinks to ~33 KB for the rest "
    "of the transfer (completion 2.2x at 1 MiB, 3x at 4 MiB). With rto_init 20 ms it does "
    "not happen; a peer's ACK delay is not yet part of the RTO (as QUIC's max_ack_delay)"))
def test_reordering_costs_no_silent_rto_with_coalesced_acks():
    seed = 4  # the one seed of 0-19 where it happens (at every size)
    wk = run_once("wakeup", "reorder", seed, size=MIB)
    pp = run_once("per_packet", "reorder", seed, size=MIB)
    assert wk["rto_silent"] == 0 and wk["completion_s"] <= 1.1 * pp["completion_s"]

