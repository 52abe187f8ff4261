"""``emu bench bursts``: MRC against RC through microbursts onto the receiver's host
ports, on the fake network (virtual time: no root, no host noise).

The training bench compares the transports on the fabric, where each repetition's
worst burst step is one sample of an extreme that also carries the host's noise.
This bench runs the transports' own logic through the demo's burst geometry:

- the receiver's two ports (one per plane) drain 100 Mbit/s from FIFOs that hold 100
  datagrams whatever their size (the fabric's pfifo: a probe takes a slot as a full
  frame does); during a burst three sources at line rate enter each port with 8102-byte
  frames (both planes at one instant, as the demo arms them) for 50 ms;
- a training step is a ring all-reduce's six messages into the receiver, then 40 ms of
  compute. In a ring of ``ring_ranks`` the sender posts its first ``ring_ranks`` at
  once and each later one once an earlier one has arrived and been passed on by the
  other ranks (``relay_s``: a clean one-way trip of the message per other rank), so up
  to four are in flight, as captures of the fabric's host ports during a training run
  show; the step ends once every message has arrived and every send is acknowledged
  (the collective waits for its sends at the end);
- the paths are the fabric's: three store-and-forward hops at the link rate before the
  receiver's port (host, leaf, spine), four back, 7 us per hop besides serialization
  (the fabric's 119 us ping over eight hops), the EVs of one plane sharing their
  host's NIC (the first hop) in each direction; a full frame's round trip is then 2.7
  ms, as on the fabric, where RTT-bound costs (a probe's round trip) weigh as there;
- MRC sprays 8 EVs over both planes; RC is one QP on plane 0 (the default AIMD
  window and RTO cap of ``transports/plan.py``).

Where a burst falls against a step decides how many of its messages cross a full
port, for either transport, and a transport with shorter steps meets a burst at
another point of its step than a slower one would at the same instant. So the bursts
are scheduled by step, as the demo's failures are: after ``warmup_steps`` healthy
steps, a burst starts at a fraction (its *alignment*) of that transport's own step
cycle (healthy step plus compute) past the start of every ``every_steps``-th step
(the demo's 200 ms period is about four of its steps), ``bursts`` of them, so what one
burst leaves in a transport (an inflated RTO, a cut window) meets the next, and every
burst meets both transports at the same point of a step. A repetition sweeps
``alignments`` points of the cycle (the grid shifted by a seeded fraction, seeds per
point), and both transports meet every point.

Per message size and transport: the worst step over every alignment (the worst case
a transport can meet: the target's figure), the median over alignments of a run's
worst step (the typical case), both as median [min-max] over the repetitions; the ratio
MRC / RC of the worst case per repetition, and of each run's worst step against the
other transport's at the same alignment (paired), with the count of runs where MRC's
was no longer. Checks, printed and returned: every run's bursts dropped other traffic
at every port they hit (they bite), and every message arrived byte-exact (a run that
does not raises). Clock: the emulated fabric's (100 Mbit/s links), as the demo's;
scale by ``LinkSpec.nominal_gbit`` for full scale.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from transports import registry
from transports.core.message import MessageCore
from transports.core.mrc import MrcConfig
from transports.core.wire import HEADER_LEN
from transports.testing.fakenet import FakeNet, PathSpec, Port

__all__ = ["BurstBench", "alignments", "bench_bursts", "run_alignment"]

# The reliable transports with a core of their own: every one is compared
TRANSPORTS = registry.names(lambda t: t.core is not None and t.caps.reliable)
NICS = (0, 0, 0, 0, 1, 1, 1, 1)  # MRC's EVs: four per plane


@dataclass(frozen=True)
class BurstBench:
    """The geometry and workload of one bench (defaults: the demo's; times in seconds)."""

    port_mbit: float = 100.0
    queue_frames: int = 100
    frame_bytes: int = 8102
    sources: int = 3  # burst senders at line rate per port
    on_s: float = 0.050
    every_steps: int = 4  # a burst every this many steps (the demo's 200 ms: about four)
    bursts: int = 3  # per run: what one leaves in a transport meets the next
    warmup_steps: int = 5  # healthy steps before the first burst (they set the cycle)
    hops: int = 3  # store-and-forward hops at port_mbit before the receiver's port
    hop_latency_s: float = 7e-6  # per hop besides serialization
    messages_per_step: int = 6
    ring_ranks: int = 4  # the sender's messages in flight: one per rank of the ring
    compute_s: float = 0.040
    sizes: tuple[int, ...] = (9_930, 40_000, 160_000)  # bytes; the first: the demo's chunk
    alignments: int = 48  # points of the step cycle per repetition
    repetitions: int = 3

    def __post_init__(self) -> None:
        checks = (
            (self.port_mbit > 0, f"port_mbit={self.port_mbit!r} must be > 0"),
            (self.queue_frames >= 1, f"queue_frames={self.queue_frames!r} must be >= 1"),
            (self.frame_bytes >= 64, f"frame_bytes={self.frame_bytes!r} must be >= 64"),
            (self.sources >= 1, f"sources={self.sources!r} must be >= 1"),
            (self.hops >= 1, f"hops={self.hops!r} must be >= 1"),
            (self.hop_latency_s >= 0, f"hop_latency_s={self.hop_latency_s!r} must be >= 0"),
            (self.on_s > 0, f"on_s={self.on_s!r} must be > 0"),
            (min(self.bursts, self.warmup_steps, self.every_steps, self.messages_per_step,
                 self.ring_ranks, self.alignments, self.repetitions) >= 1,
             "bursts, warmup_steps, every_steps, messages_per_step, ring_ranks, alignments "
             "and repetitions must be >= 1"),
            (bool(self.sizes) and min(self.sizes) >= 1,
             f"sizes={self.sizes!r} must be message sizes >= 1 byte"),
        )
        bad = [why for ok, why in checks if not ok]
        if bad:
            raise ValueError("BurstBench: " + "; ".join(bad))

    @property
    def port_rate(self) -> float:
        """Bytes per second one port drains."""
        return self.port_mbit * 1e6 / 8

    @property
    def drain_s(self) -> float:
        """How long a full port takes to drain (its frames at the port's rate)."""
        return self.queue_frames * self.frame_bytes / self.port_rate

    def relay_s(self, size: int) -> float:
        """How long the ring's other ranks take to pass a ``size``-byte message on (each a
        clean one-way trip: the message at the link rate, its first frame store-and-forward
        over the hops, their latency): how long after one of the sender's messages
        arrives the ring lets it post the next."""
        frame = min(size, MrcConfig.mtu_payload) + HEADER_LEN  # (RC's is the same)
        one_way = (size + self.hops * frame) / self.port_rate + self.hops * self.hop_latency_s
        return (self.ring_ranks - 1) * one_way


def _pair(kind: str, net: FakeNet, seed: int, bench: BurstBench) -> tuple[MessageCore, list[Port]]:
    """Connect a sender ``a`` and receiver ``b`` of ``kind`` (the emulator's default
    knobs); the receiver's ports."""
    if kind not in TRANSPORTS:
        raise ValueError(f"transport {kind!r}: the bench compares {' and '.join(TRANSPORTS)}")
    # The fabric's port FIFOs count packets (pfifo): a probe takes a slot as a frame does.
    buffer, frames = 1 << 30, bench.queue_frames
    multipath = registry.get(kind).caps.multipath
    nics = list(NICS) if multipath else [0]  # RC: one QP, on plane 0
    a, b = (registry.make_core(kind, 7, len(nics), registry.get(kind).defaults, seed * 2 + end,
                               nics=nics)
            for end in (1, 2))
    assert isinstance(a, MessageCore)  # MRC and RC both are: their counters are read
    rate = bench.port_rate
    # the receiver's port is the last hop there; back, every hop is a path's
    there = PathSpec(delay=bench.hops * bench.hop_latency_s, rate=rate, buffer=buffer,
                     hops=bench.hops)
    back = PathSpec(delay=(bench.hops + 1) * bench.hop_latency_s, rate=rate, buffer=buffer,
                    hops=bench.hops + 1)
    net.connect("a", a, "b", b, [there] * len(nics), [back] * len(nics))
    planes = [[ev for ev, nic in enumerate(nics) if nic == plane] for plane in sorted(set(nics))]
    for evs in planes:  # each end's NIC on a plane: one FIFO for its EVs
        net.share_first_hop("a", "b", evs)
        net.share_first_hop("b", "a", evs)
    if not multipath:  # one path: one port
        return a, [net.port("a", "b", rate=rate, buffer=buffer, frames=frames)]
    return a, [net.port("a", "b", rate=rate, buffer=buffer, frames=frames, evs=evs)
               for evs in planes]


def _beyond(net: FakeNet, name: str, count: int) -> Callable[[], bool]:
    """Whether ``name`` has completed more than ``count`` messages."""
    return lambda: len(net.done[name]) > count


def _ring_step(net: FakeNet, msg: int, size: int, rnd: random.Random, bench: BurstBench,
               kind: str, align: float, seed: int) -> int:
    """One step's messages ``msg + 1 ...`` from ``a`` to ``b`` as a ring posts them (the
    first ``ring_ranks`` at once, then one ``relay_s`` after each arrival: the ring's
    next message); returns once all arrived and ``a`` has completed every send. The last
    message number."""
    n, depth, relay = bench.messages_per_step, bench.ring_ranks, bench.relay_s(size)
    sent, received = len(net.done["a"]), len(net.done["b"])
    out: list[tuple[bytes, bytearray]] = []

    def post() -> None:
        data, buf = rnd.randbytes(size), bytearray(size)
        out.append((data, buf))
        net.post_recv("b", msg + len(out), buf)
        net.post_send("a", msg + len(out), data)

    for _ in range(min(depth, n)):
        post()
    seen = received
    while seen < received + n:
        # MRC places out of order: messages may complete out of order too
        net.run(net.now + 60.0, stop=_beyond(net, "b", seen))
        for c in net.done["b"][seen:]:
            if c.msg + depth <= msg + n:  # its successor around the ring, once passed on
                net.at(max(net.now, c.t + relay), post)
        seen = len(net.done["b"])
    net.run(net.now + 60.0, stop=_beyond(net, "a", sent + n - 1))
    done = net.done["a"][sent:]
    sends_ok = len(done) >= n and all(c.ok for c in done)
    for i, (data, buf) in enumerate(out):
        if buf != data or not sends_ok:
            raise AssertionError(f"{kind}: message {msg + i + 1} ({size} B, alignment "
                                 f"{align:.3f}, seed {seed}) did not arrive byte-exact")
    return msg + n


def run_alignment(kind: str, size: int, align: float, seed: int,
                  bench: BurstBench = BurstBench()) -> dict[str, Any]:
    """One run of ``size``-byte steps over ``kind``: ``bench.warmup_steps`` healthy steps,
    then a burst ``align`` (in [0, 1)) of the transport's own step cycle after the start
    of every ``bench.every_steps``-th step, ``bench.bursts`` of them; it ends at the first
    step that starts once the last burst's port has drained. Step times and what the
    bursts did."""
    if not 0.0 <= align < 1.0:
        raise ValueError(f"align={align!r} must be in [0, 1): a fraction of the step cycle")
    net = FakeNet(seed)
    a, ports = _pair(kind, net, seed, bench)
    rnd = random.Random(seed)
    steps: list[tuple[float, float]] = []  # (start, duration)
    windows: list[tuple[float, float]] = []  # each burst: [start, end of its drain)
    healthy = cycle = 0.0
    msg = 0
    while len(windows) < bench.bursts or net.now <= windows[-1][1]:
        after = len(steps) - bench.warmup_steps
        if after == 0:
            healthy = statistics.median(d for _, d in steps)
            cycle = healthy + bench.compute_s
        if after >= 0 and after % bench.every_steps == 0 and len(windows) < bench.bursts:
            at = net.now + align * cycle
            windows.append((at, at + bench.on_s + bench.drain_s))
            for port in ports:
                net.port_burst("a", "b", at, at + bench.on_s,
                               rate=bench.sources * bench.port_rate, port=port,
                               frame=bench.frame_bytes)
        t0 = net.now
        msg = _ring_step(net, msg, size, rnd, bench, kind, align, seed)
        steps.append((t0, net.now - t0))
        net.run(net.now + bench.compute_s)
    # the steps that overlap a burst or its drain
    met = [d for t, d in steps[bench.warmup_steps:]
           if any(t < end and t + d > at for at, end in windows)]
    return {
        "worst_s": max(met), "mean_s": statistics.fmean(met), "burst_steps": len(met),
        "healthy_s": healthy, "cycle_s": cycle,
        "data_dropped": sum(p.dropped for p in ports),
        "burst_dropped": [p.other_dropped for p in ports],
        "retx": a.stats.get("tx_retx", 0), "spurious": a.stats.get("tx_retx_spurious", 0),
        # probes queue in the ports' data FIFOs, a slot each
        "probes": a.stats.get("tx_tail_probe", 0) + a.stats.get("tx_plane_probe", 0),
    }


def alignments(bench: BurstBench, repetition: int) -> list[tuple[float, int]]:
    """Repetition ``repetition``'s (alignment, seed) points: ``bench.alignments`` evenly
    spaced over the cycle, shifted by a seeded fraction of a spacing; the same for every
    transport and run."""
    n = bench.alignments
    shift = random.Random(7919 * (repetition + 1)).random()
    return [((i + shift) / n, repetition * n + i + 1) for i in range(n)]


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _ms(s: dict[str, float]) -> str:
    return f"{s['median'] * 1e3:.1f} ms [{s['min'] * 1e3:.1f}-{s['max'] * 1e3:.1f}]"


def _ratio(s: dict[str, float]) -> str:
    return f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]"


def bench_size(size: int, bench: BurstBench, say: Callable[[str], None]) -> dict[str, Any]:
    """Every repetition and alignment for one message size: per-transport figures and
    the ratios."""
    runs: dict[str, list[list[dict[str, Any]]]] = {k: [] for k in TRANSPORTS}
    for rep in range(bench.repetitions):
        for kind in TRANSPORTS:
            runs[kind].append([])
        for align, seed in alignments(bench, rep):
            for kind in TRANSPORTS:  # interleaved: both meet this point of their step
                runs[kind][rep].append(run_alignment(kind, size, align, seed, bench))
    flat = {k: [r for rep in runs[k] for r in rep] for k in TRANSPORTS}
    worst = {k: [max(r["worst_s"] for r in rep) for rep in runs[k]] for k in TRANSPORTS}
    paired = [m["worst_s"] / r["worst_s"] for m, r in zip(flat["mrc"], flat["rc"], strict=True)]
    bite = all(min(r["burst_dropped"]) > 0 for k in TRANSPORTS for r in flat[k])
    out: dict[str, Any] = {"size": size, "alignments": bench.alignments,
                           "repetitions": bench.repetitions, "bursts_dropped": bite}
    for kind in TRANSPORTS:
        rs = flat[kind]
        out[kind] = {
            "worst_s": _spread(worst[kind]),
            "typical_s": _spread([statistics.median(r["worst_s"] for r in rep)
                                  for rep in runs[kind]]),
            "healthy_s": _spread([r["healthy_s"] for r in rs]),
            "retx": sum(r["retx"] for r in rs), "spurious": sum(r["spurious"] for r in rs),
            "probes": sum(r["probes"] for r in rs),
            "data_dropped": sum(r["data_dropped"] for r in rs),
        }
    out["worst_ratio"] = _spread([m / r for m, r in zip(worst["mrc"], worst["rc"], strict=True)])
    out["mrc_worst_not_longer"] = sum(m <= r for m, r in zip(worst["mrc"], worst["rc"],
                                                             strict=True))
    out["paired_ratio"] = _spread(paired)
    out["paired_not_longer"] = sum(x <= 1.0 for x in paired)
    m, r = out["mrc"], out["rc"]
    say(f"  {size:>7} B: worst over alignments MRC {_ms(m['worst_s'])}, RC "
        f"{_ms(r['worst_s'])}; MRC/RC {_ratio(out['worst_ratio'])}, MRC no longer in "
        f"{out['mrc_worst_not_longer']}/{bench.repetitions} repetitions; typical run's "
        f"worst MRC {_ms(m['typical_s'])}, RC {_ms(r['typical_s'])}; paired MRC/RC "
        f"{_ratio(out['paired_ratio'])}, MRC no longer in {out['paired_not_longer']}/"
        f"{len(paired)} runs; healthy step MRC {m['healthy_s']['median'] * 1e3:.1f} ms, RC "
        f"{r['healthy_s']['median'] * 1e3:.1f}; retx MRC {m['retx']} ({m['spurious']} "
        f"spurious, {m['probes']} tail and plane probes), RC {r['retx']} ({r['spurious']}); "
        f"bursts {'dropped in every run' if bite else 'DID NOT DROP in some runs (delay only)'}")
    return out


def bench_bursts(say: Callable[[str], None] = print, quick: bool = False,
                 bench: BurstBench | None = None) -> dict[str, Any]:
    """Every message size of ``bench`` (``quick``: 16 alignments and 2 repetitions
    instead of 48 and 3)."""
    if bench is None:
        bench = BurstBench(alignments=16, repetitions=2) if quick else BurstBench()
    say(f"MRC vs RC through host-port microbursts on the fake network ({bench.alignments} "
        f"alignments x {bench.repetitions} repetitions per size; emulated clock, "
        f"{bench.port_mbit:g} Mbit/s ports)")
    return {"clock": "emulated (fake network, virtual time)", "geometry": asdict(bench),
            "sizes": [bench_size(size, bench, say) for size in bench.sizes]}
