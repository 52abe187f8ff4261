"""What the emulator measured, as the cost model uses it: dimensionless, with intervals.

``load_calibration(paths)`` reads calibration records (``scaleacross-emu/calibration/2``
from ``emu calibrate``, or version 1 from training runs, see workloads/training/metrics.py) into
one :class:`Calibration`: per transport (mrc, rc, rc_lossy, tcp) a :class:`TransportCal`,
and the DBLP results. Later files override earlier ones figure by figure (a record that
measured only load balance and tails replaces those and keeps the rest). No absolute
emulator time is kept: the transfer laws (explorer/laws.py) carry these numbers to
full-scale RTTs, RTOs, rates and fabrics.

A record's RC is the explorer's ``rc_lossy`` (go-back-N over FIFOs that drop), unless
its FIFOs hold every RC window that can meet at one port in what it measured (queue
packets >= RC's window x the most queue pairs per uplink): then nothing could drop, a
collision or a burst cost queueing only, as on a PFC-lossless RoCE fabric, and it is
the explorer's ``rc`` (production RoCE).

What each number is (v2; see workloads/calibration/record.py for how it is measured):

* ``eta``: achieved fraction of the binding bottleneck rate, from a fit of completion
  time over >= 3 message sizes (t = a + S / (eta B)), so per-message overhead is not read
  as bandwidth loss; ``overhead_rtts`` = a / RTT. ``eta_dci`` the same over a binding DCI.
* ``load_balance``: aggregate goodput / ideal per flows per leaf uplink and queue pairs
  per connection, with the hashed flows and uplinks of the measurement (the ECMP law's
  structure at the measured point).
* ``tail``: P99 round latency under microbursts / P50 healthy, against burst length in
  RTTs and burst excess over the switch buffer, with the healthy P50 in RTTs.
* ``recovery_rtts`` / ``recovery_rtos``: time a transport loses to a path failure,
  control-plane convergence and the wait for the retry that got through after it
  excluded (the explorer models both at full scale: explorer/failures.py), in RTTs and
  in retransmission timeouts.
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
    "DEFAULT_CALIBRATION", "FORMAT_V1", "FORMAT_V2", "LAW_CALIBRATIONS", "Calibration",
    "DblpCal", "Interval", "LoadPoint", "MeasuredFabric", "Range", "TailPoint",
    "TransportCal", "dblp_steps_ratio", "load_calibration", "parse_calibration",
]

FORMAT_V1 = "scaleacross-emu/calibration/1"
FORMAT_V2 = "scaleacross-emu/calibration/2"
DATA = Path(__file__).parent / "data"
DEFAULT_CALIBRATION = DATA / "calibration_default.json"
# Measured since for the transfer laws (scripts/calibrate_laws.py), read over it.
LAW_CALIBRATIONS = (DATA / "calibration_ecmp.json", DATA / "calibration_rc_lossless.json")
TRANSPORT_NAMES = ("mrc", "rc", "rc_lossy", "tcp")
RC_WINDOW_PKTS = 64  # transports/core/rc.py: RcConfig.window_pkts, RDMA's outstanding limit


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
    """Tail inflation measured at one burst geometry (``healthy_p50_rtts``: the healthy
    round's P50 in RTTs, when the record has it)."""

    burst_rtts: float
    excess_buffers: float
    inflation: Interval
    delay_spike_only: bool = False
    healthy_p50_rtts: float | None = None


@dataclass(frozen=True)
class LoadPoint:
    """Load balance measured at ``flows_per_uplink`` connections per leaf uplink, each of
    ``qps`` queue pairs: ``efficiency`` = aggregate goodput / ideal; ``ecmp_flows`` hashed
    flows of one leaf onto ``ecmp_uplinks`` uplinks (None where nothing is hashed)."""

    flows_per_uplink: float
    qps: int
    efficiency: Interval
    ecmp_flows: int | None = None
    ecmp_uplinks: int | None = None


@dataclass(frozen=True)
class MeasuredFabric:
    """The calibration fabric's shape, for the ECMP law at the measured point."""

    planes: int
    spines: int
    leaves: int
    hosts_per_leaf: int
    queue_packets: int


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
    load_balance: tuple[LoadPoint, ...] = ()
    tail: tuple[TailPoint, ...] = ()
    recovery_rtts: Interval | None = None
    recovery_rtos: Interval | None = None
    message_bdp: Range | None = None
    flows_per_uplink: Range | None = None
    burst_rtts: Range | None = None
    burst_excess_buffers: Range | None = None
    buffer_bdp: float | None = None
    fabric: MeasuredFabric | None = None
    # Emulator-scale facts of the regime, for predictions at the emulator's own scale
    # (explorer/predict.py) only: never used in a full-scale projection.
    rtt_s: float | None = None
    payload_bytes: int | None = None
    line_rate_mbit: float | None = None  # the calibration fabric's host links
    # The switch ports its eta was measured on and what they did (the record's
    # ``switches``: "ecn+trim ports (tc-bpf): 2.39 % of 340426 packets marked, 0.0185 %
    # trimmed, 0.192 % dropped"), or None
    switches: str | None = None
    source: str = ""
    notes: tuple[str, ...] = ()


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
    """Read ``paths`` (default: the calibration this project ships, with the records
    measured for the transfer laws over it) into one Calibration, later files overriding
    earlier ones figure by figure."""
    paths = list(paths) or [DEFAULT_CALIBRATION, *(p for p in LAW_CALIBRATIONS
                                                   if p.is_file())]
    merged: dict[str, dict[str, Any]] = {}
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
        figures, d, n = _figures(doc, str(path))
        for name, f in figures.items():
            merged.setdefault(name, {}).update(f)
        dblp = d or dblp
        notes.extend(n)
        files.append((str(path), hashlib.sha256(raw).hexdigest()))
    return Calibration(_build(merged, notes), dblp, tuple(files), tuple(notes))


def parse_calibration(doc: Mapping[str, Any], where: str = "<calibration>") -> Calibration:
    """A calibration from one parsed record (version 1 or 2)."""
    figures, dblp, notes = _figures(doc, where)
    return Calibration(_build(figures, notes), dblp, notes=tuple(notes))


def _figures(doc: Mapping[str, Any], where: str
             ) -> tuple[dict[str, dict[str, Any]], DblpCal | None, list[str]]:
    """Per transport the figures one record has (TransportCal fields), its DBLP results,
    and notes."""
    fmt = doc.get("format") if isinstance(doc, Mapping) else None
    if fmt == FORMAT_V2:
        return _parse_v2(doc, where)
    if fmt == FORMAT_V1:
        return _parse_v1(doc, where)
    raise SpecError(f"{where}: format {fmt!r} is not a calibration record (expected "
                    f"{FORMAT_V2!r} or {FORMAT_V1!r})")


def _build(figures: Mapping[str, Mapping[str, Any]], notes: list[str]
           ) -> dict[str, TransportCal]:
    """TransportCals from merged figures (a transport without eta is left out, noted)."""
    figs: dict[str, dict[str, Any]] = {k: dict(v) for k, v in figures.items()}
    rc, lossy = figs.get("rc"), figs.get("rc_lossy")
    if rc is not None and lossy is not None and "recovery_rtts" not in rc \
            and "recovery_rtts" in lossy:
        # A cut link loses what was in flight on it whatever the FIFOs: lossless RC's
        # recovery is the lossy one's (measured on the same cores).
        for k in ("recovery_rtts", "recovery_rtos"):
            if k in lossy:
                rc[k] = lossy[k]
        notes.append("rc: recovery from a link cut is rc_lossy's (the same cores; a cut "
                     "loses what was in flight whatever the FIFOs)")
    out = {}
    for name, f in figs.items():
        if f.get("eta") is None:
            notes.append(f"{name}: no eta measured in any file; left out")
            continue
        f.setdefault("overhead_rtts", Interval.exact(0.0))
        out[name] = TransportCal(transport=name, **f)
    return out


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


def _tail_points(items: Iterable[Any] | None, where: str, p50_estimate: float | None = None
                 ) -> tuple[TailPoint, ...]:
    """Tail entries; a record older than ``healthy_p50_rtts`` gets ``p50_estimate``."""
    out = []
    for i, t in enumerate(items or ()):
        w = f"{where}.tail_inflation[{i}]"
        iv = _interval(t, w)
        if iv is None:
            continue
        p50 = t.get("healthy_p50_rtts")
        p50 = p50_estimate if p50 is None else _num(t, "healthy_p50_rtts", w)
        out.append(TailPoint(_num(t, "burst_rtts", w), _num(t, "burst_excess_buffers", w), iv,
                             bool(t.get("delay_spike_only", False)), p50))
    return tuple(out)


def _load_points(items: Iterable[Any] | None, where: str) -> tuple[LoadPoint, ...]:
    out = []
    for i, p in enumerate(items or ()):
        w = f"{where}.load_balance[{i}]"
        iv = _interval(p, w)
        if iv is None or p.get("excluded"):
            continue
        f, n = p.get("ecmp_flows"), p.get("ecmp_uplinks")
        out.append(LoadPoint(_num(p, "flows_per_uplink", w), int(p.get("qps_per_connection")
                                                                 or 1), iv,
                             None if f is None else int(f), None if n is None else int(n)))
    return tuple(sorted(out, key=lambda x: (x.qps, x.flows_per_uplink)))


ROUND_BYTES = 256 << 10  # workloads/calibration/plan.py's Plan.round_bytes, the tails' round


def _p50_estimate(t: Mapping[str, Any]) -> float | None:
    """The healthy round's P50 in RTTs, for records written before they carried it: the
    round's bytes at eta of the binding rate, plus the per-message overhead."""
    reg, eta = t.get("regime") or {}, t.get("eta") or {}
    bdp, e = reg.get("bdp_bytes"), eta.get("value")
    if not (bdp and e):
        return None
    return ROUND_BYTES / (e * bdp) + max(0.0, eta.get("overhead_rtts") or 0.0)


def _fabric(doc: Mapping[str, Any]) -> MeasuredFabric | None:
    f = doc.get("fabric") or {}
    keys = ("planes", "spines", "leaves", "hosts_per_leaf", "queue_packets")
    if not all(isinstance(f.get(k), int) for k in keys):
        return None
    return MeasuredFabric(*(int(f[k]) for k in keys))


def _lossless(fabric: MeasuredFabric | None, load: Sequence[LoadPoint]) -> bool:
    """Whether RC measured on ``fabric`` could never drop: its FIFOs hold RC's whole
    window for the most queue pairs that met at one uplink (module docstring)."""
    if fabric is None:
        return False
    most = max([1.0] + [p.ecmp_flows / p.ecmp_uplinks for p in load
                        if p.ecmp_flows and p.ecmp_uplinks])
    return fabric.queue_packets >= RC_WINDOW_PKTS * most


def _parse_v2(doc: Mapping[str, Any], where: str
              ) -> tuple[dict[str, dict[str, Any]], DblpCal | None, list[str]]:
    transports = doc.get("transports")
    if not isinstance(transports, Mapping):
        raise SpecError(f"{where}: 'transports' must be a table of transports")
    out: dict[str, dict[str, Any]] = {}
    dblp: DblpCal | None = None
    notes: list[str] = []
    fabric = _fabric(doc)
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
                    tail=_tail_points(t.get("tail_inflation"), w, _p50_estimate(t)),
                    steps_ratio=_interval(d.get("steps_ratio"), w),
                    steps_ratio_reason=d.get("steps_ratio_reason"))
            if name == "dblp":
                continue
        load = _load_points(t.get("load_balance"), w)
        if name == "rc":
            name = "rc" if _lossless(fabric, load) else "rc_lossy"
        if name not in TRANSPORT_NAMES:
            notes.append(f"{where}: transport {name!r} ignored (the model knows "
                         f"{', '.join(TRANSPORT_NAMES)})")
            continue
        f: dict[str, Any] = {"source": where, "notes": tuple(t.get("excluded") or ())}
        eta_doc = t.get("eta") or {}
        eta = _interval(eta_doc, f"{w}.eta")
        if eta is not None:
            # the ports this eta was measured on (a record without an eta, read over
            # another, leaves the other's eta and ports together)
            f["switches"] = _switches(t.get("switches"))
        reg = t.get("regime") or {}
        rw = f"{w}.regime"
        if eta is not None:
            overhead = _interval(eta_doc, f"{w}.eta", "overhead_rtts", "overhead_rtts_lo",
                                 "overhead_rtts_hi") or Interval.exact(0.0)
            if overhead.lo < 0:
                # A negative intercept is the emulated ports' burst credit, not a transport
                # faster than its link: no per-message overhead is projected below zero.
                notes.append(f"{w}: overhead_rtts {overhead.value:.3g} clipped at 0")
                overhead = Interval(max(0.0, overhead.value), 0.0, max(0.0, overhead.hi))
            f.update(eta=eta, overhead_rtts=overhead,
                     overhead_frames=_overhead_frames(overhead, reg, eta_doc, doc, name),
                     message_bdp=_range(reg.get("message_bdp"), rw),
                     rtt_s=reg.get("rtt_s"), payload_bytes=reg.get("payload_bytes"),
                     line_rate_mbit=(doc.get("fabric") or {}).get("rate_mbit"))
        eta_dci = _interval(t.get("eta_dci"), f"{w}.eta_dci")
        if eta_dci is not None:
            f["eta_dci"] = eta_dci
        if load:
            f.update(load_balance=load, fabric=fabric,
                     flows_per_uplink=_range(reg.get("flows_per_uplink"), rw))
        tail = _tail_points(t.get("tail_inflation"), w, _p50_estimate(t))
        if tail:
            f.update(tail=tail, burst_rtts=_range(reg.get("burst_rtts"), rw),
                     burst_excess_buffers=_range(reg.get("burst_excess_buffers"), rw),
                     buffer_bdp=reg.get("buffer_bdp"))
        rec = (t.get("recovery") or {}).get("link_cut") or {}
        recovery_rtts = _interval(rec, f"{w}.recovery.link_cut", "recovery_rtts")
        if recovery_rtts is not None:
            f["recovery_rtts"] = recovery_rtts
            if rec.get("recovery_rtos") is not None:
                rtos = _num(rec, "recovery_rtos", f"{w}.recovery.link_cut")
                if recovery_rtts.value > 0 and rtos >= 0:
                    # Same lost times divided by another unit: the interval scales with them.
                    k = rtos / recovery_rtts.value
                    f["recovery_rtos"] = Interval(rtos, recovery_rtts.lo * k,
                                                  recovery_rtts.hi * k)
                else:
                    f["recovery_rtos"] = Interval.exact(rtos)
        out[name] = f
    return out, dblp, notes


def _switches(sw: Any) -> str | None:
    """A record's ``switches`` section in one line (None: an older record without it)."""
    if not isinstance(sw, Mapping) or not sw.get("packets"):
        return None

    def pct(k: str) -> str:
        v = sw.get(k)
        return "?" if v is None else f"{100 * v:.3g} %"
    return (f"{sw.get('signals')} ports ({sw.get('mechanism')}): {pct('marked_fraction')} "
            f"of {sw['packets']} packets marked, {pct('trimmed_fraction')} trimmed, "
            f"{pct('dropped_fraction')} dropped")


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

def _parse_v1(doc: Mapping[str, Any], where: str
              ) -> tuple[dict[str, dict[str, Any]], None, list[str]]:
    variants = doc.get("variants")
    if not isinstance(variants, Mapping):
        raise SpecError(f"{where}: 'variants' must be a table")
    out: dict[str, dict[str, Any]] = {}
    notes = [f"{where}: version 1 (one message size): eta counts per-message overhead as "
             "bandwidth loss; no intervals"]
    for label, v in variants.items():
        transport = {"gloo": "tcp", "rc": "rc_lossy"}.get(v.get("transport"),
                                                           v.get("transport"))
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
        f: dict[str, Any] = {"eta": Interval.exact(float(frac)),
                             "overhead_rtts": Interval.exact(0.0), "source": where,
                             "notes": (f"v1 label {label}",)}
        if tail:  # v1 has no burst geometry: the point is placed at 1 RTT and 1 buffer
            f["tail"] = (TailPoint(1.0, 1.0, Interval.exact(float(tail))),)
        if lost is not None:
            f["recovery_rtts"] = Interval.exact(float(lost))
        out.setdefault(transport, f)  # the first label of a transport stands for it
    return out, None, notes


def dblp_steps_ratio(cal: Calibration, band: str) -> float:
    """Steps to a target with DBLP / without, at the calibrated tolerance. When the
    calibration has none (no training results were given to `emu calibrate`), 1 /
    delivered fraction stands for it: as if every lost gradient entry were work thrown
    away (error feedback re-sends it, so this is pessimistic); such points are flagged."""
    assert cal.dblp is not None
    if cal.dblp.steps_ratio is not None:
        return cal.dblp.steps_ratio.pick(band, worse_is_high=True)
    return 1.0 / cal.dblp.delivered.pick(band, worse_is_high=False)
