"""``emu bench acks``: what coalescing ACKs does to MRC's loss detection, on the fake
network (virtual time: no root, no host noise, the same figures on any machine).

The engine wakes at most once per tick and its receivers acknowledge once per wake-up or
per 16 packets (transports/io/loop.py, transports/core/receiver.py ``ack_wakeup``), where
they acknowledged every gap, every ACK request and every 4 packets at once. The sender's
loss detection (rules A, B, C, probes: transports/core/mrc/lossdetect.py) reads those
ACKs, so fewer of them could delay a retransmission or declare a loss that was only
reordering. Four ways of driving the same cores are compared on the same paths and
seeds:

- ``per_packet``: every datagram handled when it arrives, ACKs as before (ack_every 4, a
  gap or an ACK request answered at once): the old per-process driver;
- ``tick``: cores woken at most once per tick (1 ms), the old ACK policy;
- ``wakeup``: woken once per tick, one ACK per wake-up or per 16 packets, the RTO before
  any RTT sample 12 ms (the engine's run defaults, transports/registry.py);
- ``wakeup_init10``: the same with the class default of 10 ms before any sample, which
  leaves no room for the two ticks the first ACK may wait (one silent RTO seen in 20
  seeds of ``reorder``, and a window that shrinks after it).

Scenarios, one MRC connection over 8 EVs of 12.5 Mbit/s each (the 50 Mbit/s fabric's two
NICs, four spines each), 8000-byte packets, 2 ms of propagation per direction, 64 KB
queues: ``clean``; ``loss`` (1 % random loss on every EV); ``reorder`` (20 % of packets
up to 3 ms late); ``dead_ev`` (one EV dies at 20 % of the transfer). Figures per variant,
median [min-max] over seeds: completion time, retransmissions and the spurious ones, RTOs
without evidence, ACKs per data packet. Clock: the fake network's virtual time, on the
emulated links' scale (1 ms of tick is 1 us at full scale).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from commands.bench.cpu import summary
from transports.core.mrc import MrcConfig, MrcCore
from transports.testing.fakenet import FakeNet, PathSpec, exchange

EVS = 8
RATE = 12.5e6 / 8  # bytes/s of one EV: 12.5 Mbit/s
PAYLOAD = 8000
TICK_S = 1e-3
SIZE = 4 << 20
VARIANTS: dict[str, tuple[float | None, dict[str, Any]]] = {
    "per_packet": (None, {"ack_wakeup": False, "ack_every": 4}),
    "tick": (TICK_S, {"ack_wakeup": False, "ack_every": 4}),
    "wakeup": (TICK_S, {"ack_wakeup": True, "ack_every": 16, "rto_init": 12e-3}),
    "wakeup_init10": (TICK_S, {"ack_wakeup": True, "ack_every": 16, "rto_init": 10e-3}),
}
SCENARIOS: dict[str, dict[str, Any]] = {
    "clean": {}, "loss": {"loss": 0.01}, "reorder": {"reorder": 0.2, "reorder_delay": 3e-3},
    "dead_ev": {},
}
KEYS = ("tx_retx", "tx_retx_spurious", "rto_silent", "tx_tail_probe", "ev_retired")


def run_once(variant: str, scenario: str, seed: int, size: int = SIZE) -> dict:
    """One transfer of ``size`` bytes; its figures (raises if a byte differs)."""
    tick, acks = VARIANTS[variant]
    cfg = MrcConfig(mtu_payload=PAYLOAD, rto_max=2.0, **acks)
    net = FakeNet(seed, tick_s=tick)
    a, b = MrcCore(1, EVS, cfg, seed), MrcCore(1, EVS, cfg, seed + 1)
    spec = PathSpec(delay=2e-3, rate=RATE, buffer=64_000, **SCENARIOS[scenario])
    net.connect("a", a, "b", b, [spec] * EVS)
    if scenario == "dead_ev":
        net.kill("a", "b", 3, at=0.2 * size / (EVS * RATE))
    data = random.Random(seed).randbytes(size)
    bufs = exchange(net, "a", "b", {1: data}, until=60.0)
    if bufs[1] != data:
        raise RuntimeError(f"acks bench {variant}/{scenario}/{seed}: bytes differ")
    done = max(c.t for c in net.done["a"] + net.done["b"])
    pkts = a.stats["tx_data_pkts"]
    return {"completion_s": round(done, 4),
            "acks_per_packet": round(b.stats["tx_ack"] / max(1, b.stats["rx_data_pkts"]), 3),
            "wakeups_b": net.tick.wakeups["b"] if net.tick else None,
            "data_packets": pkts, **{k: a.stats[k] for k in KEYS}}


def bench_acks(say: Callable[[str], None] = print, quick: bool = False) -> dict:
    """Every variant on every scenario, seeds interleaved; median [min-max] per figure."""
    seeds = range(3 if quick else 7)
    out: dict[str, Any] = {"size": SIZE, "evs": EVS, "tick_s": TICK_S, "seeds": len(seeds),
                           "clock": "fake network, virtual time (emulated scale)"}
    for scenario in SCENARIOS:
        rows: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for seed in seeds:
            for v in VARIANTS:
                rows[v].append(run_once(v, scenario, seed))
        out[scenario] = {}
        for v, rs in rows.items():
            fig = {k: summary([r[k] for r in rs]) for k in ("completion_s", "acks_per_packet",
                                                            *KEYS)}
            out[scenario][v] = fig
            say(f"  {scenario:8s} {v:10s} done {fig['completion_s']['median']:.3f} s "
                f"[{fig['completion_s']['min']:.3f}-{fig['completion_s']['max']:.3f}]; "
                f"{fig['acks_per_packet']['median']:.3f} ACKs per packet; retx "
                f"{fig['tx_retx']['median']:g} (spurious "
                f"{fig['tx_retx_spurious']['median']:g}); silent RTOs "
                f"{fig['rto_silent']['median']:g}; EVs retired {fig['ev_retired']['median']:g}")
    return out
