"""The measurements the calibration record is reduced from: plain, frozen samples.

Its one job is the inputs: ``workloads/calibration/calibrate.py`` measures on a fabric and hands
these
dataclasses (one per measurement, with the CPU its drivers used) to
``workloads.calibration.record.calibration_record``; ``steps_from_training`` makes DBLP's steps
samples from ``emu bench training`` results. Frozen, so that a transport's measurements
can key a memo of its reduced section. Whether a measurement was CPU-bound is decided
here (``CpuUse.bound``), once for every figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workloads.calibration.schema import BINDINGS, CalibrationError

CPU_BOUND = 0.9  # of one core (a driver), or of all cores (the drivers together)


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
    """Raw quantities of the path a transport was measured on (``workloads.calibration.record``'s
    docstring says what each stands for)."""

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
    ``ecmp_uplinks`` N (None for transports that do not hash); ``qps``: RC's queue pairs
    per plane and connection (each its own hashed flow)."""

    rep: int
    flows_per_uplink: float
    goodput_mbit: float
    ideal_mbit: float
    cpu: CpuUse
    ecmp_flows: int | None = None
    ecmp_uplinks: int | None = None
    qps: int = 1


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
    (``control_plane``: whether the transport's paths wait for it); ``retry_s``: from the
    cut to the sender's first retransmission timeout at or after convergence and within
    the time the cut cost (the retry that gets through; None: none fired there, or the
    transport logs none)."""

    rep: int
    clean_s: float
    cut_s: float
    convergence_s: float | None
    control_plane: bool
    cpu: CpuUse
    retry_s: float | None = None


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
    # its switch ports over all its measurements (packets, marked, trimmed, dropped,
    # ce_seen, signals, mechanism) as sorted (key, value) pairs, so that the measurements
    # stay hashable (calibration_record's memo); None: not recorded (a fabric without the
    # ports' program)
    switches: tuple[tuple[str, Any], ...] | None = None


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
