"""MRC and RC over the real fabric (root): checksums, spraying, single paths, a cut link."""

from __future__ import annotations

import threading
import time

import pytest

from emu.counters import interface_packets
from emu.fabric import Fabric
from emu.failures import LinkDown
from topologies import MultiPlaneClos
from transports.testing.harness import Transfer, run_transfers

from .burstnoise import CpuWakeups, conclusive, excused, held_back

pytestmark = pytest.mark.root

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1)
SRC, DST = "h0", "h1"


@pytest.fixture(scope="module")
def fab():
    with Fabric(SPEC, name="tptest") as f:
        yield f


def spine_tx(fab: Fabric) -> dict[str, int]:
    """Packets each spine sent down to the destination's leaf."""
    return {s.name: interface_packets(fab.kernels[s.name])["l1"][1] for s in SPEC.spine_nodes}


@pytest.mark.parametrize("transport", ["mrc", "rc", "tcp"])
def test_transfer_is_byte_exact(fab, transport):
    r = run_transfers(fab, transport, [Transfer(SRC, DST, 3 << 20 | 12345),
                                       Transfer(DST, SRC, 1 << 20)])
    assert r.ok, r.messages


def test_mrc_sprays_one_message_over_every_plane_and_spine(fab):
    before = spine_tx(fab)
    r = run_transfers(fab, "mrc", [Transfer(SRC, DST, 4 << 20)])
    assert r.ok
    moved = {s: n - before[s] for s, n in spine_tx(fab).items()}
    packets = (4 << 20) // 8000
    # Every (plane, spine) carried a real share of the message.
    assert all(n > packets / (2 * len(moved)) for n in moved.values()), moved


def test_rc_keeps_each_connection_on_one_path(fab):
    before = spine_tx(fab)
    r = run_transfers(fab, "rc", [Transfer(SRC, DST, 4 << 20)])
    assert r.ok
    moved = {s: n - before[s] for s, n in spine_tx(fab).items()}
    for plane in range(SPEC.planes):
        used = [s for s, n in moved.items() if s.startswith(f"p{plane}") and n > 5]
        assert len(used) == 1, moved  # one QP per plane, one spine each (ECMP hash)


def nic_tx(fab: Fabric) -> dict[str, int]:
    """Packets the source sent out of each of its NICs (one per plane)."""
    c = interface_packets(fab.kernels[SRC])
    return {f"p{p}": c[f"p{p}"][1] for p in range(SPEC.planes)}


CUT_S = 0.3
# The after-cut shares hold once MRC retired the dead path early in the rest of the
# transfer: a cut much later than planned leaves too short a rest to weigh that out.
CUT_SLACK = 0.1


def test_mrc_rides_through_a_spine_link_cut_mid_transfer(fab):
    """A plane-0 spine link cut mid-transfer: MRC delivers every byte, and after the cut
    both NICs still carry half of the packets each (plane 0 has one spine path left,
    plane 1 two: spraying evenly over the three would load plane 1's NIC twice as
    much as plane 0's)."""
    conclusive(lambda i: cut_mid_transfer(fab))


def cut_mid_transfer(fab: Fabric) -> None:
    cut = LinkDown("p0l1-p0s1")
    done: dict = {}

    def cut_later(t0: float) -> None:
        def run() -> None:
            time.sleep(max(0.0, t0 + CUT_S - time.monotonic()))
            done["at"] = time.monotonic() - t0
            cut.apply(fab)
            done["tx"] = nic_tx(fab)
            done["cut"] = True
        done["t0"] = t0
        done["thread"] = th = threading.Thread(target=run, daemon=True)
        th.start()

    with CpuWakeups() as cpu:
        try:
            r = run_transfers(fab, "mrc", [Transfer(SRC, DST, 12 << 20)], on_start=cut_later)
        finally:
            done["thread"].join(10)
            if done.get("cut"):
                cut.restore(fab)
    assert r.ok, r.messages
    assert r.completion_s > CUT_S  # the transfer was still going at the planned cut
    t0 = done["t0"]
    # the test's own record: when the cut came (a cut after the end is as late as that)
    late = held_back(done.get("at", r.completion_s), CUT_S + CUT_SLACK, "cut the link")
    with excused(late, cpu.check_held(t0, t0 + CUT_S + CUT_SLACK, CUT_SLACK, "until the cut")):
        assert done.get("cut") and done["at"] < r.completion_s, (done, r.completion_s)
        after = {nic: n - done["tx"][nic] for nic, n in nic_tx(fab).items()}
        assert after["p0"] > 100 and after["p1"] > 100, after
        assert 0.45 <= after["p0"] / (after["p0"] + after["p1"]) <= 0.55, after


def test_tcp_rounds_are_chained(fab):
    """Each TCP round is posted only once the previous one was placed at the receiver."""
    r = run_transfers(fab, "tcp", [Transfer(SRC, DST, 200_000, after=i - 1 if i else None)
                                   for i in range(4)])
    assert r.ok, r.messages
    for prev, nxt in zip(r.messages, r.messages[1:], strict=False):
        assert nxt["posted"] >= prev["t"] > prev["posted"]
    (info,) = r.drivers[SRC]["tcp_info"].values()
    assert info["rto_ms"] >= 200  # Linux's floor, untuned


def test_driver_cpu_accounting_and_the_bare_path(fab):
    """Each engine process reports its loop's CPU (user + system, less checking the
    bytes), its wall time and wake-ups, and each of its hosts an equal share; the bare
    path delivers every datagram it paced out, over the SRH of the pair's first path,
    whose first spine carries them."""
    from commands.bench.cpu import bare_path, driver_cpu

    r = run_transfers(fab, "mrc", [Transfer(SRC, DST, 2 << 20)], engines=1)
    assert r.ok and set(r.engines) == {0} and r.engines[0]["hosts"] == [SRC, DST]
    e = r.engines[0]
    assert e["wall_s"] > 0 and e["wakeups"] > 0
    total = e["cpu_user_s"] + e["cpu_sys_s"]
    assert e["cpu_s"] == pytest.approx(max(0.0, total - e["verify_cpu_s"]), abs=2e-4)
    for d in r.drivers.values():
        assert d["engine"] == 0 and d["cpu_s"] == pytest.approx(e["cpu_s"] / 2, abs=2e-4)
    assert r.drivers[DST]["verify_cpu_s"] > 0  # the receiver checked 2 MiB
    cpu = driver_cpu(r)
    assert cpu["data_packets"] >= (2 << 20) // 8000
    assert set(cpu["share"]) == {"engine 0"} and cpu["processes"] == 1
    assert 0 < cpu["acks_per_packet"] < 0.5  # one per wake-up or per 16 packets
    first = SPEC.paths(SRC, DST)[0]
    spine = next(h.node for h in first.hops if h.node.startswith(f"p{first.plane}s"))
    before = interface_packets(fab.kernels[spine])["l1"][1]
    bare = bare_path(fab, SRC, DST, rate_mbit=20.0, payload=8000, seconds=0.5)
    assert bare["sent"] > 100 and bare["received"] == bare["sent"], bare
    assert interface_packets(fab.kernels[spine])["l1"][1] - before >= bare["sent"]
    assert bare["tx_us"] > 0 and bare["rx_us"] > 0


def test_bare_permutation_delivers_what_it_offers(fab):
    """The kernel-alone reference of the permutation bench: each NIC paced at its line
    rate on a path of its plane delivers every datagram, and the machine's CPU per
    datagram is reported."""
    from commands.bench.cpu import bare_permutation

    spines = {s.name: interface_packets(fab.kernels[s.name])["l1"][1] for s in SPEC.spine_nodes}
    k = bare_permutation(fab, [(SRC, DST)], payload=8000, seconds=0.5)
    assert k["nics"] == SPEC.planes and k["sent"] > 0
    assert k["received"] == k["sent"], k
    assert 0 < k["offered_fraction"] <= 1.01 and k["delivered_fraction"] <= 1.01
    assert k["machine_cpu"]["cpu_s"] > 0 and k["machine_us_per_packet"] > 0
    # one path per plane (pair 0 on each plane's spine 0): both planes carried them
    moved = {n: interface_packets(fab.kernels[n])["l1"][1] - c for n, c in spines.items()}
    for plane in range(SPEC.planes):
        assert moved[f"p{plane}s0"] >= k["sent"] // SPEC.planes, moved
