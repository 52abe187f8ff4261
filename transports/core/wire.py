"""The one wire format of every transport of this project.

Every datagram (UDP payload) starts with a 48-byte header, network byte order:

    offset size field
    0      1    version      WIRE_VERSION
    1      1    kind         DATA, ACK, NACK, PROBE, PROBE_ACK
    2      2    flags        FLAG_* bits
    4      4    conn         connection id (chosen by the receiver's side of a pair)
    8      4    psn          packet sequence number (ACK/NACK: cumulative ack = next expected)
    12     4    msg          message id
    16     4    offset       byte offset of the payload in the message (data placement)
    20     4    msg_len      total length of the message in bytes (ACK: how long, ns, the
                             oldest packet it covers waited at the receiver, its ACK delay)
    24     2    ev           entropy value: the path this packet was sent on (ACK: the
                             EV of the data packet that triggered it)
    26     2    length       payload bytes after the header
    28     8    ts           sender's timestamp, ns (CLOCK_MONOTONIC: one clock per machine)
    36     8    ts_echo      the ts of the packet being acknowledged (RTT per path)
    44     4    crc          CRC32 of the payload (0 when the transport does not use one)

ACK/NACK payloads carry SACK blocks: ``length // 8`` pairs of u32 (start, end)
PSN ranges received beyond the cumulative ack (end exclusive). The same layout
is declared as a scapy layer in transports/core/scapy_layer.py, so captures decode.

Congestion signals (topologies/signals.py): MRC's DATA carries FLAG_TRIM_OK; a switch
whose buffer is full cuts such a packet to its header and sets FLAG_TRIMMED (``length``
still says how much payload was cut); the receiving NIC sets FLAG_CE on DATA that came
marked CE; the ACK or NACK that answers it carries FLAG_ECE. An MRC receiver answers a
trimmed packet by a NACK naming its PSN (``psn``) and EV.

DBLP (transports/core/dblp/) adds two ACK flavours: FLAG_STOP (``msg`` names the message,
``msg_len`` its length, ``offset`` 1 if the receiver's deadline fired, the payload a
bitmap of the chunks placed, bit i = byte i // 8, bit i % 8) and FLAG_STOP_OK (the
sender's answer: ``psn``..``offset`` is the PSN range of ``msg`` it will never send again).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from transports.native.packet import crc32 as _crc32
from transports.native.packet import crc32_range as _crc32_range
from transports.native.packet import datagram as _datagram

WIRE_VERSION = 1
HEADER = struct.Struct("!BBHIIIIIHHQQI")
HEADER_LEN = HEADER.size  # 48
SACK_BLOCK = struct.Struct("!II")
UDP_PORT = 4791  # the RoCEv2 port: MRC and RC are RDMA transports

# kinds
DATA, ACK, NACK, PROBE, PROBE_ACK = 1, 2, 3, 4, 5
KINDS = {DATA: "DATA", ACK: "ACK", NACK: "NACK", PROBE: "PROBE", PROBE_ACK: "PROBE_ACK"}

# flags
FLAG_LAST = 0x0001  # last packet of a message
FLAG_RETX = 0x0002  # a retransmission
FLAG_SACK = 0x0004  # ACK/NACK payload holds SACK blocks
FLAG_ACK_REQ = 0x0008  # receiver should ack at once (end of a burst, a probe)
FLAG_STOP = 0x0020  # ACK, receiver -> sender: stop sending ``msg`` (DBLP); payload: bitmap
FLAG_STOP_OK = 0x0040  # ACK, sender -> receiver: ``msg`` abandoned; PSNs [psn, offset) never resent
FLAG_TAIL = 0x0080  # PROBE in the data class after a silent RTO: answered by a full ACK (MRC)
# Congestion signals from the switches (emu/bpf/port.c sets TRIMMED and CE; the bits and
# their offset are part of that program too: change them together).
FLAG_TRIM_OK = 0x0100  # DATA: a switch may trim this packet to its header rather than drop it
FLAG_TRIMMED = 0x0200  # DATA: trimmed by a switch: header only, ``length`` is what was cut
FLAG_CE = 0x0400  # DATA: the IP header arrived marked CE (the receiving NIC copies it here)
FLAG_ECE = 0x0800  # ACK/NACK: the packet it answers arrived marked CE (ECN echo, a CNP for RC)

MAX_PAYLOAD = 9000 - 40 - 8 - HEADER_LEN - 64  # jumbo MTU minus IPv6, UDP, header, SRH room


class Header(NamedTuple):
    """A decoded header (allocation per packet: for receivers and tests, not senders)."""

    version: int
    kind: int
    flags: int
    conn: int
    psn: int
    msg: int
    offset: int
    msg_len: int
    ev: int
    length: int
    ts: int
    ts_echo: int
    crc: int


class Malformed(ValueError):
    """A datagram that is not a valid packet of this protocol; ``reason`` is a short key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def parse(data: bytes | memoryview) -> Header:
    """Decode and check one datagram's header; Malformed (with a counter key) otherwise."""
    n = len(data)
    if n < HEADER_LEN:
        raise Malformed("truncated", f"{n} bytes < header {HEADER_LEN}")
    h = Header._make(HEADER.unpack_from(data, 0))
    if h.version != WIRE_VERSION:
        raise Malformed("version", f"version {h.version} != {WIRE_VERSION}")
    if h.kind not in KINDS:
        raise Malformed("kind", f"kind {h.kind}")
    if h.flags & FLAG_TRIMMED:  # a switch cut the payload: the header alone, and only DATA
        if h.kind != DATA or n != HEADER_LEN:
            raise Malformed("trimmed", f"kind {h.kind}, {n} bytes marked trimmed")
    elif h.length != n - HEADER_LEN:
        raise Malformed("length", f"length field {h.length} != {n - HEADER_LEN} payload bytes")
    if h.kind == DATA and (h.offset + h.length > h.msg_len):
        raise Malformed("bounds", f"offset {h.offset} + {h.length} > message {h.msg_len}")
    if h.flags & FLAG_SACK and h.length % SACK_BLOCK.size:
        raise Malformed("sack", f"SACK payload of {h.length} bytes")
    return h


def pack_header(buf: bytearray, kind: int, flags: int, conn: int, psn: int, msg: int,
                offset: int, msg_len: int, ev: int, length: int, ts: int, ts_echo: int = 0,
                crc: int = 0) -> None:
    """Write a header at the start of ``buf`` (a preallocated send buffer)."""
    HEADER.pack_into(buf, 0, WIRE_VERSION, kind, flags, conn, psn, msg, offset, msg_len, ev,
                     length, ts, ts_echo, crc)


# The hot paths read or patch a few fields without decoding the whole header: their byte
# offsets stay here, next to the layout above, and nowhere else.
_KIND_AT = 1
_FLAGS_LOW_AT = 3  # the low byte of the big-endian flags field: the FLAG_* bits < 0x100
_CONN_AT = 4
_CONN = struct.Struct("!I")
assert FLAG_ACK_REQ < 0x100 and FLAG_TAIL < 0x100  # both live in the flags' low byte


def conn_of(data: bytes | bytearray | memoryview, n: int) -> int:
    """The connection id of a datagram of ``n`` bytes (-1 if too short to name one): what
    a receiving loop hands the datagram to a core by, before any check."""
    if n < _CONN_AT + _CONN.size:
        return -1
    conn: int = _CONN.unpack_from(data, _CONN_AT)[0]
    return conn


def queues_as_data(data: bytes | bytearray | memoryview) -> bool:
    """Whether a packed datagram travels in the data class: DATA, and MRC's tail probes
    (FLAG_TAIL), which must queue behind the data they probe; everything else (ACK,
    NACK, probes) goes in the switches' priority class."""
    return data[_KIND_AT] == DATA or bool(data[_FLAGS_LOW_AT] & FLAG_TAIL)


def request_ack(buf: bytearray) -> None:
    """Set FLAG_ACK_REQ in the header packed at the start of ``buf`` (the last packet of a
    burst, once the burst is known to end there)."""
    buf[_FLAGS_LOW_AT] |= FLAG_ACK_REQ


# The senders' hot path packs a header and copies its payload in one compiled call
# (transports/native/packet.pyx, written to HEADER's layout; the wire tests check both
# agree): ``datagram(WIRE_VERSION, kind, flags, conn, psn, msg, offset, msg_len, ev, ts,
# ts_echo, crc, data, start, length)`` is a new bytearray, the header with ``length`` bytes
# of ``data`` from ``start``.
datagram = _datagram


def pack_version(buf: bytearray, version: int, conn: int) -> None:
    """A header of wire version ``version`` for connection ``conn``, every other field 0
    (a datagram of another version, to test that it is refused)."""
    HEADER.pack_into(buf, 0, version, 0, 0, conn, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def peek(data: bytes | bytearray | memoryview) -> Header:
    """The header fields of a datagram of at least ``HEADER_LEN`` bytes, unchecked (a
    capture's or a fake network's view; ``parse`` is the receiver's, checked)."""
    return Header._make(HEADER.unpack_from(data, 0))


def sack_blocks(payload: bytes | memoryview) -> list[tuple[int, int]]:
    """The (start, end) PSN ranges of an ACK/NACK payload."""
    return [SACK_BLOCK.unpack_from(payload, i) for i in range(0, len(payload), SACK_BLOCK.size)]


def pack_sack(blocks: list[tuple[int, int]]) -> bytes:
    """Encode SACK blocks as an ACK/NACK payload."""
    return b"".join(SACK_BLOCK.pack(a, b) for a, b in blocks)


# The payload checksum carried in ``crc``: zlib's CRC32, never 0 (0 means "no CRC"),
# computed by the compiled helper (ISA-L: 0.7 us per 8000 B against zlib's 2.3-5.4).
crc32 = _crc32
crc32_range = _crc32_range  # crc32(data[offset:offset + length]) without the slice
