"""The time scale: conversions round-trip and read off a topology."""

from __future__ import annotations

import pytest

from topologies import DciSpec, LinkSpec, MultiPlaneClos, ScaleAcross, TopologyError
from topologies.timescale import CLOCKS, TimeScale, time_scale


def test_factor_and_round_trip():
    ts = TimeScale(100.0, 100.0)  # 100 Mbit/s standing for 100 Gbit/s
    assert ts.factor == 1000.0
    assert ts.full_scale(2.0) == pytest.approx(2e-3)
    for x in (0.0, 1e-6, 0.37, 12.5):
        assert ts.full_scale(ts.emulated(x)) == pytest.approx(x)
        assert ts.emulated(ts.full_scale(x)) == pytest.approx(x)
    assert "1 emulated s = 1 ms" in ts.describe()
    rec = ts.as_record()
    assert rec["factor"] == 1000.0 and set(rec["clocks"]) == set(CLOCKS)


def test_read_off_a_topology():
    link = LinkSpec(10.0, 16, nominal_gbit=400.0)
    clos = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1, host_link=link,
                          fabric_link=link)
    assert time_scale(clos).factor == 40000.0
    sa = ScaleAcross((clos, MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1,
                                           host_link=link, fabric_link=link, dc=1)),
                     DciSpec(rate_mbit=5.0))
    assert time_scale(sa) == time_scale(clos)


def test_invalid_rates_are_refused():
    with pytest.raises(TopologyError, match="emulated_mbit"):
        TimeScale(0.0, 100.0)
