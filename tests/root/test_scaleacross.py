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


def rtt_ms(fab: Fabric, a: str, b: str, n: int = 30) -> float:
    """Median UDP ping-pong RTT between hosts a and b (ECMP routed)."""
    cli, srv = _udp(fab, a), _udp(fab, b)
    try:
        dst = srv.getsockname()[:2]
        out = []
        for i in range(n):
            t0 = time.monotonic()
            cli.sendto(i.to_bytes(2, "big"), dst)
            data, peer = srv.recvfrom(16)
            srv.sendto(data, peer)
            assert cli.recv(16) == data
            out.append(time.monotonic() - t0)
        return statistics.median(out) * 1000
    finally:
        cli.close()
        srv.close()


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
    before = {n: dl.stats() for n, dl in fab.delay_lines.items()}
    res = run_flows(fab, [Flow("h0", "d1h0", path)], rate_mbit=4, seconds=0.5, payload=1000)
    after = {n: dl.stats() for n, dl in fab.delay_lines.items()}
    moved = {n: after[n].a_to_b.relayed - before[n].a_to_b.relayed for n in after}
    assert moved == {"p0x-d1p0x": 0, "p1x-d1p1x": res[0].sent}


def test_cross_dc_rtt_is_twice_the_configured_delay(fab):
    local = rtt_ms(fab, "h0", "h1")
    remote = rtt_ms(fab, "h0", "d1h1")
    added = remote - local
    assert abs(added - 2 * DELAY_MS) < 0.1 * 2 * DELAY_MS, (local, remote)


def test_dci_delay_changes_at_run_time_and_restores(fab):
    from emu.failures import DciDelay

    longer = [DciDelay(lk.name, 3 * DELAY_MS) for lk in SA.dci_links]
    local = rtt_ms(fab, "h0", "h1")
    for d in longer:
        d.validate(SA)
        d.apply(fab)
    try:
        added = rtt_ms(fab, "h0", "d1h1") - local
        assert abs(added - 6 * DELAY_MS) < 0.1 * 6 * DELAY_MS
    finally:
        for d in longer:
            d.restore(fab)
    added = rtt_ms(fab, "h0", "d1h1") - local
    assert abs(added - 2 * DELAY_MS) < 0.1 * 2 * DELAY_MS


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
