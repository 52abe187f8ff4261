"""Microburst descriptions and the routing of bursts onto a target egress (no root)."""

from __future__ import annotations

import itertools
import math

import pytest

from emu.burst_geometry import geometry
from emu.burst_sender import jitter_offset, parse_args, periodic
from emu.microburst import (
    HEADER,
    MicroburstError,
    MicroburstSpec,
    parse_target,
    plan_routes,
    shared_upstream,
)
from topologies import DciSpec, LinkSpec, MultiPlaneClos, ScaleAcross

TOPO = MultiPlaneClos()  # 2 planes x 4 spines x 4 leaves x 4 hosts: h0..h15
SMALL = MultiPlaneClos(planes=2, spines=2, leaves=3, hosts_per_leaf=2)


def spec(**kw) -> MicroburstSpec:
    args = dict(target="p0l3:h13", sources=("h0", "h4", "h8"), on_ms=5.0, every_ms=50.0)
    args.update(kw)
    return MicroburstSpec(**args)


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, words", [
    (dict(on_ms=0), ["on_ms=0", "> 0"]),
    (dict(on_ms=-1.0), ["on_ms=-1.0", "> 0"]),
    (dict(on_ms=math.nan), ["on_ms=nan"]),
    (dict(on_ms=True), ["on_ms=True"]),
    (dict(every_ms=5.0), ["every_ms=5.0", "on_ms=5.0"]),
    (dict(every_ms=1.0), ["every_ms=1.0", "> on_ms"]),
    (dict(rate_mbit=0), ["rate_mbit=0", "> 0"]),
    (dict(start_s=-0.1), ["start_s=-0.1", ">= 0"]),
    (dict(duration_s=0.0), ["duration_s=0.0", "> 0"]),
    (dict(payload=4), ["payload=4", f"[{HEADER.size}, 8888]"]),
    (dict(payload=9000), ["payload=9000"]),
    (dict(payload=100.0), ["payload=100.0"]),
    (dict(seed="x"), ["seed='x'"]),
    (dict(mode="loss"), ["mode='loss'", "'any', 'drop', 'delay_only'"]),
    (dict(target="p0l3"), ["target='p0l3'", "node:ifname"]),
    (dict(target="a:b:c"), ["target='a:b:c'"]),
    (dict(sources=()), ["sources=()", "non-empty"]),
    (dict(sources=["h0"]), ["sources=['h0']", "tuple"]),
    (dict(sources=("h0", "h4", "h0")), ["['h0'] listed twice"]),
    (dict(schedule=()), ["schedule=()", "non-empty"]),
    (dict(schedule=((0.0, 5.0), (0.001, 5.0))), ["schedule[1]", "overlap"]),
    (dict(schedule=((0.5, 5.0), (0.1, 5.0))), ["schedule[1]", "sorted"]),
    (dict(schedule=((0.0, 0.0),)), ["schedule[0] duration_ms=0.0", "> 0"]),
    (dict(schedule=((-1.0, 5.0),)), ["schedule[0] start_s=-1.0", ">= 0"]),
    (dict(schedule=((0.0,),)), ["schedule[0]=(0.0,)", "pair"]),
    (dict(schedule=((0.0, 5.0),), duration_s=1.0), ["duration_s=1.0", "schedule"]),
    (dict(schedule=((0.0, 5.0),), start_s=1.0), ["start_s=1.0", "schedule"]),
    (dict(schedule=((0.0, 5.0),), jitter_ms=1.0), ["jitter_ms=1.0", "schedule"]),
    (dict(jitter_ms=-1.0), ["jitter_ms=-1.0", ">= 0"]),
    (dict(jitter_ms=45.0), ["jitter_ms=45.0", "every_ms=50.0", "overlap"]),
])
def test_invalid_spec_names_the_value_and_range(kw, words):
    with pytest.raises(MicroburstError) as e:
        spec(**kw)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        spec(on_ms=0)


@pytest.mark.parametrize("target, words", [
    ("x9:h1", ["unknown node 'x9'", "valid names are h0"]),
    ("p0l3:h1", ["no port 'h1'", "h12, h13, h14, h15, s0, s1, s2, s3"]),
    ("p0s1:l7", ["no port 'l7'", "l0, l1, l2, l3"]),
    ("h3:p0", ["h3 is a host", "switch egress"]),
])
def test_unknown_target_lists_valid_names(target, words):
    with pytest.raises(MicroburstError) as e:
        plan_routes(TOPO, spec(target=target))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_unknown_or_switch_source_lists_hosts():
    with pytest.raises(MicroburstError, match="unknown node 'h99'.*valid names are h0"):
        plan_routes(TOPO, spec(sources=("h0", "h99")))
    with pytest.raises(MicroburstError, match="'p0s0' is a spine, not a host; hosts are h0"):
        plan_routes(TOPO, spec(sources=("p0s0",)))


def test_source_without_a_path_through_the_target():
    # a spine's port down to leaf 3 carries nothing that starts in rack 3
    with pytest.raises(MicroburstError,
                       match=r"source 'h12' has no path through target 'p0s1:l3'.*h0, h1"):
        plan_routes(TOPO, spec(target="p0s1:l3", sources=("h0", "h12")))
    # a leaf uplink carries only what starts in its rack
    with pytest.raises(MicroburstError, match=r"'h0' has no path.*'p0l3:s1'.*h12, h13"):
        plan_routes(TOPO, spec(target="p0l3:s1", sources=("h0",)))
    # the host the target port leads to cannot burst to itself through it
    with pytest.raises(MicroburstError, match="'h13' has no path"):
        plan_routes(TOPO, spec(sources=("h0", "h13")))


def test_rate_above_line_rate_and_payload_above_mtu():
    with pytest.raises(MicroburstError, match=r"rate_mbit=150 .*\(0, 100\]"):
        plan_routes(TOPO, spec(rate_mbit=150))
    with pytest.raises(MicroburstError,
                       match=rf"payload=2000 .*\[{HEADER.size}, 1388\] for MTU 1500"):
        plan_routes(MultiPlaneClos(mtu=1500), spec(payload=2000))


def test_rate_on_a_scaleacross_is_checked_against_each_source_nic():
    # Each DC has its own host_link: DC 1's NICs are 50 Mbit/s, DC 0's 100.
    dc = dict(planes=2, spines=2, leaves=2, hosts_per_leaf=2)
    two = ScaleAcross((MultiPlaneClos(**dc, dc=0),
                       MultiPlaneClos(**dc, dc=1, host_link=LinkSpec(50.0, 100))), DciSpec())
    ok = plan_routes(two, spec(target="p0l1:h3", sources=("h0",), rate_mbit=100))
    assert [r.source for r in ok] == ["h0"]
    with pytest.raises(MicroburstError, match=r"rate_mbit=60 .*\(0, 50\]"):
        plan_routes(two, spec(target="p0l1:h3", sources=("h0", "d1h0"), rate_mbit=60))


def test_parse_target():
    assert parse_target(TOPO, "p1s3:l0") == ("p1s3", "l0")
    assert parse_target(TOPO, "p0l3:h13") == ("p0l3", "h13")


# -- path selection --------------------------------------------------------------------------


@pytest.mark.parametrize("topo, target, sources", [
    (TOPO, "p0l3:h13", ("h0", "h4", "h8", "h12")),  # leaf -> host, incl. a same-rack source
    (TOPO, "p1l0:h2", ("h5", "h9", "h3")),
    (TOPO, "p0s1:l3", ("h0", "h4", "h8")),  # spine -> leaf
    (TOPO, "p1s2:l0", ("h15", "h7")),
    (TOPO, "p0l3:s1", ("h12", "h13", "h14")),  # leaf -> spine
    (TOPO, "p1l1:s0", ("h4", "h5", "h6", "h7")),
    (SMALL, "p0l0:h1", ("h0", "h2", "h4")),
    (SMALL, "p1s0:l2", ("h0", "h2")),
])
def test_every_chosen_path_crosses_the_target(topo, target, sources):
    mb = MicroburstSpec(target, sources, on_ms=5, every_ms=50)
    node, ifname = target.split(":")
    routes = plan_routes(topo, mb)
    assert [r.source for r in routes] == list(sources)
    for r in routes:
        assert r.path.src == r.source and r.dst != r.source
        assert (node, ifname) in r.egresses
        assert r.egresses == tuple((h.node, h.out_ifname) for h in r.path.hops)
        # the path is one of the fabric's own (its segments pin exactly these hops)
        assert r.path == topo.path(r.source, r.dst, r.path.plane, r.path.spine)
    # these targets can be reached without two sources sharing an egress before it
    assert shared_upstream(routes, (node, ifname)) == {}


def test_sources_of_one_rack_get_different_destinations():
    routes = plan_routes(TOPO, spec(target="p0l3:s1", sources=("h12", "h13", "h14")))
    assert len({r.dst for r in routes}) == 3
    # after the target, the burst is spread over the other racks' leaves
    assert len({r.egresses[2] for r in routes}) == 3


def test_incast_spreads_sources_over_spines():
    routes = plan_routes(TOPO, spec(sources=("h0", "h1", "h4", "h8")))
    # h0 and h1 share leaf p0l0: they must take different uplinks; all 4 meet only at p0s*:l3
    assert len({r.path.spine for r in routes}) == 4
    assert all(r.dst == "h13" and r.path.plane == 0 for r in routes)


def test_unavoidable_sharing_is_reported():
    # 3 cross-rack sources, 2 spines: two of them must share a spine's port down to leaf 0
    routes = plan_routes(SMALL, MicroburstSpec("p0l0:h1", ("h2", "h3", "h4"), on_ms=5,
                                               every_ms=50))
    shared = shared_upstream(routes, ("p0l0", "h1"))
    assert list(shared.values()) == [2]
    assert next(iter(shared))[0] in ("p0s0", "p0s1")


def test_seed_is_deterministic():
    a = plan_routes(TOPO, spec(target="p0l3:s1", sources=("h12", "h13"), seed=7))
    b = plan_routes(TOPO, spec(target="p0l3:s1", sources=("h12", "h13"), seed=7))
    assert a == b
    picks = {tuple(r.dst for r in plan_routes(TOPO, spec(target="p0l3:s1",
                                                          sources=("h12", "h13"), seed=s)))
             for s in range(8)}
    assert len(picks) > 1  # the seed breaks ties differently


# -- schedules -------------------------------------------------------------------------------


def test_periodic_windows():
    s = spec(on_ms=20, every_ms=100, start_s=0.5, duration_s=0.35)
    w = s.windows()
    assert [(round(a, 6), round(b, 6)) for a, b in w] == [(0.5, 0.52), (0.6, 0.62),
                                                           (0.7, 0.72), (0.8, 0.82)]
    # cut by the duration
    w = spec(on_ms=20, every_ms=100, duration_s=0.31).windows()
    assert [(round(a, 6), round(b, 6)) for a, b in w][-1] == (0.3, 0.31)


def test_unbounded_windows_need_a_limit():
    s = spec(on_ms=10, every_ms=100)
    with pytest.raises(MicroburstError, match="limit_s"):
        s.windows()
    assert len(s.windows(1.0)) == 10
    assert s.windows(0.205)[-1] == pytest.approx((0.2, 0.205))


def test_schedule_windows():
    s = spec(schedule=((0.0, 30.0), (0.25, 40.0), (1.0, 5.0)))
    flat = [x for w in s.windows() for x in w]
    assert flat == pytest.approx([0.0, 0.03, 0.25, 0.29, 1.0, 1.005])
    assert len(s.windows(0.5)) == 2


def test_sender_windows_match_the_spec():
    s = spec(on_ms=20, every_ms=100, start_s=0.1, duration_s=1.0)
    w = {"start": 0.1, "on": 0.02, "every": 0.1, "until": 1.1}
    assert s.sender_windows() == pytest.approx(w)
    got = [x for w in periodic(50.0, w) for x in w]
    assert got == pytest.approx([50.0 + x for w in s.windows() for x in w])
    assert len(got) == 20
    sched = spec(schedule=((0.0, 30.0), (0.25, 40.0)))
    assert sched.sender_windows() == {"schedule": [[0.0, 0.03], [0.25, 0.29]]}


def test_jittered_windows_start_within_their_slot_and_never_overlap():
    s = spec(on_ms=50, every_ms=200, jitter_ms=80, start_s=0.1)
    w = s.windows(20.0)
    assert len(w) == 100
    late = [a - (0.1 + k * 0.2) for k, (a, _) in enumerate(w)]
    assert all(0.0 <= x < 0.08 for x in late)
    assert all(b - a == pytest.approx(0.05) for a, b in w)
    assert all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(w))
    # spread over the slot (not one fixed phase): every quarter of it is used
    assert {int(x / 0.02) for x in late} == {0, 1, 2, 3}
    gaps = [a2 - a1 for (a1, _), (a2, _) in itertools.pairwise(w)]
    assert min(gaps) < 0.15 and max(gaps) > 0.25
    assert [s.window_start(k) for k in range(100)] == pytest.approx([a for a, _ in w])


def test_jitter_is_drawn_from_the_seed_alone():
    a = spec(on_ms=50, every_ms=200, jitter_ms=80).windows(2.0)
    assert spec(on_ms=50, every_ms=200, jitter_ms=80).windows(2.0) == a  # every run alike
    other = spec(on_ms=50, every_ms=200, jitter_ms=80, seed=1).windows(2.0)
    assert other != a
    # a plane's burst and the other plane's, one seed: they stay together
    assert spec(target="p1l3:h13", on_ms=50, every_ms=200, jitter_ms=80).windows(2.0) == a
    flat = [x for w in spec(on_ms=50, every_ms=200).windows(1.0) for x in w]
    assert flat == pytest.approx([x for k in range(5) for x in (k * 0.2, k * 0.2 + 0.05)])


def test_the_sender_draws_the_same_jittered_windows():
    s = spec(on_ms=50, every_ms=200, jitter_ms=80, seed=3, duration_s=10.0)
    w = s.sender_windows()
    assert w["jitter"] == pytest.approx(0.08) and w["seed"] == 3
    got = [x for w in periodic(50.0, w) for x in w]
    assert got == pytest.approx([50.0 + x for w in s.windows() for x in w])
    assert len(got) == 100


def test_window_start():
    s = spec(on_ms=20, every_ms=100, start_s=0.5)
    assert [s.window_start(k) for k in (0, 1, 7)] == pytest.approx([0.5, 0.6, 1.2])
    sched = spec(schedule=((0.1, 30.0), (0.25, 40.0)))
    assert [sched.window_start(k) for k in (0, 1)] == [0.1, 0.25]
    assert spec(schedule=((0.0, 30.0), (0.5, 60.0))).longest_on_ms == 60.0
    assert spec(on_ms=7.0).longest_on_ms == 7.0


def test_sender_arguments():
    a = parse_args(["--index", "2", "--src", "fd5a::1", "--dst", "fd5a::2",
                    "--port", "4000", "--srh", "00", "--windows", '{"schedule": [[0, 0.01]]}'])
    assert a.index == 2 and a.payload == 8000 and a.rate_mbit == 0.0
    assert a.windows == {"schedule": [[0, 0.01]]}


def test_step_locked_bursts_take_no_period_and_hand_out_their_windows():
    s = spec(on_ms=50, every_ms=None, every_steps=3, jitter_ms=60, seed=2)
    assert s.step_locked and s.sender_windows() == {"on": 0.05, "on_demand": True}
    # burst k starts its seed's draw after its own step boundary's resume instant
    assert [s.window_start(k) for k in range(3)] == [
        jitter_offset(2, k, 0.06) for k in range(3)]
    with pytest.raises(MicroburstError, match="has no windows of its own"):
        s.windows(10.0)
    assert geometry(TOPO, s).queue_empties is None  # the steps decide, unknown here


@pytest.mark.parametrize("kw, words", [
    (dict(every_steps=3), ["every_ms=5.0", "every_steps=3", "timed by the training steps"]),
    (dict(every_ms=None, every_steps=3, start_s=1.0), ["start_s=1.0"]),
    (dict(every_ms=None, every_steps=-1), ["every_steps=-1", "integer >= 1"]),
    (dict(every_ms=None, every_steps=1.5), ["every_steps=1.5"]),
    (dict(every_ms=None), ["every_ms=None", "every_steps >= 1"]),
])
def test_invalid_step_locking_names_the_value(kw, words):
    with pytest.raises(MicroburstError) as e:
        spec(**{"on_ms": 2.0, "every_ms": 5.0, **kw})
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_step_locked_burst_restored_before_its_first_window_reports_no_bursts():
    from types import SimpleNamespace

    from emu.failure_kinds.bursts import BurstStart, Microbursts

    stopped: list = []
    never = SimpleNamespace(t0=None, stop=lambda: stopped.append(True))
    f = Microbursts(spec(every_ms=None, every_steps=3))
    rec = f.restore(None, BurstStart(never, {"every_steps": 3}))
    assert stopped == [True]
    assert rec["bursts"] == 0 and rec["target_drops"] is None and "no window" in rec["note"]
