"""Root-only tests of microbursts on a real fabric: the target FIFO overflows, nothing else.

Run in a throwaway network namespace:
``unshare --net .venv/bin/python -m pytest tests/root/test_microburst.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
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
    samples: list[tuple[float, int]]  # (CLOCK_MONOTONIC, target FIFO drops)
    pids: list[int]


def quiet(fab: Fabric, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(q.backlog == 0 for k in fab.kernels.values() for q in queue_stats(k).values()):
            return
        time.sleep(0.02)
    pytest.fail("the fabric did not go quiet")


def burst(fab: Fabric, spec: MicroburstSpec, seconds: float) -> Run:
    """Run ``spec`` for ``seconds`` after its t0, sampling the target FIFO every ~5 ms."""
    quiet(fab)
    node, ifname = spec.target.split(":")
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        k = fab.kernels[node]
        while not done.is_set():
            samples.append((time.monotonic(), queue_stats(k)[ifname].drops))
            time.sleep(SAMPLE_S)

    mb = Microburst(fab, spec)
    mb.start()
    assert mb.t0 is not None
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    time.sleep(max(0.0, mb.t0 + seconds - time.monotonic()))
    done.set()
    sampler.join()  # the netlink sockets are not shared between threads
    pids = list(mb.pids.values())
    mb.stop()
    return Run(mb, mb.report(), samples, pids)


def drop_intervals(samples: list[tuple[float, int]]) -> list[tuple[float, float, int]]:
    """(from, to, drops) for every sampling interval in which the FIFO dropped."""
    pairs = zip(samples, samples[1:], strict=False)
    return [(t0, t1, d1 - d0) for (t0, d0), (t1, d1) in pairs if d1 > d0]


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


def test_incast_drops_at_the_target_fifo_only(incast):
    rep = incast.report
    assert incast.mb.target == ("p0l0", "h1")
    # One source in the rack, two over different spines: the target is where they first meet.
    spines = {r.source: r.path.spine for r in incast.mb.routes}
    assert spines["h0"] is None and {spines["h2"], spines["h4"]} == {0, 1}
    assert rep["shared_upstream"] == {}
    assert rep["target"]["drops"] > 0
    assert rep["drops_elsewhere"] == {}  # egresses no burst path crosses
    assert rep["drops_on_burst_paths"] == {}  # nor the shallow queues upstream of the target
    assert rep["drops_other_total"] == 0
    sent = sum(s["datagrams"] for s in rep["sources"].values())
    # Every datagram either left the target FIFO or was dropped there.
    assert rep["target"]["packets"] + rep["target"]["drops"] == sent
    for src, s in rep["sources"].items():
        assert s["errors"] == 0
        assert rep["crossed"][f"{src}:p0"]["packets"] == s["datagrams"]


def test_every_burst_is_sent_at_line_rate(incast):
    rep = incast.report
    frame = 14 + 40 + 40 + 8 + INCAST.payload
    line = SHALLOW.rate_mbit * 1e6 / 8 / frame * INCAST.on_ms / 1000  # datagrams per burst
    assert rep["scheduled_bursts"] == 15
    for s in rep["sources"].values():
        assert s["bursts"] == 15 and s["late_skipped"] == 0
        per_burst = s["datagrams"] / s["bursts"]
        # the NIC's HTB lets a little burst through at once, then paces at line rate
        assert 0.9 * line <= per_burst <= line + 6, (per_burst, line)
        assert s["timing_ms"]["start_lag"]["p50"] < 1.0
    assert rep["alignment_ms"]["p50"] < 2.0


def test_drops_happen_only_inside_on_windows(incast):
    wins = incast.mb.windows()
    intervals = drop_intervals(incast.samples)
    assert intervals, "no drop was sampled"
    outside = [(a, b, d) for a, b, d in intervals
               if not any(a < we + TOL_S and b > ws for ws, we in wins)]
    assert outside == [], [(a - incast.mb.t0, b - incast.mb.t0, d) for a, b, d in outside]
    # and they recur: nearly every on-window shows drops
    hit = [any(a < we + TOL_S and b > ws for a, b, _ in intervals) for ws, we in wins]
    assert sum(hit) >= len(wins) - 1, hit
    # the sampled total is the reported total
    assert sum(d for _, _, d in intervals) == incast.report["target"]["drops"]


def test_stop_leaves_no_burst_process(fab, incast):
    assert incast.pids and all(not pid_alive(p) for p in incast.pids)
    assert burst_processes(fab) == []
    # an unbounded pattern runs until stopped, and stop() ends it promptly
    mb = Microburst(fab, MicroburstSpec("p0l0:h1", ("h0", "h2"), on_ms=5, every_ms=50))
    mb.start()
    time.sleep(0.3)
    assert len(burst_processes(fab)) == 2
    t = time.monotonic()
    mb.stop()
    assert time.monotonic() - t < 1.0
    assert all(not pid_alive(p) for p in mb.pids.values())
    assert burst_processes(fab) == []
    rep = mb.report()
    assert all(s["bursts"] >= 5 for s in rep["sources"].values())


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
    run = burst(fab, MicroburstSpec("p0s1:l0", ("h2", "h4"), on_ms=30, every_ms=150,
                                    duration_s=0.6), seconds=0.7)
    rep = run.report
    assert all(r.path.spine == 1 and r.path.plane == 0 for r in run.mb.routes)
    assert rep["target"]["drops"] > 0
    assert rep["drops_other_total"] == 0


def test_paced_bursts_below_the_link_rate_do_not_drop(fab):
    # 3 x 30 Mbit/s into a 100 Mbit/s port: the queue never fills.
    run = burst(fab, MicroburstSpec("p0l0:h1", ("h0", "h2", "h4"), on_ms=40, every_ms=100,
                                    rate_mbit=30, duration_s=0.5), seconds=0.6)
    rep = run.report
    frame = 14 + 40 + 40 + 8 + 8000
    per_burst = 30e6 / 8 / frame * 0.040
    for s in rep["sources"].values():
        assert abs(s["datagrams"] / s["bursts"] - per_burst) <= 2, s
    assert rep["target"]["drops"] == 0
    assert rep["drops_other_total"] == 0


def test_explicit_schedule(fab):
    sched = ((0.0, 30.0), (0.25, 40.0), (0.6, 30.0))
    run = burst(fab, MicroburstSpec("p0l0:h1", ("h0", "h2", "h4"), on_ms=1, every_ms=2,
                                    schedule=sched), seconds=0.75)
    assert [round(b - a, 3) for a, b in run.mb.windows()] == [0.03, 0.04, 0.03]
    assert all(s["bursts"] == 3 and s["late_skipped"] == 0
               for s in run.report["sources"].values())
    # Drops are matched to the windows the senders actually sent in: on two busy shared
    # cores a sender can wake a few ms late, and the report says by how much.
    wins = sent_windows(run)
    assert len(wins) == 3
    intervals = drop_intervals(run.samples)
    sched = run.mb.windows()
    late = [round((w[0] - s[0]) * 1e3, 2) for w, s in zip(wins, sched, strict=True)]
    for ws, we in wins:
        assert any(a < we + TOL_S and b > ws for a, b, _ in intervals), (ws - run.mb.t0, late)
    assert all(any(a < we + TOL_S and b > ws for ws, we in wins) for a, b, _ in intervals), late
    assert run.report["drops_other_total"] == 0
