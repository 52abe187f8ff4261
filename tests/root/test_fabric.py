"""Root-only integration tests of a running fabric (namespaces, veths, queues, SRv6).

Lifecycle tests (teardown, crash recovery, privilege check) build fabrics of
their own; traffic tests share the ``fabric`` fixture of conftest.py. Run them
in a throwaway network namespace: ``unshare --net .venv/bin/python -m pytest tests/root``.
"""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import sys
import time
from itertools import permutations

import pytest

from emu import registry
from emu.counters import interface_packets, queue_stats
from emu.fabric import Fabric
from emu.netns import NETNS_RUN_DIR, entered, ns_inode
from emu.registry import pid_alive
from emu.srv6 import pin_socket
from emu.traffic import Flow, run_flows
from topologies import MultiPlaneClos, Path

from .hostnoise import goodput_at_ceiling

pytestmark = pytest.mark.root

PORT = 7000
SMALL_SPEC = MultiPlaneClos(planes=2, spines=1, leaves=2, hosts_per_leaf=1)


# -- helpers ---------------------------------------------------------------------------------


def our_netns_names() -> set[str]:
    if not NETNS_RUN_DIR.is_dir():
        return set()
    return {p.name for p in NETNS_RUN_DIR.iterdir() if p.name.startswith(registry.NETNS_PREFIX)}


def link_names() -> set[str]:
    """Interface names of the namespace this test runs in (`ip -o link`)."""
    out = subprocess.run(["ip", "-o", "link"], check=True, capture_output=True, text=True).stdout
    return {line.split(": ")[1].split("@")[0] for line in out.splitlines() if line.strip()}


def wait_gone(pids: list[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(not pid_alive(p) for p in pids):
            return
        time.sleep(0.01)
    pytest.fail(f"processes {[p for p in pids if pid_alive(p)]} still run after {timeout} s")


def udp_socket(fab: Fabric, host: str, port: int = 0, path: Path | None = None) -> socket.socket:
    """A UDP socket in ``host``'s namespace, bound to its loopback, optionally pinned."""
    with entered(fab.node_kernel(host).fd):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.bind((str(fab.spec.address(host)), port))
    if path is not None:
        pin_socket(sock, path)
    sock.setblocking(False)
    return sock


def collect(socks: dict[str, socket.socket], expected: int,
            timeout: float = 5.0) -> dict[str, list[tuple[bytes, str, int]]]:
    """Drain the receivers until ``expected`` datagrams arrived (or ``timeout``), then
    once more so that extra datagrams are seen too. Returns host -> [(data, src, sport)]."""
    got: dict[str, list[tuple[bytes, str, int]]] = {h: [] for h in socks}
    owner = {s.fileno(): h for h, s in socks.items()}
    sel = selectors.DefaultSelector()
    for s in socks.values():
        sel.register(s, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            for key, _ in sel.select(0.05):
                _drain(key.fileobj, got[owner[key.fileobj.fileno()]])
        for h, s in socks.items():
            _drain(s, got[h])
    finally:
        sel.close()
    return got


def _drain(sock: socket.socket, into: list[tuple[bytes, str, int]]) -> None:
    while True:
        try:
            data, addr = sock.recvfrom(65536)
        except BlockingIOError:
            return
        into.append((data, addr[0], addr[1]))


Snapshot = dict[tuple[str, str], tuple[int, int]]


def snapshot(fab: Fabric) -> Snapshot:
    """(rx, tx) packets of every interface of every node."""
    return {(node, ifname): c for node, k in fab.kernels.items()
            for ifname, c in interface_packets(k).items()}


def delta(before: Snapshot, after: Snapshot) -> Snapshot:
    assert before.keys() == after.keys()
    return {key: (after[key][0] - before[key][0], after[key][1] - before[key][1])
            for key in before}


def drops(fab: Fabric) -> dict[tuple[str, str], int]:
    return {(node, ifname): q.drops for node, k in fab.kernels.items()
            for ifname, q in queue_stats(k).items()}


def settled(fab: Fabric, timeout: float = 5.0) -> Snapshot:
    """Counters once every egress queue is empty and two reads agree (bounded poll)."""
    deadline = time.monotonic() + timeout
    last = snapshot(fab)
    while time.monotonic() < deadline:
        backlog = sum(q.backlog for k in fab.kernels.values() for q in queue_stats(k).values())
        now = snapshot(fab)
        if backlog == 0 and now == last:
            return now
        last = now
        time.sleep(0.02)
    pytest.fail(f"the fabric did not go quiet within {timeout} s")


def crash_a_fabric(spec_args: str) -> list[int]:
    """Build fabric "crash" in a child process that dies without teardown.

    Like a run that had traffic generators going, the child leaves one process
    in every node's namespace, in a session of its own (so, unlike the node
    shells, no hangup of their ptys ends it). Returns those processes' pids.
    """
    code = (
        "import os, subprocess\n"
        "from emu.fabric import Fabric\n"
        "from emu.netns import entered\n"
        "from topologies import MultiPlaneClos\n"
        f"fab = Fabric(MultiPlaneClos({spec_args}), name='crash')\n"
        "fab.start()\n"
        "quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,\n"
        "             stderr=subprocess.DEVNULL, start_new_session=True)\n"
        "for k in fab.kernels.values():\n"
        "    with entered(k.fd):\n"
        "        p = subprocess.Popen(['sleep', '600'], **quiet)\n"
        "    print(p.pid, flush=True)\n"
        "os._exit(1)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stderr
    return [int(line) for line in proc.stdout.split()]


SMALL_ARGS = "planes=2, spines=1, leaves=2, hosts_per_leaf=1"
CRASH_NAMES = {registry.netns_name("crash", n.name) for n in SMALL_SPEC.nodes}
CRASH_STATE = registry.STATE_DIR / "fabric-crash.json"


# -- lifecycle -------------------------------------------------------------------------------


def test_teardown_leaves_no_namespace_process_or_veth():
    links_before = link_names()
    names_before = our_netns_names()
    fab = Fabric(SMALL_SPEC, name="teardown")
    try:
        fab.start()
        names = {k.netns for k in fab.kernels.values()}
        pids = [k.pid for k in fab.kernels.values()]
        inodes = {ns_inode(p) for p in pids}
        assert names == {registry.netns_name("teardown", n.name) for n in SMALL_SPEC.nodes}
        assert our_netns_names() == names_before | names
        assert None not in inodes and len(inodes) == len(SMALL_SPEC.nodes)
        assert ns_inode("self") not in inodes
        assert sorted(registry.processes_in(inodes)) == sorted(pids)  # one shell per node
        state = registry.STATE_DIR / "fabric-teardown.json"
        assert registry.FabricState.load(state).owner_pid == os.getpid()
    finally:
        fab.stop()
    assert our_netns_names() == names_before
    assert registry.processes_in(inodes) == []
    assert [p for p in pids if pid_alive(p)] == []
    assert not state.exists()
    assert link_names() == links_before
    assert fab.kernels == {} and fab.net is None
    assert fab.stop() >= 0  # idempotent


def test_registry_clean_removes_a_crashed_fabric():
    registry.clean(only="crash")  # leftovers of an interrupted earlier run of this test
    live = Fabric(SMALL_SPEC, name="live")  # a running fabric of this very process
    try:
        live.start()
        _crash_and_clean(live)
    finally:
        live.stop()


def _crash_and_clean(live: Fabric) -> None:
    live_names = {k.netns for k in live.kernels.values()}
    live_pids = [k.pid for k in live.kernels.values()]
    sleepers = crash_a_fabric(SMALL_ARGS)
    assert len(sleepers) == len(SMALL_SPEC.nodes)
    assert CRASH_STATE.exists()
    st = registry.FabricState.load(CRASH_STATE)
    assert CRASH_NAMES <= our_netns_names()
    assert {r["netns"] for r in st.namespaces.values()} == CRASH_NAMES
    assert "crash" in {s.fabric for s in registry.stale_states()}
    assert "crash" not in {s.fabric for s in registry.running_states()}
    inodes = {r["inode"] for r in st.namespaces.values()}
    pids = [r["pid"] for r in st.namespaces.values()]
    # The node shells may or may not have died of their pty's hangup yet; the
    # sleepers run on, one in each namespace of the crashed fabric.
    alive = set(registry.processes_in(inodes))
    assert set(sleepers) <= alive <= set(sleepers) | set(pids)
    assert {ns_inode(p) for p in sleepers} == inodes

    report = registry.clean()

    assert "crash" in report.fabrics
    assert "live" not in report.fabrics
    assert f"live (pid {os.getpid()})" in report.skipped_running
    assert live_names <= our_netns_names()
    assert [p for p in live_pids if not pid_alive(p)] == []
    assert CRASH_NAMES <= set(report.namespaces)
    assert len(sleepers) <= report.processes <= len(sleepers) + len(pids)
    assert not CRASH_NAMES & our_netns_names()
    assert not CRASH_STATE.exists()
    wait_gone(sleepers + pids)
    assert registry.processes_in(inodes) == []
    assert registry.clean(only="crash").empty


def test_new_fabric_of_a_crashed_name_cleans_it_first():
    registry.clean(only="crash")
    sleepers = crash_a_fabric(SMALL_ARGS)
    old = registry.FabricState.load(CRASH_STATE)
    old_pids = [r["pid"] for r in old.namespaces.values()] + sleepers
    assert not [p for p in sleepers if not pid_alive(p)]
    assert CRASH_NAMES <= our_netns_names()
    messages: list[str] = []
    with Fabric(SMALL_SPEC, name="crash", progress=messages.append) as fab:
        assert "cleaned stale fabric 'crash' from a crashed run" in messages
        wait_gone(old_pids)
        new_pids = {k.pid for k in fab.kernels.values()}
        assert not new_pids & set(old_pids)
        for k in fab.kernels.values():
            assert os.stat(NETNS_RUN_DIR / k.netns).st_ino == ns_inode(k.pid)
        assert registry.FabricState.load(CRASH_STATE).owner_pid == os.getpid()
        # The rebuilt fabric works: one datagram crosses it.
        src, dst = (h.name for h in SMALL_SPEC.hosts)
        rx = udp_socket(fab, dst, PORT)
        tx = udp_socket(fab, src, path=SMALL_SPEC.path(src, dst, 1, 0))
        try:
            tx.sendto(b"after the crash", (str(SMALL_SPEC.address(dst)), PORT))
            got = collect({dst: rx}, 1)
        finally:
            rx.close()
            tx.close()
        assert [d for d, _, _ in got[dst]] == [b"after the crash"]
    assert not CRASH_NAMES & our_netns_names()
    assert not CRASH_STATE.exists()


def test_not_root_gives_a_clear_message():
    code = (
        "from emu.fabric import Fabric\n"
        "from topologies import MultiPlaneClos\n"
        f"Fabric(MultiPlaneClos({SMALL_ARGS}), name='nonroot').start()\n"
    )
    names_before = our_netns_names()
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("emu.errors.EmuError: building a fabric needs root"), proc.stderr
    assert "sudo" in last
    assert our_netns_names() == names_before
    assert not (registry.STATE_DIR / "fabric-nonroot.json").exists()


# -- traffic on the shared fabric --------------------------------------------------------------


def test_fabric_is_quiet(fabric):
    """No ND, MLD or RA chatter: counters stay put while nobody sends."""
    before = settled(fabric)
    time.sleep(0.3)  # an idle moment, then nothing must have moved
    assert snapshot(fabric) == before


def test_every_host_reaches_every_other_over_every_path(fabric):
    spec = fabric.spec
    hosts = [h.name for h in spec.hosts]
    receivers = {h: udp_socket(fabric, h, PORT) for h in hosts}
    senders: dict[tuple, socket.socket] = {}
    expected: dict[str, list[tuple[bytes, str, int]]] = {h: [] for h in hosts}
    try:
        n = 0
        for src, dst in permutations(hosts, 2):
            paths = spec.paths(src, dst)
            assert len(paths) == (spec.planes if spec.rack_of(src) == spec.rack_of(dst)
                                  else spec.planes * spec.spines)
            for path in paths:
                # The SRH names only the transit SID: one socket per (source, SID list).
                key = (src, path.segments[:-1])
                if key not in senders:
                    senders[key] = udp_socket(fabric, src, path=path)
                sock = senders[key]
                payload = (f"{src}>{dst} plane {path.plane} spine {path.spine} #{n} ".encode()
                           + bytes((n + i) % 256 for i in range(n % 97)))
                n += 1
                sock.sendto(payload, (str(spec.address(dst)), PORT))
                expected[dst].append((payload, str(spec.address(src)),
                                      sock.getsockname()[1]))
        assert n == 8 * (2 + 6 * 4)
        got = collect(receivers, n)
    finally:
        for s in [*receivers.values(), *senders.values()]:
            s.close()
    missing = {h: [e[0][:40] for e in expected[h] if e not in got[h]] for h in hosts}
    assert {h: m for h, m in missing.items() if m} == {}
    for h in hosts:
        assert sorted(got[h]) == sorted(expected[h]), h


PROBE_PATHS = [("h0", "h2", p, s) for p in range(2) for s in range(2)] + [
    ("h0", "h1", 0, None), ("h3", "h2", 1, None)]


@pytest.mark.parametrize("src,dst,plane,spine", PROBE_PATHS,
                         ids=[f"{a}-{b}-p{p}-s{s}" for a, b, p, s in PROBE_PATHS])
def test_probes_count_exactly_on_their_path(fabric, src, dst, plane, spine):
    spec = fabric.spec
    path = spec.path(src, dst, plane, spine)
    n = 50
    rx = udp_socket(fabric, dst, PORT)
    tx = udp_socket(fabric, src, path=path)
    try:
        before = settled(fabric)
        for i in range(n):
            tx.sendto(b"probe %d" % i, (str(spec.address(dst)), PORT))
        got = collect({dst: rx}, n)
        after = settled(fabric)
    finally:
        rx.close()
        tx.close()
    assert sorted(d for d, _, _ in got[dst]) == sorted(b"probe %d" % i for i in range(n))
    expected = {key: (0, 0) for key in before}
    for hop in path.hops:
        rx_, tx_ = expected[(hop.node, hop.out_ifname)]
        expected[(hop.node, hop.out_ifname)] = (rx_, tx_ + n)
        rx_, tx_ = expected[(hop.next_node, hop.in_ifname)]
        expected[(hop.next_node, hop.in_ifname)] = (rx_ + n, tx_)
    # Nothing else moves: not the other planes, not `lo` of the source or destination.
    assert delta(before, after) == expected


def test_ecmp_spreads_flows_over_every_plane_and_spine(fabric):
    spec = fabric.spec
    src, dst, n = "h0", "h6", 64
    assert spec.rack_of(src) != spec.rack_of(dst)
    rx = udp_socket(fabric, dst, PORT)
    sports = [41000 + i for i in range(n)]
    senders = [udp_socket(fabric, src, port) for port in sports]
    try:
        before = settled(fabric)
        for i, s in enumerate(senders):
            s.sendto(b"flow %d" % i, (str(spec.address(dst)), PORT))
        got = collect({dst: rx}, n)
        after = settled(fabric)
    finally:
        for s in [rx, *senders]:
            s.close()
    assert sorted(p for _, _, p in got[dst]) == sports
    d = delta(before, after)
    src_rack = spec.rack_of(src)
    nic_tx = {p: d[(src, f"p{p}")][1] for p in range(spec.planes)}
    spine_rx = {s.name: d[(s.name, f"l{src_rack}")][0] for s in spec.spine_nodes}
    dst_rx = sum(d[(dst, f"p{p}")][0] for p in range(spec.planes))
    assert sum(nic_tx.values()) == n
    assert min(nic_tx.values()) >= 1, f"a plane carried nothing: {nic_tx}"
    assert sum(spine_rx.values()) == n
    assert min(spine_rx.values()) >= 1, f"a spine carried nothing: {spine_rx}"
    assert dst_rx == n


def test_rate_limit_holds(fabric):
    spec = fabric.spec
    rate = spec.host_link.rate_mbit
    assert spec.fabric_link.rate_mbit == rate
    path = spec.path("h0", "h2", 1, 1)
    settled(fabric)
    res = goodput_at_ceiling(lambda: run_flows(fabric, [Flow("h0", "h2", path)],
                                               rate_mbit=1.5 * rate, seconds=2.0)[0],
                             rate, seconds=2.0)
    assert res.frame_bytes == 14 + 40 + (8 + 2 * 16) + 8 + 8000  # Eth, IPv6, SRH, UDP
    assert res.received <= res.sent


def test_overloaded_egress_drops_at_its_queue(fabric):
    spec = fabric.spec
    rate = spec.host_link.rate_mbit
    flows = [Flow(src, "h2", spec.path(src, "h2", 0, 0)) for src in ("h0", "h1")]
    hot = ("p0l0", "s0")  # both flows leave leaf p0l0 towards spine p0s0: 2x its rate
    on_path = {(h.node, h.out_ifname) for f in flows for h in f.path.hops}
    assert hot in on_path
    tries = 3
    for i in range(tries):
        settled(fabric)
        before = drops(fabric)
        results = run_flows(fabric, flows, rate_mbit=rate, seconds=1.0)
        settled(fabric)
        after = drops(fabric)
        dropped = {key: after[key] - before[key] for key in before}
        assert dropped[hot] > 0
        assert {k: v for k, v in dropped.items() if v and k not in on_path} == {}
        lost = sum(r.sent for r in results) - sum(r.received for r in results)
        at_queues = sum(dropped[k] for k in on_path)
        if lost == at_queues:
            return
        # The receiving socket's overflows are the host's part: the receiver was held
        # off the CPU until its buffer filled. Measured again only when they account
        # for the whole difference; any other loss is the fabric's.
        overflow = sum({r.flow.dst: r.rcvbuf_drops for r in results}.values())
        miss = (f"lost {lost}, dropped at the queues {at_queues}, receive-buffer "
                f"overflows {overflow}")
        if not overflow or lost != at_queues + overflow:
            raise AssertionError(f"{miss}: {results}, {dropped}")
        if i == tries - 1:
            pytest.skip(f"inconclusive: the receiver fell behind in each of {tries} tries "
                        f"({miss})")
        print(f"  try {i + 1}: {miss}, the receiver fell behind: measuring again")


def test_plane_addresses_keep_traffic_on_their_plane(fabric):
    """A socket bound to a host's plane-p address sends (and is answered) over plane p only."""
    spec = fabric.spec
    src, dst = spec.hosts[0].name, spec.hosts[-1].name
    for plane in range(spec.planes):
        before = {n: interface_packets(fabric.kernels[n]) for n in (src, dst)}
        with entered(fabric.node_kernel(src).fd):
            a = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        with entered(fabric.node_kernel(dst).fd):
            b = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        try:
            a.bind((str(spec.plane_address(src, plane)), 0))
            b.bind((str(spec.plane_address(dst, plane)), 0))
            b.settimeout(2.0)
            a.settimeout(2.0)
            for i in range(20):
                a.sendto(bytes([i]), b.getsockname()[:2])
                data, peer = b.recvfrom(16)
                b.sendto(data, peer)
                assert a.recv(16) == data
        finally:
            a.close()
            b.close()
        after = {n: interface_packets(fabric.kernels[n]) for n in (src, dst)}
        for host in (src, dst):
            for p in range(spec.planes):
                tx = after[host][f"p{p}"][1] - before[host][f"p{p}"][1]
                assert tx == (20 if p == plane else 0), (host, p, tx)


def test_clean_leaves_a_namespace_no_state_file_records():
    """Another tool's namespace that happens to carry our prefix, with a process in it,
    survives ``emu clean``: only what a state file records is provably ours."""
    name = f"{registry.NETNS_PREFIX}foreign-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "30"])
    try:
        deadline = time.monotonic() + 5.0
        inode = os.stat(NETNS_RUN_DIR / name).st_ino
        while not registry.processes_in({inode}) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert registry.processes_in({inode}), "the sleeper never entered the namespace"
        report = registry.clean()
        assert name not in report.namespaces
        assert name in our_netns_names() and sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_ip_netns_add_while_a_fabric_runs_hides_none_of_its_names():
    """/run/netns is made a shared mount of itself before our names are bound (as
    ``ip netns add`` does the first time), so another tool's ``ip netns add`` during a
    run does not mount it over our names, which then tear down cleanly."""
    small = MultiPlaneClos(planes=1, spines=1, leaves=1, hosts_per_leaf=1)
    name = f"foreign-{os.getpid()}"
    with Fabric(small, name="netnsadd") as fab:
        with open("/proc/self/mountinfo") as f:
            info = f.read().splitlines()
        tops = [ln for ln in info
                if ln.split()[4] == str(NETNS_RUN_DIR)]
        assert tops and "shared:" in tops[-1]  # the topmost /run/netns mount is shared
        subprocess.run(["ip", "netns", "add", name], check=True)
        try:
            ours = [n for n in os.listdir(NETNS_RUN_DIR) if "-netnsadd-" in n]
            assert len(ours) == len(fab.kernels)
        finally:
            subprocess.run(["ip", "netns", "del", name], check=True)
    assert not [n for n in os.listdir(NETNS_RUN_DIR) if "-netnsadd-" in n]
