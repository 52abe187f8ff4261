"""The burst sender process and its ready / start / started / result protocol, over IPv6
loopback (no root, no fabric)."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator

import pytest

from emu.burst_report import build_report, spread, start_offset_ms
from emu.burst_sender import HEADER, MAGIC, WINDOW
from emu.childproto import START
from emu.launch import Child
from emu.microburst import MicroburstSpec


@pytest.fixture()
def sink() -> Iterator[socket.socket]:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    s.setblocking(False)
    yield s
    s.close()


def spawn(port: int, windows: dict, payload: int = 200, rate_mbit: float = 1.0) -> Child:
    return Child("sender", [
        sys.executable, "-m", "emu.burst_sender", "--index", "3", "--src", "::1", "--dst",
        "::1", "--port", str(port), "--payload", str(payload), "--rate-mbit", str(rate_mbit),
        "--windows", json.dumps(windows)])


def drain(s: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(s.recv(65536))
        except BlockingIOError:
            return out


def test_ready_start_started_result(sink):
    # two 4 ms windows 20 ms apart, paced at 1 Mbit/s: 262-byte frames 2.1 ms apart
    p = spawn(sink.getsockname()[1], {"schedule": [[0.0, 0.004], [0.02, 0.024]]})
    try:
        p.wait_ready(20)
        p.send(START, t0=time.monotonic() + 0.05)
        started = p.record("started", 20)
        res = p.record("result", 20)
        assert p.wait(10) == 0
    finally:
        p.kill()
    assert started is not None and res is not None
    lag = started["lag"]
    assert started["burst"] == 0
    assert lag >= 0  # never before its window opens
    assert res["fired"] is True and res["late_skipped"] == 0
    assert res["bursts"] == 2 and len(res["records"]) == 2
    assert res["started"] == [0, lag]
    assert res["records"][0][1] == lag  # the same first send
    got = drain(sink)
    assert len(got) == res["datagrams"] == sum(r[3] for r in res["records"])
    heads = [HEADER.unpack_from(d) for d in got]
    assert all(m == MAGIC and idx == 3 for m, idx, _, _ in heads)
    for burst in (0, 1):  # each burst numbers its datagrams from 0
        seqs = [seq for _, _, b, seq in heads if b == burst]
        assert seqs == list(range(len(seqs))) and seqs


def test_an_armed_sender_ends_on_end_of_file(sink):
    p = spawn(sink.getsockname()[1], {"schedule": [[0.0, 0.004]]})
    try:
        p.wait_ready(20)
        p.close_stdin()  # what Microburst.stop() does to a sender that never fired
        res = p.record("result", 20)
        assert p.wait(10) == 0
    finally:
        p.kill()
    assert res is not None
    assert res["fired"] is False and res["datagrams"] == 0 and res["started"] is None
    assert drain(sink) == []


def test_an_instant_already_past_skips_the_windows_that_passed(sink):
    p = spawn(sink.getsockname()[1], {"schedule": [[0.0, 0.004], [0.3, 0.304]]})
    try:
        p.wait_ready(20)
        p.send(START, t0=time.monotonic() - 0.1)  # burst 0 ended 96 ms ago
        started = p.record("started", 20)
        res = p.record("result", 20)
    finally:
        p.kill()
    assert started is not None and res is not None
    assert started["burst"] == 1 and started["lag"] >= 0
    assert res["late_skipped"] == 1 and res["bursts"] == 1
    spec = MicroburstSpec("p0l0:h1", ("h0",), 1.0, 2.0, schedule=((0.0, 4.0), (0.3, 4.0)))
    # as an offset from the pattern's first burst: 300 ms + the lag
    assert start_offset_ms(spec, 1, started["lag"]) == pytest.approx(
        300 + started["lag"] * 1e3)


# -- the report, from the senders' results -----------------------------------------------------


def test_spread():
    assert spread({"a": 0.5, "b": 2.0, "c": None}) == 1.5
    assert spread({"a": 0.5}) == 0.0
    assert spread({"a": None}) is None


def test_report_flags_delay_only_and_counts_only_what_was_counted():
    from emu.burst_geometry import geometry
    from emu.burst_report import Counts
    from emu.burst_routes import plan_routes
    from emu.counters import QueueStats
    from topologies import MultiPlaneClos

    topo = MultiPlaneClos()
    spec = MicroburstSpec("p0l1:h4", ("h5", "h6"), 20.0, 100.0)
    routes = plan_routes(topo, spec)
    zero = QueueStats(0, 0, 0, 0)
    before = {("p0l1", "h4"): zero, ("h5", "p0"): zero, ("h6", "p0"): zero,
              ("p0l1", "h7"): zero}
    after = {("p0l1", "h4"): QueueStats(120, 0, 0, 0), ("h5", "p0"): QueueStats(60, 0, 0, 0),
             ("h6", "p0"): QueueStats(60, 0, 0, 0), ("p0l1", "h7"): QueueStats(5, 0, 3, 0)}

    def result(lag: float) -> dict:
        return {"bursts": 2, "datagrams": 60, "eagain": 0, "errors": 0, "late_skipped": 0,
                "cpu_s": 0.01, "wall_s": 0.2, "realtime": True, "started": [0, lag],
                "records": [[0, lag, 0.0, 30], [1, lag + 0.0002, 0.0, 30]]}

    results = {"h5": result(0.0004), "h6": result(0.0019)}
    rep = build_report(spec, routes, geometry(topo, spec, routes),
                       Counts("paths", before, after), results, {}, fired_late_s=-0.05,
                       duration_s=0.2)
    assert rep["target"] == {"egress": "p0l1:h4", "drops": 0, "packets": 120}
    assert rep["delay_only"] is True and rep["drops_per_burst"] == 0.0
    assert rep["geometry"]["can_drop"] is False
    assert rep["start_offsets_ms"] == {"h5": 0.4, "h6": 1.9}
    assert rep["start_spread_ms"] == 1.5
    assert rep["fired_late_ms"] == -50.0
    assert rep["alignment_ms"]["max"] == pytest.approx(1.5)
    assert rep["scheduled_bursts"] == 2
    # p0l1:h7 is on the counted node but on no burst path; with only the paths counted,
    # "elsewhere" is unknown, not zero
    assert rep["counted"] == "paths" and rep["drops_elsewhere"] is None
    assert rep["drops_on_burst_paths"] == {} and rep["drops_other_total"] == 0
    rep = build_report(spec, routes, geometry(topo, spec, routes),
                       Counts("all", before, after), results, {}, 0.0, 0.2)
    assert rep["drops_elsewhere"] == {"p0l1:h7": 3} and rep["drops_other_total"] == 3
    # a burst never counted: nothing is claimed
    rep = build_report(spec, routes, geometry(topo, spec, routes), Counts(None, None, None),
                       {"h5": None, "h6": None}, {"h5": "Traceback ..."}, 0.0, 0.2)
    assert rep["target"]["drops"] is None and rep["delay_only"] is None
    assert rep["sources"]["h5"]["error"] == "Traceback ..."
    assert rep["start_spread_ms"] is None


def test_step_locked_windows_open_at_the_instants_the_parent_hands_out(sink):
    # 20 ms windows: a sender woken a few ms late on a busy machine still sends in each
    p = spawn(sink.getsockname()[1], {"on": 0.02, "on_demand": True})
    try:
        p.wait_ready(20)
        t0 = time.monotonic() + 0.05
        p.send(START, t0=t0)
        assert p.record("started", 20) is not None
        # far enough apart that each record arrives while the sender waits for it
        later = [t0 + 0.15, t0 + 0.3]
        for k, t in enumerate(later, start=1):
            p.send(WINDOW, k=k, t=t)
        time.sleep(max(0.0, later[-1] + 0.05 - time.monotonic()))
        p.close_stdin()  # end of file: no more windows
        res = p.record("result", 20)
        assert p.wait(10) == 0
    finally:
        p.kill()
    assert res is not None and res["fired"] is True
    assert [r[0] for r in res["records"]] == [0, 1, 2] and res["late_skipped"] == 0
    heads = [HEADER.unpack_from(d) for d in drain(sink)]
    assert sorted({b for _, _, b, _ in heads}) == [0, 1, 2]
    # each burst's first send, at (never before) the instant handed for it
    assert all(0.0 <= r[1] < 0.02 for r in res["records"])


def test_a_step_locked_sender_given_no_further_window_ends_on_end_of_file(sink):
    p = spawn(sink.getsockname()[1], {"on": 0.004, "on_demand": True})
    try:
        p.wait_ready(20)
        p.send(START, t0=time.monotonic() + 0.02)
        assert p.record("started", 20) is not None
        p.close_stdin()
        res = p.record("result", 20)
        assert p.wait(10) == 0
    finally:
        p.kill()
    assert res is not None and res["bursts"] == 1 and [r[0] for r in res["records"]] == [0]
