"""Root-only tests of the BGP/BFD control plane (FRR in every switch namespace).

Run them in a throwaway network namespace:
``unshare --net .venv/bin/python -m pytest tests/root/test_bgp.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emu import frr, registry
from emu.errors import EmuError
from emu.fabric import Fabric
from emu.netns import entered
from emu.traffic import Flow, run_flows
from topologies import MultiPlaneClos
from topologies.routing import originated_prefixes

from .burstnoise import CpuWakeups, conclusive, excused, held_back
from .ctlnoise import bfd_downs, flapped

pytestmark = pytest.mark.root

# 2 planes x 2 spines x 3 leaves x 1 host: 3 racks, 10 switches running FRR.
SPEC = MultiPlaneClos(planes=2, spines=2, leaves=3, hosts_per_leaf=1)
BFD = frr.BfdTimers(3, 100, 100)
# Both ends of the link the failure tests take down (their sessions go down on purpose).
CUT = {("p0l0", "s0"), ("p0s0", "l0")}
# A session's detection runs from its last packet before the cut, so at least
# detection - transmit interval (200 ms) after it: the 0.5 x detection floor holds
# unless the timing started more than the difference late.
START_SLACK = BFD.detection_s - BFD.transmit_ms / 1000 - 0.5 * BFD.detection_s
# Detection plus BGP's and zebra's few ms leave the 2 x detection ceiling this much.
END_SLACK = 2 * BFD.detection_s - BFD.detection_s - 0.1
# BFD down counters when the fabric was last known converged.
CALM: dict[str, dict] = {}


@pytest.fixture(scope="module")
def fab() -> Iterator[Fabric]:
    with Fabric(SPEC, name="bgptest", control_plane="bgp", bfd=BFD) as f:
        CALM["downs"] = bfd_downs(f)
        yield f


def reconverged(fab: Fabric) -> dict:
    """Converged again (a host stall may have flapped a session); the counters then."""
    fab.wait_converged(60)
    CALM["downs"] = bfd_downs(fab)
    return CALM["downs"]


def over_both_spines(fab: Fabric, i: int, far: str, prefix) -> dict:
    """Try ``i``'s start: converged (again, after a failed try) with ``far`` reaching
    ``prefix`` over both spines; the BFD down counters then."""
    before = reconverged(fab) if i else CALM["downs"]
    with excused(flapped(fab, before)):  # a stall since may have flapped a session
        assert frr.route_nexthops(fab.node_kernel(far), prefix) == {"s0", "s1"}
    return before


def calm(fab: Fabric, check) -> None:
    """Run ``check`` on the converged fabric. A failure is checked again (once converged)
    only when BFD sessions went down since the fabric was last seen converged: nothing
    is cut here, so only a host stall takes a session down."""
    def attempt(i: int) -> None:
        before = reconverged(fab) if i else CALM["downs"]
        with excused(flapped(fab, before)):
            check()
    conclusive(attempt)


def vtysh_json(fab: Fabric, node: str, command: str) -> dict | list:
    return json.loads(fab.frr.vtysh(node, command))


def frr_pids(fab: Fabric) -> list[int]:
    return [d.proc.pid for d in fab.frr.daemons]


def alive(pid: int) -> bool:
    return registry.pid_alive(pid)


def flows_arrive(fab: Fabric, pairs: list[tuple[str, str]], sports: range) -> None:
    """Every flow of every pair (one per source port, so ECMP spreads them) arrives whole."""
    flows = [Flow(a, b, None, sport) for a, b in pairs for sport in sports]
    results = run_flows(fab, flows, rate_mbit=2, seconds=0.4, payload=1000)
    bad = [(r.flow.src, r.flow.dst, r.flow.sport, r.sent, r.received)
           for r in results if r.sent == 0 or r.received != r.sent]
    assert bad == []


def set_link(fab: Fabric, link: str, up: bool) -> None:
    lk = fab.spec.link(link)
    for end in (lk.a, lk.b):
        k = fab.node_kernel(end.node)
        k.ipr.link("set", index=k.ifindex[end.ifname], state="up" if up else "down")


def host_prefix(fab: Fabric, rack: int):
    return originated_prefixes(fab.spec, f"p0l{rack}")[0]


# -- a converged fabric ----------------------------------------------------------------------


def test_sessions_and_bfd_up(fab):
    calm(fab, lambda: sessions_and_bfd_up(fab))


def sessions_and_bfd_up(fab: Fabric) -> None:
    for cfg in fab.bgp.values():
        summary = vtysh_json(fab, cfg.node, "show bgp ipv6 unicast summary json")
        peers = summary["peers"]
        assert sorted(peers) == sorted(s.ifname for s in cfg.sessions), cfg.node
        assert {p["state"] for p in peers.values()} == {"Established"}, (cfg.node, peers)
        assert {p["remoteAs"] for p in peers.values()} == {s.peer_asn for s in cfg.sessions}
        bfd = vtysh_json(fab, cfg.node, "show bfd peers json")
        assert len(bfd) == len(cfg.sessions)
        # Sessions run between the kernel's EUI-64 link-locals, as planned.
        assert {p["local"] for p in bfd} == {
            str(i.link_local.ip) for i in fab.plans[cfg.node].interfaces if i.link_local}
        for peer in bfd:
            assert peer["status"] == "up", (cfg.node, peer)
            assert peer["detect-multiplier"] == BFD.detect_multiplier
            assert peer["receive-interval"] == BFD.receive_ms
            assert peer["transmit-interval"] == BFD.transmit_ms


def test_every_leaf_has_ecmp_routes_over_all_spines(fab):
    calm(fab, lambda: ecmp_routes_over_all_spines(fab))


def ecmp_routes_over_all_spines(fab: Fabric) -> None:
    try:
        assert fab.wait_converged(5) < 5
    except EmuError as e:
        raise AssertionError(str(e)) from e
    assert frr.missing_routes(fab) == {}
    for leaf, routes in frr.expected_routes(fab.spec).items():
        k = fab.node_kernel(leaf)
        assert len(routes) == 2
        for net in routes:
            assert frr.route_nexthops(k, net) == {"s0", "s1"}, (leaf, net)
    # Spines reach every rack over the one link to its leaf; hosts keep static routes.
    for spine in fab.spec.spine_nodes:
        k = fab.node_kernel(spine.name)
        for rack in range(fab.spec.leaves):
            assert frr.route_nexthops(k, host_prefix(fab, rack)) == {f"l{rack}"}
    assert frr.route_nexthops(fab.node_kernel("h0"), "fd5a::/24") == {"p0", "p1"}


def test_ecmp_traffic_between_racks(fab):
    calm(fab, lambda: flows_arrive(fab, [("h0", "h1"), ("h1", "h2"), ("h2", "h0")],
                                   range(42000, 42008)))


# -- failures --------------------------------------------------------------------------------


def test_gray_failure_is_detected_by_bfd(fab):
    """Every packet through p0l0's port s0 is dropped, the link stays up: only BFD can tell."""
    leaf = fab.node_kernel("p0l0")
    rules = ('table inet gray {\n chain i {\n  type filter hook input priority 0;\n'
             '  iifname "s0" drop\n }\n chain o {\n  type filter hook output priority 0;\n'
             '  oifname "s0" drop\n }\n}\n')
    far, prefix = "p0l1", host_prefix(fab, 0)

    def attempt(i: int) -> None:
        before = over_both_spines(fab, i, far, prefix)
        with CpuWakeups() as cpu:
            t_cut = time.monotonic()
            with entered(leaf.fd):
                subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)
            t0 = time.monotonic()  # the rule is in force by now
            try:
                took = frr.wait_withdrawn(fab, far, prefix, "s0", timeout=5)
                hops = frr.route_nexthops(fab.node_kernel(far), prefix)
            finally:
                with entered(leaf.fd):
                    subprocess.run(["nft", "delete", "table", "inet", "gray"], check=True)
        print(f"\nBFD gray failure: {far} withdrew s0 for {prefix} after {took * 1000:.0f} ms "
              f"(detection time {BFD.detection_s * 1000:.0f} ms)")
        noise = flapped(fab, before, CUT)
        # too short only if the timing started late after the rule was in force
        with excused(held_back(t0, t_cut + START_SLACK, "started timing"), noise):
            assert BFD.detection_s * 0.5 < took, took
        with excused(cpu.check_held(t_cut, t0 + took, END_SLACK, "before the withdrawal"),
                     noise):
            assert took < 2 * BFD.detection_s, took
            assert hops == {"s1"}

    conclusive(attempt)
    t0 = time.monotonic()
    reconverged(fab)
    print(f"sessions back and converged after {time.monotonic() - t0:.1f} s")


def test_remote_link_failure_withdraws_within_bfd_time_and_traffic_recovers(fab):
    far, prefix = "p0l1", host_prefix(fab, 0)

    def attempt(i: int) -> None:
        before = over_both_spines(fab, i, far, prefix)
        with CpuWakeups() as cpu:
            t0 = time.monotonic()
            set_link(fab, "p0l0-p0s0", up=False)
            try:
                took = time.monotonic() - t0 + frr.wait_withdrawn(fab, far, prefix, "s0",
                                                                  timeout=5)
            except BaseException:
                set_link(fab, "p0l0-p0s0", up=True)
                raise
        print(f"\nlink down: {far} withdrew s0 for {prefix} after {took * 1000:.1f} ms")
        try:
            with excused(cpu.check_held(t0, t0 + took, END_SLACK, "before the withdrawal"),
                         flapped(fab, before, CUT)):
                assert took < 2 * BFD.detection_s, took
                assert frr.route_nexthops(fab.node_kernel(far), prefix) == {"s1"}
        except BaseException:
            set_link(fab, "p0l0-p0s0", up=True)
            raise

    conclusive(attempt)
    try:
        # Locally, p0l0 stopped using s0 at once (admin down; link-down routes ignored).
        assert frr.route_nexthops(fab.node_kernel("p0l0"), host_prefix(fab, 1)) == {"s1"}
        flows_arrive(fab, [("h0", "h1"), ("h1", "h0"), ("h2", "h0")], range(43000, 43008))
        with pytest.raises(TimeoutError, match=r"p0l1: s1 still a next hop .* \['s1'\]"):
            frr.wait_withdrawn(fab, far, prefix, "s1", timeout=0.05)
    finally:
        set_link(fab, "p0l0-p0s0", up=True)
    t0 = time.monotonic()
    reconverged(fab)
    print(f"link up: converged again after {time.monotonic() - t0:.1f} s")


# -- lifecycle -------------------------------------------------------------------------------


def leftovers(pids: list[int], dirs: list[str]) -> tuple[list[int], list[str]]:
    return [p for p in pids if alive(p)], [d for d in dirs if Path(d).exists()]


def test_teardown_leaves_no_frr_process_or_dir():
    run_frr = set(os.listdir("/var/run/frr")) if os.path.isdir("/var/run/frr") else set()
    small = MultiPlaneClos(planes=1, spines=2, leaves=2, hosts_per_leaf=1)
    fab = Fabric(small, name="bgpdown", control_plane="bgp")
    try:
        fab.start()
        pids = frr_pids(fab)
        assert len(pids) == 3 * small.switch_count and all(alive(p) for p in pids)
        state = registry.FabricState.load(registry.STATE_DIR / "fabric-bgpdown.json")
        dirs = state.tmpdirs
        assert str(fab.frr.root) in dirs
        assert {f"/var/tmp/frr/{d.name}.{d.proc.pid}" for d in fab.frr.daemons} <= set(dirs)
        # Supervision: a daemon that dies is reported with its log.
        os.kill(fab.frr.daemons[-1].proc.pid, signal.SIGKILL)
        with pytest.raises(EmuError, match=r"FRR bgpd of p0\w+ exited .*log tail"):
            fab.wait_converged(5)
    finally:
        fab.stop()
    assert leftovers(pids, dirs) == ([], [])
    assert (set(os.listdir("/var/run/frr")) if os.path.isdir("/var/run/frr") else set()) \
        <= run_frr


def test_emu_clean_removes_a_crashed_bgp_fabric():
    registry.clean(only="bgpcrash")
    code = (
        "import json, os\n"
        "from emu.fabric import Fabric\n"
        "from topologies import MultiPlaneClos\n"
        "fab = Fabric(MultiPlaneClos(planes=1, spines=1, leaves=2, hosts_per_leaf=1),\n"
        "             name='bgpcrash', control_plane='bgp')\n"
        "fab.start()\n"
        "print(json.dumps([d.proc.pid for d in fab.frr.daemons]), flush=True)\n"
        "os._exit(1)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stderr
    pids = json.loads(proc.stdout.strip().splitlines()[-1])
    state = registry.FabricState.load(registry.STATE_DIR / "fabric-bgpcrash.json")
    dirs = state.tmpdirs
    assert all(Path(d).exists() for d in dirs[:1]) and any(alive(p) for p in pids)
    report = registry.clean(only="bgpcrash")
    assert "bgpcrash" in report.fabrics
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert leftovers(pids, dirs) == ([], [])
