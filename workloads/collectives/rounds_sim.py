"""Gradient rounds in virtual time: the transport cores on the fake network, shaped as
the DBLP bench's fabric pair, for maps too dense for the fabric.

One host pair of the multi-plane Clos (``SimFabric``: ``planes`` x ``spines`` paths, one
EV each; links of ``rate_mbit``; switch FIFOs of ``queue_packets`` frames): each EV
leaves by its plane's NIC (one FIFO per plane at the line rate, shared by the plane's
EVs), crosses ``hops - 1`` more store-and-forward links at the line rate, then the
receiver's port on its plane (one FIFO of ``queue_packets`` frames per plane: the
switch egress a microburst fills). The one-way propagation delay is ``rtt_ms / 2``;
random ``loss`` hits every datagram, both directions. What the fake network does not
have: the Python stack's own ~0.1 ms per hop and its CPU (the emulator's fabric has
both), so a base RTT here is the propagation alone.

Microbursts (``Bursts``): other traffic of ``sources`` x the line rate enters the
receiver's port on every plane for ``on_ms`` (the all_paths setting of `emu bench
dblp`: every path meets a full FIFO), one burst every ``every_ms`` from ``start_ms``,
each start moved by a seeded draw in [0, ``jitter_ms``) so bursts meet rounds at every
phase. Each burst's drops at the ports are counted (``burst_drops``).

Rounds are synchronous, as the bench's: round i + 1 is posted when round i's send
completed; its latency is the receiver's completion minus the send's post (the
harness's definition). A system is a core factory and a per-round bound (None:
reliable), so reliable MRC, an MLT-style fixed tolerance and DBLP's schedule run
through identical networks (same seed: same losses drawn in the same order only as
long as the systems send alike; the bursts are the same instants).

    res = run_rounds(SimFabric(rtt_ms=2.0, loss=0.001), "dblp", bounds, Bursts(10, 200),
                     round_bytes=1 << 20, seed=3)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from transports import registry
from transports.core.bound import LossBound
from transports.core.wire import HEADER_LEN
from transports.testing.fakenet import FakeNet, PathSpec

__all__ = ["Bursts", "RoundsResult", "SimFabric", "run_rounds"]

FRAME = 8000 + HEADER_LEN  # a full chunk's datagram (the fabric adds IP/UDP/SRH: ~1 %)


@dataclass(frozen=True)
class SimFabric:
    """The pair's network: ``planes`` x ``spines`` paths (EVs), ``rate_mbit`` links,
    ``queue_packets``-frame switch FIFOs, ``hops`` links per path, one-way delay
    ``rtt_ms / 2``, random ``loss`` per datagram (both directions)."""

    rtt_ms: float = 0.2
    loss: float = 0.0
    planes: int = 2
    spines: int = 4
    rate_mbit: float = 100.0
    queue_packets: int = 16
    hops: int = 4

    def __post_init__(self) -> None:
        if not (self.rtt_ms >= 0 and 0 <= self.loss < 1 and self.planes >= 1
                and self.spines >= 1 and self.rate_mbit > 0 and self.queue_packets >= 1
                and self.hops >= 2):
            raise ValueError(f"invalid SimFabric {self}: rtt_ms >= 0, loss in [0, 1), "
                             "planes, spines, queue_packets >= 1, rate_mbit > 0, hops >= 2")

    @property
    def evs(self) -> int:
        return self.planes * self.spines

    @property
    def rate(self) -> float:
        """The line rate in bytes/s."""
        return self.rate_mbit * 1e6 / 8

    def nics(self) -> list[int]:
        """The plane (NIC) of each EV."""
        return [ev // self.spines for ev in range(self.evs)]


@dataclass(frozen=True)
class Bursts:
    """Microbursts at the receiver's port on every plane: ``sources`` x the line rate
    for ``on_ms``, every ``every_ms`` (each start jittered by up to ``jitter_ms``)."""

    on_ms: float
    every_ms: float
    sources: int = 3
    start_ms: float = 0.0
    jitter_ms: float = 0.0

    def __post_init__(self) -> None:
        if not (self.on_ms > 0 and self.on_ms + self.jitter_ms < self.every_ms
                and self.sources >= 1 and self.start_ms >= 0 and self.jitter_ms >= 0):
            raise ValueError(f"invalid Bursts {self}: need on_ms > 0, on_ms + jitter_ms < "
                             "every_ms, sources >= 1, start_ms >= 0, jitter_ms >= 0")


@dataclass(frozen=True)
class RoundsResult:
    """Per round: latency (s), delivered fraction, whether it ended at its deadline;
    and the datagrams the bursts' ports dropped of ours (``port_drops``) and of theirs
    (``burst_drops``), the cores' retransmissions."""

    latency_s: tuple[float, ...]
    delivered: tuple[float, ...]
    port_drops: int
    burst_drops: int
    retx: int
    virtual_s: float


def _build(fab: SimFabric, transport: str, seed: int) -> tuple[FakeNet, list]:
    decl = registry.get(transport, lambda t: t.core is not None, "a transport with a core")
    settings = decl.settings()
    nics = fab.nics()
    a = registry.make_core(transport, 1, fab.evs, settings, seed * 2 + 1, nics)
    b = registry.make_core(transport, 1, fab.evs, settings, seed * 2 + 2, nics)
    net = FakeNet(seed)
    half = fab.rtt_ms / 2e3
    fwd = PathSpec(delay=half, loss=fab.loss, rate=fab.rate,
                   buffer=fab.queue_packets * FRAME, hops=fab.hops - 1)
    back = PathSpec(delay=half, loss=fab.loss)
    net.connect("a", a, "b", b, [fwd] * fab.evs, [back] * fab.evs)
    ports = []
    for p in range(fab.planes):
        evs = [ev for ev in range(fab.evs) if nics[ev] == p]
        net.share_first_hop("a", "b", evs)  # the sender's NIC on plane p
        ports.append(net.port("a", "b", fab.rate, fab.queue_packets * FRAME, evs=evs,
                              frames=fab.queue_packets))
    return net, ports


def _schedule(net: FakeNet, ports: list, bursts: Bursts, rate: float,
              rng: random.Random) -> None:
    """Burst k at ``start + k * every`` (+ its jitter) on every port; each schedules the
    next when it starts, so bursts go on for as long as the rounds do."""
    every, on = bursts.every_ms / 1e3, bursts.on_ms / 1e3

    def fire(slot: float) -> None:
        at = slot + rng.random() * bursts.jitter_ms / 1e3
        for port in ports:
            net.port_burst("a", "b", at, at + on, bursts.sources * rate, port=port,
                           frame=FRAME)
        net.at(slot + every, lambda: fire(slot + every))

    net.at(bursts.start_ms / 1e3, lambda: fire(bursts.start_ms / 1e3))


def run_rounds(fab: SimFabric, transport: str, bounds: Sequence[LossBound | None],
               bursts: Bursts | None = None, round_bytes: int = 1 << 20, seed: int = 0,
               limit_s: float = 600.0) -> RoundsResult:
    """``len(bounds)`` synchronous rounds of ``round_bytes`` over ``transport``'s cores
    (round i bounded by ``bounds[i]``; None: reliable), through ``bursts``."""
    net, ports = _build(fab, transport, seed)
    a, b = net.cores["a"], net.cores["b"]
    data = random.Random(seed).randbytes(round_bytes)
    if bursts is not None:
        _schedule(net, ports, bursts, fab.rate, random.Random(seed * 7919 + 1))
    latency: list[float] = []
    delivered: list[float] = []
    bufs = [bytearray(round_bytes), bytearray(round_bytes)]
    bounded = registry.get(transport).caps.bounded
    done_a, done_b = net.done["a"], net.done["b"]
    for i, bound in enumerate(bounds):
        posted = net.now
        msg = i + 1
        kw = {"bound": bound} if bounded else {}
        if bound is not None and not bounded:
            raise ValueError(f"round {i} has a bound, but {transport} is reliable")
        net.send("b", b.post_recv(msg, bufs[i % 2], posted, **kw))
        net.send("a", a.post_send(msg, data, posted, **kw))
        na, nb = len(done_a), len(done_b)

        def both_done(na: int = na, nb: int = nb) -> bool:
            return len(done_a) > na and len(done_b) > nb

        net.run(limit_s, stop=both_done)
        cs, cr = done_a[-1], done_b[-1]
        if not (cs.ok and cr.ok) or net.now >= limit_s:
            raise RuntimeError(f"{transport} round {i} failed in virtual time at "
                               f"{net.now:.3f} s: {cs.error or cr.error or 'time limit'}")
        latency.append(cr.t - posted)
        delivered.append(cr.delivered)
    stats = getattr(a, "stats", {})
    return RoundsResult(tuple(latency), tuple(delivered), sum(p.dropped for p in ports),
                        sum(p.other_dropped for p in ports) // FRAME,
                        stats.get("tx_retx", 0), net.now)
