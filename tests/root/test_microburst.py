"""Root-only tests of microbursts on a real fabric: the target FIFO overflows, nothing else.

Run in a throwaway network namespace:
``unshare --net .venv/bin/python -m pytest tests/root/test_microburst.py``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from emu import registry
from emu.counters import queue_stats
from emu.errors import EmuError
from emu.fabric import Fabric
from emu.microburst import Microburst, MicroburstSpec
from emu.netns import ns_inode
from emu.registry import pid_alive
from topologies import LinkSpec, MultiPlaneClos

from .burstnoise import CpuWakeups, conclusive, excused

pytestmark = pytest.mark.root

# 3 racks of 2 hosts, 2 planes x 2 spines; 100 Mbit/s links with 20-packet switch buffers.
SHALLOW = LinkSpec(100, 20)
SPEC = MultiPlaneClos(planes=2, spines=2, leaves=3, hosts_per_leaf=2,
                      host_link=SHALLOW, fabric_link=SHALLOW)
SAMPLE_S = 0.005
TOL_S = 0.005  # drops may trail a window by the few frames the sources still had queued


@pytest.fixture(scope="module")
def fab() -> Iterator[Fabric]:
    with Fabric(SPEC, name="mbtest") as f:
        yield f


@dataclass
class Run:
    mb: Microburst
    report: dict
    # (CLOCK_MONOTONIC before, after reading the target FIFO's drops, drops)
    samples: list[tuple[float, float, int]]
    pids: list[int]
    host: CpuWakeups  # the host's CPUs over the run


def quiet(fab: Fabric, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(q.backlog == 0 for k in fab.kernels.values() for q in queue_stats(k).values()):
            return
        time.sleep(0.02)
    pytest.fail("the fabric did not go quiet")


def burst(fab: Fabric, spec: MicroburstSpec, seconds: float) -> Run:
    """Run ``spec`` for ``seconds`` after its t0, sampling the target FIFO every ~5 ms,
    from before the bursts were armed to after they stopped (every drop is sampled)."""
    quiet(fab)
    node, ifname = spec.target.split(":")
    k = fab.kernels[node]
    samples: list[tuple[float, float, int]] = []
    done = threading.Event()

    def read() -> None:
        t = time.monotonic()
        d = queue_stats(k)[ifname].drops
        samples.append((t, time.monotonic(), d))

    def sample() -> None:
        # at the senders' real-time priority (if allowed): a read the burst's own load
        # holds back widens the span its drops are placed in
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            pass
        while not done.is_set():
            read()
            time.sleep(SAMPLE_S)

    with CpuWakeups() as host:
        read()
        mb = Microburst(fab, spec)
        try:
            mb.start()
            assert mb.t0 is not None
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            time.sleep(max(0.0, mb.t0 + seconds - time.monotonic()))
            done.set()
            sampler.join()  # the netlink sockets are not shared between threads
            pids = list(mb.pids.values())
        finally:
            mb.stop()
        read()
    return Run(mb, mb.report(), samples, pids, host)


def drop_intervals(samples: list[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    """(from, to, drops) for every sampling interval in which the FIFO dropped: from
    before the previous read to after this one, the span its drops surely fell in."""
    pairs = zip(samples, samples[1:], strict=False)
    return [(a0, b1, d1 - d0) for (a0, _b0, d0), (_a1, b1, d1) in pairs if d1 > d0]


def frame_s(run: Run) -> float:
    """One frame's time at the target (s)."""
    return run.mb.geometry.frame_ms / 1e3


def erased_s(run: Run, on_s: float) -> float:
    """How long a source must be held back in a window of ``on_s`` for it to drop nothing
    (s): its expected drops, in the target's frame times."""
    g = run.mb.geometry
    excess = max(0.0, g.excess_mbit) * 1e6 / 8 * on_s / g.frame_bytes
    return max(0.0, excess - g.queue_packets) * frame_s(run)


def check_drops_in_windows(run: Run, wins: list[tuple[float, float]], allowed_misses: int,
                           why: object) -> list[tuple[float, float, int]]:
    """Every sampled drop falls in a window (or TOL_S after it) and at most
    ``allowed_misses`` windows show none, unless the host held the trailing frames back
    longer than TOL_S, or a window's senders long enough to erase its drops."""
    intervals = drop_intervals(run.samples)
    assert intervals, "no drop was sampled"
    t0 = run.mb.t0
    assert t0 is not None
    outside = [(a, b, d) for a, b, d in intervals
               if not any(a < we + TOL_S and b > ws for ws, we in wins)]

    def trailing() -> str | None:  # since the window before each stray drop
        for a, b, _ in outside:
            prev = max((we for _, we in wins if we <= a), default=t0)
            w = run.host.check_worst(prev, b, TOL_S, f"before a drop at {(b - t0) * 1e3:.0f} ms")()
            if w:
                return w
        return None

    with excused(trailing):
        assert outside == [], ([(a - t0, b - t0, d) for a, b, d in outside], why)
    missed = [(ws, we) for ws, we in wins
              if not any(a < we + TOL_S and b > ws for a, b, _ in intervals)]
    held = [w for w in missed
            if run.host.check_held(w[0], w[1] + TOL_S, erased_s(run, w[1] - w[0]))()]
    excuse = (f"the host held the senders back in {len(held)} of the {len(missed)} windows "
              "without drops") if len(missed) - len(held) <= allowed_misses else None
    with excused(excuse):
        assert len(missed) <= allowed_misses, ([(a - t0, b - t0) for a, b in missed], why)
    return intervals


def sent_windows(run: Run) -> list[tuple[float, float]]:
    """Per burst, the span from its first source's first datagram to its last source's
    last one (CLOCK_MONOTONIC), from the senders' per-burst records."""
    sched = run.mb.windows()
    spans: dict[int, list[float]] = {}
    for res in run.mb.results.values():
        assert res is not None
        for k, lag, end_off, _n in res["records"]:
            a, b = sched[int(k)]
            span = spans.setdefault(int(k), [a + lag, b + end_off])
            span[0], span[1] = min(span[0], a + lag), max(span[1], b + end_off)
    return [(a, b) for _, (a, b) in sorted(spans.items())]


def burst_processes(fab: Fabric) -> list[int]:
    """Processes in the fabric's namespaces that run the burst sender."""
    inodes = {ns_inode(k.pid) for k in fab.kernels.values()} - {None}
    out = []
    for pid in registry.processes_in(inodes):  # type: ignore[arg-type]
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"emu.burst_sender" in f.read():
                    out.append(pid)
        except OSError:
            pass
    return out


INCAST = MicroburstSpec("p0l0:h1", ("h0", "h2", "h4"), on_ms=20, every_ms=100,
                        duration_s=1.5, seed=1)


@pytest.fixture(scope="module")
def incast(fab: Fabric) -> Run:
    """Three line-rate sources bursting 20 ms every 100 ms at leaf p0l0's port to h1."""
    return burst(fab, INCAST, seconds=1.6)  # 0.1 s after the last burst: queues drained


def again(fab: Fabric, first: Run, spec: MicroburstSpec, seconds: float,
          check: Callable[[Run], None]) -> None:
    """``check`` the run ``first``, measuring again (the same burst) while inconclusive."""
    conclusive(lambda i: check(first if i == 0 else burst(fab, spec, seconds)))


def held_upstream(run: Run) -> Callable[[], str | None]:
    """An excuse for drops upstream of the target: a shallow FIFO there fills only when
    its drain is held back while a line-rate source keeps sending, for a whole FIFO's
    worth of frames."""
    ws, we = run.mb.windows()[0][0], run.mb.windows()[-1][1]
    return run.host.check_worst(ws, we + TOL_S, SHALLOW.queue_packets * frame_s(run),
                                "during the bursts")


def test_incast_drops_at_the_target_fifo_only(fab, incast):
    again(fab, incast, INCAST, 1.6, incast_drops_at_the_target)


def incast_drops_at_the_target(run: Run) -> None:
    rep = run.report
    assert run.mb.target == ("p0l0", "h1")
    # One source in the rack, two over different spines: the target is where they first meet.
    spines = {r.source: r.path.spine for r in run.mb.routes}
    assert spines["h0"] is None and {spines["h2"], spines["h4"]} == {0, 1}
    assert rep["shared_upstream"] == {}
    assert rep["target"]["drops"] > 0
    assert rep["drops_elsewhere"] == {}  # egresses no burst path crosses
    with excused(held_upstream(run)):
        assert rep["drops_on_burst_paths"] == {}  # nor the shallow queues upstream of it
        assert rep["drops_other_total"] == 0
    sent = sum(s["datagrams"] for s in rep["sources"].values())
    # Every datagram either left the target FIFO or was dropped there.
    assert rep["target"]["packets"] + rep["target"]["drops"] == sent
    for src, s in rep["sources"].items():
        assert s["errors"] == 0
        assert rep["crossed"][f"{src}:p0"]["packets"] == s["datagrams"]


def test_every_burst_is_sent_at_line_rate(fab, incast):
    again(fab, incast, INCAST, 1.6, sent_at_line_rate)


def sent_at_line_rate(run: Run) -> None:
    rep = run.report
    frame = 14 + 40 + 40 + 8 + INCAST.payload
    line = SHALLOW.rate_mbit * 1e6 / 8 / frame * INCAST.on_ms / 1000  # datagrams per burst
    assert rep["scheduled_bursts"] == 15
    wins = run.mb.windows()
    on_s = INCAST.on_ms / 1e3
    # a sender misses a window only when held back for all of it
    missed = run.host.check_worst(wins[0][0], wins[-1][1], on_s, "during the bursts")
    # it sends less only for as long as it is held back within the windows
    short = 0.1 * on_s * len(wins)
    lost = sum(run.host.held(a, b) for a, b in wins)
    held = (f"the host took {lost * 1e3:.1f} ms within the windows, beyond the "
            f"{short * 1e3:.1f} ms of sending the check allows") if lost > short else None
    for s in rep["sources"].values():
        with excused(missed):
            assert s["bursts"] == 15 and s["late_skipped"] == 0, s
        per_burst = s["datagrams"] / s["bursts"]
        # the NIC's HTB lets a little burst through at once, then paces at line rate
        assert per_burst <= line + 6, (per_burst, line)
        with excused(held):
            assert 0.9 * line <= per_burst, (per_burst, line)
    # medians: a host late at half the windows' starts by the bound makes them miss it
    for key, bound_ms in (("start_lag", 1.0), ("alignment", 2.0)):
        late = [a for a, _ in wins if run.host.worst(a, a + bound_ms / 1e3) > bound_ms / 1e3]
        excuse = (f"the host took a CPU away for over {bound_ms} ms at {len(late)} of "
                  f"{len(wins)} window starts") if 2 * len(late) >= len(wins) else None
        with excused(excuse):
            if key == "start_lag":
                for s in rep["sources"].values():
                    assert s["timing_ms"]["start_lag"]["p50"] < bound_ms, s["timing_ms"]
            else:
                assert rep["alignment_ms"]["p50"] < bound_ms, rep["alignment_ms"]


def test_drops_happen_only_inside_on_windows(fab, incast):
    again(fab, incast, INCAST, 1.6, drops_inside_on_windows)


def drops_inside_on_windows(run: Run) -> None:
    # and they recur: nearly every on-window shows drops
    intervals = check_drops_in_windows(run, run.mb.windows(), 1, "scheduled windows")
    # the sampled total (from before the arming to after the stop) is the reported total
    assert sum(d for _, _, d in intervals) == run.report["target"]["drops"]


def test_stop_leaves_no_burst_process(fab, incast):
    assert incast.pids and all(not pid_alive(p) for p in incast.pids)
    assert burst_processes(fab) == []
    conclusive(lambda _: unbounded_stops_promptly(fab))


def unbounded_stops_promptly(fab: Fabric, bound_s: float = 1.0) -> None:
    # an unbounded pattern runs until stopped, and stop() ends it promptly
    spec = MicroburstSpec("p0l0:h1", ("h0", "h2"), on_ms=5, every_ms=50)
    mb = Microburst(fab, spec)
    try:
        with CpuWakeups() as host:
            mb.start()
            assert mb.t0 is not None
            # until five windows have closed (the fifth at 205 ms)
            time.sleep(max(0.0, mb.t0 + 0.25 - time.monotonic()))
            assert len(burst_processes(fab)) == 2
            t = time.monotonic()
            mb.stop()
            took = time.monotonic() - t
    finally:
        mb.stop()
    lost = host.held(t, t + took)
    with excused(f"the host took {lost:.2f} s of it" if took - lost < bound_s else None):
        assert took < bound_s, took
    assert all(not pid_alive(p) for p in mb.pids.values())
    assert burst_processes(fab) == []
    rep = mb.report()
    with excused(host.check_worst(mb.t0, t, spec.on_ms / 1e3, "during the bursts")):
        assert all(s["bursts"] >= 5 for s in rep["sources"].values()), rep["sources"]


def test_an_armed_burst_that_never_fires_sends_nothing_and_stops(fab):
    mb = Microburst(fab, MicroburstSpec("p0l0:h1", ("h0", "h2"), on_ms=5, every_ms=50))
    mb.arm()
    assert mb.armed and mb.t0 is None
    assert len(burst_processes(fab)) == 2
    mb.stop()
    # end of file on stdin ended each waiting sender: it reported on its own, sent nothing
    assert all(r is not None and r["fired"] is False and r["datagrams"] == 0
               for r in mb.results.values()), mb.results
    assert all(not pid_alive(p) for p in mb.pids.values())
    assert burst_processes(fab) == []
    with pytest.raises(EmuError, match="fired and stopped"):
        mb.report()
    with pytest.raises(EmuError, match="needs an armed microburst"):
        mb.fire()


def test_spine_egress_overflows(fab):
    spec = MicroburstSpec("p0s1:l0", ("h2", "h4"), on_ms=30, every_ms=150, duration_s=0.6)
    conclusive(lambda _: spine_egress_overflows(burst(fab, spec, seconds=0.7)))


def spine_egress_overflows(run: Run) -> None:
    rep = run.report
    assert all(r.path.spine == 1 and r.path.plane == 0 for r in run.mb.routes)
    assert rep["target"]["drops"] > 0
    with excused(held_upstream(run)):
        assert rep["drops_other_total"] == 0


def test_paced_bursts_below_the_link_rate_do_not_drop(fab):
    # 3 x 30 Mbit/s into a 100 Mbit/s port: the queue never fills.
    spec = MicroburstSpec("p0l0:h1", ("h0", "h2", "h4"), on_ms=40, every_ms=100,
                          rate_mbit=30, duration_s=0.5)
    conclusive(lambda _: paced_do_not_drop(burst(fab, spec, seconds=0.6), spec))


def paced_do_not_drop(run: Run, spec: MicroburstSpec) -> None:
    rep = run.report
    frame = 14 + 40 + 40 + 8 + 8000
    gap = frame * 8 / 30e6  # a paced sender does not catch up with the slots it was away for
    per_burst = 30e6 / 8 / frame * 0.040
    wins = run.mb.windows()
    lost = sum(run.host.held(a, b) for a, b in wins)
    held = (f"the host took {lost * 1e3:.1f} ms within the windows, beyond the "
            f"{2 * gap * len(wins) * 1e3:.1f} ms of slots the check allows"
            if lost > 2 * gap * len(wins) else None)
    for s in rep["sources"].values():
        n = s["datagrams"] / s["bursts"]
        assert n - per_burst <= 2, s
        with excused(held):
            assert per_burst - n <= 2, s
    # the target overflows only when its drain is held back while the sources keep
    # sending, long enough for their 90 Mbit/s to fill its FIFO
    fill = SHALLOW.queue_packets * frame * 8 / (3 * 30e6)
    ws, we = wins[0][0], wins[-1][1]
    with excused(run.host.check_worst(ws, we + TOL_S, fill, "during the bursts")):
        assert rep["target"]["drops"] == 0
        assert rep["drops_other_total"] == 0


def test_jittered_bursts_drop_in_the_windows_drawn_for_them(fab):
    spec = MicroburstSpec("p0l0:h1", ("h0", "h2", "h4"), on_ms=30, every_ms=150,
                          jitter_ms=60, duration_s=0.75)
    conclusive(lambda _: jittered_windows(burst(fab, spec, seconds=0.85)))


def jittered_windows(run: Run) -> None:
    sched = run.mb.windows()  # CLOCK_MONOTONIC
    t0 = run.mb.t0
    assert t0 is not None
    # each burst its own draw within its slot: not the slots, not one fixed phase
    late = [a - t0 - k * 0.15 for k, (a, _) in enumerate(sched)]
    assert len(sched) == 5 and all(0.0 <= x < 0.06 for x in late)
    assert len({round(x, 4) for x in late}) == 5 and max(late) > 0.01
    # The senders' records are relative to the windows each drew for itself: placed on the
    # parent's draw, the target's drops fall inside them only if both drew the same.
    wins = sent_windows(run)
    assert len(wins) == 5
    lag = [round((w[0] - s[0]) * 1e3, 2) for w, s in zip(wins, sched, strict=True)]
    check_drops_in_windows(run, wins, 0, lag)


def test_explicit_schedule(fab):
    sched = ((0.0, 30.0), (0.25, 40.0), (0.6, 30.0))
    spec = MicroburstSpec("p0l0:h1", ("h0", "h2", "h4"), on_ms=1, every_ms=2, schedule=sched)
    conclusive(lambda _: explicit_schedule(burst(fab, spec, seconds=0.75)))


def explicit_schedule(run: Run) -> None:
    assert [round(b - a, 3) for a, b in run.mb.windows()] == [0.03, 0.04, 0.03]
    sched = run.mb.windows()
    # a sender misses a window only when held back for all of it
    with excused(run.host.check_worst(sched[0][0], sched[-1][1], 0.03, "during the bursts")):
        assert all(s["bursts"] == 3 and s["late_skipped"] == 0
                   for s in run.report["sources"].values()), run.report["sources"]
    # Drops are matched to the windows the senders actually sent in: on two busy shared
    # cores a sender can wake a few ms late, and the report says by how much.
    wins = sent_windows(run)
    assert len(wins) == 3
    late = [round((w[0] - s[0]) * 1e3, 2) for w, s in zip(wins, sched, strict=True)]
    check_drops_in_windows(run, wins, 0, late)
    with excused(held_upstream(run)):
        assert run.report["drops_other_total"] == 0
