"""What the emulator measured, as the cost model uses it: dimensionless, with intervals.

``load_calibration(paths)`` reads calibration records (``scaleacross-emu/calibration/2``
from ``emu calibrate``, or version 1 from training runs, see workloads/training/metrics.py) into
one :class:`Calibration`: per transport (mrc, rc, tcp) a :class:`TransportCal`, and the
DBLP results. Later files override earlier ones transport by transport. No absolute
emulator time is kept: the model multiplies these numbers by full-scale RTTs, RTOs and
rates.

What each number is (v2; see workloads/calibration/record.py for how it is measured):

* ``eta``: achieved fraction of the binding bottleneck rate, from a fit of completion
  time over >= 3 message sizes (t = a + S / (eta B)), so per-message overhead is not read
  as bandwidth loss; ``overhead_rtts`` = a / RTT. ``eta_dci`` the same over a binding DCI.
* ``load_balance``: aggregate goodput / ideal against flows per leaf uplink (ECMP
  collisions for RC and TCP; spraying for MRC).
* ``tail``: P99 round latency under microbursts / P50 healthy, against burst length in
  RTTs and burst excess over the switch buffer.
* ``recovery_rtts`` / ``recovery_rtos``: time a transport loses to a path failure,
  control-plane convergence excluded, in RTTs and in retransmission timeouts.
* DBLP: the delivered fraction of bounded rounds, their tail inflation, and the ratio of
  steps to a target (with / without DBLP) at the measured tolerance.

A version-1 record has one message size: its line-rate fraction becomes ``eta`` with
``overhead_rtts`` 0 and a note saying per-message overhead is counted as bandwidth loss;
it has no intervals (lo = hi = value).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.spec import SpecError

__all__ = [
    "DEFAULT_CALIBRATION", "FORMAT_V1", "FORMAT_V2", "Calibration", "DblpCal", "Interval",
    "Range", "TailPoint", "TransportCal", "dblp_steps_ratio", "load_calibration",
    "parse_calibration", "tail_at",
]

FORMAT_V1 = "scaleacross-emu/calibration/1"
FORMAT_V2 = "scaleacross-emu/calibration/2"
DEFAULT_CALIBRATION = Path(__file__).parent / "data" / "calibration_default.json"
TRANSPORT_NAMES = ("mrc", "rc", "tcp")


@dataclass(frozen=True)
class Interval:
    """A measured value with its 95 % interval (lo <= value <= hi)."""

    value: float
    lo: float
    hi: float

    @classmethod
    def exact(cls, value: float) -> Interval:
        return cls(value, value, value)

    def pick(self, band: str, worse_is_high: bool) -> float:
        """``band``: "mid" (value), "pess" (the worse end), "opt" (the better end)."""
        if band == "mid":
            return self.value
        high = (band == "pess") == worse_is_high
        return self.hi if high else self.lo


@dataclass(frozen=True)
class Range:
    """A measured range of a regime quantity (lo <= hi); None when not measured."""

    lo: float
    hi: float

    def outside(self, x: float, factor: float = 2.0) -> bool:
        """True beyond ``factor`` x the measured range (the ``extrapolated`` rule)."""
        return x < self.lo / factor or x > self.hi * factor


@dataclass(frozen=True)
class TailPoint:
    """Tail inflation measured at one burst geometry."""

    burst_rtts: float
    excess_buffers: float
    inflation: Interval
    delay_spike_only: bool = False


@dataclass(frozen=True)
class TransportCal:
    """One transport's calibration."""

    transport: str
    eta: Interval
    overhead_rtts: Interval
    eta_dci: Interval | None = None
    # The per-message overhead beyond half an RTT, in frame times of the calibration's
    # links (its RTT there is mostly one frame's serialisation; at full scale it is
    # latency): how the overhead is carried to full scale when known.
    overhead_frames: Interval | None = None
    load_balance: tuple[tuple[float, Interval], ...] = ()  # (flows per uplink, efficiency)
    tail: tuple[TailPoint, ...] = ()
    recovery_rtts: Interval | None = None
    recovery_rtos: Interval | None = None
    message_bdp: Range | None = None
    flows_per_uplink: Range | None = None
    burst_rtts: Range | None = None
    burst_excess_buffers: Range | None = None
    buffer_bdp: float | None = None
    # Emulator-scale facts of the regime, for predictions at the emulator's own scale
    # (explorer/predict.py) only: never used in a full-scale projection.
    rtt_s: float | None = None
    payload_bytes: int | None = None
    line_rate_mbit: float | None = None  # the calibration fabric's host links
    source: str = ""
    notes: tuple[str, ...] = ()

    def load_balance_at(self, flows: float, band: str = "mid") -> float:
        """Load-balance efficiency at ``flows`` per uplink: piecewise linear in log2(flows)
        between measured points, constant beyond them (1.0 when never measured)."""
        if not self.load_balance:
            return 1.0
        xs = [math.log2(f) for f, _ in self.load_balance]
        ys = [iv.pick(band, worse_is_high=False) for _, iv in self.load_balance]
        x = math.log2(flows)
        if x <= xs[0]:
            return ys[0]
        for i in range(1, len(xs)):
            if x <= xs[i]:
                w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
                return ys[i - 1] + w * (ys[i] - ys[i - 1])
        return ys[-1]

    def tail_at(self, burst_rtts: float, excess_buffers: float, band: str = "mid") -> float:
        """Tail inflation at a burst geometry (see :func:`tail_at`)."""
        return tail_at(self.tail, burst_rtts, excess_buffers, band)


def tail_at(points: Sequence[TailPoint], burst_rtts: float, excess_buffers: float,
            band: str = "mid") -> float:
    """Tail inflation of the measured geometry nearest in log space (1.0 if none). Points
    that were only delay spikes (their burst dropped nothing) count only when nothing
    else was measured."""
    pts = [p for p in points if not p.delay_spike_only] or list(points)
    if not pts:
        return 1.0
    best = min(pts, key=lambda p: _log_distance(p, burst_rtts, excess_buffers))
    return best.inflation.pick(band, worse_is_high=True)


def _log_distance(p: TailPoint, burst_rtts: float, excess: float) -> tuple[float, float, float]:
    # Ties broken by position so the scalar and vectorised lookups pick the same point.
    a = math.log(max(burst_rtts, 1e-9)) - math.log(max(p.burst_rtts, 1e-9))
    b = math.log(max(excess, 1e-9)) - math.log(max(p.excess_buffers, 1e-9))
    return (a * a + b * b, p.burst_rtts, p.excess_buffers)


@dataclass(frozen=True)
class DblpCal:
    """DBLP measured at ``tolerance``: delivered fraction, tail inflation, steps ratio."""

    tolerance: float
    delivered: Interval
    tail: tuple[TailPoint, ...] = ()
    steps_ratio: Interval | None = None
    steps_ratio_reason: str | None = None


@dataclass(frozen=True)
class Calibration:
    """Every transport's calibration and where it came from (path, sha256)."""

    transports: Mapping[str, TransportCal]
    dblp: DblpCal | None = None
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = field(default=())

    def get(self, transport: str) -> TransportCal:
        """The calibration of ``transport``, or an error naming what is missing."""
        if transport not in self.transports:
            have = ", ".join(sorted(self.transports)) or "none"
            files = ", ".join(p for p, _ in self.files) or "no file"
            raise SpecError(f"no calibration for transport {transport!r} (calibrated: {have}; "
                            f"from {files}); pass a record that has it with --calibration "
                            "(`emu calibrate` makes one)")
        return self.transports[transport]


def load_calibration(paths: Sequence[str | Path] = ()) -> Calibration:
    """Read ``paths`` (default: the calibration this project ships) into one Calibration."""
    paths = list(paths) or [DEFAULT_CALIBRATION]
    merged: dict[str, TransportCal] = {}
    dblp: DblpCal | None = None
    files: list[tuple[str, str]] = []
    notes: list[str] = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise SpecError(f"calibration file {str(path)!r} does not exist"
                            + (" (regenerate it with `emu calibrate --out "
                               f"{DEFAULT_CALIBRATION}`)" if path == DEFAULT_CALIBRATION
                               else ""))
        raw = path.read_bytes()
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise SpecError(f"{path}: not a JSON calibration record: {e}") from None
        cal = parse_calibration(doc, str(path))
        merged.update(cal.transports)
        dblp = cal.dblp or dblp
        notes.extend(cal.notes)
        files.append((str(path), hashlib.sha256(raw).hexdigest()))
    return Calibration(merged, dblp, tuple(files), tuple(notes))


def parse_calibration(doc: Mapping[str, Any], where: str = "<calibration>") -> Calibration:
    """A calibration from one parsed record (version 1 or 2)."""
    fmt = doc.get("format") if isinstance(doc, Mapping) else None
    if fmt == FORMAT_V2:
        return _parse_v2(doc, where)
    if fmt == FORMAT_V1:
        return _parse_v1(doc, where)
    raise SpecError(f"{where}: format {fmt!r} is not a calibration record (expected "
                    f"{FORMAT_V2!r} or {FORMAT_V1!r})")


# -- version 2 ------------------------------------------------------------------------

def _num(obj: Mapping[str, Any], key: str, where: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecError(f"{where}: {key} = {v!r} must be a finite number")
    return float(v)


def _interval(obj: Any, where: str, value: str = "value", lo: str = "lo",
              hi: str = "hi") -> Interval | None:
    if not isinstance(obj, Mapping) or obj.get(value) is None:
        return None
    v = _num(obj, value, where)
    lo_v = _num(obj, lo, where) if obj.get(lo) is not None else v
    hi_v = _num(obj, hi, where) if obj.get(hi) is not None else v
    if not lo_v <= v <= hi_v:
        raise SpecError(f"{where}: interval [{lo_v}, {hi_v}] does not contain {v}")
    return Interval(v, lo_v, hi_v)


def _range(obj: Any, where: str) -> Range | None:
    if obj is None:
        return None
    if (not isinstance(obj, (list, tuple)) or len(obj) != 2
            or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in obj)
            or obj[0] > obj[1]):
        raise SpecError(f"{where}: {obj!r} must be [lo, hi] with lo <= hi")
    return Range(float(obj[0]), float(obj[1]))


def _tail_points(items: Iterable[Any] | None, where: str) -> tuple[TailPoint, ...]:
    out = []
    for i, t in enumerate(items or ()):
        w = f"{where}.tail_inflation[{i}]"
        iv = _interval(t, w)
        if iv is None:
            continue
        out.append(TailPoint(_num(t, "burst_rtts", w), _num(t, "burst_excess_buffers", w), iv,
                             bool(t.get("delay_spike_only", False))))
    return tuple(out)


def _parse_v2(doc: Mapping[str, Any], where: str) -> Calibration:
    transports = doc.get("transports")
    if not isinstance(transports, Mapping):
        raise SpecError(f"{where}: 'transports' must be a table of transports")
    out: dict[str, TransportCal] = {}
    dblp: DblpCal | None = None
    notes: list[str] = []
    for name, t in transports.items():
        w = f"{where}: transports.{name}"
        if not isinstance(t, Mapping):
            raise SpecError(f"{w} must be a table")
        if name == "dblp" or t.get("dblp"):
            d = t.get("dblp")
            delivered = (_interval(d.get("delivered_fraction"), w)
                         if isinstance(d, Mapping) else None)
            if isinstance(d, Mapping) and delivered:
                dblp = DblpCal(
                    tolerance=_num(d, "tolerance", w),
                    delivered=delivered,
                    tail=_tail_points(t.get("tail_inflation"), w),
                    steps_ratio=_interval(d.get("steps_ratio"), w),
                    steps_ratio_reason=d.get("steps_ratio_reason"))
            if name == "dblp":
                continue
        if name not in TRANSPORT_NAMES:
            notes.append(f"{where}: transport {name!r} ignored (the model knows "
                         f"{', '.join(TRANSPORT_NAMES)})")
            continue
        eta_doc = t.get("eta") or {}
        eta = _interval(eta_doc, f"{w}.eta")
        if eta is None:
            notes.append(f"{w}: no eta ({'; '.join(t.get('excluded') or []) or 'not measured'})")
            continue
        overhead = _interval(eta_doc, f"{w}.eta", "overhead_rtts", "overhead_rtts_lo",
                             "overhead_rtts_hi") or Interval.exact(0.0)
        if overhead.lo < 0:
            # A negative intercept is the emulated ports' burst credit, not a transport
            # faster than its link: no per-message overhead is projected below zero.
            notes.append(f"{w}: overhead_rtts {overhead.value:.3g} clipped at 0")
            overhead = Interval(max(0.0, overhead.value), 0.0, max(0.0, overhead.hi))
        lb = []
        for i, p in enumerate(t.get("load_balance") or ()):
            iv = _interval(p, f"{w}.load_balance[{i}]")
            if iv is not None and not p.get("excluded"):
                lb.append((_num(p, "flows_per_uplink", f"{w}.load_balance[{i}]"), iv))
        rec = (t.get("recovery") or {}).get("link_cut") or {}
        recovery_rtts = _interval(rec, f"{w}.recovery.link_cut", "recovery_rtts")
        recovery_rtos = None
        if rec.get("recovery_rtos") is not None and recovery_rtts is not None:
            rtos = _num(rec, "recovery_rtos", f"{w}.recovery.link_cut")
            if recovery_rtts.value > 0 and rtos >= 0:
                # Same lost times divided by another unit: the interval scales with them.
                k = rtos / recovery_rtts.value
                recovery_rtos = Interval(rtos, recovery_rtts.lo * k, recovery_rtts.hi * k)
            else:
                recovery_rtos = Interval.exact(rtos)
        reg = t.get("regime") or {}
        rw = f"{w}.regime"
        frames = _overhead_frames(overhead, reg, eta_doc, doc, name)
        out[name] = TransportCal(
            transport=name, eta=eta, overhead_rtts=overhead, overhead_frames=frames,
            eta_dci=_interval(t.get("eta_dci"), f"{w}.eta_dci"),
            load_balance=tuple(sorted(lb)), tail=_tail_points(t.get("tail_inflation"), w),
            recovery_rtts=recovery_rtts, recovery_rtos=recovery_rtos,
            message_bdp=_range(reg.get("message_bdp"), rw),
            flows_per_uplink=_range(reg.get("flows_per_uplink"), rw),
            burst_rtts=_range(reg.get("burst_rtts"), rw),
            burst_excess_buffers=_range(reg.get("burst_excess_buffers"), rw),
            buffer_bdp=reg.get("buffer_bdp"), rtt_s=reg.get("rtt_s"),
            payload_bytes=reg.get("payload_bytes"),
            line_rate_mbit=(doc.get("fabric") or {}).get("rate_mbit"), source=where,
            notes=tuple(t.get("excluded") or ()))
    return Calibration(out, dblp, notes=tuple(notes))


def _overhead_frames(overhead: Interval, regime: Mapping[str, Any], eta: Mapping[str, Any],
                     doc: Mapping[str, Any], name: str) -> Interval | None:
    """``overhead_rtts`` as half an RTT plus k frame times of the calibration's links.

    A frame's time there is payload x lanes / binding rate (the binding rate is lanes x
    line rate x payload / frame; lanes: every plane, one for TCP)."""
    rtt, payload = regime.get("rtt_s"), regime.get("payload_bytes")
    binding = eta.get("binding_mbit")
    planes = (doc.get("fabric") or {}).get("planes")
    if not (rtt and payload and binding and planes):
        return None
    lanes = 1 if name == "tcp" else planes
    frame = payload * 8 * lanes / (binding * 1e6)

    def k(x: float) -> float:
        return max(0.0, (x - 0.5) * rtt / frame)
    return Interval(k(overhead.value), k(overhead.lo), k(overhead.hi))


# -- version 1 ------------------------------------------------------------------------

def _parse_v1(doc: Mapping[str, Any], where: str) -> Calibration:
    variants = doc.get("variants")
    if not isinstance(variants, Mapping):
        raise SpecError(f"{where}: 'variants' must be a table")
    out: dict[str, TransportCal] = {}
    notes = [f"{where}: version 1 (one message size): eta counts per-message overhead as "
             "bandwidth loss; no intervals"]
    for label, v in variants.items():
        transport = {"gloo": "tcp"}.get(v.get("transport"), v.get("transport"))
        if transport not in TRANSPORT_NAMES:
            continue
        frac = (v.get("line_rate") or {}).get("fraction")
        if frac is None:
            notes.append(f"{where}: {label}: no line-rate fraction")
            continue
        tail = (v.get("tail_inflation") or {}).get("value")
        # v1's time lost per failure includes control-plane convergence and the slowed
        # steps of the whole window: for the ECMP transports it is not a transport's own
        # recovery, so it is left out rather than counted twice.
        lost = v.get("lost_rtts_per_failure") if transport == "mrc" else None
        cal = TransportCal(
            transport=transport, eta=Interval.exact(float(frac)),
            overhead_rtts=Interval.exact(0.0),
            # v1 has no burst geometry: the point is placed at 1 RTT and 1 buffer.
            tail=(TailPoint(1.0, 1.0, Interval.exact(float(tail))),) if tail else (),
            recovery_rtts=Interval.exact(float(lost)) if lost is not None else None,
            source=where, notes=(f"v1 label {label}",))
        out.setdefault(transport, cal)  # the first label of a transport stands for it
    return Calibration(out, None, notes=tuple(notes))


def dblp_steps_ratio(cal: Calibration, band: str) -> float:
    """Steps to a target with DBLP / without, at the calibrated tolerance. When the
    calibration has none (no training results were given to `emu calibrate`), 1 /
    delivered fraction stands for it: as if every lost gradient entry were work thrown
    away (error feedback re-sends it, so this is pessimistic); such points are flagged."""
    assert cal.dblp is not None
    if cal.dblp.steps_ratio is not None:
        return cal.dblp.steps_ratio.pick(band, worse_is_high=True)
    return 1.0 / cal.dblp.delivered.pick(band, worse_is_high=False)
