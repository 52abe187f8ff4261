"""Calibration record version 2: dimensionless transport figures with their regime.

Pure (no root, no emulator imports). This module defines the record (this docstring)
and reduces measurements to it: ``workloads/calibration/calibrate.py`` measures on a fabric and
hands
plain samples (``workloads.calibration.samples``) to :func:`calibration_record`, which
reduces them with the statistics of ``workloads.calibration.stats`` and returns the
record; ``validate`` checks one (strictly: unknown or missing keys are errors) and
``load`` reads one back (both in ``workloads.calibration.schema``). Import each name from
the module that defines it.

No absolute emulator time enters a figure the explorer projects: every value is a
ratio, and ``regime`` says in which dimensionless groups it was measured (``rtt_s`` there
is information only).

Record (``scaleacross-emu/calibration/2``; floats finite or null)::

    {"format", "generated" (Unix time), "command", "versions", "host",
     "fabric": {"planes", "spines", "leaves", "hosts_per_leaf", "rate_mbit" (host links),
                "fabric_rate_mbit", "queue_packets", "mtu", "nominal_gbit" (what a host link
                stands for), "dci": null | {free-form: the 2-DC fabric of ``eta_dci``}},
     "transports": {"mrc" | "rc" | "tcp" | "dblp": {
        "regime": {...}, "eta": {...}, "eta_dci": {...} | null, "load_balance": [...],
        "tail_inflation": [...], "recovery": {"link_cut": {...}}, "dblp": {...} | null,
        "excluded": ["<what>: <reason>", ...],
        "switches": {...}}}}    (optional: older records have none)

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
* ``load_balance``: per flows_per_uplink (= concurrent connections x lanes / a leaf's
  uplinks over all planes) and ``qps_per_connection`` (RC's queue pairs per plane and
  connection, each its own 5-tuple; 1 for the other transports), value = mean over
  repetitions of aggregate goodput (all bytes / last completion) / ideal (every source's
  usable NICs busy: min(flows x lanes, planes) NICs at payload rate). ``balls_into_bins``
  (ECMP transports): F hashed flows (connections x QPs) onto N uplinks, E[occupied
  uplinks] / min(F, N) = N (1 - (1 - 1/N)^F) / min(F, N); for F = N it is 1 - (1 -
  1/N)^N. It counts uplink collisions only, each busy uplink full (an upper bound);
  ``ecmp_flows`` and ``ecmp_uplinks`` are that F and N (null where nothing is hashed),
  from which the explorer computes the most-loaded-link expectation (its ECMP law).
* ``tail_inflation``: per burst geometry, value = P99 of the latencies of the rounds that
  overlapped a burst window (pooled over repetitions) / P50 of the healthy rounds (same
  repetitions, no bursts); percentiles interpolate linearly. ``burst_rtts`` = on-time /
  rtt_s; ``burst_excess_buffers`` = (sources x source rate - target rate) x on-time / 8 /
  (buffer_packets x frame_bytes); ``rounds``: the rounds under bursts behind the P99;
  ``burst_drops``: packets dropped at the target FIFOs while the bursts ran (every kept
  repetition); ``delay_spike_only``: no drop at all, so the burst delayed and never lost;
  ``healthy_p50_rtts``: the healthy rounds' P50 in RTTs (so (value - 1) x it is the delay
  a burst adds, in RTTs).
  DBLP's rounds are bounded (``dblp.tolerance``), so its healthy P50 is a bounded one too.
* ``recovery.link_cut``: per repetition lost = completion with the cut - without;
  ``lost_rtts`` = mean lost / rtt_s; ``convergence_s``: mean control-plane convergence
  (null when the transport's paths do not depend on it); ``timer_wait_s``: mean time from
  convergence to the retry that gets through (the sender's first retransmission timeout
  at or after convergence within the lost time, ``RecoverySample.retry_s``; 0 where none
  fired there), null without convergence; ``recovery_rtts`` = mean(lost - ready) / rtt_s
  with ``lo``/``hi``, ready = the later of convergence and that retry (0 for a transport
  that routes around the cut itself): the transport's own restart once a retry gets
  through, since the explorer models the wait for convergence and for the retry timer at
  full scale itself (explorer/failures.py); ``recovery_rtos`` = the same / rto_floor_s.
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

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from workloads.calibration.samples import (
    LoadSample,
    RecoverySample,
    Regime,
    RoundsSample,
    TransferSample,
    TransportMeasurements,
)
from workloads.calibration.schema import (
    FORMAT,
    TRANSPORTS,
    CalibrationError,
    plain,
    validate,
)
from workloads.calibration.stats import RESAMPLES, EtaFit, balls_into_bins, bootstrap, fit_eta

__all__ = ["calibration_record", "transport_record"]

CREDIT_MARGIN = 1.5  # eta points below this many burst credits are left out of the fit


# -- helpers of the reductions -----------------------------------------------------------


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
    for fpu, qps in sorted({(s.flows_per_uplink, s.qps) for s in samples}):
        at = sorted((s for s in samples if (s.flows_per_uplink, s.qps) == (fpu, qps)),
                    key=lambda s: s.rep)
        what = f"load_balance {fpu:g} flows per uplink" + (f" x {qps} QPs" if qps > 1 else "")
        reasons = [f"rep {s.rep}: {r}" for s in at if (r := s.cpu.bound())]
        if reasons:
            excluded.append(f"{what}: " + "; ".join(reasons))
        ratios = [s.goodput_mbit / s.ideal_mbit for s in at]
        key = str(fpu) if qps == 1 else f"{fpu}x{qps}"  # qps 1 keeps its former seed
        lo, hi = bootstrap(ratios, _mean, seed=_seed(seed, name, "lb", key),
                           resamples=resamples, value=_mean(ratios))
        f, n = at[0].ecmp_flows, at[0].ecmp_uplinks
        out.append({"flows_per_uplink": fpu, "qps_per_connection": qps, "value": _mean(ratios),
                    "lo": lo, "hi": hi,
                    "balls_into_bins": balls_into_bins(f, n) if f and n else None,
                    "ecmp_flows": f, "ecmp_uplinks": n, "excluded": "; ".join(reasons) or None})
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

        p50 = _pct([x for h, _ in pairs for x in h.latencies_s], 50)

        lo, hi = bootstrap(pairs, ratio, seed=_seed(seed, name, what), resamples=resamples,
                           value=ratio(pairs))
        drops = sum(b.burst_drops for _, b in pairs)
        out.append({"burst_rtts": geo.rtts(regime),
                    "burst_excess_buffers": geo.excess_buffers(regime),
                    "value": ratio(pairs), "lo": lo, "hi": hi, "burst_drops": drops,
                    "delay_spike_only": drops == 0,
                    "rounds": sum(len(b.latencies_s) for _, b in pairs),
                    "healthy_p50_rtts": None if p50 is None else p50 / regime.rtt_s})
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
    net = [s.cut_s - s.clean_s - _ready(s) for s in kept]
    lost = _mean([s.cut_s - s.clean_s for s in kept])
    conv = [s.convergence_s for s in kept if s.convergence_s is not None]
    waits = [_ready(s) - s.convergence_s for s in kept if s.convergence_s is not None]
    rec = _mean(net)

    def per_rtt(xs: Sequence[float]) -> float | None:
        m = _mean(xs)  # never None: bootstrap resamples a non-empty ``net``
        return None if m is None else m / rtt

    lo, hi = bootstrap(net, per_rtt, seed=_seed(seed, name, "recovery"),
                       resamples=resamples, value=None if rec is None else rec / rtt)
    return {"lost_rtts": None if lost is None else lost / rtt,
            "convergence_s": _mean(conv) if conv else None,
            "timer_wait_s": _mean(waits) if waits else None,
            "recovery_rtts": None if rec is None else rec / rtt, "lo": lo, "hi": hi,
            "recovery_rtos": None if rec is None or not rto else rec / rto}, excluded


def _ready(s: RecoverySample) -> float:
    """When the transfer could go on after the cut: the later of convergence and the
    retry that got through (0 for a transport that does not wait for convergence)."""
    if s.convergence_s is None:
        return 0.0
    return max(s.convergence_s, s.retry_s or 0.0)


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
    out = {"regime": regime, "eta": eta, "eta_dci": eta_dci, "load_balance": load,
           "tail_inflation": tails, "recovery": {"link_cut": recovery}, "dblp": dblp,
           "excluded": excluded + list(m.notes)}
    if m.switches is not None:
        out["switches"] = switches_record(dict(m.switches))
    return out


def switches_record(sw: Mapping[str, Any]) -> dict:
    """A transport's ``switches`` section: what its switch ports did over its
    measurements (its production form's: workloads/systems.py) and the fractions of the
    packets they carried that were marked and trimmed."""
    n = int(sw.get("packets", 0))
    counts = {k: int(sw.get(k, 0)) for k in ("packets", "marked", "trimmed", "dropped",
                                             "ce_seen")}
    return {"signals": str(sw.get("signals", "plain")),
            "mechanism": str(sw.get("mechanism", "none")), **counts,
            "marked_fraction": counts["marked"] / n if n else None,
            "trimmed_fraction": counts["trimmed"] / n if n else None,
            "dropped_fraction": counts["dropped"] / n if n else None}


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
    record = plain(record)
    validate(record)
    return record
