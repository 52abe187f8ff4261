"""``emu bench bursts``: MRC against RC through microbursts onto the receiver's host
ports, on the fake network (virtual time: no root, no host noise).

The training bench compares the transports on the fabric, where each repetition's
worst burst step is one sample of an extreme that also carries the host's noise.
This bench runs the transports' own logic through the demo's burst geometry many
times over, so that the comparison has a distribution:

- the receiver's two ports (one per plane) drain 100 Mbit/s from FIFOs that hold 100
  datagrams whatever their size (the fabric's pfifo: a probe takes a slot as a full
  frame does); during a burst three sources at line rate enter each port with 8102-byte
  frames (both planes at one instant, as the demo arms them), 50 ms every 200 ms;
- a training step is a ring all-reduce's six sequential messages into the receiver
  (each must arrive before the next is posted), then 40 ms of compute;
- MRC sprays 8 EVs over both planes; RC is one QP on plane 0 (the default AIMD
  window and RTO cap of ``transports/plan.py``);
- each run draws where the bursts fall against the steps (its phase); every
  transport meets the same phases.

Per message size and transport: the worst and the mean step among those that start
while the bursts run, for every phase; the ratio MRC / RC per phase, reported as the
median [min-max] over the phases, and in how many phases MRC's worst step was no
longer than RC's. Checks, printed and returned: every run's bursts dropped other
traffic at every port they hit (they bite), and every message arrived byte-exact
(a run that does not raises). Clock: the emulated fabric's (100 Mbit/s links), as
the demo's; scale by ``LinkSpec.nominal_gbit`` for full scale.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from transports.fakenet import FakeNet, PathSpec, Port
from transports.message import MessageCore
from transports.plan import DEFAULT_CONFIG, make_core

__all__ = ["BurstBench", "bench_bursts", "phases", "run_phase"]

TRANSPORTS = ("mrc", "rc")
NICS = (0, 0, 0, 0, 1, 1, 1, 1)  # MRC's EVs: four per plane


@dataclass(frozen=True)
class BurstBench:
    """The geometry and workload of one bench (defaults: the demo's; times in seconds)."""

    port_mbit: float = 100.0
    queue_frames: int = 100
    frame_bytes: int = 8102
    sources: int = 3  # burst senders at line rate per port
    on_s: float = 0.050
    every_s: float = 0.200
    bursts: int = 10
    first_burst_s: float = 0.3  # plus the phase: where the bursts fall against the steps
    phase_span_s: float = 0.2
    one_way_s: float = 0.25e-3  # each EV's propagation
    messages_per_step: int = 6
    compute_s: float = 0.040
    steps: int = 45
    sizes: tuple[int, ...] = (9_930, 40_000, 160_000)  # bytes; the first: the demo's chunk
    phases: int = 30

    def __post_init__(self) -> None:
        checks = (
            (self.port_mbit > 0, f"port_mbit={self.port_mbit!r} must be > 0"),
            (self.queue_frames >= 1, f"queue_frames={self.queue_frames!r} must be >= 1"),
            (self.frame_bytes >= 64, f"frame_bytes={self.frame_bytes!r} must be >= 64"),
            (self.sources >= 1, f"sources={self.sources!r} must be >= 1"),
            (0 < self.on_s < self.every_s,
             f"on_s={self.on_s!r} must be > 0 and shorter than every_s={self.every_s!r}"),
            (min(self.bursts, self.steps, self.messages_per_step, self.phases) >= 1,
             "bursts, steps, messages_per_step and phases must be >= 1"),
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

    def burst_window(self, phase: float) -> tuple[float, float]:
        """[first burst's start, last burst's end) for ``phase`` in [0, 1)."""
        start = self.first_burst_s + phase * self.phase_span_s
        return start, start + (self.bursts - 1) * self.every_s + self.on_s


def _pair(kind: str, net: FakeNet, seed: int, bench: BurstBench) -> tuple[MessageCore, list[Port]]:
    """Connect a sender ``a`` and receiver ``b`` of ``kind`` (the emulator's default
    knobs); the receiver's ports."""
    if kind not in TRANSPORTS:
        raise ValueError(f"transport {kind!r}: the bench compares {' and '.join(TRANSPORTS)}")
    # The fabric's port FIFOs count packets (pfifo): a probe takes a slot as a frame does.
    buffer, frames = 1 << 30, bench.queue_frames
    nics = list(NICS) if kind == "mrc" else [0]  # RC: one QP, on plane 0
    a, b = (make_core(kind, 7, len(nics), DEFAULT_CONFIG[kind], seed * 2 + end, nics=nics)
            for end in (1, 2))
    assert isinstance(a, MessageCore)  # MRC and RC both are: their counters are read
    net.connect("a", a, "b", b, [PathSpec(delay=bench.one_way_s)] * len(nics))
    if kind == "rc":
        return a, [net.port("a", "b", rate=bench.port_rate, buffer=buffer, frames=frames)]
    return a, [net.port("a", "b", rate=bench.port_rate, buffer=buffer, frames=frames,
                        evs=[ev for ev, nic in enumerate(nics) if nic == plane])
               for plane in (0, 1)]


def _arrived(net: FakeNet, sent: int, received: int) -> Callable[[], bool]:
    """Whether the sender has completed more than ``sent`` messages and the receiver
    ``received``."""
    return lambda: len(net.done["a"]) > sent and len(net.done["b"]) >= received


def run_phase(kind: str, size: int, phase: float, seed: int,
              bench: BurstBench = BurstBench()) -> dict[str, Any]:
    """One run: ``bench.steps`` steps of ``size``-byte messages over ``kind`` with the
    bursts at ``phase`` (in [0, 1)); step times and what the bursts did."""
    net = FakeNet(seed)
    a, ports = _pair(kind, net, seed, bench)
    start, end = bench.burst_window(phase)
    for port in ports:
        for k in range(bench.bursts):
            at = start + k * bench.every_s
            net.port_burst("a", "b", at, at + bench.on_s, rate=bench.sources * bench.port_rate,
                           port=port, frame=bench.frame_bytes)
    rnd = random.Random(seed)
    steps: list[tuple[float, float]] = []  # (start, duration)
    msg = 0
    for _ in range(bench.steps):
        t0 = net.now
        for _ in range(bench.messages_per_step):
            msg += 1
            data, buf = rnd.randbytes(size), bytearray(size)
            net.post_recv("b", msg, buf)
            net.post_send("a", msg, data)
            net.run(net.now + 60.0, stop=_arrived(net, len(net.done["a"]), msg))
            if buf != data or not (net.done["a"] and net.done["a"][-1].ok):
                raise AssertionError(f"{kind}: message {msg} ({size} B, phase {phase:.3f}, "
                                     f"seed {seed}) did not arrive byte-exact")
        steps.append((t0, net.now - t0))
        net.run(net.now + bench.compute_s)
    burst = [d for t, d in steps if start <= t < end]
    healthy = [d for t, d in steps if t < start]
    return {
        "worst_s": max(burst), "mean_s": statistics.fmean(burst), "burst_steps": len(burst),
        "healthy_s": statistics.median(healthy) if healthy else None,
        "data_dropped": sum(p.dropped for p in ports),
        "burst_dropped": [p.other_dropped for p in ports],
        "retx": a.stats.get("tx_retx", 0), "spurious": a.stats.get("tx_retx_spurious", 0),
        # probes queue in the ports' data FIFOs, a slot each
        "probes": a.stats.get("tx_tail_probe", 0) + a.stats.get("tx_plane_probe", 0),
    }


def phases(n: int) -> list[float]:
    """The bench's ``n`` burst phases in [0, 1): the same for every transport and run."""
    return [random.Random(7919 * (i + 1)).random() for i in range(n)]


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def bench_size(size: int, bench: BurstBench, say: Callable[[str], None]) -> dict[str, Any]:
    """Every phase for one message size: per-transport figures and the ratios."""
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in TRANSPORTS}
    for i, phase in enumerate(phases(bench.phases)):
        for kind in TRANSPORTS:  # interleaved: both meet this phase
            runs[kind].append(run_phase(kind, size, phase, i + 1, bench))
    worst = [m["worst_s"] / r["worst_s"] for m, r in zip(runs["mrc"], runs["rc"], strict=True)]
    mean = [m["mean_s"] / r["mean_s"] for m, r in zip(runs["mrc"], runs["rc"], strict=True)]
    bite = all(min(r["burst_dropped"]) > 0 for k in TRANSPORTS for r in runs[k])
    out: dict[str, Any] = {"size": size, "phases": bench.phases, "bursts_dropped": bite}
    for kind in TRANSPORTS:
        rs = runs[kind]
        out[kind] = {
            "worst_s": _spread([r["worst_s"] for r in rs]),
            "mean_s": _spread([r["mean_s"] for r in rs]),
            "healthy_s": _spread([r["healthy_s"] for r in rs if r["healthy_s"] is not None]),
            "retx": sum(r["retx"] for r in rs), "spurious": sum(r["spurious"] for r in rs),
            "probes": sum(r["probes"] for r in rs),
            "data_dropped": sum(r["data_dropped"] for r in rs),
        }
    out["worst_ratio"] = _spread(worst)
    out["mean_ratio"] = _spread(mean)
    out["mrc_worst_not_longer"] = sum(x <= 1.0 for x in worst)
    m, r = out["mrc"], out["rc"]
    say(f"  {size:>7} B: worst step MRC {m['worst_s']['median'] * 1e3:.1f} ms "
        f"[{m['worst_s']['min'] * 1e3:.1f}-{m['worst_s']['max'] * 1e3:.1f}], RC "
        f"{r['worst_s']['median'] * 1e3:.1f} [{r['worst_s']['min'] * 1e3:.1f}-"
        f"{r['worst_s']['max'] * 1e3:.1f}]; MRC/RC {out['worst_ratio']['median']:.2f} "
        f"[{out['worst_ratio']['min']:.2f}-{out['worst_ratio']['max']:.2f}], MRC no longer "
        f"in {out['mrc_worst_not_longer']}/{bench.phases} phases; mean burst step MRC/RC "
        f"{out['mean_ratio']['median']:.2f} [{out['mean_ratio']['min']:.2f}-"
        f"{out['mean_ratio']['max']:.2f}]; retx MRC {m['retx']} ({m['spurious']} spurious, "
        f"{m['probes']} tail and plane probes), "
        f"RC {r['retx']} ({r['spurious']}); bursts "
        f"{'dropped in every run' if bite else 'DID NOT DROP in some runs (delay only)'}")
    return out


def bench_bursts(say: Callable[[str], None] = print, quick: bool = False,
                 bench: BurstBench | None = None) -> dict[str, Any]:
    """Every message size of ``bench`` (``quick``: 8 phases instead of 30)."""
    if bench is None:
        bench = BurstBench(phases=8) if quick else BurstBench()
    say(f"MRC vs RC through host-port microbursts on the fake network ({bench.phases} "
        f"phases per size; emulated clock, {bench.port_mbit:g} Mbit/s ports)")
    return {"clock": "emulated (fake network, virtual time)", "geometry": asdict(bench),
            "sizes": [bench_size(size, bench, say) for size in bench.sizes]}
