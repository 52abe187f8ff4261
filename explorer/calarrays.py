"""A calibration at one band as small arrays indexed by transport code, for the
vectorised model: per-transport figures (eta, overhead, recovery), load-balance and
tail-inflation tables, the regime's measured ranges, DBLP's figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from explorer.calibration import Calibration, Interval, TailPoint, dblp_steps_ratio
from explorer.spec import TRANSPORTS

__all__ = ["CalArrays", "by_transport", "tail_at_np"]


def _pick(iv: Interval | None, band: str, worse_is_high: bool) -> float:
    return float("nan") if iv is None else iv.pick(band, worse_is_high)


def _tail_table(points: tuple[TailPoint, ...], band: str) -> tuple[np.ndarray, ...]:
    pts = [p for p in points if not p.delay_spike_only] or list(points)
    pts.sort(key=lambda p: (p.burst_rtts, p.excess_buffers))
    return (np.log(np.maximum([p.burst_rtts for p in pts], 1e-9)),
            np.log(np.maximum([p.excess_buffers for p in pts], 1e-9)),
            np.array([p.inflation.pick(band, True) for p in pts]))


@dataclass
class CalArrays:
    """A calibration at one band as arrays indexed by transport code (spec.TRANSPORTS)."""

    present: np.ndarray
    eta: np.ndarray
    eta_x: np.ndarray
    overhead: np.ndarray
    overhead_frames: np.ndarray
    rec_rtts: np.ndarray
    lb: list[tuple[np.ndarray, np.ndarray]]
    tail: list[tuple[np.ndarray, ...]]
    buffer_bdp: np.ndarray
    ranges: dict[str, np.ndarray]
    dblp_tol: float
    dblp_ratio: float
    dblp_tail: tuple[np.ndarray, ...] | None
    eta_dci_known: np.ndarray | None = None
    dblp_ratio_measured: bool = False

    @classmethod
    def build(cls, cal: Calibration, band: str = "mid") -> CalArrays:
        n = len(TRANSPORTS)
        nan = float("nan")
        present = np.zeros(n, bool)
        eta, eta_x, ov, kf, rr, buf = (np.full(n, nan) for _ in range(6))
        ranges = {k: np.full((n, 2), nan) for k in
                  ("message_bdp", "flows_per_uplink", "burst_rtts", "burst_excess_buffers")}
        lb: list[tuple[np.ndarray, np.ndarray]] = []
        tail: list[tuple[np.ndarray, ...]] = []
        eta_dci_known = np.zeros(n, bool)
        for i, name in enumerate(TRANSPORTS):
            tc = cal.transports.get(name)
            if tc is None:
                lb.append((np.zeros(1), np.ones(1)))
                tail.append((np.zeros(0), np.zeros(0), np.zeros(0)))
                continue
            present[i] = True
            eta[i] = tc.eta.pick(band, False)
            eta_x[i] = (tc.eta_dci or tc.eta).pick(band, False)
            eta_dci_known[i] = tc.eta_dci is not None
            ov[i] = tc.overhead_rtts.pick(band, True)
            kf[i] = _pick(tc.overhead_frames, band, True)
            rr[i] = _pick(tc.recovery_rtts, band, True)
            buf[i] = tc.buffer_bdp if tc.buffer_bdp else nan
            if tc.load_balance:
                lb.append((np.log2([f for f, _ in tc.load_balance]),
                           np.array([iv.pick(band, False) for _, iv in tc.load_balance])))
            else:
                lb.append((np.zeros(1), np.ones(1)))
            tail.append(_tail_table(tc.tail, band))
            for k, arr in ranges.items():
                r = getattr(tc, k)
                if r is not None:
                    arr[i] = (r.lo, r.hi)
        d = cal.dblp
        ratio = nan if d is None else dblp_steps_ratio(cal, band)
        out = cls(present, eta, eta_x, ov, kf, rr, lb, tail, buf, ranges,
                  d.tolerance if d else nan, ratio,
                  _tail_table(d.tail, band) if d and d.tail else None)
        out.eta_dci_known = eta_dci_known
        out.dblp_ratio_measured = d is not None and d.steps_ratio is not None
        return out


def by_transport(values: np.ndarray, code: Any) -> Any:
    return values[np.asarray(code, dtype=np.intp)]


def tail_at_np(table: tuple[np.ndarray, ...], burst_rtts: Any, excess: Any) -> Any:
    xs, ys, vals = table
    if len(vals) == 0:
        return np.ones(np.shape(burst_rtts)) if np.ndim(burst_rtts) else 1.0
    a = np.log(np.maximum(burst_rtts, 1e-9))[..., None] - xs
    b = np.log(np.maximum(excess, 1e-9))[..., None] - ys
    return vals[np.argmin(a * a + b * b, axis=-1)]
