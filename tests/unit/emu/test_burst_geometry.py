"""Burst geometry and sizing: excess over the buffer, on-times that drop or only delay (no root)."""

from __future__ import annotations

import math

import pytest

from emu.burst_geometry import (
    BurstGeometry,
    arrival_mbit,
    check_mode,
    geometry,
    max_delay_on_ms,
    min_on_ms,
    sized_burst,
)
from emu.burst_routes import parse_target, plan_routes
from emu.failures import Microbursts
from emu.microburst import MicroburstError, MicroburstSpec
from topologies import LinkSpec, MultiPlaneClos

DEMO = MultiPlaneClos()  # the demo's fabric: 100 Mbit/s links, 100-packet FIFOs
SMALL = MultiPlaneClos(planes=2, spines=2, leaves=3, hosts_per_leaf=2)
FRAME = 8102  # 8000-byte payload + Ethernet, IPv6, 40-byte SRH and UDP headers


# -- the arithmetic ---------------------------------------------------------------------------


def test_geometry_by_hand():
    # 3 x 100 Mbit/s into 100 Mbit/s for 1 ms: 200 Mbit/s of excess = 25,000 bytes = 20
    # frames of 1250 bytes against a 10-frame FIFO; a frame takes 0.1 ms at 100 Mbit/s.
    g = BurstGeometry(sources=3, arrival_mbit=300.0, target_mbit=100.0, queue_packets=10,
                      frame_bytes=1250, on_ms=1.0, every_ms=5.0, rtt_ms=0.5)
    assert g.frame_ms == pytest.approx(0.1)
    assert g.excess_mbit == 200.0
    assert g.excess_bytes == pytest.approx(25_000)
    assert g.excess_packets == pytest.approx(20.0)
    assert g.buffer_bytes == 12_500
    assert g.excess_over_buffer == pytest.approx(2.0)
    assert g.can_drop and g.expected_drops == pytest.approx(10.0)
    assert g.on_frames == pytest.approx(10.0)
    assert g.on_rtts == pytest.approx(2.0)
    assert g.peak_delay_ms == pytest.approx(1.0)  # a full FIFO: 10 frames of 0.1 ms
    assert g.queue_empties is True  # 4 ms off >= 1 ms to drain
    rec = g.record()
    assert rec["excess_over_buffer"] == 2.0 and rec["can_drop"] is True
    assert rec["on_frames"] == 10.0 and rec["on_rtts"] == 2.0 and rec["expected_drops"] == 10.0


def test_a_jittered_burst_must_drain_before_its_closest_neighbour():
    # the demo's burst leaves a 64.8 ms queue: 200 ms apart it drains, but with 100 ms of
    # jitter two bursts may come 150 ms apart, 100 ms after the first one ended
    base = dict(target="p0l1:h4", sources=("h5", "h6", "h7"), on_ms=50.0, every_ms=200.0)
    assert geometry(DEMO, MicroburstSpec(**base, jitter_ms=80.0)).queue_empties is True
    g = geometry(DEMO, MicroburstSpec(**base, jitter_ms=140.0))
    assert g.every_ms == 60.0 and g.queue_empties is False


def test_the_demos_bursts_only_delay():
    # Two rack-mates at line rate, 20 ms: 250,000 bytes of excess = 30.9 frames of 8102
    # bytes, a third of the 100-frame FIFO: a 20 ms delay spike, no drop.
    g = geometry(DEMO, MicroburstSpec("p0l1:h4", ("h5", "h6"), 20.0, 100.0))
    assert (g.sources, g.arrival_mbit, g.target_mbit, g.queue_packets, g.frame_bytes) == (
        2, 200.0, 100.0, 100, FRAME)
    assert g.excess_packets == pytest.approx(250_000 / FRAME)
    assert g.excess_over_buffer == pytest.approx(250_000 / (100 * FRAME))
    assert not g.can_drop and g.expected_drops == 0.0
    assert g.peak_delay_ms == pytest.approx(20.0)
    assert g.on_rtts is None  # no RTT given


def test_no_excess_no_queue():
    g = BurstGeometry(2, 90.0, 100.0, 10, 1250, on_ms=50.0)
    assert g.excess_bytes == 0.0 and g.peak_delay_ms == 0.0 and not g.can_drop
    assert g.queue_empties is None  # no period given


def test_exactly_one_buffer_of_excess_does_not_drop():
    # excess = buffer: the FIFO is just full at the end of the burst
    g = BurstGeometry(2, 200.0, 100.0, 10, 1250, on_ms=1.0)
    assert g.excess_packets == pytest.approx(10.0) and not g.can_drop


def test_min_on_ms_by_hand():
    # 2 x 100 into 100, 10 frames of 1250 bytes: margin 2 = 25,000 bytes = 2 ms of excess
    assert min_on_ms(100.0, 10, 2, 100.0, 1250, margin=2.0) == 2.0
    # the demo's port: 1.5 x 100 x 8102 bytes at 200 / 100 Mbit/s of excess, rounded up
    assert min_on_ms(100.0, 100, 3, 100.0, FRAME) == 48.7  # 48.612 ms
    assert min_on_ms(100.0, 100, 2, 100.0, FRAME) == 97.3  # 97.224 ms
    assert min_on_ms(100.0, 100, 2, 100.0, FRAME, margin=1.2) == 77.8  # 77.779 ms


def test_max_delay_on_ms_by_hand():
    assert max_delay_on_ms(100.0, 10, 2, 100.0, 1250, fill=0.5) == 0.5
    assert max_delay_on_ms(100.0, 100, 3, 100.0, FRAME) == 16.2  # 16.204 ms, rounded down
    assert max_delay_on_ms(100.0, 100, 1, 100.0, FRAME) == math.inf  # never overflows


def test_sized_bursts_meet_their_margin():
    on = min_on_ms(100.0, 100, 3, 100.0, FRAME)
    g = BurstGeometry(3, 300.0, 100.0, 100, FRAME, on)
    assert g.can_drop and g.excess_over_buffer >= 1.5
    on = max_delay_on_ms(100.0, 100, 3, 100.0, FRAME)
    g = BurstGeometry(3, 300.0, 100.0, 100, FRAME, on)
    assert not g.can_drop and g.excess_over_buffer <= 0.5


@pytest.mark.parametrize("call, words", [
    (lambda: min_on_ms(100.0, 100, 1, 100.0, FRAME),
     ["1 sources at 100 Mbit/s bring 100 Mbit/s", "no burst of any length"]),
    (lambda: min_on_ms(100.0, 100, 2, 100.0, FRAME, margin=1.0), ["margin=1.0", "> 1"]),
    (lambda: min_on_ms(100.0, 100, 2, 100.0, FRAME, margin=math.inf), ["margin=inf"]),
    (lambda: min_on_ms(100.0, 100, 0, 100.0, FRAME), ["sources=0", ">= 1"]),
    (lambda: min_on_ms(0.0, 100, 2, 100.0, FRAME), ["target_mbit=0.0", "> 0"]),
    (lambda: max_delay_on_ms(100.0, 100, 2, 100.0, FRAME, fill=1.0), ["fill=1.0", "(0, 1)"]),
    (lambda: BurstGeometry(2, 200.0, 100.0, 0, FRAME, 1.0), ["queue_packets=0"]),
    (lambda: BurstGeometry(2, 200.0, 100.0, 10, FRAME, -1.0), ["on_ms=-1.0", "> 0"]),
])
def test_bad_sizing_inputs_name_the_value(call, words):
    with pytest.raises(MicroburstError) as e:
        call()
    for w in words:
        assert w in str(e.value), (w, str(e.value))


# -- on a fabric ----------------------------------------------------------------------------


def test_arrival_capped_by_a_shared_spine_port():
    # 3 cross-rack sources, 2 spines: two share a spine's 100 Mbit/s port into leaf 0
    spec = MicroburstSpec("p0l0:h1", ("h2", "h3", "h4"), on_ms=5, every_ms=50)
    routes = plan_routes(SMALL, spec)
    assert arrival_mbit(SMALL, routes, parse_target(SMALL, spec.target), None) == 200.0
    # paced sources: 3 x 30 Mbit/s
    paced = MicroburstSpec("p0l0:h1", ("h0", "h2", "h4"), on_ms=40, every_ms=100, rate_mbit=30)
    g = geometry(SMALL, paced)
    assert g.arrival_mbit == pytest.approx(90.0) and not g.can_drop


def test_arrival_capped_by_slower_fabric_links():
    topo = MultiPlaneClos(planes=1, spines=2, leaves=2, hosts_per_leaf=2,
                          host_link=LinkSpec(100.0, 50), fabric_link=LinkSpec(40.0, 20))
    # the target is a spine's 40 Mbit/s port down to leaf 1; both sources sit under leaf
    # p0l0 and reach the spine over the same 40 Mbit/s uplink
    g = geometry(topo, MicroburstSpec("p0s0:l1", ("h0", "h1"), 10.0, 100.0))
    assert g.target_mbit == 40.0 and g.queue_packets == 20
    assert g.arrival_mbit == pytest.approx(40.0)  # both through p0l0's uplink to s0
    assert not g.can_drop


def test_geometry_uses_the_longest_scheduled_burst_and_the_rtt():
    spec = MicroburstSpec("p0l1:h4", ("h5", "h6", "h7"), 1.0, 2.0,
                          schedule=((0.0, 10.0), (0.5, 60.0)))
    g = geometry(DEMO, spec, rtt_ms=2.0)
    assert g.on_ms == 60.0 and g.every_ms is None and g.on_rtts == pytest.approx(30.0)
    assert g.can_drop


def test_mode_drop_refuses_a_burst_that_cannot_drop():
    spec = MicroburstSpec("p0l1:h4", ("h5", "h6"), 20.0, 100.0, mode="drop")
    with pytest.raises(MicroburstError) as e:
        check_mode(spec, geometry(DEMO, spec))
    msg = str(e.value)
    for w in ("mode='drop'", "on_ms=20 cannot drop", "30.9 packets", "100-packet FIFO",
              "p0l1:h4", "on_ms >= 97.3", "delay_only"):
        assert w in msg, (w, msg)
    # the failure primitive validates the same way (before anything runs)
    with pytest.raises(MicroburstError, match="cannot drop"):
        Microbursts(spec).validate(DEMO)


def test_mode_drop_with_sources_that_cannot_outrun_the_port():
    spec = MicroburstSpec("p0l1:h4", ("h5",), 20.0, 100.0, mode="drop")
    with pytest.raises(MicroburstError, match="no burst of any length overflows it"):
        check_mode(spec, geometry(DEMO, spec))


def test_mode_delay_only_refuses_a_burst_that_overflows():
    spec = MicroburstSpec("p0l1:h4", ("h5", "h6", "h7"), 60.0, 200.0, mode="delay_only")
    with pytest.raises(MicroburstError, match=r"overflows.*on_ms <= 16.2"):
        check_mode(spec, geometry(DEMO, spec))


@pytest.mark.parametrize("on, mode", [(20.0, "any"), (60.0, "any"), (60.0, "drop"),
                                      (10.0, "delay_only")])
def test_modes_that_hold(on, mode):
    spec = MicroburstSpec("p0l1:h4", ("h5", "h6", "h7"), on, 200.0, mode=mode)
    check_mode(spec, geometry(DEMO, spec))
    Microbursts(spec).validate(DEMO)


def test_sized_burst_for_the_demo():
    # three idle rack-mates of h4: 48.7 ms on, every 48.7 + 2 x 64.8 ms (a full FIFO's
    # drain) rounded up to 10 ms
    s = sized_burst(DEMO, "p0l1:h4", ("h5", "h6", "h7"))
    assert (s.on_ms, s.every_ms, s.mode, s.sources) == (48.7, 180, "drop", ("h5", "h6", "h7"))
    g = geometry(DEMO, s)
    assert g.can_drop and g.excess_over_buffer == pytest.approx(1.5, abs=0.01)
    assert g.queue_empties
    # the demo's own two sources need twice as long
    assert sized_burst(DEMO, "p0l1:h4", ("h5", "h6"), every_ms=300.0).on_ms == 97.3
    d = sized_burst(DEMO, "p0l1:h4", ("h5", "h6", "h7"), mode="delay_only")
    assert (d.on_ms, d.every_ms, d.mode) == (16.2, 150, "delay_only")
    assert not geometry(DEMO, d).can_drop


def test_sized_burst_errors():
    with pytest.raises(MicroburstError, match="every burst is delay-only"):
        sized_burst(DEMO, "p0l1:h4", ("h5",), mode="delay_only")
    with pytest.raises(MicroburstError, match="no burst of any length"):
        sized_burst(DEMO, "p0l1:h4", ("h5",))
    with pytest.raises(MicroburstError, match="mode='any' is invalid for sizing"):
        sized_burst(DEMO, "p0l1:h4", ("h5", "h6"), mode="any")
    with pytest.raises(MicroburstError, match="'h99'"):
        sized_burst(DEMO, "p0l1:h4", ("h99",))
