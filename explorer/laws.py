"""Transfer laws: how a figure measured on the emulator's fabric becomes a full-scale one.

Every calibrated number enters a projection through a law in dimensionless variables:
the law's *structure* is physics or combinatorics that holds at any scale, and what the
emulator measured fixes only what the structure leaves free (its *correction*), at the
measured point. ``emu explore --explain`` prints each law for one configuration.

**ECMP load balance** (``EcmpLaw``). A synchronous collective ends when its most loaded
link does. ``m`` equal flows hashed uniformly onto ``n`` uplinks (independently in ``G``
leaf groups), whose ideal load per link is ``L`` flows (a host port's), take
E[max(L, M)] / L as long as ideal, M the most loaded bin over the groups: the
*structure* s = L / E[max(L, M)] (``expected_max``: exact, by Poissonisation). The
emulator's measured efficiency, divided by the transport's single-flow eta (applied
apart by the model), over s at the measured point is the *correction* c; at full scale
the efficiency is s(full-scale m, n, G, L) x c, with c interpolated in log2 of the
hashed flows per uplink between measured points (constant beyond them, flagged). QPs
per connection enter through m and L (a connection of Q queue pairs is Q flows of 1/Q
of its bytes). Spraying (MRC) has no hashing: its structure is 1 and the measured
efficiency (over eta) is the law, against flows per uplink.

**Burst tail** (``TailLaw``). A microburst that meets a round delays it by D; a round of
t seconds over P ports meets one with probability 1 - exp(-r P t) (``r``: bursts per
second at one port, a scenario parameter). D measured = (P99 / P50 - 1) x the healthy
P50, in RTTs. Lossless (PFC) RC: a burst costs the queue it builds, whose *structure*
is D0 = L + E (in RTTs: the burst's length, while the flow shares the port, plus the
time the port takes to drain the burst's excess E = excess / buffer x buffer in BDPs);
the deep-FIFO measurement's D / D0 is the *correction*, against log L (interpolated,
constant beyond). A lossy transport: D = RTT (a + b x burst length in RTTs), the
recovery's timer part a and its part b growing with the congested time, fitted on the
measured points. The excess over the buffer is a regime dimension, flagged where it
leaves the measured range.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from explorer.calibration import Interval, LoadPoint, MeasuredFabric, TailPoint, TransportCal

__all__ = ["ECMP_TRANSPORTS", "EcmpLaw", "TailLaw", "ecmp_law", "expected_max",
           "measured_point", "structure", "tail_law"]

ECMP_TRANSPORTS = ("rc", "rc_lossy", "tcp")
_TOL = 1e-12


_LOG_FACT = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, 1 << 16)))])


def _log_fact(j: np.ndarray) -> np.ndarray:
    """log(j!) for integers 0 <= j < 65536."""
    return _LOG_FACT[j]


@functools.lru_cache(maxsize=4096)
def _p_max_at_most(m: int, n: int, c: int) -> float:
    """P(no bin holds more than c of m balls thrown uniformly into n bins), exact up to
    rounding: by Poissonisation, [y^m] (sum_{j<=c} pois(j; m/n) y^j)^n / pois(m; m)."""
    if c >= m:
        return 1.0
    if c * n < m:
        return 0.0
    lam = m / n
    j = np.arange(c + 1)
    logq = j * math.log(lam) - lam - _log_fact(j)
    size = 1 << int(math.ceil(math.log2(c * n + 1)))
    q = np.zeros(size)
    q[: c + 1] = np.exp(logq)
    coef = np.fft.irfft(np.fft.rfft(q) ** n, size)[m]
    log_pm = m * math.log(m) - m - math.lgamma(m + 1)  # pois(m; m)
    return float(min(1.0, max(0.0, coef / math.exp(log_pm))))


@functools.lru_cache(maxsize=4096)
def expected_max(m: int, n: int, groups: int, floor: float) -> float:
    """E[max(floor, M)], M the most loaded of n bins over ``groups`` independent throws
    of m balls each (a synchronous collective's most loaded uplink, in flows)."""
    if m <= 0 or n <= 0 or groups <= 0:
        return float(floor)
    lo = math.floor(floor)
    total = float(floor)
    if floor > lo:  # the part of [floor, ceil(floor)) where M > floor(floor)
        total += (math.ceil(floor) - floor) * (1.0 - _p_max_at_most(m, n, lo) ** groups)
        lo += 1
    for c in range(lo, m):
        # The union bound (groups x bins x one bin's Poisson tail) takes over where the
        # exact value's rounding (about 1e-13) would swamp a smaller tail.
        bound = groups * n * _pois_sf(m / n, c)
        tail = min(max(0.0, 1.0 - _p_max_at_most(m, n, c) ** groups), bound)
        total += tail
        if bound < _TOL:
            break
    return total


def _pois_sf(lam: float, c: int) -> float:
    """P(Poisson(lam) > c)."""
    j = np.arange(c + 1, c + 400)
    logp = j * math.log(lam) - lam - _log_fact(j)
    return float(np.exp(logp).sum())


def structure(m: float, n: float, groups: float, floor: float) -> float:
    """The ECMP law's structure s = floor / E[max(floor, M)] (module docstring)."""
    return floor / expected_max(int(round(m)), int(round(n)), max(1, int(round(groups))),
                                float(floor))


@dataclass(frozen=True)
class MeasuredPoint:
    """One load-balance measurement in the law's variables."""

    flows_per_uplink: float  # connections per uplink, as recorded
    qps: int
    balls: int  # hashed flows of one leaf group
    bins: int  # uplinks they hash onto
    groups: int  # independent leaf groups whose most loaded link ends the collective
    floor: float  # the ideal flows per link (a host port's)
    efficiency: Interval  # measured, over the transport's eta
    structure: float  # s at this point (1 for spraying)

    @property
    def hashed_per_uplink(self) -> float:
        return self.balls / self.bins

    def correction(self, band: str) -> float:
        return self.efficiency.pick(band, worse_is_high=False) / self.structure


def measured_point(transport: str, p: LoadPoint, fab: MeasuredFabric | None,
                   eta: float) -> MeasuredPoint:
    """A measurement in the law's variables. RC hashes its QPs onto one plane's spines,
    every plane alike (groups: leaves x planes); TCP a connection onto any plane and
    spine (groups: leaves); MRC sprays (structure 1). Records older than the hashed-flow
    fields give them through the fabric: k connections per host = flows per uplink x
    uplinks / (hosts x lanes)."""
    iv = Interval(p.efficiency.value / eta, p.efficiency.lo / eta, p.efficiency.hi / eta)
    if transport not in ECMP_TRANSPORTS or fab is None:
        return MeasuredPoint(p.flows_per_uplink, p.qps, 0, 1, 1, 1.0, iv, 1.0)
    h = fab.hosts_per_leaf
    if transport == "tcp":
        n = p.ecmp_uplinks or fab.spines * fab.planes
        m = p.ecmp_flows or round(p.flows_per_uplink * n / h) * h
        k = m / h
        floor, groups = k / min(k, fab.planes), fab.leaves
    else:
        n = p.ecmp_uplinks or fab.spines
        m = p.ecmp_flows or round(p.flows_per_uplink * fab.spines / h) * h * p.qps
        floor, groups = m / h, fab.leaves * fab.planes
    s = structure(m, n, groups, floor)
    return MeasuredPoint(p.flows_per_uplink, p.qps, int(m), int(n), int(groups), floor, iv, s)


@dataclass(frozen=True)
class EcmpLaw:
    """A transport's load-balance law: measured points in its variables (sorted by
    hashed flows per uplink); ``hashed``: ECMP hashes it (else it sprays)."""

    transport: str
    hashed: bool
    points: tuple[MeasuredPoint, ...]

    def table(self, band: str) -> tuple[np.ndarray, np.ndarray]:
        """(log2 hashed flows per uplink, correction) of the measured points: spraying's
        abscissa is flows per uplink (connections), hashing's the hashed flows."""
        if not self.points:
            return np.zeros(1), np.ones(1)
        xs = [p.hashed_per_uplink if self.hashed else p.flows_per_uplink for p in self.points]
        ys = [p.correction(band) for p in self.points]
        order = np.argsort(xs, kind="stable")
        return np.log2(np.asarray(xs)[order]), np.asarray(ys)[order]


def ecmp_law(tc: TransportCal) -> EcmpLaw:
    """The ECMP law of a calibrated transport (no points: efficiency 1, flagged)."""
    eta = tc.eta.value
    pts = tuple(sorted((measured_point(tc.transport, p, tc.fabric, eta)
                        for p in tc.load_balance),
                       key=lambda q: (q.hashed_per_uplink, q.flows_per_uplink)))
    return EcmpLaw(tc.transport, tc.transport in ECMP_TRANSPORTS, pts)


@dataclass(frozen=True)
class TailLaw:
    """A transport's burst law: ``queueing`` (lossless: D = D0 x correction), else D =
    RTT (a + b L) with (a, b) per band from the measured (L, D) points in RTTs;
    ``buffer_bdp``: the measurement's buffer in BDPs (D0's excess term)."""

    transport: str
    queueing: bool
    points: tuple[tuple[float, float, Interval], ...]  # (L in RTTs, excess/buffer, D RTTs)
    buffer_bdp: float = 0.0

    def structure(self, length_rtts: float, excess_bdp: float) -> float:
        """D0 = L + E in RTTs: the burst's length plus the time to drain its excess."""
        return length_rtts + excess_bdp

    def correction(self, band: str) -> tuple[np.ndarray, np.ndarray]:
        """(log burst length in RTTs, measured D / D0) of the lossless law's points."""
        pts = sorted(self.points)
        if not (self.queueing and pts):
            return np.zeros(1), np.ones(1)
        xs = [math.log(max(L, 1e-9)) for L, _, _ in pts]
        ys = [iv.pick(band, worse_is_high=True) / self.structure(L, x * self.buffer_bdp)
              for L, x, iv in pts]
        return np.asarray(xs), np.asarray(ys)

    def coefficients(self, band: str) -> tuple[float, float]:
        """(a, b) of D = a + b L (RTTs): exact through two points (the longest and the
        shortest burst), through the origin with one; both >= 0."""
        pts = sorted(self.points)
        if self.queueing or not pts:
            return 0.0, 0.0
        d = [iv.pick(band, worse_is_high=True) for _, _, iv in pts]
        if len(pts) == 1 or pts[-1][0] == pts[0][0]:
            return 0.0, max(0.0, sum(d) / len(d) / max(pts[0][0], 1e-9))
        b = (d[-1] - d[0]) / (pts[-1][0] - pts[0][0])
        if b < 0:
            return max(0.0, sum(d) / len(d)), 0.0
        return max(0.0, d[0] - b * pts[0][0]), b


def _delay_rtts(p: TailPoint) -> Interval | None:
    """The delay a burst added, in RTTs: (P99 / P50 - 1) x the healthy P50."""
    if p.healthy_p50_rtts is None:
        return None
    k = p.healthy_p50_rtts
    iv = p.inflation
    return Interval((iv.value - 1) * k, (iv.lo - 1) * k, (iv.hi - 1) * k)


def tail_law(tc: TransportCal | None, tails: Sequence[TailPoint] = (),
             name: str = "", lossless: bool = False) -> TailLaw:
    """The burst law of ``tc`` (or of ``tails`` measured for ``name``, e.g. DBLP's);
    ``lossless`` (production RC) makes it the queueing law."""
    pts_in = tc.tail if tc is not None else tuple(tails)
    pts = [p for p in pts_in if not p.delay_spike_only] or list(pts_in)
    rows = tuple((p.burst_rtts, p.excess_buffers, d) for p in pts
                 if (d := _delay_rtts(p)) is not None)
    return TailLaw(tc.transport if tc is not None else name, lossless, rows,
                   (tc.buffer_bdp or 0.0) if tc is not None else 0.0)
