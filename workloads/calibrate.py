"""`emu calibrate`: measure the transports' dimensionless figures; write calibration v2.

One fabric, built once (under FRR BGP + BFD when recovery is measured: RC and TCP need
the control plane to route around a cut; MRC's SRv6 paths are static either way):
``FABRIC``, 2 planes x 4 spines x 2 racks x 4 hosts, 10 Mbit/s links, 16-packet FIFOs
(at 10 Mbit/s the eight Python drivers of a permutation stay far from CPU-bound;
transports/bench.py found 2 cores short at twice the packet rate). Then, if asked, a
2-DC ``DCI_FABRIC`` whose DCI links bind. Phases, each repeated ``reps`` times,
interleaved (repetition 1 of every transport, then repetition 2, ...), host h0 to the
first host of the next rack unless said:

1. RTT: two chained one-packet messages per repetition, the second one's post-to-ACK
   time (the first warms the path); the regime's rtt adds the frame's serialisation
   (workloads/calibration.py).
2. eta: one message per size, sizes a fixed list of BDPs of the transport's regime.
3. Load balance: every host sends to ``k`` hosts of the next rack (the same local
   indices onward), ``k`` in ``flows_per_host``, each source's bytes sized to
   ``load_s`` seconds at its ideal rate.
4. Tails: chained rounds of ``round_bytes`` (``bench_dblp``-style synchronous rounds),
   healthy, then through microbursts onto the receiver's plane-0 port (two rack-mates at
   line rate, ``burst_rtts`` RTTs on, then off for ``burst_gap_rounds`` rounds' time at the
   binding rate, so that a round meets about one burst); TCP's connection is put on
   plane 0 by its source port, so every transport crosses the burst port. DBLP's rounds
   are bounded (``dblp_tolerance``).
5. Recovery: a transfer of ``recovery_s`` at the binding rate, once clean and once with
   the leaf-spine link busiest into the receiver's rack cut ``cut_at_s`` (+ a 0.1 s
   traffic sample) after the start (emu.failures.BusiestUplinkDown); RC and TCP also
   time the control plane's withdrawals (emu.convergence); restored and reconverged
   before the next run.
6. eta over the DCI (no RC: its per-plane QP addresses are not routed across DCs).

The record is rewritten after every measurement (Ctrl-C keeps what was measured) and
the fabrics always come down.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu.errors import EmuError, require_root
from emu.fabric import Fabric
from emu.failures import BusiestUplinkDown, LinkDown
from emu.kernel import htb_class
from emu.microburst import Microburst, MicroburstSpec
from emu.srv6 import srh_option
from topologies import DciSpec, LinkSpec, MultiPlaneClos, ScaleAcross
from transports import harness
from transports.harness import Transfer, TransferResult
from transports.plan import DEFAULT_CONFIG
from transports.tcp import TCP_PORT
from transports.wire import HEADER_LEN
from workloads import calibration as cal
from workloads.provenance import host_info, software_versions
from workloads.results import read_jsonl

if TYPE_CHECKING:
    from topologies.routing import EcmpMode
    from transports.mrc import MrcConfig
    from transports.rc import RcConfig

Say = Callable[[str], None]
MEASUREMENTS = ("eta", "load", "tails", "recovery", "dci")
FABRIC = MultiPlaneClos(planes=2, spines=4, leaves=2, hosts_per_leaf=4,
                        host_link=LinkSpec(10.0, 16), fabric_link=LinkSpec(10.0, 16))
DCI_FABRIC = ScaleAcross(
    dcs=tuple(MultiPlaneClos(planes=2, spines=1, leaves=1, hosts_per_leaf=1,
                             host_link=LinkSpec(10.0, 16), fabric_link=LinkSpec(10.0, 16),
                             dc=d) for d in range(2)),
    dci=DciSpec(rate_mbit=5.0, queue_packets=16, delay_ms=5.0))
TCP_CONFIG = {"cc": "cubic"}  # Linux's default (this host's namespaces may default to BBR)
TCP_RTO_MIN_S = 0.2
# Shortest busy time CPU use is taken over: a driver's fixed start-up work (tens of ms for
# DBLP) would otherwise read as a busy core on a millisecond transfer.
CPU_WINDOW_S = 0.1
ECMP = ("rc", "tcp")  # transports whose paths ECMP hashes and the control plane moves


@dataclass(frozen=True)
class Plan:
    """What one run measures. ``measure`` names the phases (``MEASUREMENTS``)."""

    transports: tuple[str, ...] = cal.TRANSPORTS
    reps: int = 5
    eta_bdp: tuple[float, ...] = (0.5, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
    eta_dci_bdp: tuple[float, ...] = (0.5, 4.0, 16.0, 64.0)
    flows_per_host: tuple[int, ...] = (1, 2, 4)
    load_s: float = 0.8
    round_bytes: int = 256 << 10
    rounds: int = 16
    healthy_rounds: int = 10
    burst_rtts: tuple[float, ...] = (4.0, 24.0)
    burst_gap_rounds: float = 3.0
    recovery_s: float = 1.2
    cut_at_s: float = 0.25
    dblp_tolerance: float = 0.1
    measure: tuple[str, ...] = MEASUREMENTS
    seed: int = 0
    resamples: int = cal.RESAMPLES

    def __post_init__(self) -> None:
        bad = [t for t in self.transports if t not in cal.TRANSPORTS]
        if bad or not self.transports:
            raise EmuError(f"transports={','.join(self.transports)!r} is invalid: name some "
                           f"of {', '.join(cal.TRANSPORTS)}")
        bad = [m for m in self.measure if m not in MEASUREMENTS]
        if bad:
            raise EmuError(f"measure={bad} is invalid: must be among {', '.join(MEASUREMENTS)}")
        if self.reps < 3:
            raise EmuError(f"reps={self.reps} is invalid: must be >= 3 (bootstrap intervals)")
        for name in ("eta_bdp", "eta_dci_bdp"):
            sizes = sorted(getattr(self, name))
            if len(set(sizes)) < 3 or sizes[0] <= 0 or sizes[-1] < 10 * sizes[0]:
                raise EmuError(f"{name}={getattr(self, name)} is invalid: need >= 3 distinct "
                               "sizes > 0, the largest >= 10x the smallest")
        if self.burst_gap_rounds <= 0 or self.rounds < 1 or self.healthy_rounds < 1:
            raise EmuError("burst_gap_rounds must be > 0, rounds and healthy_rounds >= 1")


QUICK = Plan(reps=3, eta_bdp=(0.5, 4.0, 16.0, 64.0), flows_per_host=(1, 2), load_s=0.6,
             rounds=12, healthy_rounds=8, recovery_s=1.0)
FULL = Plan()


def lanes(spec: MultiPlaneClos | ScaleAcross, transport: str) -> int:
    """NICs one connection of ``transport`` uses at once (TCP: one, ECMP picks it)."""
    return 1 if transport == "tcp" else spec.planes


def frame(spec: MultiPlaneClos | ScaleAcross, transport: str, src: str,
          dst: str) -> tuple[int, int]:
    """(payload, wire bytes) of a full data packet of ``transport`` from src to dst."""
    if transport == "tcp":  # IPv6 + TCP with timestamps; Ethernet on the wire
        return spec.mtu - 40 - 20 - 12, spec.mtu + 14
    payload = int(DEFAULT_CONFIG["mrc"].get("mtu_payload", 8000))
    srh = len(srh_option(spec.paths(src, dst)[0])) if transport != "rc" else 0
    return payload, 14 + 40 + srh + 8 + HEADER_LEN + payload


def cpu_use(res: TransferResult) -> cal.CpuUse:
    """Cores of each driver: CPU seconds over its busy time (from the common start to its
    last completion, at least ``CPU_WINDOW_S``)."""
    drivers = []
    for host, d in sorted(res.drivers.items()):
        busy = max((m["t"] for m in d["messages"] if m.get("t") is not None), default=0.0)
        drivers.append((host, round(d["cpu_s"] / max(busy, CPU_WINDOW_S), 4)))
    return cal.CpuUse(tuple(drivers), os.cpu_count() or 1)


def _config(transport: str, **extra) -> dict | None:
    return {**TCP_CONFIG, **extra} if transport == "tcp" else None


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


@dataclass
class _Acc:
    """One transport's samples so far (mutable while measuring)."""

    probes: list[float] = field(default_factory=list)
    regime: cal.Regime | None = None
    dci_probes: list[float] = field(default_factory=list)
    dci_regime: cal.Regime | None = None
    eta: list = field(default_factory=list)
    eta_dci: list = field(default_factory=list)
    load: list = field(default_factory=list)
    healthy: list = field(default_factory=list)
    bursts: list = field(default_factory=list)
    recovery: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Calibration:
    """A calibration run: ``run()`` measures per ``plan`` and writes ``out`` as it goes."""

    def __init__(self, out: Path, plan: Plan = FULL, *, say: Say = print,
                 spec: MultiPlaneClos = FABRIC, dci_spec: ScaleAcross | None = DCI_FABRIC,
                 command: str = "emu calibrate", training_results: Path | None = None,
                 name: str = "calib") -> None:
        self.out, self.plan, self.say, self.spec, self.command = out, plan, say, spec, command
        self.dci_spec = dci_spec if "dci" in plan.measure else None
        self.name = name
        self.acc = {t: _Acc() for t in plan.transports}
        self.steps: tuple[cal.StepsSample, ...] = ()
        self.steps_reason: str | None = "no --training-results given"
        self.training_results = training_results
        self._memo: dict = {}
        if spec.leaves < 2:
            raise EmuError(f"leaves={spec.leaves} is invalid for calibration: the measured "
                           "paths cross racks (>= 2 leaves)")
        self.src, self.dst = spec.hosts[0].name, spec.hosts[spec.hosts_per_leaf].name
        self.versions, self.host = software_versions(), host_info()
        self._t0 = time.monotonic()

    # -- the record ---------------------------------------------------------------------

    def record(self) -> dict:
        """The v2 record from everything measured so far."""
        transports = {}
        for t, a in self.acc.items():
            if a.regime is None:
                continue
            transports[t] = cal.TransportMeasurements(
                regime=a.regime, eta=tuple(a.eta), dci_regime=a.dci_regime,
                eta_dci=tuple(a.eta_dci), load=tuple(a.load), healthy_rounds=tuple(a.healthy),
                burst_rounds=tuple(a.bursts), recovery=tuple(a.recovery),
                dblp_tolerance=self.plan.dblp_tolerance if t == "dblp" else None,
                steps=self.steps if t == "dblp" else (),
                steps_reason=self.steps_reason if t == "dblp" else None, notes=tuple(a.notes))
        s = self.spec
        fabric = {"planes": s.planes, "spines": s.spines, "leaves": s.leaves,
                  "hosts_per_leaf": s.hosts_per_leaf, "rate_mbit": s.host_link.rate_mbit,
                  "fabric_rate_mbit": s.fabric_link.rate_mbit,
                  "queue_packets": s.host_link.queue_packets, "mtu": s.mtu,
                  "nominal_gbit": s.host_link.nominal_gbit, "dci": self._dci_desc()}
        return cal.calibration_record(
            fabric=fabric, transports=transports, command=self.command, versions=self.versions,
            host=self.host, generated=time.time(), seed=self.plan.seed,
            resamples=self.plan.resamples, memo=self._memo)

    def _dci_desc(self) -> dict | None:
        d = self.dci_spec
        if d is None:
            return None
        dc = d.dcs[0]
        return {"dcs": d.dc_count, "planes": d.planes, "spines": dc.spines,
                "leaves": dc.leaves, "hosts_per_leaf": dc.hosts_per_leaf,
                "host_rate_mbit": dc.host_link.rate_mbit, "rate_mbit": d.dci.rate_mbit,
                "queue_packets": d.dci.queue_packets, "delay_ms": d.dci.delay_ms,
                "nominal_gbit": d.dci.nominal_gbit,
                "rtt_s": {t: a.dci_regime.rtt_s for t, a in self.acc.items() if a.dci_regime},
                "bdp_bytes": {t: a.dci_regime.bdp_bytes for t, a in self.acc.items()
                              if a.dci_regime}}

    def write(self) -> dict:
        """Rewrite the record file (atomically) and return the record."""
        rec = self.record() if any(a.regime for a in self.acc.values()) else None
        if rec is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.out.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(rec, indent=1, allow_nan=False) + "\n")
            tmp.replace(self.out)
        return rec or {}

    # -- running -------------------------------------------------------------------------

    def run(self) -> dict:
        """Every phase of the plan; the record (also on disk)."""
        require_root("emu calibrate")
        p = self.plan
        if "load" in p.measure and max(p.flows_per_host) > self.spec.hosts_per_leaf:
            raise EmuError(f"flows_per_host={p.flows_per_host} is invalid: at most "
                           f"hosts_per_leaf={self.spec.hosts_per_leaf} (distinct receivers)")
        if self.training_results is not None:
            self._load_training()
        self.say(f"calibrate: {', '.join(p.transports)}; {p.reps} repetitions; record in "
                 f"{self.out}")
        self._t0 = time.monotonic()
        try:
            # the control plane only matters to recovery (RC and TCP wait for it there)
            cp: EcmpMode = "bgp" if "recovery" in p.measure else "static"
            with Fabric(self.spec, name=self.name, control_plane=cp,
                        progress=lambda m: self.say(f"  fabric: {m}")) as fab:
                self._rtt(fab, self.spec, self.src, self.dst, dci=False)
                if "eta" in p.measure:
                    self._eta(fab, self.src, self.dst, dci=False)
                if "load" in p.measure:
                    self._load(fab)
                if "tails" in p.measure:
                    self._tails(fab)
                if "recovery" in p.measure:
                    self._recovery(fab)
            if self.dci_spec is not None:
                self._dci()
        finally:
            rec = self.write()
        self.say(f"calibrate: done in {time.monotonic() - self._t0:.0f} s; record in {self.out}")
        return rec

    def _reps(self, phase: str, each: Callable[[int, str], None],
              transports: tuple[str, ...] | None = None) -> None:
        self.say(f"{phase} ({time.monotonic() - self._t0:.0f} s in)")
        for rep in range(self.plan.reps):
            for t in transports or self.plan.transports:
                a = self.acc[t]
                if not phase.startswith("rtt") and (a.dci_regime if "dci" in phase
                                                    else a.regime) is None:
                    continue  # its RTT probes all failed: noted there
                try:
                    each(rep, t)
                except (EmuError, subprocess.SubprocessError) as e:
                    self.acc[t].notes.append(f"{phase} rep {rep}: failed: {e}"[:300])
                    self.say(f"  {phase} {t} rep {rep}: FAILED: {e}")
                self.write()

    def _rtt(self, fab: Fabric, spec, src: str, dst: str, dci: bool) -> None:
        def probe(rep: int, t: str) -> None:
            payload, _ = frame(spec, t, src, dst)
            size = payload * lanes(spec, t)
            transfers = [Transfer(src, dst, size), Transfer(src, dst, size, after=0)]
            _, parts = harness.plan_transfers(spec, t, transfers)
            res = self._checked(harness.run_transfers(fab, t, transfers, config=_config(t)))
            sends = {m["msg"]: m["t"] for m in res.drivers[src]["messages"]
                     if m["kind"] == "send" and m.get("t") is not None}
            posted = res.drivers[src]["posted"]
            ids = parts[1]
            rtt = max(sends[i] for i in ids) - min(posted[str(i)] for i in ids)
            a = self.acc[t]
            (a.dci_probes if dci else a.probes).append(rtt)
            self._set_regime(spec, t, src, dst, dci)
            self.say(f"  rtt {'dci ' if dci else ''}{t} rep {rep}: probe {rtt * 1e3:.3f} ms")

        self._reps("rtt_dci" if dci else "rtt", probe, self._dci_transports() if dci else None)

    def _set_regime(self, spec, t: str, src: str, dst: str, dci: bool) -> None:
        a = self.acc[t]
        payload, wire = frame(spec, t, src, dst)
        link = spec.dci_link_spec if dci else spec.host_link
        line = link.rate_mbit
        rtt_s = statistics.median(a.dci_probes if dci else a.probes) + wire * 8 / (line * 1e6)
        rto = TCP_RTO_MIN_S if t == "tcp" else _rto_floor(t, rtt_s)
        regime = cal.Regime(
            rtt_s=rtt_s,
            payload_bytes=payload, frame_bytes=wire, line_mbit=line, lanes=lanes(spec, t),
            buffer_packets=spec.dci.queue_packets if dci else spec.host_link.queue_packets,
            binding="dci" if dci else "host_nic", rto_floor_s=rto,
            credit_bytes=lanes(spec, t) * htb_class(link, spec.mtu)["burst"])
        if dci:
            a.dci_regime = regime
        else:
            a.regime = regime

    def _eta(self, fab: Fabric, src: str, dst: str, dci: bool) -> None:
        def one(rep: int, t: str) -> None:
            a = self.acc[t]
            regime = a.dci_regime if dci else a.regime
            assert regime is not None  # set by _rtt, which runs first
            for bdp in self.plan.eta_dci_bdp if dci else self.plan.eta_bdp:
                size = max(1, round(bdp * regime.bdp_bytes))
                res = harness.run_transfers(fab, t, [Transfer(src, dst, size)], config=_config(t),
                                    deadline_s=120)
                self._checked(res)
                s = cal.TransferSample(rep, size, res.messages[0]["latency"], cpu_use(res))
                (a.eta_dci if dci else a.eta).append(s)
                self.say(f"  eta {'dci ' if dci else ''}{t} rep {rep}: {bdp:g} BDP ({size} B) "
                         f"in {s.seconds * 1e3:.1f} ms, cpu {s.cpu.max_core:.2f}")

        self._reps("eta_dci" if dci else "eta", one, self._dci_transports() if dci else None)

    def _load(self, fab: Fabric) -> None:
        spec = self.spec
        hosts, h, racks = [n.name for n in spec.hosts], spec.hosts_per_leaf, spec.leaves

        def one(rep: int, t: str) -> None:
            regime = self.acc[t].regime
            assert regime is not None  # set by _rtt, which runs first
            nic = regime.line_mbit * regime.payload_bytes / regime.frame_bytes
            for k in self.plan.flows_per_host:
                per_host = min(k * regime.lanes, spec.planes) * nic
                size = max(1, round(per_host * 1e6 / 8 * self.plan.load_s / k))
                transfers = [Transfer(hosts[i], hosts[((i // h + 1) % racks) * h + (i + m) % h],
                                      size) for i in range(len(hosts)) for m in range(k)]
                res = harness.run_transfers(fab, t, transfers, config=_config(t), deadline_s=120)
                self._checked(res)
                fpu = k * h * regime.lanes / (spec.planes * spec.spines)
                f = n = None
                if t in ECMP:
                    f, n = k * h, spec.spines * (spec.planes if t == "tcp" else 1)
                s = cal.LoadSample(rep, fpu, res.goodput_mbit, per_host * len(hosts),
                                   cpu_use(res), f, n)
                self.acc[t].load.append(s)
                self.say(f"  load {t} rep {rep}: {fpu:g} flows/uplink: "
                         f"{s.goodput_mbit / s.ideal_mbit:.3f} of ideal, cpu "
                         f"{s.cpu.max_core:.2f} max / {sum(c for _, c in s.cpu.drivers):.2f}")

        self._reps("load", one)

    def _tails(self, fab: Fabric) -> None:
        spec, src, dst = self.spec, self.src, self.dst
        rack = spec.rack_of(dst)
        mates = [n.name for n in spec.hosts if spec.rack_of(n.name) == rack and n.name != dst]
        target = f"{spec.leaf_of(dst, 0).name}:{dst}"
        line = spec.host_link.rate_mbit
        sport = tcp_sport(fab, src, dst, 0) if "tcp" in self.plan.transports else None

        def one(rep: int, t: str) -> None:
            a = self.acc[t]
            regime = a.regime
            assert regime is not None  # set by _rtt, which runs first
            bound = ({"tolerance": self.plan.dblp_tolerance, "deadline_s": None}
                     if t == "dblp" else None)
            cfg = _config(t, sport=sport)
            res, _ = self._rounds(fab, t, self.plan.healthy_rounds, bound, cfg, None)
            lat = tuple(m["latency"] for m in res.messages)
            a.healthy.append(cal.RoundsSample(rep, None, lat, tuple(m["delivered"] for m in
                                                                    res.messages), cpu_use(res)))
            # bursts apart by a few rounds' time: a round meets at most about one burst
            gap = self.plan.burst_gap_rounds * self.plan.round_bytes * 8 / (
                regime.binding_mbit * 1e6)
            for g in self.plan.burst_rtts:
                on = g * regime.rtt_s
                geo = cal.BurstGeometry(on, on + gap, 2, line, line)
                burst = MicroburstSpec(target, tuple(mates[:2]), on * 1e3, geo.every_s * 1e3,
                                       seed=rep)
                res, (hit, drops) = self._rounds(fab, t, self.plan.rounds, bound, cfg, burst)
                s = cal.RoundsSample(rep, geo, tuple(m["latency"] for m in hit),
                                     tuple(m["delivered"] for m in hit), cpu_use(res), drops)
                a.bursts.append(s)
                worst = max(s.latencies_s, default=0.0)
                self.say(f"  tails {t} rep {rep}: {g:g} RTT bursts: {len(hit)} rounds hit, "
                         f"worst {worst * 1e3:.1f} ms vs healthy median "
                         f"{statistics.median(lat) * 1e3:.1f} ms, {drops} drops at {target}")

        self._reps("tails", one)

    def _rounds(self, fab: Fabric, t: str, n: int, bound: dict | None, cfg: dict | None,
                burst: MicroburstSpec | None) -> tuple[TransferResult, tuple[list, int]]:
        rounds = [Transfer(self.src, self.dst, self.plan.round_bytes,
                           after=i - 1 if i else None, bound=bound) for i in range(n)]
        if burst is None:
            res = harness.run_transfers(fab, t, rounds, config=cfg, deadline_s=120)
            return self._checked(res), ([], 0)
        start: list[float] = []
        with Microburst(fab, burst) as mb:
            res = harness.run_transfers(fab, t, rounds, config=cfg, deadline_s=120,
                                on_start=start.append)
        self._checked(res)
        t0 = start[0]
        assert mb.t0 is not None  # entering the with block fired the bursts
        windows = mb.windows(t0 - mb.t0 + res.completion_s + 1.0)
        hit = [m for m in res.messages
               if any(a < t0 + m["t"] and b > t0 + m["posted"] for a, b in windows)]
        return res, (hit, int(mb.report()["target"]["drops"] or 0))

    @staticmethod
    def _checked(res: TransferResult) -> TransferResult:
        if not res.ok:
            bad = [m for m in res.messages if not m["ok"]]
            raise EmuError(f"{len(bad)} of {len(res.messages)} transfers failed, e.g. "
                           f"{bad[0]['src']} -> {bad[0]['dst']}: {bad[0]['errors']}")
        return res

    def _recovery(self, fab: Fabric) -> None:
        spec, src, dst = self.spec, self.src, self.dst
        leaves = ",".join(spec.leaf_of(dst, p).name for p in range(spec.planes))

        def one(rep: int, t: str) -> None:
            regime = self.acc[t].regime
            assert regime is not None  # set by _rtt, which runs first
            size = round(regime.binding_mbit * 1e6 / 8 * self.plan.recovery_s)
            clean = harness.run_transfers(fab, t, [Transfer(src, dst, size)], config=_config(t),
                                  deadline_s=120)
            cut: dict = {}
            failure = BusiestUplinkDown(leaves, sample_s=0.1)

            def cutter(t0: float) -> None:
                time.sleep(max(0.0, t0 + self.plan.cut_at_s - time.monotonic()))
                cut["chosen"] = failure.apply(fab)
                cut["at"] = time.monotonic() - t0
                if t in ECMP:
                    from emu import convergence

                    cut["conv"] = convergence.measure(fab, LinkDown(cut["chosen"].link))

            th: list[threading.Thread] = []

            def on_start(t0: float) -> None:
                th.append(threading.Thread(target=cutter, args=(t0,), daemon=True))
                th[0].start()

            try:
                res = harness.run_transfers(fab, t, [Transfer(src, dst, size)], config=_config(t),
                                    deadline_s=120, on_start=on_start)
            finally:
                if th:
                    th[0].join(30)
                if "chosen" in cut:
                    failure.restore(fab, cut["chosen"])
                fab.wait_converged(60)
            self._checked(clean)
            self._checked(res)
            conv = cut.get("conv", {}).get("convergence_s")
            cpu = max(cpu_use(clean), cpu_use(res), key=lambda c: c.max_core)
            s = cal.RecoverySample(rep, clean.completion_s, res.completion_s, conv,
                                   t in ECMP, cpu)
            self.acc[t].recovery.append(s)
            self.say(f"  recovery {t} rep {rep}: cut {cut['chosen'].link} at {cut['at']:.2f} s;"
                     f" {s.cut_s - s.clean_s:.3f} s lost, convergence {conv} s")

        self._reps("recovery", one)

    def _dci_transports(self) -> tuple[str, ...]:
        return tuple(t for t in self.plan.transports if t != "rc")

    def _dci(self) -> None:
        spec = self.dci_spec
        assert spec is not None
        if "rc" in self.acc:
            self.acc["rc"].notes.append("eta_dci: not measured: RC's per-plane QP addresses "
                                        "are not routed across DCs")
        if not self._dci_transports():
            return
        src, dst = spec.hosts[0].name, spec.hosts[-1].name
        with Fabric(spec, name=self.name + "x",
                    progress=lambda m: self.say(f"  dci fabric: {m}")) as fab:
            self._rtt(fab, spec, src, dst, dci=True)
            self._eta(fab, src, dst, dci=True)

    def _load_training(self) -> None:
        path = self.training_results
        assert path is not None
        f = path / "results.jsonl" if path.is_dir() else path
        if not f.exists():
            raise EmuError(f"--training-results {str(path)!r}: no results.jsonl there (the "
                           "output directory of `emu bench training`)")
        self.steps, self.steps_reason = cal.steps_from_training(read_jsonl(f))
        self.say(f"  training results {f}: {len(self.steps)} DBLP / MRC pairs"
                 + (f" ({self.steps_reason})" if self.steps_reason else ""))


def _rto_floor(transport: str, rtt_s: float) -> float:
    """The RTO floor of a UDP core as the harness configures it, on a path of ``rtt_s``
    (an absolute part and a part in RTTs, transports/rto.py)."""
    from transports.rto import rto_floor

    kw: dict[str, Any] = DEFAULT_CONFIG[transport]
    cfg: RcConfig | MrcConfig
    if transport == "rc":
        from transports.rc import RcConfig

        cfg = RcConfig(**kw)
    else:
        from transports.mrc import MrcConfig

        cfg = MrcConfig(**kw)
    return rto_floor(cfg.rto_min, cfg.rto_min_rtts, rtt_s)


def calibrate(out: Path, *, quick: bool = False, transports: tuple[str, ...] | None = None,
              training_results: Path | None = None, say: Say = print,
              command: str | None = None) -> dict:
    """`emu calibrate`: the full (or ``quick``) plan on the default fabrics; the record."""
    plan = QUICK if quick else FULL
    if transports:
        plan = replace(plan, transports=transports)
    if command is None:
        command = shlex.join(["emu", "calibrate", "--out", str(out)]
                             + (["--quick"] if quick else [])
                             + (["--transports", ",".join(transports)] if transports else [])
                             + (["--training-results", str(training_results)]
                                if training_results else []))
    return Calibration(out, plan, say=say, command=command,
                       training_results=training_results).run()
