"""ScaleAcross / DciSpec data validation."""

from __future__ import annotations

import pytest

from topologies import DciSpec, MultiPlaneClos, ScaleAcross, TopologyError


def _two(**kw) -> tuple[MultiPlaneClos, MultiPlaneClos]:
    return MultiPlaneClos(dc=0, **kw), MultiPlaneClos(dc=1, leaves=2, **kw)


def test_valid() -> None:
    sa = ScaleAcross(list(_two()), DciSpec(100.0, oversubscription=4.0))
    assert isinstance(sa.dcs, tuple) and sa.dc_count == 2 and sa.planes == 2
    assert len(sa.hosts) == 16 + 8
    assert sa.node("d1h3").dc == 1 and sa.node("h3").dc == 0
    assert sa.fabric_of("d1p0s1") is sa.dcs[1]
    # DC 0: 2 planes * 4 leaves * 4 spines * 100G / 4
    assert sa.dci_nominal_gbit(0) == pytest.approx(800.0)
    with pytest.raises(TopologyError, match="unknown node 'd2h0'"):
        sa.node("d2h0")
    hash(sa)


@pytest.mark.parametrize(
    ("dcs", "needle"),
    [
        ((MultiPlaneClos(),), "dcs has 1 entries"),
        ((MultiPlaneClos(dc=0), MultiPlaneClos(dc=2)), "dcs[1].dc=2"),
        ((MultiPlaneClos(dc=0), MultiPlaneClos(dc=1, planes=3)), "dcs[1].planes=3"),
        ((MultiPlaneClos(), "x"), "dcs[1]='x'"),
    ],
)
def test_invalid_dcs(dcs: tuple, needle: str) -> None:
    with pytest.raises(TopologyError) as exc:
        ScaleAcross(dcs, DciSpec(100.0))
    assert needle in str(exc.value)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"rate_mbit": 0}, "rate_mbit=0"),
        ({"rate_mbit": 1, "queue_packets": 0}, "queue_packets=0"),
        ({"rate_mbit": 1, "delay_ms": -1}, "delay_ms=-1"),
        ({"rate_mbit": 1, "delay_ms": 1001}, "delay_ms=1001"),
        ({"rate_mbit": 1, "loss": 1.5}, "loss=1.5"),
        ({"rate_mbit": 1, "oversubscription": 0.5}, "oversubscription=0.5"),
        ({"rate_mbit": 1, "nominal_gbit": True}, "nominal_gbit=True"),
    ],
)
def test_invalid_dci(kwargs: dict, needle: str) -> None:
    with pytest.raises(TopologyError) as exc:
        DciSpec(**kwargs)
    assert needle in str(exc.value)
