"""A calibration at one band as small arrays indexed by transport code (spec.TRANSPORTS),
the form the cost model reads: per-transport figures (eta, overhead, recovery), each
transport's ECMP law table and burst-law coefficients (explorer/laws.py), the regime's
measured ranges, DBLP's figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from explorer.calibration import Calibration, Interval, dblp_steps_ratio
from explorer.laws import EcmpLaw, TailLaw, ecmp_law, tail_law
from explorer.spec import TRANSPORTS

__all__ = ["CalArrays", "by_transport"]


def _pick(iv: Interval | None, band: str, worse_is_high: bool) -> float:
    return float("nan") if iv is None else iv.pick(band, worse_is_high)


@dataclass
class CalArrays:
    """A calibration at one band as arrays indexed by transport code."""

    calibration: Calibration
    band: str
    present: np.ndarray
    eta: np.ndarray
    eta_x: np.ndarray
    eta_dci_known: np.ndarray
    overhead: np.ndarray  # in RTTs
    overhead_frames: np.ndarray  # NaN: not known
    rec_rtts: np.ndarray
    buffer_bdp: np.ndarray
    hashed: np.ndarray  # ECMP hashes the transport (else it sprays)
    ecmp: list[tuple[np.ndarray, np.ndarray]]  # (log2 abscissa, correction) per transport
    queueing: np.ndarray  # burst law: lossless queueing (else measured a + b L)
    tail_corr: list[tuple[np.ndarray, np.ndarray]]  # lossless: (log L, D / D0)
    tail_a: np.ndarray
    tail_b: np.ndarray
    ranges: dict[str, np.ndarray]
    dblp_tol: float = float("nan")
    dblp_ratio: float = float("nan")
    dblp_ratio_measured: bool = False
    dblp_tail: tuple[float, float] | None = None
    laws: dict[str, tuple[EcmpLaw, TailLaw]] = field(default_factory=dict)

    @classmethod
    def build(cls, cal: Calibration, band: str = "mid") -> CalArrays:
        n = len(TRANSPORTS)
        nan = float("nan")

        def arr(fill: float = nan) -> np.ndarray:
            return np.full(n, fill)

        present, known, hashed, queueing = (np.zeros(n, bool) for _ in range(4))
        eta, eta_x, ov, kf, rr, buf, ta, tb = (arr() for _ in range(8))
        ranges = {k: np.full((n, 2), nan) for k in
                  ("message_bdp", "flows_per_uplink", "burst_rtts", "burst_excess_buffers")}
        ecmp: list[tuple[np.ndarray, np.ndarray]] = []
        tail_corr: list[tuple[np.ndarray, np.ndarray]] = []
        laws: dict[str, tuple[EcmpLaw, TailLaw]] = {}
        for i, name in enumerate(TRANSPORTS):
            tc = cal.transports.get(name)
            if tc is None:
                ecmp.append((np.zeros(1), np.ones(1)))
                tail_corr.append((np.zeros(1), np.ones(1)))
                continue
            present[i] = True
            eta[i] = tc.eta.pick(band, False)
            eta_x[i] = (tc.eta_dci or tc.eta).pick(band, False)
            known[i] = tc.eta_dci is not None
            ov[i] = tc.overhead_rtts.pick(band, True)
            kf[i] = _pick(tc.overhead_frames, band, True)
            rr[i] = _pick(tc.recovery_rtts, band, True)
            buf[i] = tc.buffer_bdp if tc.buffer_bdp else nan
            law = ecmp_law(tc)
            tlaw = tail_law(tc, lossless=name == "rc")
            laws[name] = (law, tlaw)
            hashed[i] = law.hashed
            ecmp.append(law.table(band))
            if law.points:
                xs = [p.hashed_per_uplink if law.hashed else p.flows_per_uplink
                      for p in law.points]
                ranges["flows_per_uplink"][i] = (min(xs), max(xs))
            queueing[i] = tlaw.queueing
            tail_corr.append(tlaw.correction(band))
            ta[i], tb[i] = tlaw.coefficients(band)
            for k in ("message_bdp", "burst_rtts", "burst_excess_buffers"):
                r = getattr(tc, k)
                if r is not None:
                    ranges[k][i] = (r.lo, r.hi)
        out = cls(cal, band, present, eta, eta_x, known, ov, kf, rr, buf, hashed, ecmp,
                  queueing, tail_corr, ta, tb, ranges, laws=laws)
        d = cal.dblp
        if d is not None:
            out.dblp_tol = d.tolerance
            out.dblp_ratio = dblp_steps_ratio(cal, band)
            out.dblp_ratio_measured = d.steps_ratio is not None
            if d.tail:
                out.dblp_tail = tail_law(None, d.tail, "dblp").coefficients(band)
        return out


def by_transport(values: np.ndarray, code: Any) -> Any:
    """``values[code]`` for a transport code array of any shape (or a scalar)."""
    return values[np.asarray(code, dtype=np.intp)]
