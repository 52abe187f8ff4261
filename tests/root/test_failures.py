"""Failure primitives proven by traffic on a real fabric (root)."""

from __future__ import annotations

import math
import socket
import time

import pytest

from emu.counters import interface_packets, queue_stats
from emu.fabric import Fabric
from emu.failures import GrayLink, LinkDown, LinkFlap, PlaneDown, RateDegrade, SwitchDown
from emu.netns import entered
from emu.srv6 import pin_socket
from emu.timeline import Timeline, TimelineRunner, at, fail_link, gray_link, restore
from emu.traffic import Flow, run_flows
from topologies import MultiPlaneClos

from .burstnoise import CpuWakeups, conclusive, excused
from .hostnoise import goodput_at_ceiling

pytestmark = pytest.mark.root

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1)
PORT = 43000


@pytest.fixture(scope="module")
def fab():
    with Fabric(SPEC, name="failtest") as f:
        yield f


# Probes still out are all in once the receiver, on time, heard none for QUIET_S of its
# own running time and no queue of the fabric holds any; a host stall stretches neither.
QUIET_S, POLL_S, PROBE_CAP_S = 0.3, 0.02, 10.0


def queues_empty(fab: Fabric) -> bool:
    return all(q.backlog == 0 for k in fab.kernels.values() for q in queue_stats(k).values())


def probes(fab: Fabric, src: str, dst: str, plane: int, spine: int, n: int = 20) -> int:
    """Send ``n`` probes pinned to (plane, spine); return how many arrived."""
    spec = fab.spec
    with entered(fab.node_kernel(dst).fd):
        rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with entered(fab.node_kernel(src).fd):
        tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        rx.bind((str(spec.address(dst)), PORT))
        rx.settimeout(POLL_S)
        tx.bind((str(spec.address(src)), 0))
        pin_socket(tx, spec.path(src, dst, plane, spine))
        for i in range(n):
            try:
                tx.sendto(i.to_bytes(4, "big"), (str(spec.address(dst)), PORT))
            except OSError:
                pass  # no route (the leaf's own uplink is down): the probe is lost
        got: set[int] = set()
        quiet, deadline = 0.0, time.monotonic() + PROBE_CAP_S
        while len(got) < n and time.monotonic() < deadline:
            t = time.monotonic()
            try:
                got.add(int.from_bytes(rx.recv(16), "big"))
                quiet = 0.0
            except TimeoutError:
                took = time.monotonic() - t
                if took <= 2 * POLL_S:  # a poll that came back on time: real silence
                    quiet += took
                if quiet >= QUIET_S and queues_empty(fab):
                    break
        return len(got)
    finally:
        rx.close()
        tx.close()


def all_paths_ok(fab: Fabric) -> bool:
    return all(probes(fab, "h0", "h1", p, s, 5) == 5 and probes(fab, "h1", "h0", p, s, 5) == 5
               for p in range(SPEC.planes) for s in range(SPEC.spines))


def test_cut_link_carries_nothing_and_restores(fab):
    cut = LinkDown("p0l0-p0s1")
    cut.validate(fab.spec)
    before = {n: interface_packets(fab.kernels[n]) for n in ("p0l0", "p0s1")}
    cut.apply(fab)
    try:
        assert probes(fab, "h0", "h1", 0, 1) == 0
        assert probes(fab, "h1", "h0", 0, 1) == 0
        assert probes(fab, "h0", "h1", 0, 0) == 20  # the other spine is untouched
        after = {n: interface_packets(fab.kernels[n]) for n in ("p0l0", "p0s1")}
        # Nothing crossed the cut cable in either direction.
        assert after["p0l0"]["s1"][1] == before["p0l0"]["s1"][1]
        assert after["p0s1"]["l0"][1] == before["p0s1"]["l0"][1]
    finally:
        cut.restore(fab)
    # Restored means forwarding when restore returns: the cut cable itself is probed
    # first, with no other traffic to give the kernel time to finish bringing it up.
    assert probes(fab, "h0", "h1", 0, 1) == 20
    assert probes(fab, "h1", "h0", 0, 1) == 20
    assert all_paths_ok(fab)


def test_switch_down_and_plane_down(fab):
    spine = SwitchDown("p1s0")
    spine.apply(fab)
    try:
        assert probes(fab, "h0", "h1", 1, 0) == 0
        assert probes(fab, "h0", "h1", 1, 1) == 20
    finally:
        spine.restore(fab)
    plane = PlaneDown(1)
    plane.apply(fab)
    try:
        assert [probes(fab, "h0", "h1", 1, s) for s in range(2)] == [0, 0]
        assert [probes(fab, "h0", "h1", 0, s) for s in range(2)] == [20, 20]
    finally:
        plane.restore(fab)
    assert all_paths_ok(fab)


GRAY_RATE_MBIT, GRAY_S, GRAY_MIN = 20, 1.5, 2000


def test_gray_link_loss_is_the_configured_fraction_both_ways(fab):
    conclusive(lambda i: gray_loss(fab))


def gray_loss(fab: Fabric) -> None:
    loss = 0.2
    gray = GrayLink("p0l0-p0s1", loss)
    gray.apply(fab)
    try:
        flows = [Flow("h0", "h1", SPEC.path("h0", "h1", 0, 1)),
                 Flow("h1", "h0", SPEC.path("h1", "h0", 0, 1))]
        # Small datagrams at a rate the queues absorb: every loss is the gray link's.
        with CpuWakeups() as cpu:
            t0 = time.monotonic()
            res = run_flows(fab, flows, rate_mbit=GRAY_RATE_MBIT, seconds=GRAY_S, payload=1000)
            t1 = time.monotonic()
    finally:
        gray.restore(fab)
    for r in res:
        n = r.sent
        # The sender paces without catching up: GRAY_MIN datagrams need this much of its
        # schedule (warm-up included); a sender held back longer could not send them.
        per_s = GRAY_RATE_MBIT * 1e6 / 8 / r.frame_bytes
        slack = GRAY_S + 0.3 - GRAY_MIN / per_s
        with excused(cpu.check_held(t0, t1, slack, "while the flows ran"),
                     (f"the sender fell {r.tx_stall_s * 1e3:.0f} ms behind its schedule"
                      if r.tx_stall_s > slack else None)):
            assert n > GRAY_MIN, (r.flow.src, n, r)
        sd = math.sqrt(n * loss * (1 - loss))
        assert abs(r.lost - n * loss) < 5 * sd, (r.flow.src, r.sent, r.received)
    assert all_paths_ok(fab)


def test_rate_degradation_holds_then_restores(fab):
    path = SPEC.path("h0", "h1", 0, 1)
    slow = RateDegrade("p0l0-p0s1", 30.0)
    slow.validate(fab.spec)
    slow.apply(fab)
    try:
        goodput_at_ceiling(lambda: run_flows(fab, [Flow("h0", "h1", path)], rate_mbit=60,
                                             seconds=1.5)[0], 30.0, seconds=1.5)
    finally:
        slow.restore(fab)
    goodput_at_ceiling(lambda: run_flows(fab, [Flow("h0", "h1", path)], rate_mbit=150,
                                         seconds=1.5)[0], 100.0, seconds=1.5)


def test_flap_loses_some_and_recovers(fab):
    flap = LinkFlap("p0l0-p0s1", period_s=0.2, duty=0.5)
    flap.validate(fab.spec)
    handle = flap.apply(fab)
    try:
        r = run_flows(fab, [Flow("h0", "h1", SPEC.path("h0", "h1", 0, 1))], rate_mbit=20,
                      seconds=1.0, payload=1000)[0]
    finally:
        flap.restore(fab, handle)
    assert 0 < r.received < r.sent
    assert all_paths_ok(fab)


def test_timeline_fires_in_order_and_logs_actual_times(fab):
    c, g = fail_link("p0l1-p0s0"), gray_link("p1l0-p1s1", 0.5)
    tl = Timeline((at(0.05, c), at(0.1, g), at(0.2, restore(c)), at(0.25, restore(g))))
    log: list[dict] = []
    runner = TimelineRunner(fab, tl, log.append)
    runner.start()
    runner.join(timeout=5)
    runner.stop()
    assert [(e["at"], e["action"], e["kind"]) for e in log] == [
        (0.05, "apply", "link_down"), (0.1, "apply", "gray_link"),
        (0.2, "restore", "link_down"), (0.25, "restore", "gray_link")]
    assert all(e["fired"] >= e["at"] and "error" not in e for e in log)
    assert [e["fired"] for e in log] == sorted(e["fired"] for e in log)
    assert all_paths_ok(fab)


def test_runner_stop_restores_what_is_still_active(fab):
    tl = Timeline((at(0.0, fail_link("p1l1-p1s1")),))
    log: list[dict] = []
    runner = TimelineRunner(fab, tl, log.append)
    runner.start()
    deadline = time.monotonic() + 5
    while not log and time.monotonic() < deadline:
        time.sleep(0.01)
    assert probes(fab, "h1", "h0", 1, 1) == 0
    runner.stop()
    assert all_paths_ok(fab)
