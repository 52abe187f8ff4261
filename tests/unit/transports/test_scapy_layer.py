"""The scapy layer of the wire format: round trips with transports/core/wire.py, both ways."""

from __future__ import annotations

import itertools
from ipaddress import IPv6Address

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether
from scapy.packet import Padding, Raw

from emu import capture
from emu.srv6 import srh_option
from topologies import MultiPlaneClos
from transports.core import wire
from transports.core.scapy_layer import FLAG_NAMES, SaeSack, SaeTransport, register

# TRIMMED only on a header alone (the wire's own check): tested apart
ALL_FLAGS = [0] + [f for f in FLAG_NAMES if f != wire.FLAG_TRIMMED] + \
    [sum(FLAG_NAMES) & ~wire.FLAG_TRIMMED]
FIELDS = ("version", "kind", "flags", "conn", "psn", "msg", "offset", "msg_len", "ev", "length",
          "ts", "ts_echo", "crc")
SACKS = [(7, 9), (11, 12), (2**32 - 2, 2**32 - 1)]


def values(kind: int, flags: int, length: int) -> dict[int | str, int]:
    """Distinct, byte-order-revealing values for every field (max values included)."""
    return dict(kind=kind, flags=flags, conn=0xDEADBEEF, psn=0x01020304, msg=2**32 - 1,
                offset=0 if kind != wire.DATA else 100, msg_len=100 + length, ev=0xFFFE,
                length=length, ts=0x0102030405060708, ts_echo=2**64 - 1, crc=0x89ABCDEF)


def payload_for(kind: int, flags: int) -> bytes:
    if kind in (wire.ACK, wire.NACK) and flags & wire.FLAG_SACK:
        return wire.pack_sack(SACKS)
    return b"payload!" * 3 if kind == wire.DATA else b""


def wire_bytes(kind: int, flags: int) -> tuple[bytes, dict]:
    payload = payload_for(kind, flags)
    v = values(kind, flags, len(payload))
    buf = bytearray(wire.HEADER_LEN + len(payload))
    wire.pack_header(buf, **v)
    buf[wire.HEADER_LEN:] = payload
    return bytes(buf), v


def check_header(pkt: SaeTransport, v: dict) -> None:
    assert pkt.version == wire.WIRE_VERSION
    for name, value in v.items():
        assert int(getattr(pkt, name)) == value, name


CASES = list(itertools.product(sorted(wire.KINDS), ALL_FLAGS))


def test_fields_are_wire_header() -> None:
    names = [f.name for f in SaeTransport.fields_desc]
    assert names[:13] == list(wire.Header._fields) == list(FIELDS)
    assert len(SaeTransport()) == wire.HEADER_LEN
    assert FLAG_NAMES == {1: "LAST", 2: "RETX", 4: "SACK", 8: "ACK_REQ",
                          32: "STOP", 64: "STOP_OK", 128: "TAIL", 256: "TRIM_OK",
                          512: "TRIMMED", 1024: "CE", 2048: "ECE"}


@pytest.mark.parametrize(("kind", "flags"), CASES)
def test_scapy_to_wire(kind: int, flags: int) -> None:
    payload = payload_for(kind, flags)
    v = values(kind, flags, len(payload))
    fields = {k: x for k, x in v.items() if k != "length"}  # length: computed by post_build
    if kind in (wire.ACK, wire.NACK) and flags & wire.FLAG_SACK:
        pkt = SaeTransport(**fields, sacks=[SaeSack(start=a, end=b) for a, b in SACKS])
    else:
        pkt = SaeTransport(**fields) / payload if payload else SaeTransport(**fields)
    data = bytes(pkt)
    h = wire.parse(data)
    assert h._asdict() == {"version": wire.WIRE_VERSION, **v}
    assert data[wire.HEADER_LEN:] == payload
    if kind in (wire.ACK, wire.NACK) and h.flags & wire.FLAG_SACK:
        assert wire.sack_blocks(data[wire.HEADER_LEN:]) == SACKS


@pytest.mark.parametrize(("kind", "flags"), CASES)
def test_wire_to_scapy(kind: int, flags: int) -> None:
    data, v = wire_bytes(kind, flags)
    pkt = SaeTransport(data)
    check_header(pkt, v)
    assert pkt.kind == kind and pkt.sprintf("%kind%") == wire.KINDS[kind]
    for bit, name in FLAG_NAMES.items():
        assert getattr(pkt.flags, name) == bool(flags & bit)
    if kind in (wire.ACK, wire.NACK) and flags & wire.FLAG_SACK:
        assert [(s.start, s.end) for s in pkt.sacks] == SACKS
        assert Raw not in pkt
    elif kind == wire.DATA:
        assert pkt[Raw].load == data[wire.HEADER_LEN:]
    else:
        assert Raw not in pkt
    assert bytes(pkt) == data  # and back, unchanged


def test_names_build() -> None:
    pkt = SaeTransport(kind="NACK", flags="SACK+RETX", sacks=[SaeSack(start=1, end=3)])
    h = wire.parse(bytes(pkt))
    assert (h.kind, h.flags, h.length) == (wire.NACK, wire.FLAG_SACK | wire.FLAG_RETX, 8)
    assert "NACK" in pkt.summary()


def test_malformed_sack_payload_stays_raw() -> None:
    pkt = SaeTransport(bytes(SaeTransport(kind="ACK", flags="SACK") / b"12345"))
    assert pkt.length == 5 and pkt[Raw].load == b"12345" and not pkt.sacks


def test_padding_beyond_length() -> None:
    data, _ = wire_bytes(wire.DATA, wire.FLAG_LAST)
    pkt = SaeTransport(data + b"\0\0\0")
    assert pkt[Raw].load == data[wire.HEADER_LEN:] and pkt[Padding].load == b"\0\0\0"
    data, _ = wire_bytes(wire.ACK, wire.FLAG_SACK)
    pkt = SaeTransport(data + b"\0" * 8)
    assert len(pkt.sacks) == len(SACKS) and pkt[Padding].load == b"\0" * 8


def test_udp_bindings() -> None:
    register()
    register()  # idempotent
    udp = UDP(bytes(UDP() / SaeTransport()))
    assert (udp.sport, udp.dport) == (wire.UDP_PORT, wire.UDP_PORT)
    data, v = wire_bytes(wire.DATA, 0)
    for sport, dport in ((50000, wire.UDP_PORT), (wire.UDP_PORT, 50000)):
        check_header(UDP(bytes(UDP(sport=sport, dport=dport) / data))[SaeTransport], v)
    assert SaeTransport not in UDP(bytes(UDP(sport=1, dport=2) / data))


ETHER = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
def test_capture_filter_port() -> None:
    assert capture.PORT == wire.UDP_PORT
    assert capture.DEFAULT_FILTER.startswith(f"udp port {wire.UDP_PORT} or ")


SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1)


@pytest.mark.parametrize(("kind", "flags"),
                         [(wire.DATA, wire.FLAG_LAST), (wire.ACK, wire.FLAG_SACK),
                          (wire.NACK, wire.FLAG_SACK | wire.FLAG_RETX), (wire.PROBE, 0)])
def test_full_stack_with_srh(kind: int, flags: int) -> None:
    """Ether/IPv6/SRH (2 segments, as emu/srv6.py sends them)/UDP/SaeTransport, both ways."""
    path = SPEC.path("h0", "h1", 0, 1)
    src, dst = str(SPEC.address("h0")), str(path.segments[-1])
    spine_sid = str(path.segments[0])
    data, v = wire_bytes(kind, flags)
    # The SRH the kernel sends: emu.srv6's bytes with segment 0 filled in by the destination.
    srh_bytes = bytearray(srh_option(path))
    srh_bytes[8:24] = IPv6Address(dst).packed
    srh_bytes[0] = 17  # next header: UDP
    frame = ETHER / IPv6(src=src, dst=spine_sid) / IPv6ExtHdrSegmentRouting(
        addresses=path.srh_addresses(), segleft=1, nh=17) / UDP(
        sport=50000, dport=wire.UDP_PORT) / Raw(data)
    raw_frame = bytes(frame)
    assert raw_frame[14 + 40:14 + 40 + len(srh_bytes)] == bytes(srh_bytes)

    pkt = Ether(raw_frame)
    srh = pkt[IPv6ExtHdrSegmentRouting]
    assert srh.addresses == [dst, spine_sid] and srh.segleft == 1
    assert pkt[UDP].dport == wire.UDP_PORT
    check_header(pkt[SaeTransport], v)
    assert wire.parse(bytes(pkt[SaeTransport])) == wire.parse(data)

    # The other way: scapy builds the whole stack, wire.parse reads the UDP payload.
    fields = {k: x for k, x in v.items() if k != "length"}
    sae = SaeTransport(**fields)
    if flags & wire.FLAG_SACK:
        sae.sacks = [SaeSack(start=a, end=b) for a, b in SACKS]
    elif kind == wire.DATA:
        sae = sae / data[wire.HEADER_LEN:]
    built = Ether(bytes(ETHER / IPv6(src=src, dst=spine_sid) / IPv6ExtHdrSegmentRouting(
        addresses=path.srh_addresses(), segleft=1) / UDP(sport=50000, dport=wire.UDP_PORT)
        / sae))
    assert built[IPv6ExtHdrSegmentRouting].nh == 17
    udp = built[UDP]
    assert bytes(udp.payload) == data
    assert wire.parse(bytes(udp.payload)) == wire.parse(data)
    # The UDP checksum is over the final destination (the SRH's segment 0), RFC 8754.
    plain = IPv6(bytes(IPv6(src=src, dst=dst) / UDP(sport=50000, dport=wire.UDP_PORT)
                       / Raw(data)))
    assert udp.chksum == plain[UDP].chksum
