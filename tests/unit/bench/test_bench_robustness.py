"""The robustness bench's logic without root: the rate ladder and its threshold search,
the memory slope fit, the hostile datagram generator and its pacing, the soak's plans
and its loss accounting, and the driver's streams (byte checks, buffer reuse) and RSS
sampler on fake cores."""

from __future__ import annotations

import random

import pytest

from commands.bench.robustness import (
    fabric_sizes,
    ladder,
    predict_build_s,
    search_rate,
)
from topologies import MultiPlaneClos
from transports import registry
from transports.core.api import Completion
from transports.core.bound import LossBound
from transports.core.mrc import MrcConfig, MrcCore
from transports.io.footprint import RssSampler
from transports.io.sockets import Conn
from transports.io.streams import RecvStream, SendStream
from transports.plan import message_bytes
from transports.planrecord import StreamPlan
from transports.testing import hostile
from transports.testing.soak import DEFAULT_STREAMS, Stream, reconcile, rss_fit, slope, stream_plans

# -- the rate ladder and its search -------------------------------------------------------


def test_ladder_doubles_up_to_the_top():
    assert ladder(1000, 16000) == [1000, 2000, 4000, 8000, 16000]
    assert ladder(4000, 256_000, 4.0) == [4000, 16000, 64000, 256_000]
    assert ladder(1000, 1500) == [1000]
    with pytest.raises(ValueError):
        ladder(0, 10)
    with pytest.raises(ValueError):
        ladder(10, 100, 1.0)


def fake_measure(fractions: dict[int, list[float]], achieved: dict[int, float] | None = None):
    """A measure returning the listed fractions of each rate in turn."""
    calls: list[int] = []

    def measure(rate: int) -> dict:
        calls.append(rate)
        return {"fraction": fractions[rate].pop(0),
                "achieved": (achieved or {}).get(rate, float(rate))}
    return measure, calls


def test_search_stops_at_the_first_rate_below_the_threshold():
    measure, calls = fake_measure({1: [1.0], 2: [0.95], 4: [0.5, 0.6], 8: [1.0]})
    res = search_rate([1, 2, 4, 8], measure)
    assert res["held"] == 2 and res["held_achieved"] == 2.0
    assert res["failed"] == 4 and res["limited_by"] == "goodput"
    assert calls == [1, 2, 4, 4]  # a failing rate is measured twice; 8 never
    assert [s["holds"] for s in res["steps"]] == [True, True, False]
    assert res["steps"][-1]["fraction"] == pytest.approx(0.55)


def test_a_noisy_failure_is_judged_on_the_mean_of_two_runs():
    measure, calls = fake_measure({1: [0.85, 0.99], 2: [0.7, 0.8]})
    res = search_rate([1, 2], measure)
    assert res["held"] == 1 and res["steps"][0]["fraction"] == pytest.approx(0.92)
    assert res["failed"] == 2 and calls == [1, 1, 2, 2]


def test_nothing_held_when_the_first_rate_fails():
    measure, _ = fake_measure({1: [0.1, 0.2]})
    res = search_rate([1, 2], measure)
    assert res["held"] is None and res["held_achieved"] is None and res["failed"] == 1


def test_a_sender_that_falls_short_is_the_limit():
    measure, calls = fake_measure({10: [1.0], 20: [1.0], 40: [1.0]}, achieved={20: 12.0})
    res = search_rate([10, 20, 40], measure)
    assert res["held"] == 20 and res["held_achieved"] == 12.0
    assert res["limited_by"] == "sender" and res["failed"] is None and calls == [10, 20]


def test_the_ladder_top_is_the_limit_when_everything_holds():
    measure, _ = fake_measure({1: [1.0], 2: [0.9]})
    res = search_rate([1, 2], measure)
    assert res["held"] == 2 and res["limited_by"] == "ladder"


# -- the largest fabric's ladder ------------------------------------------------------------


def test_fabric_sizes_grow_and_are_valid():
    sizes = fabric_sizes()
    nodes = [len(s.hosts) + len(s.switches) for s in sizes[:6]]
    assert nodes == sorted(nodes) and nodes[0] == 12


def test_build_time_is_extrapolated_from_the_last_two():
    rows = [{"links": 100, "total_s": 1.0}, {"links": 200, "total_s": 4.0}]
    assert predict_build_s(rows[:1], 400) is None
    assert predict_build_s(rows, 400) == pytest.approx(16.0)  # t ~ links^2
    # never extrapolated below linear
    assert predict_build_s([{"links": 100, "total_s": 2.0}, {"links": 200, "total_s": 2.0}],
                           400) == pytest.approx(4.0)


# -- the memory slope -----------------------------------------------------------------------


def test_slope_is_the_least_squares_fit():
    assert slope([(0, 1.0), (1, 3.0), (2, 5.0)]) == pytest.approx(2.0)
    assert slope([(0, 1.0)]) == 0.0 and slope([(1, 1.0), (1, 2.0)]) == 0.0


def test_rss_fit_after_warm_up():
    mb = 1 << 20
    # 10 MB flat after a warm-up that grew from 5 MB
    flat = [(t * 0.5, 5 * mb + min(t, 20) * mb // 4) for t in range(200)]
    f = rss_fit(flat, warmup_s=10.0)
    assert f["samples"] == 180 and f["slope_mb_per_min"] == 0.0 and f["change_pct"] == 0.0
    assert f["rss_mb_start"] == 10.0 and f["spread_pct"] == 0.0 and f["rss_mb_first"] == 5.0
    # a leak of 1 MB per minute on 20 MB
    leak = [(t, 20 * mb + t * mb / 60) for t in range(0, 121)]
    f = rss_fit(leak, warmup_s=0.0)
    assert f["slope_mb_per_min"] == pytest.approx(1.0)
    assert f["change_pct"] == pytest.approx(2 / 21 * 100, rel=1e-3)  # 2 MB over a 21 MB mean
    assert rss_fit(leak[:2], 0.0)["change_pct"] is None


# -- hostile datagrams -----------------------------------------------------------------------


def receiver_core() -> MrcCore:
    core = MrcCore(7, 4, MrcConfig(), 1)
    core.post_recv(1, bytearray(100_000), 0.0)
    return core


def demux(core: MrcCore, data: bytes, unknown: list[int]) -> None:
    """What the driver does: by connection id at offset 4 (transports/io/sockets.py)."""
    conn = int.from_bytes(data[4:8], "big") if len(data) >= 8 else -1
    if conn != core.conn:
        unknown[0] += 1
        return
    assert core.on_packet(data, 0.001) == []  # nothing answered, nothing raised


@pytest.mark.parametrize("kind", hostile.KINDS)
def test_every_hostile_kind_is_counted_as_its_kind_and_dropped(kind):
    core = receiver_core()
    unknown = [0]
    for d in hostile.pool(kind, seed=3, conn=7, evs=4, n=200):
        demux(core, d, unknown)
    stats = {**core.stats, "unknown_conn": unknown[0]}
    assert hostile.counted(kind, stats) == 200, stats
    assert stats.get("rx_data_bytes", 0) == 0 and "internal_error" not in stats
    assert not core.completions()


def test_hostile_pools_are_deterministic_and_the_mix_draws_every_kind():
    assert hostile.pool("sack_flood", 5, 1, 4) == hostile.pool("sack_flood", 5, 1, 4)
    assert hostile.pool("junk", 5, 1, 4) != hostile.pool("junk", 6, 1, 4)
    rng = random.Random(0)
    sizes = {len(hostile.hostile(rng, 4, 7)) for _ in range(500)}
    assert 48 in sizes and any(s > 48 for s in sizes) and any(s < 48 for s in sizes)
    with pytest.raises(ValueError):
        hostile.datagram("nonsense", rng, 1, 4)


def test_credit_paces_and_never_bursts_after_a_stall():
    c = hostile.Credit(1000.0, now=0.0, burst_s=0.005)
    assert c.refill(0.001) == 1 and c.refill(0.0015) == 0 and c.refill(0.002) == 1
    assert c.refill(10.0) == 5  # a 10 s stall: at most 5 ms of credit
    c.give_back(3)
    assert c.refill(10.0) == 3


# -- the soak's plans and accounting ----------------------------------------------------------

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2)


def test_stream_plans_one_driver_per_host_with_matching_streams():
    plans = stream_plans(SPEC, DEFAULT_STREAMS, 30.0)
    assert set(plans) == {"h0", "h1", "h2", "h3"}
    assert plans["h0"].transport == "mrc" and plans["h1"].transport == "dblp"
    snd, rcv = plans["h1"].streams[0], plans["h3"].streams[0]
    assert snd.kind == "send" and rcv.kind == "recv" and snd.conn == rcv.conn == 2
    assert snd.seeds == rcv.seeds and len(set(snd.seeds)) == 3
    assert snd.until_s == 30.0 and rcv.until_s is None
    assert rcv.bound is not None and rcv.bound.tolerance == 0.05
    assert len(plans["h0"].conns[0].paths) == 4  # every (plane, spine)
    assert plans["h0"].deadline_s > 30.0 and plans["h0"].timeline_s == 1.0
    assert plans["h1"].config == registry.get("dblp").defaults
    with pytest.raises(Exception, match="one transport per host"):
        stream_plans(SPEC, [Stream("mrc", "h0", "h2", 10), Stream("dblp", "h0", "h3", 10)], 1)


def outs(sent: dict, got: dict) -> dict:
    base_s = {"conn": 1, "kind": "send", "msg0": 1, "posted": 10, "ok": 10, "failed": 0,
              "open": [], "slowest_s": 0.5, "errors": []}
    base_r = {"conn": 1, "kind": "recv", "msg0": 1, "posted": 12, "ok": 10, "failed": 0,
              "bytes": 10 << 20, "not_exact": 0, "outside_bound": 0, "missing_chunks": 0,
              "deadline_rounds": 0, "delivered_min": 1.0, "open": [11, 12], "errors": []}
    return {"h0": {"streams": [{**base_s, **sent}]}, "h2": {"streams": [{**base_r, **got}]}}


def test_reconcile_nothing_lost():
    (row,) = reconcile([Stream("mrc", "h0", "h2", 1 << 20, 2)], outs({}, {}), 10.0)
    assert row["lost"] == 0 and row["problems"] == {} and row["messages"] == 10
    assert row["goodput_mbit"] == pytest.approx((10 << 20) * 8 / 10 / 1e6, abs=0.01)


@pytest.mark.parametrize("sent, got, problem", [
    ({}, {"ok": 9, "open": [10, 11, 12]}, "recv_open_sent"),
    ({"failed": 1, "ok": 9}, {}, "send_failed"),
    ({}, {"not_exact": 1}, "not_exact"),
    ({}, {"outside_bound": 2}, "outside_bound"),
    ({"open": [10]}, {}, "send_open"),
])
def test_reconcile_counts_every_way_to_lose(sent, got, problem):
    (row,) = reconcile([Stream("mrc", "h0", "h2", 1 << 20)], outs(sent, got), 10.0)
    assert row["lost"] > 0 and problem in row["problems"]


# -- the driver's streams and RSS sampler (fake cores) -----------------------------------------


class FakeCore:
    conn = 5

    def __init__(self) -> None:
        self.posted: list[tuple] = []

    def post_recv(self, msg, buf, now, **kw):
        self.posted.append(("recv", msg, buf, kw))
        return []

    def post_send(self, msg, data, now, **kw):
        self.posted.append(("send", msg, data, kw))
        return []


def fake_conn() -> Conn:
    return Conn(FakeCore(), ("::1", 1), [])  # type: ignore[arg-type]


def no_send(conn, txs) -> None:
    assert txs == []


def test_recv_stream_checks_bytes_and_reuses_its_buffers():
    size, seeds = 20_000, [11, 12, 13]
    spec = StreamPlan(conn=1, kind="recv", msg0=100, size=size, seeds=tuple(seeds), window=2)
    st = RecvStream(spec, fake_conn(), 8000)
    st.fill(0.0, no_send)
    core = st.conn.core
    assert [p[1] for p in core.posted] == [100, 101] and st.owns(101) and not st.owns(102)
    bufs = {p[1]: p[2] for p in core.posted}
    bufs[100][:] = message_bytes(seeds[0], size)  # message 100 carries seed 0's bytes
    st.complete(Completion(100, "recv", True, size, 1.0))
    assert st.ok == 1 and st.not_exact == 0 and bufs[100] == bytes(size)  # cleared
    st.fill(1.0, no_send)
    assert core.posted[-1][1] == 102 and core.posted[-1][2] is bufs[100]  # reused
    bufs[101][:] = message_bytes(seeds[1], size)
    bufs[101][5] ^= 1
    st.complete(Completion(101, "recv", True, size, 2.0))
    assert st.not_exact == 1 and st.errors == ["message 101: bytes differ"]
    st.complete(Completion(102, "recv", False, 0, 3.0, "connection failed"))
    r = st.report()
    assert r["ok"] == 2 and r["failed"] == 1 and r["open"] == [] and r["posted"] == 3
    st.fill(3.0, no_send)  # a failed receive: nothing more is posted
    assert st.next == 3 and len(core.posted) == 3
    st.complete(Completion(102, "recv", True, size, 4.0))  # a core completing it twice
    assert st.failed == 2 and st.errors[-1] == "message 102: completed twice"


def test_recv_stream_checks_only_the_chunks_a_bounded_round_placed():
    size, chunk = 24_000, 8000
    spec = StreamPlan(conn=1, kind="recv", msg0=1, size=size, seeds=(7,), window=1,
                      bound=LossBound(tolerance=0.4))
    st = RecvStream(spec, fake_conn(), chunk)
    st.fill(0.0, no_send)
    buf = st.conn.core.posted[0][2]
    assert st.conn.core.posted[0][3]["bound"].tolerance == 0.4
    ref = message_bytes(7, size)
    buf[:chunk] = ref[:chunk]
    buf[2 * chunk:] = ref[2 * chunk:]  # chunk 1 missing (left zero)
    st.complete(Completion(1, "recv", True, size, 1.0, delivered=2 / 3, missing=(1,)))
    assert st.ok == 1 and st.not_exact == 0 and st.missing_chunks == 1
    assert st.outside_bound == 0 and st.delivered_min == pytest.approx(2 / 3)
    st.fill(1.0, no_send)
    buf = st.conn.core.posted[1][2]
    buf[:] = ref
    buf[100] ^= 0xFF  # a placed chunk wrong
    st.complete(Completion(2, "recv", True, size, 2.0, delivered=1 / 3, missing=(2, 1)))
    assert st.not_exact == 1 and st.outside_bound == 1  # 1/3 < 1 - 0.4


def test_send_stream_keeps_its_window_until_the_end():
    spec = StreamPlan(conn=1, kind="send", msg0=1, size=1000, seeds=(1, 2), window=2,
                      until_s=10.0)
    st = SendStream(spec, fake_conn())
    st.fill(0.0, 0.0, no_send)
    core = st.conn.core
    assert [p[1] for p in core.posted] == [1, 2]
    assert core.posted[0][2] == message_bytes(1, 1000)
    assert core.posted[1][2] == message_bytes(2, 1000)
    st.complete(Completion(1, "send", True, 1000, 3.0))
    st.fill(3.0, 0.0, no_send)
    assert core.posted[-1][1] == 3 and core.posted[-1][2] == message_bytes(1, 1000)
    st.fill(11.0, 0.0, no_send)  # after until_s: nothing more, not finished while open
    assert len(core.posted) == 3 and not st.finished
    st.complete(Completion(2, "send", True, 1000, 11.5))
    st.complete(Completion(3, "send", False, 0, 11.6, "connection failed"))
    st.fill(12.0, 0.0, no_send)
    assert st.finished
    r = st.report()
    assert (r["posted"], r["ok"], r["failed"], r["open"]) == (3, 2, 1, [])
    assert r["slowest_s"] == pytest.approx(11.5)


def test_send_stream_stops_at_its_first_failure():
    st = SendStream(StreamPlan(conn=1, kind="send", msg0=1, size=10, seeds=(1,), window=1,
                               until_s=10.0), fake_conn())
    st.fill(0.0, 0.0, no_send)
    st.complete(Completion(1, "send", False, 0, 1.0, "connection failed"))
    st.fill(1.0, 0.0, no_send)  # long before until_s: no more posts, finished
    assert st.finished and st.next == 1 and st.errors == ["message 1: connection failed"]


def test_rss_sampler_samples_on_period_and_stays_bounded():
    s = RssSampler(every_s=1.0, cap=8)
    try:
        assert s.read() > 1 << 20
        for i in range(40):
            s.sample(100.0 + i * 0.5, 100.0)
        assert len(s.samples) < 8 and s.every > 1.0  # halved twice
        ts = [t for t, _ in s.samples]
        assert ts == sorted(ts) and ts[0] == 0.0
        n = len(s.samples)
        s.sample(120.0, 100.0, force=True)  # the last one, whenever the run ends
        assert len(s.samples) == n + 1 and s.samples[-1][0] == 20.0
    finally:
        s.close()

