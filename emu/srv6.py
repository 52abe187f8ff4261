"""Sending along a chosen path: a UDP socket that carries its own SRH.

The kernel accepts a type-4 routing header as a sticky socket option
(IPV6_RTHDR); it refuses it as a per-packet cmsg. So a path is bound to a
socket, and a sender picks a path per packet by picking the socket: one socket
per (plane, spine), shared by every destination (the SRH names only the
spine or leaf SID; the final segment is filled in from each sendto's address).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from ipaddress import IPv6Address

from topologies import Path

IPV6_RTHDR = 57
SRH_TYPE = 4
_SRH_FIXED = struct.Struct("!BBBBBBH")


def srh_bytes(transit: Sequence[IPv6Address | str]) -> bytes:
    """IPV6_RTHDR option bytes that send a packet through the ``transit`` SIDs (in order).

    Layout (RFC 8754): segments are stored last-first; segment 0 is the final
    destination, which the kernel overwrites with each packet's destination.
    """
    segs = [IPv6Address("::"), *(IPv6Address(a) for a in reversed(transit))]
    n = len(segs)
    head = _SRH_FIXED.pack(0, 2 * n, SRH_TYPE, n - 1, n - 1, 0, 0)
    return head + b"".join(a.packed for a in segs)


def srh_option(path: Path) -> bytes:
    """The SRH bytes for IPV6_RTHDR that send a packet along ``path``."""
    return srh_bytes(path.segments[:-1])


def pin_socket(sock: socket.socket, path: Path) -> None:
    """Make every datagram of ``sock`` follow ``path`` (its plane and spine)."""
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RTHDR, srh_option(path))
