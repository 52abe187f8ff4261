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
from ipaddress import IPv6Address

from topologies import Path

IPV6_RTHDR = 57
SRH_TYPE = 4
_SRH_FIXED = struct.Struct("!BBBBBBH")


def srh_option(path: Path) -> bytes:
    """The SRH bytes for IPV6_RTHDR that send a packet along ``path``.

    Layout (RFC 8754): segments are stored last-first; segment 0 is the final
    destination, which the kernel overwrites with each packet's destination.
    """
    transit: tuple[IPv6Address, ...] = path.segments[:-1]
    segs = [IPv6Address("::"), *reversed(transit)]
    n = len(segs)
    head = _SRH_FIXED.pack(0, 2 * n, SRH_TYPE, n - 1, n - 1, 0, 0)
    return head + b"".join(a.packed for a in segs)


def pin_socket(sock: socket.socket, path: Path) -> None:
    """Make every datagram of ``sock`` follow ``path`` (its plane and spine)."""
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RTHDR, srh_option(path))
