"""Calibration record version 2: dimensionless transport figures with their regime.

Pure (no root, no emulator imports): ``workloads/calibrate.py`` measures on a fabric and
hands plain samples (the frozen dataclasses below) to :func:`calibration_record`, which
reduces them and returns the record; :func:`validate` checks one (strictly: unknown or
missing keys are errors) and :func:`load` reads one back. No absolute emulator time
enters a figure the explorer projects: every value is a ratio, and ``regime`` says in
which dimensionless groups it was measured (``rtt_s`` there is information only).

Record (``scaleacross-emu/calibration/2``; floats finite or null)::

    {"format", "generated" (Unix time), "command", "versions", "host",
     "fabric": {"planes", "spines", "leaves", "hosts_per_leaf", "rate_mbit" (host links),
                "fabric_rate_mbit", "queue_packets", "mtu", "nominal_gbit" (what a host link
                stands for), "dci": null | {free-form: the 2-DC fabric of ``eta_dci``}},
     "transports": {"mrc" | "rc" | "tcp" | "dblp": {
        "regime": {...}, "eta": {...}, "eta_dci": {...} | null, "load_balance": [...],
        "tail_inflation": [...], "recovery": {"link_cut": {...}}, "dblp": {...} | null,
        "excluded": ["<what>: <reason>", ...]}}}

Regime (:class:`Regime` holds the raw inputs):

* ``rtt_s``: idle round trip of one full-size data packet and its ACK = the transport's
  own one-packet probe (post to acknowledgement, median over repetitions) + the frame's
  serialisation at the binding port's line rate (``frame_bytes * 8 / line rate``): a
  lone probe crosses the emulated ports inside their burst credit (see eta), which a
  real link never grants; a transfer longer than the credit pays the serialisation.
* ``payload_bytes``; ``binding``: "host_nic" (the source's NICs bind) or "dci";
  ``binding_mbit`` (in ``eta``) = lanes x line rate x payload / (payload + headers),
  lanes = the ports one connection uses at once (MRC, DBLP: every plane; RC: one QP per
  plane; TCP: one connection on one plane, so one NIC).
* ``bdp_bytes`` = binding_mbit * 1e6 / 8 * rtt_s; ``buffer_packets`` (egress FIFO depth);
  ``buffer_bdp`` = buffer_packets * frame_bytes / (line rate / 8 * rtt_s): one port's
  buffer in that port's BDP.
* ``message_bdp``, ``flows_per_uplink``, ``burst_rtts``, ``burst_excess_buffers``:
  [lo, hi] over the kept entries below (null when there are none);
  ``cpu_cores_max``: the busiest driver's cores over every kept measurement;
  ``rto_floor_s``: the transport's minimum RTO (the MRC, RC and DBLP cores' ``rto_min``;
  TCP: Linux's 200 ms).

Figures (each "value" with a 95 % percentile-bootstrap interval ``lo``/``hi``: the
repetitions are resampled with replacement, ``RESAMPLES`` times, numpy's seeded
generator, seed derived from the run's seed and the figure's name; the statistic is
recomputed on each resample, resamples where it is undefined are skipped, and the
interval is widened to contain the value where a skewed statistic leaves it outside):

* ``eta``: least squares over every (size, seconds) of the kept points of
  ``t(S) = a + (S - C) * 8 / (eta * binding_mbit * 1e6)``; ``overhead_rtts`` = a / rtt_s
  (interval from the same resamples). C is the burst credit of the emulated ports (their
  HTB burst, ``emu.kernel.htb_class``: max(2 (mtu + 14), rate_bps / 8000 + mtu + 14)
  bytes per port, times lanes): an idle port passes that much unshaped, which no real
  link does, so C is taken out (a is then the per-message overhead a real link would
  show; a literal ``a + S / (eta B)`` intercept is a - C / (eta B)), and sizes below
  1.5 C are measured but left out of the fit. ``points``: per message size,
  ``message_bdp`` = bytes / bdp_bytes, the completion times (post to fully placed) of
  the repetitions in order, ``cpu_cores`` (busiest driver) and ``excluded``. Needs >= 3
  kept sizes, the largest >= 10x the smallest. ``eta_dci``: the same on the 2-DC fabric
  with the DCI binding; its rtt and BDP per transport are in ``fabric.dci``.
* ``load_balance``: per flows_per_uplink (= concurrent flows x lanes / a leaf's uplinks
  over all planes), value = mean over repetitions of aggregate goodput (all bytes / last
  completion) / ideal (every source's usable NICs busy: min(flows x lanes, planes) NICs
  at payload rate). ``balls_into_bins`` (ECMP transports): F flows hashed onto N uplinks,
  E[occupied uplinks] / min(F, N) = N (1 - (1 - 1/N)^F) / min(F, N); for F = N it is
  1 - (1 - 1/N)^N. It counts uplink collisions only, each busy uplink full (an upper bound).
* ``tail_inflation``: per burst geometry, value = P99 of the latencies of the rounds that
  overlapped a burst window (pooled over repetitions) / P50 of the healthy rounds (same
  repetitions, no bursts); percentiles interpolate linearly. ``burst_rtts`` = on-time /
  rtt_s; ``burst_excess_buffers`` = (sources x source rate - target rate) x on-time / 8 /
  (buffer_packets x frame_bytes); ``rounds``: the rounds under bursts behind the P99;
  ``burst_drops``: packets dropped at the target FIFOs while the bursts ran (every kept
  repetition); ``delay_spike_only``: no drop at all, so the burst delayed and never lost.
  DBLP's rounds are bounded (``dblp.tolerance``), so its healthy P50 is a bounded one too.
* ``recovery.link_cut``: per repetition lost = completion with the cut - without;
  ``lost_rtts`` = mean lost / rtt_s; ``convergence_s``: mean control-plane convergence
  (null when the transport's paths do not depend on it); ``recovery_rtts`` = mean(lost -
  convergence) / rtt_s with ``lo``/``hi``; ``recovery_rtos`` = mean(lost - convergence) /
  rto_floor_s.
* ``dblp`` (DBLP only): ``tolerance`` of its bounded rounds; ``delivered_fraction``: mean
  delivered fraction of the bounded rounds under bursts (pooled); ``steps_ratio``: steps
  to the target with DBLP / with reliable MRC, one repetition per training repetition
  (from ``emu bench training`` results), else null with ``steps_ratio_reason``.

CPU: a repetition is CPU-bound when any driver used >= 0.9 core, or all together >= 0.9 x
the machine's cores (:class:`CpuUse`; the runner takes cores = CPU seconds / the driver's
busy seconds, at least 0.1 s of them). An eta point or a load-balance entry with a
CPU-bound repetition is excluded whole (``excluded`` says why; its numbers stay visible,
computed over every repetition, but a reader must skip it, as the fit does); tail,
recovery and DBLP figures drop the CPU-bound repetitions. Everything left out, and every
measurement that failed, is listed in the transport's ``excluded``.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "BINDINGS", "FORMAT", "RESAMPLES", "TRANSPORTS", "BurstGeometry", "CalibrationError",
    "CpuUse", "EtaFit", "LoadSample", "RecoverySample", "Regime", "RoundsSample",
    "StepsSample", "TransferSample", "TransportMeasurements", "balls_into_bins", "bootstrap",
    "calibration_record", "fit_eta", "load", "steps_from_training", "validate",
]

FORMAT = "scaleacross-emu/calibration/2"
TRANSPORTS = ("mrc", "rc", "tcp", "dblp")
BINDINGS = ("host_nic", "dci")
RESAMPLES = 2000
CPU_BOUND = 0.9  # of one core (a driver), or of all cores (the drivers together)
CREDIT_MARGIN = 1.5  # eta points below this many burst credits are left out of the fit
T = TypeVar("T")


class CalibrationError(ValueError):
    """Calibration input or record that cannot be used (the message names it)."""


# -- inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuUse:
    """Cores each driver process used during one measurement (``(host, cores)`` pairs)."""

    drivers: tuple[tuple[str, float], ...]
    machine_cores: int

    @property
    def max_core(self) -> float:
        return max((c for _, c in self.drivers), default=0.0)

    def bound(self) -> str | None:
        """Why this measurement was CPU-bound, or None."""
        if self.drivers and self.max_core >= CPU_BOUND:
            host = max(self.drivers, key=lambda d: d[1])[0]
            return f"CPU-bound: the driver on {host} used {self.max_core:.2f} core"
        total = sum(c for _, c in self.drivers)
        if total >= CPU_BOUND * self.machine_cores:
            return (f"CPU-bound: the drivers used {total:.2f} of the machine's "
                    f"{self.machine_cores} cores")
        return None


@dataclass(frozen=True)
class Regime:
    """Raw quantities of the path a transport was measured on (module docstring)."""

    rtt_s: float
    payload_bytes: int
    frame_bytes: int
    line_mbit: float
    lanes: int
    buffer_packets: int
    binding: str = "host_nic"
    rto_floor_s: float | None = None
    credit_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("rtt_s", "line_mbit"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise CalibrationError(f"Regime.{name}={v!r} is invalid: must be > 0")
        if not 0 < self.payload_bytes <= self.frame_bytes:
            raise CalibrationError(f"Regime.payload_bytes={self.payload_bytes!r} is invalid: "
                                   f"must be in (0, frame_bytes={self.frame_bytes}]")
        if self.lanes < 1 or self.buffer_packets < 1:
            raise CalibrationError(f"Regime lanes={self.lanes!r} and buffer_packets="
                                   f"{self.buffer_packets!r} are invalid: both must be >= 1")
        if self.binding not in BINDINGS:
            raise CalibrationError(f"Regime.binding={self.binding!r} is invalid: must be one "
                                   f"of {', '.join(BINDINGS)}")

    @property
    def binding_mbit(self) -> float:
        return self.lanes * self.line_mbit * self.payload_bytes / self.frame_bytes

    @property
    def bdp_bytes(self) -> float:
        return self.binding_mbit * 1e6 / 8 * self.rtt_s

    @property
    def buffer_bytes(self) -> int:
        return self.buffer_packets * self.frame_bytes

    @property
    def buffer_bdp(self) -> float:
        return self.buffer_bytes / (self.line_mbit * 1e6 / 8 * self.rtt_s)


@dataclass(frozen=True)
class TransferSample:
    """One message of ``message_bytes``: ``seconds`` from post to fully placed."""

    rep: int
    message_bytes: int
    seconds: float
    cpu: CpuUse


@dataclass(frozen=True)
class LoadSample:
    """One permutation: aggregate goodput vs ideal; ``ecmp_flows`` F hashed onto
    ``ecmp_uplinks`` N (None for transports that do not hash)."""

    rep: int
    flows_per_uplink: float
    goodput_mbit: float
    ideal_mbit: float
    cpu: CpuUse
    ecmp_flows: int | None = None
    ecmp_uplinks: int | None = None


@dataclass(frozen=True)
class BurstGeometry:
    """``sources`` hosts at ``source_mbit`` for ``on_s`` every ``every_s`` onto a port of
    ``target_mbit``."""

    on_s: float
    every_s: float
    sources: int
    source_mbit: float
    target_mbit: float

    def rtts(self, regime: Regime) -> float:
        return self.on_s / regime.rtt_s

    def excess_buffers(self, regime: Regime) -> float:
        excess = (self.sources * self.source_mbit - self.target_mbit) * 1e6 / 8 * self.on_s
        return excess / regime.buffer_bytes


@dataclass(frozen=True)
class RoundsSample:
    """Chained rounds of one repetition: healthy (``geometry`` None: every round) or
    under bursts (the rounds that overlapped a burst window), with target FIFO drops."""

    rep: int
    geometry: BurstGeometry | None
    latencies_s: tuple[float, ...]
    delivered: tuple[float, ...]
    cpu: CpuUse
    burst_drops: int = 0


@dataclass(frozen=True)
class RecoverySample:
    """A long transfer without and with a link cut; ``convergence_s`` of the control plane
    (``control_plane``: whether the transport's paths wait for it)."""

    rep: int
    clean_s: float
    cut_s: float
    convergence_s: float | None
    control_plane: bool
    cpu: CpuUse


@dataclass(frozen=True)
class StepsSample:
    """Steps to the training target with DBLP and without (one training repetition)."""

    rep: int
    steps_with: int
    steps_without: int


@dataclass(frozen=True)
class TransportMeasurements:
    """Everything measured for one transport (empty tuples: not measured)."""

    regime: Regime
    eta: tuple[TransferSample, ...] = ()
    dci_regime: Regime | None = None
    eta_dci: tuple[TransferSample, ...] = ()
    load: tuple[LoadSample, ...] = ()
    healthy_rounds: tuple[RoundsSample, ...] = ()
    burst_rounds: tuple[RoundsSample, ...] = ()
    recovery: tuple[RecoverySample, ...] = ()
    dblp_tolerance: float | None = None
    steps: tuple[StepsSample, ...] = ()
    steps_reason: str | None = None
    notes: tuple[str, ...] = ()


# -- statistics --------------------------------------------------------------------------


@dataclass(frozen=True)
class EtaFit:
    """``t(S) = overhead_s + (S - credit) * 8 / (eta * binding_mbit * 1e6)``."""

    eta: float
    overhead_s: float


def fit_eta(message_bytes: Sequence[int], seconds: Sequence[float], binding_mbit: float,
            credit_bytes: float = 0.0) -> EtaFit:
    """Least-squares eta and per-message overhead from (size, completion time) pairs."""
    if len(message_bytes) != len(seconds):
        raise CalibrationError(f"fit_eta: {len(message_bytes)} sizes but {len(seconds)} times")
    sizes = sorted(set(message_bytes))
    if len(sizes) < 3:
        raise CalibrationError(f"eta needs at least 3 distinct message sizes, got {len(sizes)}"
                               f" ({sizes}): one slope and one intercept need a third to check")
    if sizes[-1] < 10 * sizes[0]:
        raise CalibrationError(f"eta needs the largest message >= 10x the smallest, got "
                               f"{sizes[0]}..{sizes[-1]} bytes")
    y = np.asarray(seconds, dtype=float)
    if not np.all(np.isfinite(y)) or np.any(y <= 0) or not binding_mbit > 0:
        raise CalibrationError("fit_eta: times must be finite and > 0 and binding_mbit > 0")
    x = (np.asarray(message_bytes, dtype=float) - credit_bytes) * 8 / (binding_mbit * 1e6)
    slope, intercept = np.polyfit(x, y, 1)
    if not slope > 0:
        raise CalibrationError(f"eta fit has a slope {slope:g} <= 0: times do not grow "
                               "with size")
    return EtaFit(float(1 / slope), float(intercept))


def bootstrap(groups: Sequence[T], stat: Callable[[Sequence[T]], float | None], *,
              seed: int, resamples: int = RESAMPLES, level: float = 0.95,
              value: float | None = None) -> tuple[float | None, float | None]:
    """Percentile-bootstrap interval of ``stat`` over ``groups`` (one per repetition),
    resampled with replacement; (None, None) when fewer than half the resamples define it.
    Given the full-sample ``value``, the interval is widened to contain it."""
    if resamples < 1000:
        raise CalibrationError(f"resamples={resamples} is invalid: must be >= 1000")
    if not groups:
        return None, None
    rng = np.random.default_rng(seed)
    vals = []
    for row in rng.integers(0, len(groups), size=(resamples, len(groups))):
        try:
            v = stat([groups[i] for i in row])
        except CalibrationError:
            continue
        if v is not None and math.isfinite(v):
            vals.append(v)
    if len(vals) < resamples / 2:
        return None, None
    lo, hi = (float(x) for x in np.percentile(vals, [50 * (1 - level), 50 * (1 + level)]))
    if value is not None and math.isfinite(value):
        lo, hi = min(lo, value), max(hi, value)
    return lo, hi


def balls_into_bins(flows: int, bins: int) -> float:
    """E[occupied bins] / min(flows, bins) for ``flows`` hashed uniformly onto ``bins``."""
    if flows < 1 or bins < 1:
        raise CalibrationError(f"balls_into_bins({flows}, {bins}): both must be >= 1")
    return bins * (1 - (1 - 1 / bins) ** flows) / min(flows, bins)


def _seed(seed: int, *names: str) -> int:
    return zlib.crc32(":".join(names).encode()) ^ seed


def _by_rep(samples: Sequence[Any]) -> list[list[Any]]:
    reps: dict[int, list[Any]] = {}
    for s in samples:
        reps.setdefault(s.rep, []).append(s)
    return [reps[r] for r in sorted(reps)]


def _mean(xs: Sequence[float]) -> float | None:
    return float(np.mean(xs)) if len(xs) else None


def _pct(xs: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(xs, dtype=float), q)) if len(xs) else None


def _span(xs: Sequence[float]) -> list[float] | None:
    return [float(min(xs)), float(max(xs))] if xs else None


# -- reductions --------------------------------------------------------------------------


def _eta(samples: Sequence[TransferSample], regime: Regime, seed: int, resamples: int,
         name: str, what: str) -> tuple[dict, list[str], list[float]]:
    """The eta section, what was left out, and the kept cores."""
    excluded: list[str] = []
    points, kept_sizes = [], set()
    for size in sorted({s.message_bytes for s in samples}):
        at = sorted((s for s in samples if s.message_bytes == size), key=lambda s: s.rep)
        reasons = [f"rep {s.rep}: {r}" for s in at if (r := s.cpu.bound())]
        if size < CREDIT_MARGIN * regime.credit_bytes:
            reasons.insert(0, f"within the emulated ports' burst credit ({regime.credit_bytes}"
                           " B pass unshaped)")
        bdp = size / regime.bdp_bytes
        if reasons:
            excluded.append(f"{what} {bdp:.3g} BDP ({size} B): " + "; ".join(reasons))
        else:
            kept_sizes.add(size)
        points.append({"message_bytes": size, "message_bdp": bdp,
                       "seconds": [s.seconds for s in at],
                       "cpu_cores": max(s.cpu.max_core for s in at),
                       "excluded": "; ".join(reasons) or None})
    kept = [s for s in samples if s.message_bytes in kept_sizes]
    out: dict[str, Any] = {"value": None, "lo": None, "hi": None, "overhead_rtts": None,
                           "overhead_rtts_lo": None, "overhead_rtts_hi": None,
                           "binding_mbit": regime.binding_mbit, "points": points}
    if not samples:
        excluded.append(f"{what}: not measured")
        return out, excluded, []

    def fit(reps: Sequence[list[TransferSample]]) -> EtaFit:
        flat = [s for rep in reps for s in rep]
        return fit_eta([s.message_bytes for s in flat], [s.seconds for s in flat],
                       regime.binding_mbit, regime.credit_bytes)

    groups = _by_rep(kept)
    try:
        best = fit(groups)
    except CalibrationError as e:
        excluded.append(f"{what}: not fitted: {e}")
        return out, excluded, []
    rtt = regime.rtt_s
    lo, hi = bootstrap(groups, lambda g: fit(g).eta, seed=_seed(seed, name, what),
                       resamples=resamples, value=best.eta)
    olo, ohi = bootstrap(groups, lambda g: fit(g).overhead_s / rtt, value=best.overhead_s / rtt,
                         seed=_seed(seed, name, what), resamples=resamples)
    out.update(value=best.eta, lo=lo, hi=hi, overhead_rtts=best.overhead_s / rtt,
               overhead_rtts_lo=olo, overhead_rtts_hi=ohi)
    return out, excluded, [s.cpu.max_core for s in kept]


def _load(samples: Sequence[LoadSample], seed: int, resamples: int,
          name: str) -> tuple[list[dict], list[str]]:
    out, excluded = [], []
    for fpu in sorted({s.flows_per_uplink for s in samples}):
        at = sorted((s for s in samples if s.flows_per_uplink == fpu), key=lambda s: s.rep)
        reasons = [f"rep {s.rep}: {r}" for s in at if (r := s.cpu.bound())]
        if reasons:
            excluded.append(f"load_balance {fpu:g} flows per uplink: " + "; ".join(reasons))
        ratios = [s.goodput_mbit / s.ideal_mbit for s in at]
        lo, hi = bootstrap(ratios, _mean, seed=_seed(seed, name, "lb", str(fpu)),
                           resamples=resamples, value=_mean(ratios))
        f, n = at[0].ecmp_flows, at[0].ecmp_uplinks
        out.append({"flows_per_uplink": fpu, "value": _mean(ratios), "lo": lo, "hi": hi,
                    "balls_into_bins": balls_into_bins(f, n) if f and n else None,
                    "excluded": "; ".join(reasons) or None})
    if not samples:
        excluded.append("load_balance: not measured")
    return out, excluded


def _cpu_ok(samples: Sequence[Any], what: str, excluded: list[str]) -> list[Any]:
    kept = []
    for s in samples:
        reason = s.cpu.bound()
        if reason:
            excluded.append(f"{what} rep {s.rep}: {reason}")
        else:
            kept.append(s)
    return kept


def _tails(healthy: Sequence[RoundsSample], bursts: Sequence[RoundsSample], regime: Regime,
           seed: int, resamples: int, name: str) -> tuple[list[dict], list[str]]:
    excluded: list[str] = []
    healthy = _cpu_ok(healthy, "tail_inflation healthy rounds", excluded)
    base = {s.rep: s for s in healthy}
    out = []
    for geo in sorted({s.geometry for s in bursts if s.geometry}, key=lambda g: g.on_s):
        what = f"tail_inflation {geo.rtts(regime):.3g} RTTs"
        hit = _cpu_ok([s for s in bursts if s.geometry == geo], what, excluded)
        pairs = [(base[s.rep], s) for s in sorted(hit, key=lambda s: s.rep) if s.rep in base]
        excluded += [f"{what} rep {s.rep}: no healthy rounds to compare with"
                     for s in hit if s.rep not in base]

        def ratio(ps: Sequence[tuple[RoundsSample, RoundsSample]]) -> float | None:
            p99 = _pct([x for _, b in ps for x in b.latencies_s], 99)
            p50 = _pct([x for h, _ in ps for x in h.latencies_s], 50)
            return p99 / p50 if p99 is not None and p50 else None

        lo, hi = bootstrap(pairs, ratio, seed=_seed(seed, name, what), resamples=resamples,
                           value=ratio(pairs))
        drops = sum(b.burst_drops for _, b in pairs)
        out.append({"burst_rtts": geo.rtts(regime),
                    "burst_excess_buffers": geo.excess_buffers(regime),
                    "value": ratio(pairs), "lo": lo, "hi": hi, "burst_drops": drops,
                    "delay_spike_only": drops == 0,
                    "rounds": sum(len(b.latencies_s) for _, b in pairs)})
    if not bursts:
        excluded.append("tail_inflation: not measured")
    return out, excluded


def _recovery(samples: Sequence[RecoverySample], regime: Regime, seed: int, resamples: int,
              name: str) -> tuple[dict, list[str]]:
    excluded: list[str] = []
    kept = []
    for s in _cpu_ok(samples, "recovery link_cut", excluded):
        if s.control_plane and s.convergence_s is None:
            excluded.append(f"recovery link_cut rep {s.rep}: control-plane convergence "
                            "not measured")
        else:
            kept.append(s)
    if not samples:
        excluded.append("recovery link_cut: not measured")
    rtt, rto = regime.rtt_s, regime.rto_floor_s
    net = [s.cut_s - s.clean_s - (s.convergence_s or 0.0) for s in kept]
    lost = _mean([s.cut_s - s.clean_s for s in kept])
    conv = [s.convergence_s for s in kept if s.convergence_s is not None]
    rec = _mean(net)

    def per_rtt(xs: Sequence[float]) -> float | None:
        m = _mean(xs)  # never None: bootstrap resamples a non-empty ``net``
        return None if m is None else m / rtt

    lo, hi = bootstrap(net, per_rtt, seed=_seed(seed, name, "recovery"),
                       resamples=resamples, value=None if rec is None else rec / rtt)
    return {"lost_rtts": None if lost is None else lost / rtt,
            "convergence_s": _mean(conv) if conv else None,
            "recovery_rtts": None if rec is None else rec / rtt, "lo": lo, "hi": hi,
            "recovery_rtos": None if rec is None or not rto else rec / rto}, excluded


def _dblp(m: TransportMeasurements, seed: int, resamples: int) -> tuple[dict, list[str]]:
    excluded: list[str] = []
    hit = _cpu_ok(m.burst_rounds, "dblp delivered", excluded)
    groups = [[x for s in rep for x in s.delivered] for rep in _by_rep(hit)]

    def pooled(gs: Sequence[list[float]]) -> float | None:
        return _mean([x for g in gs for x in g])

    lo, hi = bootstrap(groups, pooled, seed=_seed(seed, "dblp", "delivered"),
                       resamples=resamples, value=pooled(groups))
    ratios = [s.steps_with / s.steps_without for s in m.steps]
    steps = None
    if ratios:
        slo, shi = bootstrap(ratios, _mean, seed=_seed(seed, "dblp", "steps"),
                             resamples=resamples, value=_mean(ratios))
        steps = {"value": _mean(ratios), "lo": slo, "hi": shi}
    reason = None if steps else (m.steps_reason or "no training results given")
    return {"tolerance": m.dblp_tolerance,
            "delivered_fraction": {"value": pooled(groups), "lo": lo, "hi": hi},
            "steps_ratio": steps, "steps_ratio_reason": reason}, excluded


def transport_record(name: str, m: TransportMeasurements, *, seed: int = 0,
                     resamples: int = RESAMPLES) -> dict:
    """One transport's section of the record (module docstring)."""
    if name not in TRANSPORTS:
        raise CalibrationError(f"transport {name!r} is invalid: must be one of "
                               f"{', '.join(TRANSPORTS)}")
    r = m.regime
    eta, excluded, cores = _eta(m.eta, r, seed, resamples, name, "eta")
    eta_dci = None
    if m.dci_regime is not None:
        eta_dci, ex, c = _eta(m.eta_dci, m.dci_regime, seed, resamples, name, "eta_dci")
        excluded += ex
        cores += c
    load, ex = _load(m.load, seed, resamples, name)
    excluded += ex
    tails, ex = _tails(m.healthy_rounds, m.burst_rounds, r, seed, resamples, name)
    excluded += ex
    recovery, ex = _recovery(m.recovery, r, seed, resamples, name)
    excluded += ex
    dblp = None
    if name == "dblp":
        dblp, ex = _dblp(m, seed, resamples)
        excluded += ex
    for group in (m.load, m.healthy_rounds, m.burst_rounds, m.recovery):
        cores += [s.cpu.max_core for s in group if not s.cpu.bound()]
    kept_points = [p["message_bdp"] for p in eta["points"] if not p["excluded"]]
    kept_load = [e["flows_per_uplink"] for e in load if not e["excluded"]]
    regime = {"rtt_s": r.rtt_s, "payload_bytes": r.payload_bytes, "bdp_bytes": r.bdp_bytes,
              "buffer_packets": r.buffer_packets, "buffer_bdp": r.buffer_bdp,
              "message_bdp": _span(kept_points), "flows_per_uplink": _span(kept_load),
              "burst_rtts": _span([t["burst_rtts"] for t in tails]),
              "burst_excess_buffers": _span([t["burst_excess_buffers"] for t in tails]),
              "cpu_cores_max": max(cores) if cores else None, "binding": r.binding,
              "rto_floor_s": r.rto_floor_s}
    return {"regime": regime, "eta": eta, "eta_dci": eta_dci, "load_balance": load,
            "tail_inflation": tails, "recovery": {"link_cut": recovery}, "dblp": dblp,
            "excluded": excluded + list(m.notes)}


def calibration_record(*, fabric: Mapping[str, Any],
                       transports: Mapping[str, TransportMeasurements], command: str,
                       versions: Mapping[str, Any], host: Mapping[str, Any],
                       generated: float, seed: int = 0, resamples: int = RESAMPLES,
                       memo: dict | None = None) -> dict:
    """The whole record, validated. ``memo`` (a dict the caller keeps) reuses the sections
    of transports whose measurements did not change since the last call."""
    memo = {} if memo is None else memo
    sections = {}
    for name, m in transports.items():
        key = (name, m, seed, resamples)
        if key not in memo:
            if len(memo) > 64:  # old versions of the measurements are never asked again
                memo.clear()
            memo[key] = transport_record(name, m, seed=seed, resamples=resamples)
        sections[name] = memo[key]
    record = {"format": FORMAT, "generated": generated, "command": command,
              "versions": dict(versions), "host": dict(host), "fabric": dict(fabric),
              "transports": sections}
    record = _plain(record)
    validate(record)
    return record


def _plain(obj: Any) -> Any:
    """JSON data: tuples to lists, numpy scalars to numbers, non-finite floats to None."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if hasattr(obj, "item"):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


# -- training results: steps to target --------------------------------------------------


def steps_from_training(records: Sequence[Mapping[str, Any]]
                        ) -> tuple[tuple[StepsSample, ...], str | None]:
    """DBLP vs reliable MRC steps to target from ``emu bench training`` records
    (``results.jsonl``): each DBLP label (default all-gather) against the MRC label of the
    same model, target and failure events, per repetition. Returns the samples, or () and
    the reason."""
    metas = {r.get("label"): r for r in records if r.get("type") == "meta"}

    def target(meta: Mapping[str, Any]) -> tuple[str, str, float] | None:
        exp = meta.get("experiment") or {}
        w = exp.get("workload") or {}
        for key in ("target_loss", "target_accuracy"):
            if w.get(key) is not None:
                return str(w.get("model")), key, float(w[key])
        return None

    def name(meta: Mapping[str, Any]) -> str | None:
        t = (meta.get("experiment") or {}).get("transport") or {}
        if (t.get("dblp") or {}).get("bounded_gather"):
            return "dblp_bounded_gather"
        return t.get("name")

    def steps(label: str | None, rep: int, key: str, goal: float) -> int | None:
        evals = sorted((r for r in records if r.get("type") == "eval" and
                        r.get("label") == label and r.get("rep", 0) == rep),
                       key=lambda r: r["step"])
        metric = "loss" if key == "target_loss" else "accuracy"
        for e in evals:
            v = e.get(metric)
            if v is not None and (v <= goal if metric == "loss" else v >= goal):
                return int(e["step"]) + 1
        return None

    out: list[StepsSample] = []
    for label, meta in sorted(metas.items(), key=lambda kv: str(kv[0])):
        tg = target(meta)
        if name(meta) != "dblp" or tg is None:
            continue
        events = (meta.get("experiment") or {}).get("events")
        ref = next((lb for lb, m in metas.items() if name(m) == "mrc" and target(m) == tg
                    and (m.get("experiment") or {}).get("events") == events), None)
        if ref is None:
            continue
        for rep in sorted({r.get("rep", 0) for r in records
                           if r.get("type") == "eval" and r.get("label") == label}):
            a, b = steps(label, rep, tg[1], tg[2]), steps(ref, rep, tg[1], tg[2])
            if a is not None and b is not None:
                out.append(StepsSample(rep=len(out), steps_with=a, steps_without=b))
    if not out:
        return (), ("no DBLP run with a reliable MRC run of the same model, target and "
                    "events that both reached the target")
    return tuple(out), None


# -- validation --------------------------------------------------------------------------

_CI = {"value": "float?", "lo": "float?", "hi": "float?"}
_INTERVALS = (("value", "lo", "hi"), ("recovery_rtts", "lo", "hi"),
              ("overhead_rtts", "overhead_rtts_lo", "overhead_rtts_hi"))
_POINT = {"message_bytes": "int", "message_bdp": "float", "seconds": ["float"],
          "cpu_cores": "float", "excluded": "str?"}
_ETA = {"value": "float?", "lo": "float?", "hi": "float?", "overhead_rtts": "float?",
        "overhead_rtts_lo": "float?", "overhead_rtts_hi": "float?", "binding_mbit": "float",
        "points": [_POINT]}
_REGIME = {"rtt_s": "float", "payload_bytes": "int", "bdp_bytes": "float",
           "buffer_packets": "int", "buffer_bdp": "float", "message_bdp": "range?",
           "flows_per_uplink": "range?", "burst_rtts": "range?",
           "burst_excess_buffers": "range?", "cpu_cores_max": "float?", "binding": "binding",
           "rto_floor_s": "float?"}
_TRANSPORT = {
    "regime": _REGIME, "eta": _ETA, "eta_dci": ("null", _ETA),
    "load_balance": [{"flows_per_uplink": "float", **_CI, "balls_into_bins": "float?",
                      "excluded": "str?"}],
    "tail_inflation": [{"burst_rtts": "float", "burst_excess_buffers": "float", **_CI,
                        "burst_drops": "int", "delay_spike_only": "bool", "rounds": "int"}],
    "recovery": {"link_cut": {"lost_rtts": "float?", "convergence_s": "float?",
                              "recovery_rtts": "float?", "lo": "float?", "hi": "float?",
                              "recovery_rtos": "float?"}},
    "dblp": ("null", {"tolerance": "float?", "delivered_fraction": _CI,
                      "steps_ratio": ("null", _CI), "steps_ratio_reason": "str?"}),
    "excluded": ["str"]}
_FABRIC = {"planes": "int", "spines": "int", "leaves": "int", "hosts_per_leaf": "int",
           "rate_mbit": "float", "fabric_rate_mbit": "float", "queue_packets": "int",
           "mtu": "int", "nominal_gbit": "float", "dci": "dict?"}
_RECORD = {"format": "str", "generated": "float", "command": "str", "versions": "dict",
           "host": "dict", "fabric": _FABRIC, "transports": "transports"}


def _check(v: Any, schema: Any, where: str) -> None:
    def bad(want: str) -> CalibrationError:
        return CalibrationError(f"{where}={v!r} is invalid: must be {want}")

    if isinstance(schema, tuple):  # ("null", schema)
        if v is not None:
            _check(v, schema[1], where)
        return
    if isinstance(schema, list):
        if not isinstance(v, list):
            raise bad("a list")
        for i, item in enumerate(v):
            _check(item, schema[0], f"{where}[{i}]")
        return
    if isinstance(schema, dict):
        if not isinstance(v, dict):
            raise bad("an object")
        if set(v) != set(schema):
            raise CalibrationError(f"{where}: unknown keys {sorted(set(v) - set(schema))}, "
                                   f"missing keys {sorted(set(schema) - set(v))}")
        for k, s in schema.items():
            _check(v[k], s, f"{where}.{k}")
        for mid, lo, hi in _INTERVALS:
            trio = [v.get(k) for k in (lo, mid, hi)]
            a, m, b = trio
            if mid in v and a is not None and m is not None and b is not None \
                    and not a <= m <= b:
                raise CalibrationError(f"{where}: {mid}={trio[1]} is outside [{lo}, {hi}] = "
                                       f"[{trio[0]}, {trio[2]}]")
        return
    if schema.endswith("?"):
        if v is None:
            return
        schema = schema[:-1]
    number = isinstance(v, int | float) and not isinstance(v, bool)
    if schema == "float" and not (number and math.isfinite(v)):
        raise bad("a finite number")
    if schema == "int" and not (isinstance(v, int) and not isinstance(v, bool)):
        raise bad("an integer")
    if schema in ("str", "bool", "dict") and not isinstance(v, {"str": str, "bool": bool,
                                                                 "dict": dict}[schema]):
        raise bad(f"a {schema}")
    if schema == "binding" and v not in BINDINGS:
        raise bad(f"one of {', '.join(BINDINGS)}")
    if schema == "range" and not (isinstance(v, list) and len(v) == 2 and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in v) and v[0] <= v[1]):
        raise bad("[lo, hi] with finite lo <= hi")
    if schema == "transports":
        if not isinstance(v, dict) or not v or set(v) - set(TRANSPORTS):
            raise bad(f"an object with keys among {', '.join(TRANSPORTS)}")
        for name, t in v.items():
            _check(t, _TRANSPORT, f"{where}.{name}")
            if (name == "dblp") != (t["dblp"] is not None):
                raise CalibrationError(f"{where}.{name}.dblp must be set for dblp only")


def validate(record: Any) -> None:
    """CalibrationError naming the first field of ``record`` that is not a v2 record's."""
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        got = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise CalibrationError(f"format={got!r} is invalid: must be {FORMAT!r}")
    _check(record, _RECORD, "record")


def load(path: str | Path) -> dict:
    """A v2 record read from ``path`` and validated."""
    try:
        record = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise CalibrationError(f"{path}: not JSON: {e}") from None
    try:
        validate(record)
    except CalibrationError as e:
        raise CalibrationError(f"{path}: {e}") from None
    return record
