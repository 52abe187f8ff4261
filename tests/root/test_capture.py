"""Captures on a running fabric: tcpdump in a spine's namespace, decoded with SaeTransport.

Run in a throwaway network namespace:
``timeout 300 unshare --net .venv/bin/python -m pytest tests/root/test_capture.py -q``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting

from emu.capture import Capture
from emu.counters import interface_packets
from emu.errors import EmuError
from emu.fabric import Fabric
from emu.netns import entered
from emu.registry import pid_alive
from emu.srv6 import pin_socket
from topologies import MultiPlaneClos
from topologies.errors import TopologyError
from transports.core import wire
from transports.core.scapy_layer import SaeTransport
from transports.core.scapy_layer import read_pcap as decode

from .ctlnoise import wait_for

pytestmark = pytest.mark.root

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1)
PLANE, SPINE = 0, 1
SPINE_NODE = "p0s1"


@pytest.fixture(scope="module")
def fab() -> Iterator[Fabric]:
    with Fabric(SPEC, name="captest") as fab:
        yield fab


def datagram(i: int) -> tuple[bytes, dict[str, int]]:
    """A valid DATA packet (wire.parse accepts it) whose fields all depend on ``i``."""
    payload = bytes((i + k) % 256 for k in range(64 + i))
    v = dict(kind=wire.DATA, flags=wire.FLAG_LAST if i % 2 else 0, conn=0xC0DE0000 + i,
             psn=1000 + i, msg=7 + i, offset=4096 * i, msg_len=4096 * (i + 1), ev=SPINE,
             length=len(payload), ts=time.monotonic_ns(), ts_echo=i, crc=wire.crc32(payload))
    buf = bytearray(wire.HEADER_LEN + len(payload))
    wire.pack_header(buf, **v)
    buf[wire.HEADER_LEN:] = payload
    wire.parse(buf)
    return bytes(buf), v


def host_socket(fab: Fabric, host: str) -> socket.socket:
    with entered(fab.node_kernel(host).fd):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    return sock


def test_capture_on_spine_decodes_srv6_data(fab: Fabric, tmp_path: Path) -> None:
    spec = fab.spec
    path = spec.path("h0", "h1", PLANE, SPINE)
    assert path.hops[1].next_node == SPINE_NODE == path.hops[2].node
    ingress, egress = path.hops[1].in_ifname, path.hops[2].out_ifname
    spine_sid, dst = str(path.segments[0]), str(spec.address("h1"))
    assert str(path.segments[-1]) == dst

    rx = host_socket(fab, "h1")
    rx.bind((dst, wire.UDP_PORT))
    rx.settimeout(5.0)
    tx = host_socket(fab, "h0")
    tx.bind((str(spec.address("h0")), 0))
    pin_socket(tx, path)
    sent = [datagram(i) for i in range(5)]
    try:
        with Capture(fab, SPINE_NODE, ingress, tmp_path / "in.pcap") as cap_in, \
                Capture(fab, SPINE_NODE, egress, tmp_path / "out.pcap") as cap_out:
            assert cap_in.running and cap_out.running
            pids = [cap_in.pid, cap_out.pid]
            for data, _ in sent:
                tx.sendto(data, (dst, wire.UDP_PORT))
            received = [rx.recv(65535) for _ in sent]
        assert not cap_in.running and not any(pid_alive(p) for p in pids if p)
    finally:
        tx.close()
        rx.close()
    assert sorted(received) == sorted(d for d, _ in sent)  # delivered, unchanged
    assert cap_in.stats is not None and cap_in.stats.captured == len(sent)
    assert cap_out.stats is not None and cap_out.stats.captured == len(sent)

    for pcap, ip_dst, segleft in ((cap_in.path, spine_sid, 1), (cap_out.path, dst, 0)):
        pkts = decode(pcap)
        assert len(pkts) == len(sent), pcap
        # Matched by PSN: a sender moved to the other CPU between two datagrams may have
        # them cross the veth pairs out of order, which is no fault of the capture.
        by_psn = {v["psn"]: (data, v) for data, v in sent}
        assert sorted(int(p[SaeTransport].psn) for p in pkts) == sorted(by_psn), pcap
        for pkt in pkts:
            data, v = by_psn[int(pkt[SaeTransport].psn)]
            assert IPv6 in pkt and pkt[IPv6].src == str(spec.address("h0"))
            assert pkt[IPv6].dst == ip_dst
            srh = pkt[IPv6ExtHdrSegmentRouting]
            assert srh.addresses == [dst, spine_sid] and srh.segleft == segleft
            assert pkt[UDP].dport == wire.UDP_PORT
            sae = pkt[SaeTransport]
            for name in ("version", "kind", "flags", "conn", "psn", "msg", "offset", "msg_len",
                         "ev", "length", "ts", "ts_echo", "crc"):
                assert int(getattr(sae, name, wire.WIRE_VERSION)) == v.get(
                    name, wire.WIRE_VERSION), name
            # snaplen 256 cuts the payload: what was captured is a prefix of what was sent.
            captured = bytes(sae)
            assert data.startswith(captured) and wire.HEADER_LEN < len(captured) <= len(data)


def test_snaplen_zero_keeps_whole_payload(fab: Fabric, tmp_path: Path) -> None:
    spec = fab.spec
    path = spec.path("h0", "h1", PLANE, SPINE)
    tx = host_socket(fab, "h0")
    tx.bind((str(spec.address("h0")), 0))
    pin_socket(tx, path)
    data, v = datagram(200)
    egress = path.hops[2].out_ifname

    def spine_sent() -> int:
        return interface_packets(fab.kernels[SPINE_NODE])[egress][1]

    try:
        with Capture(fab, SPINE_NODE, egress, tmp_path / "full.pcap", snaplen=0) as cap:
            before = spine_sent()
            tx.sendto(data, (str(spec.address("h1")), wire.UDP_PORT))
            # no receiver here: until the spine sent it on (stopping, the capture still
            # writes what its socket was given)
            wait_for(lambda: spine_sent() > before, 10,
                     lambda: f"{SPINE_NODE} sent {spine_sent() - before} packets on {egress}")
    finally:
        tx.close()
    (pkt,) = decode(cap.path)
    sae = pkt[SaeTransport]
    assert bytes(sae) == data and wire.parse(bytes(sae)).crc == v["crc"]
    assert wire.crc32(sae.load) == sae.crc


def host_sent(fab: Fabric) -> int:
    """Packets h0 sent out of its NICs."""
    c = interface_packets(fab.kernels["h0"])
    return c["p0"][1] + c["p1"][1]


def test_default_filter_without_srh(fab: Fabric, tmp_path: Path) -> None:
    """Unpinned (ECMP, no SRH) datagrams match the default filter too; others do not."""
    spec = fab.spec
    dst = str(spec.address("h1"))
    socks = [host_socket(fab, "h0") for _ in range(4)]
    try:
        with Capture(fab, "h0", "p0", tmp_path / "p0.pcap") as c0, \
                Capture(fab, "h0", "p1", tmp_path / "p1.pcap") as c1:
            before = host_sent(fab)
            for i, sock in enumerate(socks):
                sock.bind((str(spec.address("h0")), 0))
                sock.sendto(datagram(i)[0], (dst, wire.UDP_PORT))
                sock.sendto(b"not ours", (dst, wire.UDP_PORT + 1))
            # until h0's NICs sent them all (the captures see them as they leave)
            want = 2 * len(socks)
            wait_for(lambda: host_sent(fab) - before >= want, 10,
                     lambda: f"h0 sent {host_sent(fab) - before} of {want} datagrams")
    finally:
        for sock in socks:
            sock.close()
    pkts = decode(c0.path) + decode(c1.path)
    assert len(pkts) == len(socks)
    assert {p[SaeTransport].psn for p in pkts} == {1000 + i for i in range(len(socks))}
    assert not any(IPv6ExtHdrSegmentRouting in p for p in pkts)


def test_validation(fab: Fabric, tmp_path: Path) -> None:
    with pytest.raises(EmuError, match="needs a running fabric"):
        Capture(Fabric(SPEC, name="capidle"), "h0", "p0", tmp_path / "x.pcap")
    with pytest.raises(TopologyError, match="unknown node 'p9s9'"):
        Capture(fab, "p9s9", "l0", tmp_path / "x.pcap")
    with pytest.raises(EmuError, match="valid interfaces are l0, l1"):
        Capture(fab, SPINE_NODE, "eth0", tmp_path / "x.pcap")
    with pytest.raises(EmuError, match="valid interfaces are p0, p1"):
        Capture(fab, "h0", "lo", tmp_path / "x.pcap")


def test_bad_filter_fails_at_start(fab: Fabric, tmp_path: Path) -> None:
    cap = Capture(fab, SPINE_NODE, "l0", tmp_path / "x.pcap", filter="udp port nonsense(")
    with pytest.raises(EmuError, match="exited with 1 before capturing"):
        cap.start()
    assert not cap.running


def test_teardown_kills_a_running_capture(tmp_path: Path) -> None:
    small = MultiPlaneClos(planes=1, spines=1, leaves=2, hosts_per_leaf=1)
    with Fabric(small, name="captest2") as fab2:
        cap = Capture(fab2, "h0", "p0", tmp_path / "left.pcap").start()
        pid = cap.pid
        assert pid is not None and pid_alive(pid)
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not pid_alive(pid)
    cap.stop()  # the process is gone already: stop() still reaps it and returns
    assert not cap.running
