"""Round latencies of each transport, healthy and through microbursts (calibration phase 4).

Its one job: the tail samples. Chained rounds of ``Plan.round_bytes``
(``bench_dblp``-style synchronous rounds) src -> dst, healthy, then through microbursts
onto the receiver's plane-0 port (two rack-mates at line rate, ``Plan.burst_rtts`` RTTs
on, then off for ``Plan.burst_gap_rounds`` rounds' time at the binding rate, so that a
round meets about one burst); only the rounds a burst overlapped count. TCP's
connection is put on plane 0 by its source port (:func:`tcp_sport`), so every transport
crosses the burst port. DBLP's rounds are bounded (``Plan.dblp_tolerance``).
"""

from __future__ import annotations

import statistics
import subprocess

from emu.errors import EmuError
from emu.fabric import Fabric
from emu.microburst import Microburst, MicroburstSpec
from transports.io.tcp import TCP_PORT
from transports.testing import harness
from transports.testing.harness import Transfer, TransferResult
from workloads.calibration.samples import BurstGeometry, RoundsSample
from workloads.calibration.session import Session
from workloads.calibration.transfers import checked, cpu_use, transport_config


def tcp_sport(fab: Fabric, src: str, dst: str, plane: int) -> int:
    """A source port whose TCP connection src -> dst leaves on plane ``plane`` (the host
    hashes the 5-tuple: asked of its kernel)."""
    a, b = str(fab.spec.address(src)), str(fab.spec.address(dst))
    for sport in range(40000, 40200):
        out = subprocess.run(["ip", "netns", "exec", fab.netns(src), "ip", "-6", "route", "get",
                              b, "from", a, "ipproto", "tcp", "sport", str(sport), "dport",
                              str(TCP_PORT)], capture_output=True, text=True,
                             check=True).stdout.split()
        if out[out.index("dev") + 1] == f"p{plane}":
            return sport
    raise EmuError(f"no TCP source port in 40000-40199 takes {src} -> {dst} onto plane {plane}")


def measure_tails(s: Session, fab: Fabric) -> None:
    """Every transport's healthy and burst round samples on the main fabric ``fab``."""
    spec, src, dst = s.spec, s.src, s.dst
    rack = spec.rack_of(dst)
    mates = [n.name for n in spec.hosts if spec.rack_of(n.name) == rack and n.name != dst]
    target = f"{spec.leaf_of(dst, 0).name}:{dst}"
    line = spec.host_link.rate_mbit
    sport = tcp_sport(fab, src, dst, 0) if "tcp" in s.plan.transports else None

    def one(rep: int, t: str) -> None:
        a = s.samples(t)
        regime = a.regime
        assert regime is not None  # set by the RTT probes, which run first
        bound = ({"tolerance": s.plan.dblp_tolerance, "deadline_s": None}
                 if t == "dblp" else None)
        cfg = transport_config(t, dict(s.plan.rc_config), sport=sport)
        res, _ = _rounds(s, fab, t, s.plan.healthy_rounds, bound, cfg, None)
        lat = tuple(m["latency"] for m in res.messages)
        a.healthy.append(RoundsSample(rep, None, lat, tuple(m["delivered"] for m in
                                                                res.messages), cpu_use(res)))
        # bursts apart by a few rounds' time: a round meets at most about one burst
        gap = s.plan.burst_gap_rounds * s.plan.round_bytes * 8 / (regime.binding_mbit * 1e6)
        for g in s.plan.burst_rtts:
            on = g * regime.rtt_s
            geo = BurstGeometry(on, on + gap, 2, line, line)
            burst = MicroburstSpec(target, tuple(mates[:2]), on * 1e3, geo.every_s * 1e3,
                                   seed=rep)
            res, (hit, drops) = _rounds(s, fab, t, s.plan.rounds, bound, cfg, burst)
            sample = RoundsSample(rep, geo, tuple(m["latency"] for m in hit),
                                      tuple(m["delivered"] for m in hit), cpu_use(res), drops)
            a.bursts.append(sample)
            worst = max(sample.latencies_s, default=0.0)
            s.say(f"  tails {t} rep {rep}: {g:g} RTT bursts: {len(hit)} rounds hit, "
                  f"worst {worst * 1e3:.1f} ms vs healthy median "
                  f"{statistics.median(lat) * 1e3:.1f} ms, {drops} drops at {target}")

    s.reps("tails", one)


def _rounds(s: Session, fab: Fabric, t: str, n: int, bound: dict | None, cfg: dict | None,
            burst: MicroburstSpec | None) -> tuple[TransferResult, tuple[list, int]]:
    """``n`` chained rounds of ``t``; with ``burst``, also the rounds a burst overlapped
    and the drops at the burst's target port."""
    rounds = [Transfer(s.src, s.dst, s.plan.round_bytes,
                       after=i - 1 if i else None, bound=bound) for i in range(n)]
    if burst is None:
        res = harness.run_transfers(fab, t, rounds, config=cfg, deadline_s=120)
        return checked(res), ([], 0)
    start: list[float] = []
    with Microburst(fab, burst) as mb:
        res = harness.run_transfers(fab, t, rounds, config=cfg, deadline_s=120,
                                    on_start=start.append)
    checked(res)
    t0 = start[0]
    assert mb.t0 is not None  # entering the with block fired the bursts
    windows = mb.windows(t0 - mb.t0 + res.completion_s + 1.0)
    hit = [m for m in res.messages
           if any(a < t0 + m["t"] and b > t0 + m["posted"] for a, b in windows)]
    return res, (hit, int(mb.report()["target"]["drops"] or 0))
