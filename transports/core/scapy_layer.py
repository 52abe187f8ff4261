"""The wire format of transports/core/wire.py as a scapy layer, so captures decode.

    from transports.core.scapy_layer import SaeSack, SaeTransport, register
    register()                                   # UDP port 4791 <-> SaeTransport
    pkt = IPv6() / UDP() / SaeTransport(kind="DATA", flags="LAST", conn=7) / payload
    ack = SaeTransport(kind="ACK", flags="SACK", psn=5, sacks=[SaeSack(start=7, end=9)])

``SaeTransport`` has exactly the fields of ``wire.HEADER`` in its order; kind
and flag names come from ``wire.KINDS`` and ``wire.FLAG_*`` (one source of
truth). ``length`` is filled in on build when left None. An ACK/NACK with the
SACK flag carries its SACK blocks in the ``sacks`` field (a list of
``SaeSack``); any other payload (DATA bytes, a malformed SACK payload) stays
``Raw``. Bytes beyond ``length`` are padding, never payload.

Definitions only here; the UDP bindings are made by ``register()`` (idempotent),
which this module also calls on import so that ``rdpcap`` decodes at once.
"""

from __future__ import annotations

import os
from typing import Any

from scapy.fields import (
    ByteEnumField,
    ByteField,
    ConditionalField,
    FlagsField,
    IntField,
    LongField,
    PacketListField,
    ShortField,
    XIntField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_bottom_up, bind_top_down

from transports.core import wire

FLAG_NAMES: dict[int, str] = {
    value: name.removeprefix("FLAG_") for name, value in vars(wire).items()
    if name.startswith("FLAG_") and isinstance(value, int)
}


def _has_sacks(pkt: Packet) -> bool:
    """Whether the payload of ``pkt`` is SACK blocks (as wire.parse accepts them)."""
    return (pkt.kind in (wire.ACK, wire.NACK) and bool(int(pkt.flags) & wire.FLAG_SACK)
            and (pkt.length is None or pkt.length % wire.SACK_BLOCK.size == 0))


class SaeSack(Packet):
    """One SACK block: PSNs ``start`` (inclusive) to ``end`` (exclusive) were received."""

    name = "SAE SACK block"
    fields_desc = [IntField("start", 0), IntField("end", 0)]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s  # a block has no payload: the rest is the next block

    def mysummary(self) -> str:
        return self.sprintf("[%SaeSack.start%, %SaeSack.end%)")


class SaeTransport(Packet):
    """The 48-byte header of every transport datagram (transports/core/wire.py)."""

    name = "SAE transport"
    fields_desc = [
        ByteField("version", wire.WIRE_VERSION),
        ByteEnumField("kind", wire.DATA, dict(wire.KINDS)),
        FlagsField("flags", 0, 16, FLAG_NAMES),
        IntField("conn", 0),
        IntField("psn", 0),
        IntField("msg", 0),
        IntField("offset", 0),
        IntField("msg_len", 0),
        ShortField("ev", 0),
        ShortField("length", None),
        LongField("ts", 0),
        LongField("ts_echo", 0),
        XIntField("crc", 0),
        ConditionalField(
            PacketListField("sacks", [], SaeSack, length_from=lambda pkt: pkt.length),
            _has_sacks),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.length is None:
            n = len(pkt) - wire.HEADER_LEN + len(pay)
            pkt = pkt[:26] + n.to_bytes(2, "big") + pkt[28:]
        return pkt + pay

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        # What is left after the header (and SACK blocks) up to ``length`` is payload.
        left = self.length - len(self.sacks) * wire.SACK_BLOCK.size if _has_sacks(self) \
            else self.length
        left = max(left, 0)
        return s[:left], s[left:]

    def mysummary(self) -> str:
        return self.sprintf("SAE %SaeTransport.kind% conn=%SaeTransport.conn% "
                            "psn=%SaeTransport.psn% ev=%SaeTransport.ev% "
                            "flags=%SaeTransport.flags%")


_registered = False


def register() -> None:
    """Decode UDP port ``wire.UDP_PORT`` (either end) as SaeTransport; building
    ``UDP()/SaeTransport()`` sets both ports to it. Calling it again does nothing."""
    global _registered
    if _registered:
        return
    # bind_layers(UDP, SaeTransport, dport=...) then (..., sport=...) would leave only
    # the last one for building (top-down overloads replace each other): sport=4791 and
    # scapy's default dport=53. So the two directions are bound separately.
    bind_bottom_up(UDP, SaeTransport, dport=wire.UDP_PORT)
    bind_bottom_up(UDP, SaeTransport, sport=wire.UDP_PORT)
    bind_top_down(UDP, SaeTransport, sport=wire.UDP_PORT, dport=wire.UDP_PORT)
    _registered = True


register()


def read_pcap(path: str | os.PathLike[str]) -> list[Any]:
    """Every packet of a pcap file (e.g. from emu.capture.Capture), decoded with this layer."""
    import scapy.layers.inet6  # noqa: F401 - IPv6 and the SRH for Ether type 0x86dd
    from scapy.utils import rdpcap

    register()
    return list(rdpcap(str(path)))
