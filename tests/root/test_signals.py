"""Root tests of the switch ports' congestion signals (emu/signals.py, emu/bpf/port.c):
ECN marks and trims happen in the kernel's path, every trimmed header and CE mark reaches
the receiving socket intact (the kernel checked its UDP checksum), the counters match
what the receiver saw, and the programs go with the fabric and with `emu clean`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from emu import registry
from emu.bpf.libbpf import prog_exists
from emu.counters import queue_stats
from emu.fabric import Fabric
from emu.kernel import CTRL_FIFO
from emu.traffic import SO_RCVBUFFORCE
from topologies import LinkSpec, MultiPlaneClos
from topologies.signals import SwitchSignals
from transports.core import wire

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[2]

LINK = LinkSpec(rate_mbit=20.0, queue_packets=24)
SPEC = MultiPlaneClos(planes=1, spines=1, leaves=1, hosts_per_leaf=4, host_link=LINK,
                      fabric_link=LINK)
PER_SENDER = 20  # below the host NIC queue (24): only the leaf port overflows
PAYLOAD = 8000  # near the MTU: the buffer (bytes) holds about queue_packets of them


def _datagram(i: int, flags: int) -> bytes:
    buf = bytearray(wire.HEADER_LEN + PAYLOAD)
    wire.pack_header(buf, wire.DATA, flags, 7, i, 1, 0, PAYLOAD, 0, PAYLOAD, 1)
    return bytes(buf)


def _incast(fab: Fabric, senders: dict[str, int]) -> list[wire.Header]:
    """Each sender (host -> its wire flags) sends PER_SENDER packets at once to h3."""
    rx = fab.node_kernel("h3").socket()
    rx.bind(("::", wire.UDP_PORT))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    rx.settimeout(1.0)
    dst = str(fab.spec.address("h3"))
    socks = []
    for host, flags in senders.items():
        s = fab.node_kernel(host).socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        socks.append((s, flags))
    for i in range(PER_SENDER):
        for s, flags in socks:
            s.sendto(_datagram(i, flags), (dst, wire.UDP_PORT))
    got = []
    try:
        while True:
            data = rx.recv(65536)
            got.append(wire.parse(data))
    except TimeoutError:
        pass
    for s, _ in socks:
        s.close()
    rx.close()
    return got


def test_marks_trims_and_drops_at_a_full_port() -> None:
    signals = SwitchSignals(ecn=True, ecn_kmin=4, ecn_kmax=8, ecn_pmax=0.5, trim=True)
    with Fabric(SPEC, name="sigtest", signals=signals) as fab:
        got = _incast(fab, {"h0": wire.FLAG_TRIM_OK, "h1": wire.FLAG_TRIM_OK, "h2": 0})
        stats = fab.signal_stats()
        port = stats[("p0l0", fab.spec.ports("p0l0")[3].ifname)]
        fifo = queue_stats(fab.node_kernel("p0l0"))
    trimmed = [h for h in got if h.flags & wire.FLAG_TRIMMED]
    marked = [h for h in got if h.flags & wire.FLAG_CE]
    assert trimmed and marked, (len(trimmed), len(marked), port)
    assert all(h.flags & wire.FLAG_TRIM_OK and h.length == PAYLOAD for h in trimmed)
    # the host port of h3 passed up every CE mark the leaf port made
    assert port.marked == len(marked) == stats[("h3", fab.spec.ports("h3")[0].ifname)].ce_seen
    assert port.trimmed == len(trimmed)
    # what overflowed without FLAG_TRIM_OK was dropped by the program, not the FIFO
    assert port.dropped > 0 and len(got) == 3 * PER_SENDER - port.dropped
    assert sum(1 for h in got if not h.flags & wire.FLAG_TRIM_OK) == PER_SENDER - port.dropped
    assert all(q.drops == 0 for q in fifo.values())


def _send_paced(sock: socket.socket, dst: str, packets: list[bytes] | None,
                 small: bytes, until: threading.Event, sent: list[int]) -> None:
    """Send ``packets`` (or ``small`` until ``until`` is set) as fast as the host's NIC
    drains: a blocking socket whose send buffer holds fewer packets than the NIC's FIFO,
    so the NIC never drops and the host sends at its link rate."""
    if packets is None:
        while not until.is_set():
            sock.sendto(small, (dst, wire.UDP_PORT))
            sent[0] += 1
    else:
        for data in packets:
            sock.sendto(data, (dst, wire.UDP_PORT))
            sent[0] += 1


def _ctrl_fifo(fab: Fabric, node: str, ifname: str) -> tuple[int, int]:
    """(packets, bytes) the control class's FIFO of a port sent, as its HTB charged them."""
    k = fab.node_kernel(node)
    for q in k.ipr.get_qdiscs(index=k.ifindex[ifname]):
        if q["handle"] == CTRL_FIFO:
            basic = q.get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")
            return basic["packets"], basic["bytes"]
    raise AssertionError(f"{node}:{ifname} has no control FIFO")


@pytest.mark.parametrize("rate", [20.0, 5.0])
def test_a_full_port_trims_before_its_fifo_drops(rate: float) -> None:
    """Two hosts send trimmable data and a third floods tail-probe-sized packets (they
    queue as data) into one port, each at its link rate: the port trims, its FIFO drops
    none of it (the FIFO counts bytes, as the program's buffer does: 24 frames of bytes
    hold hundreds of small packets), every trimmable packet reaches the receiver whole
    or as its header, every probe the program did not drop arrives, and HTB charges a
    trimmed header its own length."""
    link = LinkSpec(rate_mbit=rate, queue_packets=24)
    spec = MultiPlaneClos(planes=1, spines=1, leaves=1, hosts_per_leaf=4, host_link=link,
                          fabric_link=link)
    n = 40
    probe = bytearray(wire.HEADER_LEN)
    wire.pack_header(probe, wire.PROBE, wire.FLAG_TAIL, 9, 0, 0, 0, 0, 0, 0, 1)
    with Fabric(spec, name="sigfull", signals=SwitchSignals(trim=True)) as fab:
        port_if = fab.spec.ports("p0l0")[3].ifname
        rx = fab.node_kernel("h3").socket()
        rx.bind(("::", wire.UDP_PORT))
        rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
        rx.settimeout(1.0)
        dst = str(fab.spec.address("h3"))
        done, sent, threads, socks = threading.Event(), [[0], [0], [0]], [], []
        for i, host in enumerate(("h0", "h1", "h2")):
            s = fab.node_kernel(host).socket()
            # a few packets' worth (the kernel doubles it): below the NIC's 24 packets
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 3 * 8192 if i < 2 else 4096)
            s.settimeout(10.0)
            socks.append(s)
            packets = [_datagram(j, wire.FLAG_TRIM_OK) for j in range(n)] if i < 2 else None
            threads.append(threading.Thread(target=_send_paced, daemon=True,
                                            args=(s, dst, packets, bytes(probe), done, sent[i])))
        for t in threads:
            t.start()
        got = []
        while threads[0].is_alive() or threads[1].is_alive():
            try:
                got.append(wire.parse(rx.recv(65536)))
            except TimeoutError:
                pass
        done.set()
        threads[2].join()
        try:
            while True:
                got.append(wire.parse(rx.recv(65536)))
        except TimeoutError:
            pass
        for s in [*socks, rx]:
            s.close()
        port = fab.signal_stats()[("p0l0", port_if)]
        fifo = queue_stats(fab.node_kernel("p0l0"))[port_if]
        nics = [q for h in ("h0", "h1", "h2") for q in queue_stats(fab.node_kernel(h)).values()]
        ctrl = _ctrl_fifo(fab, "p0l0", port_if)
    assert sent[0][0] == sent[1][0] == n and sent[2][0] > 0
    assert all(q.drops == 0 for q in nics)  # the hosts sent at their link rates, no faster
    data = [h for h in got if h.kind == wire.DATA]
    trimmed = [h for h in data if h.flags & wire.FLAG_TRIMMED]
    assert trimmed and port.trimmed == len(trimmed), (len(trimmed), port)
    # every trimmable packet arrived, whole or as its header; the FIFO dropped nothing
    assert sorted((h.conn, h.psn) for h in data) == sorted((7, j) for j in range(n) for _ in "ab")
    assert fifo.drops == 0, (fifo, port)
    # what the program dropped were probes that did not fit, and the rest arrived; whether
    # any probe met a buffer too full for its few bytes depends on how the three senders
    # interleave, so a count of none is as valid as some
    probes = sum(1 for h in got if h.kind == wire.PROBE)
    assert probes == sent[2][0] - port.dropped, (probes, sent[2], port)
    # the control class carried only the trimmed headers, charged at their own length
    assert ctrl == (len(trimmed), len(trimmed) * (14 + 40 + 8 + wire.HEADER_LEN)), ctrl


def test_plain_fabric_can_switch_signals_on_and_off() -> None:
    with Fabric(SPEC, name="sigtest2") as fab:
        assert fab.signal_stats() == {}
        fab.set_signals(SwitchSignals(ecn=True, ecn_kmin=2, ecn_kmax=2))
        got = _incast(fab, {"h0": wire.FLAG_TRIM_OK, "h1": wire.FLAG_TRIM_OK})
        assert any(h.flags & wire.FLAG_CE for h in got)
        assert not any(h.flags & wire.FLAG_TRIMMED for h in got)
        fab.set_signals(SwitchSignals())
        before = sum(s.marked for s in fab.signal_stats().values())
        got = _incast(fab, {"h0": wire.FLAG_TRIM_OK, "h1": wire.FLAG_TRIM_OK})
        assert not any(h.flags & (wire.FLAG_CE | wire.FLAG_TRIMMED) for h in got)
        assert sum(s.marked for s in fab.signal_stats().values()) == before


def _programs_gone(ids: tuple[int, ...], timeout: float = 10.0) -> list[int]:
    """The programs of ``ids`` still loaded after ``timeout`` (the kernel frees a program
    once its last filter goes with its namespace, a little after the namespace)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [i for i in ids if prog_exists(i)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def test_the_program_goes_with_the_fabric() -> None:
    with Fabric(SPEC, name="sigdown", signals=SwitchSignals(ecn=True)) as fab:
        assert fab.port_signals is not None
        ids = fab.port_signals.program_ids()
        assert all(prog_exists(i) for i in ids)
    assert _programs_gone(ids) == []


def test_emu_clean_removes_the_program_of_a_crashed_fabric() -> None:
    registry.clean(only="sigcrash")  # leftovers of an interrupted earlier run
    code = ("import os\nfrom emu.fabric import Fabric\n"
            "from topologies import MultiPlaneClos\n"
            "from topologies.signals import SwitchSignals\n"
            "fab = Fabric(MultiPlaneClos(planes=1, spines=1, leaves=2, hosts_per_leaf=1),\n"
            "             name='sigcrash', signals=SwitchSignals(trim=True))\n"
            "fab.start()\n"
            "print(*fab.port_signals.program_ids(), flush=True)\n"
            "os._exit(1)  # no teardown: a crashed run\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stderr
    ids = tuple(int(x) for x in proc.stdout.split())
    assert len(ids) == 2
    # the crashed run's filters still hold its programs in its namespaces
    assert all(prog_exists(i) for i in ids)
    report = registry.clean()
    assert "sigcrash" in report.fabrics
    assert _programs_gone(ids) == []
