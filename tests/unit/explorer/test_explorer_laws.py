"""The transfer laws: the ECMP law's structure is the hashing's exact most-loaded-link
expectation, its correction reproduces every measurement at its own point, the burst
law goes through its measured points, and the law records the shipped calibration carries
behave as the laws say."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from explorer_fixtures import FABRIC

from explorer.calibration import Interval, LoadPoint, TailPoint, TransportCal, load_calibration
from explorer.laws import ecmp_law, expected_max, measured_point, structure, tail_law


def _exact(m: int, n: int, groups: int, floor: float) -> float:
    """E[max(floor, M)] by enumerating every hash of m balls into n bins, per group."""
    dist: dict[int, float] = {}
    for throw in itertools.product(range(n), repeat=m):
        top = max(np.bincount(throw, minlength=n))
        dist[top] = dist.get(top, 0.0) + n ** -m
    cdf = {c: sum(p for k, p in dist.items() if k <= c) for c in range(m + 1)}
    # the max over independent groups has cdf**groups
    e = 0.0
    for c in range(m + 1):
        below = cdf[c - 1] ** groups if c > 0 else 0.0
        e += max(floor, c) * (cdf[c] ** groups - below)
    return e


@pytest.mark.parametrize(("m", "n", "groups", "floor"), [
    (4, 4, 1, 0.0), (4, 4, 4, 1.0), (6, 3, 2, 2.0), (5, 4, 3, 1.5), (8, 2, 1, 4.0)])
def test_expected_max_is_exact(m, n, groups, floor):
    assert expected_max(m, n, groups, floor) == pytest.approx(_exact(m, n, groups, floor),
                                                              rel=1e-9)


def test_expected_max_at_full_scale_matches_a_monte_carlo():
    # 16 QPs of each of 128 ports hashed onto 128 uplinks, 8 leaf groups: 2048 balls
    rng = np.random.default_rng(3)
    draws = [np.bincount(rng.integers(0, 128, 2048), minlength=128).max()
             for _ in range(8 * 400)]
    mc = np.asarray(draws).reshape(400, 8).max(axis=1).mean()
    assert expected_max(2048, 128, 8, 16.0) == pytest.approx(mc, rel=0.02)


def test_structure_improves_with_flows_and_worsens_with_groups():
    s = [structure(128 * q, 128, 8, q) for q in (1, 2, 4, 16, 64)]
    assert all(a < b for a, b in zip(s, s[1:], strict=False)) and s[-1] < 1
    assert structure(128, 128, 64, 1) < structure(128, 128, 8, 1)
    # connections and QPs enter as their product: 4 connections x 1 QP hash like 1 x 4
    a = measured_point("rc", LoadPoint(4.0, 1, Interval.exact(0.5), 16, 4), FABRIC, 1.0)
    b = measured_point("rc", LoadPoint(1.0, 4, Interval.exact(0.5), 16, 4), FABRIC, 1.0)
    assert (a.balls, a.bins, a.groups, a.floor) == (b.balls, b.bins, b.groups, b.floor)


def test_correction_reproduces_each_measurement_at_its_point():
    tc = TransportCal("rc", Interval(0.8, 0.8, 0.8), Interval.exact(0.0), load_balance=(
        LoadPoint(1.0, 1, Interval(0.3, 0.25, 0.35), 4, 4),
        LoadPoint(1.0, 4, Interval(0.5, 0.45, 0.55), 16, 4)), fabric=FABRIC)
    law = ecmp_law(tc)
    for p in law.points:
        # the law at the measured point: s x c = the measurement (over eta)
        s = structure(p.balls, p.bins, p.groups, p.floor)
        assert s * p.correction("mid") == pytest.approx(p.efficiency.value)
        assert p.groups == FABRIC.leaves * FABRIC.planes  # RC: one plane's spines
    xs, _ = law.table("mid")
    assert list(np.exp2(xs)) == pytest.approx([1.0, 4.0])  # hashed flows per uplink


def test_old_records_give_hashed_flows_through_the_fabric():
    p = measured_point("rc", LoadPoint(2.0, 4, Interval.exact(0.4)), FABRIC, 1.0)
    assert (p.balls, p.bins) == (2 * 4 * 4, 4)  # k = 2 per host, 4 hosts, 4 QPs
    t = measured_point("tcp", LoadPoint(0.5, 1, Interval.exact(0.4)), FABRIC, 1.0)
    assert (t.balls, t.bins, t.groups) == (4, 8, FABRIC.leaves)
    spray = measured_point("mrc", LoadPoint(4.0, 1, Interval.exact(0.8)), FABRIC, 1.0)
    assert spray.structure == 1.0 and spray.correction("mid") == pytest.approx(0.8)


def test_lossy_burst_law_goes_through_its_points_and_lossless_is_queueing():
    pts = (TailPoint(4.0, 0.3, Interval.exact(2.0), False, 10.0),
           TailPoint(24.0, 2.0, Interval.exact(3.0), False, 10.0))
    lossy = tail_law(TransportCal("rc_lossy", Interval.exact(1.0), Interval.exact(0.0),
                                  tail=pts))
    a, b = lossy.coefficients("mid")
    for length, _, d in lossy.points:  # D = (P99/P50 - 1) x P50: 10 and 20 RTTs
        assert a + b * length == pytest.approx(d.value)
    lossless = tail_law(TransportCal("rc", Interval.exact(1.0), Interval.exact(0.0),
                                     tail=pts, buffer_bdp=10.0), lossless=True)
    assert lossless.coefficients("mid") == (0.0, 0.0)
    xs, cs = lossless.correction("mid")
    # correction = measured / (L + excess in BDPs)
    assert cs == pytest.approx([10.0 / (4.0 + 3.0), 20.0 / (24.0 + 20.0)])
    assert xs == pytest.approx([math.log(4.0), math.log(24.0)])


def test_shipped_law_records_follow_the_hashing_structure():
    """What scripts/calibrate_laws.py measured: lossless RC's efficiency (over eta) follows
    the hashing expectation, and 1 x 4 QPs balances like 4 connections of 1 QP. Lossy RC
    (16-packet FIFOs, go-back-N) loses more than the collisions alone cost at every
    point: a collision drops, and each drop resends a window."""
    cal = load_calibration()
    law = ecmp_law(cal.get("rc"))
    assert {p.qps for p in law.points} == {1, 4}
    for p in law.points:
        assert 0.8 <= p.correction("mid") <= 1.5, p
    four = [p for p in law.points if p.balls / p.bins == 4]
    assert len(four) == 2
    assert four[0].efficiency.value == pytest.approx(four[1].efficiency.value, rel=0.15)
    lossy = ecmp_law(cal.get("rc_lossy"))
    assert {p.qps for p in lossy.points} == {1, 4}
    for p, q in zip(lossy.points, law.points, strict=True):
        assert p.correction("mid") < 1.0 and p.efficiency.value < q.efficiency.value, p
