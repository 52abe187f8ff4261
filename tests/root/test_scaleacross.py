"""Two data centers joined by DCI links with a delay line (root)."""

from __future__ import annotations

import socket
import statistics
import time

import pytest

from emu.fabric import Fabric
from emu.netns import entered
from emu.traffic import Flow, run_flows
from topologies import DciSpec, MultiPlaneClos, ScaleAcross

from .hostnoise import HostWakeups, measure_undisturbed

pytestmark = pytest.mark.root

DELAY_MS = 5.0
SA = ScaleAcross(
    dcs=tuple(MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1, dc=d)
              for d in range(2)),
    dci=DciSpec(rate_mbit=100.0, delay_ms=DELAY_MS))


@pytest.fixture(scope="module")
def fab():
    with Fabric(SA, name="dcitest") as f:
        yield f


def _udp(fab: Fabric, host: str) -> socket.socket:
    with entered(fab.node_kernel(host).fd):
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.bind((str(SA.address(host)), 0))
    s.settimeout(2.0)
    return s


def added_rtt_ms(fab: Fabric, a: str, near: str, far: str, n: int = 60) -> float:
    """What the way to ``far`` adds to the UDP ping-pong RTT from ``a`` over the way to
    ``near`` (ECMP routed): the median of ``n`` paired differences, the two pings of a
    pair back to back, so that this host's scheduling noise (the test's own wake-ups)
    drifts alike in both."""
    cli, srv_near, srv_far = _udp(fab, a), _udp(fab, near), _udp(fab, far)

    def ping(srv: socket.socket, i: int) -> float:
        t0 = time.monotonic()
        cli.sendto(i.to_bytes(2, "big"), srv.getsockname()[:2])
        data, peer = srv.recvfrom(16)
        srv.sendto(data, peer)
        assert cli.recv(16) == data
        return time.monotonic() - t0

    try:
        diffs = []
        for i in range(n):
            first, second = (srv_near, srv_far) if i % 2 else (srv_far, srv_near)
            t = {first: ping(first, i), second: ping(second, i)}
            diffs.append(t[srv_far] - t[srv_near])
        return statistics.median(diffs) * 1000
    finally:
        for sock in (cli, srv_near, srv_far):
            sock.close()


def test_backend_is_reported(fab):
    assert fab.delay_backend_used in ("netem", "userspace")
    if fab.delay_backend_used == "userspace":
        assert set(fab.delay_lines) == {lk.name for lk in SA.dci_links}
        assert all(dl.running for dl in fab.delay_lines.values())


def test_every_cross_dc_path_and_ecmp_deliver(fab):
    src, dst = "h0", "d1h1"
    paths = SA.paths(src, dst)
    assert len(paths) == SA.planes * 2 * 2
    flows = [Flow(src, dst, p) for p in paths] + [Flow(dst, src, p) for p in SA.paths(dst, src)]
    flows += [Flow(src, dst, None, sport=52000 + i) for i in range(8)]
    res = run_flows(fab, flows, rate_mbit=2, seconds=0.5, payload=500)
    for r in res:
        assert r.sent > 50 and r.received == r.sent, (r.flow.src, r.flow.dst, r.flow.path)


def test_pinned_cross_dc_path_crosses_the_chosen_dci_link(fab):
    if fab.delay_backend_used != "userspace":
        pytest.skip("relay counters exist only for the userspace delay line")
    path = SA.path("h0", "d1h0", 1, 0, dst_spine=1)
    before = {n: dl.stats().a_to_b for n, dl in fab.delay_lines.items()}
    res = run_flows(fab, [Flow("h0", "d1h0", path)], rate_mbit=4, seconds=0.5, payload=1000)

    def moved() -> dict[str, tuple[int, int]]:
        """Per DCI link: frames relayed since ``before``, and frames it dropped."""
        out = {}
        for n, dl in fab.delay_lines.items():
            a, b = dl.stats().a_to_b, before[n]
            out[n] = (a.relayed - b.relayed,
                      a.lost + a.overflow + a.errors - b.lost - b.overflow - b.errors)
        return out

    # The relay may still hold the last frames: wait until it accounts for every one.
    deadline = time.monotonic() + 5.0
    while sum(sum(c) for c in moved().values()) < res[0].sent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert moved() == {"p0x-d1p0x": (0, 0), "p1x-d1p1x": (res[0].sent, 0)}, res[0]


def test_cross_dc_rtt_is_twice_the_configured_delay(fab):
    def attempt(host: HostWakeups) -> None:
        with host:
            added = added_rtt_ms(fab, "h0", "h1", "d1h1")
        print(f"added RTT {added:.3f} ms; host wake-ups meanwhile {host.summary()}")
        assert abs(added - 2 * DELAY_MS) < 0.1 * 2 * DELAY_MS, added

    measure_undisturbed(attempt, 0.1 * 2 * DELAY_MS / 1e3)


def test_dci_delay_changes_at_run_time_and_restores(fab):
    from emu.failures import DciDelay

    longer = [DciDelay(lk.name, 3 * DELAY_MS) for lk in SA.dci_links]

    def attempt(host: HostWakeups) -> None:
        for d in longer:
            d.validate(SA)
            d.apply(fab)
        try:
            with host:
                during = added_rtt_ms(fab, "h0", "h1", "d1h1")
        finally:
            for d in longer:
                d.restore(fab)
        after = added_rtt_ms(fab, "h0", "h1", "d1h1")
        print(f"added RTT at 3x the delay {during:.3f} ms, restored {after:.3f} ms; host "
              f"wake-ups meanwhile {host.summary()}")
        assert abs(during - 6 * DELAY_MS) < 0.1 * 6 * DELAY_MS, during
        assert abs(after - 2 * DELAY_MS) < 0.1 * 2 * DELAY_MS, after

    measure_undisturbed(attempt, 0.1 * 2 * DELAY_MS / 1e3)


def test_delay_lines_stop_with_the_fabric():
    small = ScaleAcross(dcs=tuple(MultiPlaneClos(planes=1, spines=1, leaves=1,
                                                 hosts_per_leaf=1, dc=d) for d in range(2)),
                        dci=DciSpec(rate_mbit=50.0, delay_ms=1.0))
    with Fabric(small, name="dcistop") as f:
        pids = [dl.pid for dl in f.delay_lines.values()]
    for pid in pids:
        if pid is None:
            continue
        try:
            with open(f"/proc/{pid}/stat") as st:
                assert st.read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            pass
