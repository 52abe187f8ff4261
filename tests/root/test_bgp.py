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

pytestmark = pytest.mark.root

# 2 planes x 2 spines x 3 leaves x 1 host: 3 racks, 10 switches running FRR.
SPEC = MultiPlaneClos(planes=2, spines=2, leaves=3, hosts_per_leaf=1)
BFD = frr.BfdTimers(3, 100, 100)


@pytest.fixture(scope="module")
def fab() -> Iterator[Fabric]:
    with Fabric(SPEC, name="bgptest", control_plane="bgp", bfd=BFD) as f:
        yield f


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
    assert fab.wait_converged(5) < 5
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
    flows_arrive(fab, [("h0", "h1"), ("h1", "h2"), ("h2", "h0")], range(42000, 42008))


# -- failures --------------------------------------------------------------------------------


def test_gray_failure_is_detected_by_bfd(fab):
    """Every packet through p0l0's port s0 is dropped, the link stays up: only BFD can tell."""
    leaf = fab.node_kernel("p0l0")
    rules = ('table inet gray {\n chain i {\n  type filter hook input priority 0;\n'
             '  iifname "s0" drop\n }\n chain o {\n  type filter hook output priority 0;\n'
             '  oifname "s0" drop\n }\n}\n')
    far, prefix = "p0l1", host_prefix(fab, 0)
    assert frr.route_nexthops(fab.node_kernel(far), prefix) == {"s0", "s1"}
    with entered(leaf.fd):
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)
    try:
        took = frr.wait_withdrawn(fab, far, prefix, "s0", timeout=5)
    finally:
        with entered(leaf.fd):
            subprocess.run(["nft", "delete", "table", "inet", "gray"], check=True)
    print(f"\nBFD gray failure: {far} withdrew s0 for {prefix} after {took * 1000:.0f} ms "
          f"(detection time {BFD.detection_s * 1000:.0f} ms)")
    assert BFD.detection_s * 0.5 < took < 2 * BFD.detection_s
    assert frr.route_nexthops(fab.node_kernel(far), prefix) == {"s1"}
    t0 = time.monotonic()
    fab.wait_converged(60)
    print(f"sessions back and converged after {time.monotonic() - t0:.1f} s")


def test_remote_link_failure_withdraws_within_bfd_time_and_traffic_recovers(fab):
    far, prefix = "p0l1", host_prefix(fab, 0)
    assert frr.route_nexthops(fab.node_kernel(far), prefix) == {"s0", "s1"}
    t0 = time.monotonic()
    set_link(fab, "p0l0-p0s0", up=False)
    took = time.monotonic() - t0 + frr.wait_withdrawn(fab, far, prefix, "s0", timeout=5)
    print(f"\nlink down: {far} withdrew s0 for {prefix} after {took * 1000:.1f} ms")
    assert took < 2 * BFD.detection_s
    assert frr.route_nexthops(fab.node_kernel(far), prefix) == {"s1"}
    # Locally, p0l0 stopped using s0 at once (admin down; link-down routes ignored).
    assert frr.route_nexthops(fab.node_kernel("p0l0"), host_prefix(fab, 1)) == {"s1"}
    flows_arrive(fab, [("h0", "h1"), ("h1", "h0"), ("h2", "h0")], range(43000, 43008))
    with pytest.raises(TimeoutError, match=r"p0l1: s1 still a next hop .* \['s1'\]"):
        frr.wait_withdrawn(fab, far, prefix, "s1", timeout=0.05)
    set_link(fab, "p0l0-p0s0", up=True)
    t0 = time.monotonic()
    fab.wait_converged(60)
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
