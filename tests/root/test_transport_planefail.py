"""MRC through a whole plane going down and coming back, on a real (static-routed) fabric.

The claim's plane failure (emu.failures.PlaneDown: every link of the plane, the hosts'
NICs on it included) fired mid-transfer and restored: MRC retires the plane's EVs, goes on
over the other plane, and once the plane's links and routes are back a probe re-admits
each EV, which then carries data again. The drivers' ``ev_log`` (the EV state changes
with their times) shows both steps.
"""

from __future__ import annotations

import threading
import time

import pytest

from emu.fabric import Fabric
from emu.failures import PlaneDown
from topologies import MultiPlaneClos
from transports.testing.harness import Transfer, run_transfers

from .burstnoise import CpuWakeups, conclusive, excused, held_back
from .ctlnoise import loop_gap

pytestmark = pytest.mark.root

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1)
SRC, DST = "h0", "h1"
FIRE_S, OUTAGE_S = 0.3, 0.25
# MRC retires an EV a few RTOs (ms) after its first unanswered packet: the checks hold
# while the sender ran for half the outage, and the plane went down early in the transfer.
OUTAGE_SLACK, FIRE_SLACK = OUTAGE_S / 2, 0.1


@pytest.fixture(scope="module")
def fab():
    with Fabric(SPEC, name="pftest") as f:
        yield f


def test_mrc_retires_a_dead_plane_and_readmits_it_once_restored(fab):
    conclusive(lambda i: plane_down_and_back(fab))


def plane_down_and_back(fab: Fabric) -> None:
    plane = PlaneDown(0)
    at: dict = {}

    def fail_later(t0: float) -> None:
        def run() -> None:
            time.sleep(max(0.0, t0 + FIRE_S - time.monotonic()))
            at["down"] = time.monotonic() - t0
            handle = plane.apply(fab)
            time.sleep(OUTAGE_S)
            at["restoring"] = time.monotonic() - t0
            plane.restore(fab, handle)
            at["up"] = time.monotonic() - t0  # links, addresses and routes back
        at["t0"] = t0
        at["thread"] = th = threading.Thread(target=run, daemon=True)
        th.start()

    with CpuWakeups() as cpu:
        try:
            r = run_transfers(fab, "mrc", [Transfer(SRC, DST, 32 << 20)], on_start=fail_later)
        finally:
            at["thread"].join(10)
            if "up" not in at:
                plane.restore(fab)
    assert r.ok, r.messages
    t0 = at["t0"]
    with excused(held_back(at["down"], FIRE_S + FIRE_SLACK, "took the plane down"),
                 cpu.check_held(t0, t0 + at["up"], FIRE_SLACK, "before the plane was back")):
        assert r.completion_s > at["up"], (r.completion_s, at)  # back mid-transfer
    nics = [p.plane for p in SPEC.paths(SRC, DST)]
    dead = {ev for ev, nic in enumerate(nics) if nic == 0}
    log = r.drivers[SRC]["ev_log"]
    # The sender's own record: its loop samples its timeline at least every 10 ms when it
    # runs; an EV it never sent on in the outage cannot have failed there.
    gap = loop_gap(r.drivers[SRC]["timeline"], at["down"], at["restoring"])
    stalled = (f"the sender's loop did not run for {gap * 1e3:.0f} ms of the "
               f"{OUTAGE_S * 1e3:.0f} ms outage" if gap > OUTAGE_SLACK else None)
    retired = {ev for t, _, ev, old, new in log if new == "ASSUMED_BAD" and t >= at["down"]}
    with excused(stalled, cpu.check_held(t0 + at["down"], t0 + at["restoring"],
                                         OUTAGE_SLACK, "in the outage")):
        assert dead <= retired, log  # every EV of the dead plane (a live one may be undone)
    back = {ev for t, _, ev, old, new in log if old == "ASSUMED_BAD" and new == "GOOD"
            and ev in dead and t >= at["down"]}
    assert back == dead, log  # each re-admitted ...
    assert all(t >= at["restoring"] for t, _, ev, old, new in log
               if ev in dead and new == "GOOD" and t >= at["down"]), log  # ... once back
    last = {ev: new for _, _, ev, _, new in log}
    assert all(state == "GOOD" for state in last.values()), log
