"""Root tests of the switch ports' congestion signals (emu/signals.py, emu/bpf/port.c):
ECN marks and trims happen in the kernel's path, every trimmed header and CE mark reaches
the receiving socket intact (the kernel checked its UDP checksum), and the counters match
what the receiver saw."""

from __future__ import annotations

import socket

import pytest

from emu.counters import queue_stats
from emu.fabric import Fabric
from topologies import LinkSpec, MultiPlaneClos
from topologies.signals import SwitchSignals
from transports.core import wire

pytestmark = pytest.mark.root

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
