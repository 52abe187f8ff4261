"""A driver host's UDP sockets and the hot path between them and the transport cores.

One receive socket on the transport port of all the host's addresses; for MRC one send
socket per distinct path (the socket carries the path's SRH, shared by every peer behind
the same transit SIDs); for RC one socket with a fixed source port (ECMP hashes the
5-tuple once). :meth:`HostSockets.receive` feeds waiting datagrams to their cores by the
connection id at offset 4, :meth:`HostSockets.send` sends a core's datagrams on their EVs'
sockets (control packets in the switches' priority class). Used by the driver process
(transports/io/driver.py) and by the in-process engine (transports/io/endpoint.py).
"""

from __future__ import annotations

import os
import socket
import struct
import time
import traceback
from dataclasses import dataclass, field

from emu.srv6 import IPV6_RTHDR, srh_bytes
from topologies.qos import CTRL_TCLASS
from transports.core.api import Core
from transports.core.rto import HostDelay
from transports.core.wire import UDP_PORT, conn_of, queues_as_data

SO_RCVBUFFORCE, SO_SNDBUFFORCE = 33, 32
RX_BATCH = 64  # datagrams read per wake-up before timers are served
MAX_INTERNAL_ERRORS = 5  # tracebacks kept of a core raising on a datagram

# Traffic class of control packets (topologies/qos.py: DSCP EF).
_CTRL_CMSG = [(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, struct.pack("i", CTRL_TCLASS))]


@dataclass
class Conn:
    """One connection of this host: its core, peer address and the socket of each EV."""

    core: Core
    peer: tuple[str, int]
    ev_socks: list[socket.socket]
    sent_per_ev: list[int] = field(default_factory=list)


class HostSockets:
    """A host's UDP sockets: one receive socket on the transport port (all its
    addresses) and one send socket per distinct path (SRH) or per (source, port)."""

    def __init__(self, addr: str = "::", port: int = UDP_PORT) -> None:
        self.rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        if os.geteuid() == 0:
            self.rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
        self.rx.bind((addr, port))  # "::": the loopback and the per-plane addresses
        self.rx.setblocking(False)
        self.path_socks: dict[tuple[str, ...], socket.socket] = {}
        self._buf = bytearray(65536)
        self._view = memoryview(self._buf)
        self.host_delay = HostDelay()
        # a core that raised on a datagram: the first tracebacks (the rest are counted)
        self.internal_errors: list[str] = []

    def conn(self, c: dict, core: Core) -> Conn:
        """The ``Conn`` of plan entry ``c`` (see transports.plan.conn_spec)."""
        paths = c.get("paths") or [[]]
        src = c.get("src_addr", "::")
        socks = [self._sock_for(tuple(p), c.get("sport", 0), src) for p in paths]
        return Conn(core, (c["peer_addr"], UDP_PORT), socks, [0] * len(paths))

    def _sock_for(self, transit: tuple[str, ...], sport: int, src: str) -> socket.socket:
        key = transit + ((f"sport{sport}", src) if not transit else ())
        s = self.path_socks.get(key)
        if s is None:
            s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 4 << 20)
            s.bind((src, sport))
            if transit:
                s.setsockopt(socket.IPPROTO_IPV6, IPV6_RTHDR, srh_bytes(transit))
            self.path_socks[key] = s
        return s

    @staticmethod
    def send(conn: Conn, txs: list) -> None:
        """Send a core's datagrams on their EVs' sockets (control ones in the EF class, but
        MRC's tail probes, which queue as data)."""
        for ev, data in txs:
            try:
                if queues_as_data(data):  # DATA, and tail probes: they queue behind data
                    conn.ev_socks[ev].sendto(data, conn.peer)
                    conn.sent_per_ev[ev] += 1
                else:  # ACK, NACK, probes: the switches' priority class
                    conn.ev_socks[ev].sendmsg([data], _CTRL_CMSG, 0, conn.peer)
            except (BlockingIOError, OSError):
                pass  # a full NIC queue or a dead first hop: the packet is lost, as on a wire

    def receive(self, conns: dict[int, Conn]) -> int:
        """Feed up to ``RX_BATCH`` waiting datagrams to their cores (then the caller's
        timers get their turn); returns how many named no connection of ``conns``."""
        rx, buf, view, send = self.rx, self._buf, self._view, self.send
        unknown = 0
        for _ in range(RX_BATCH):
            try:
                n = rx.recv_into(buf)
            except BlockingIOError:
                break
            # Each datagram its own arrival time: a batch read after a pause sharing
            # one stale clock reading would shorten RTT samples.
            now = time.monotonic()
            conn = conns.get(conn_of(view, n))
            if conn is None:
                unknown += 1
                continue
            try:
                txs = conn.core.on_packet(view[:n], now)
            except Exception:  # a bug one datagram reaches must not end the host's transport
                self._internal_error(conn)
                continue
            send(conn, txs)
        return unknown

    def _internal_error(self, conn: Conn) -> None:
        """Count a core's exception (its stats' ``internal_error``), keep its traceback."""
        stats = getattr(conn.core, "stats", None)
        if stats is not None:
            stats["internal_error"] = stats.get("internal_error", 0) + 1
        if len(self.internal_errors) < MAX_INTERNAL_ERRORS:
            self.internal_errors.append(traceback.format_exc())

    def woke(self, wake: float, now: float, conns: dict[int, Conn]) -> None:
        """The loop's wait for a timer due at ``wake`` returned at ``now``: its lateness
        is the host's scheduling delay, which the cores add to their RTO floor."""
        if wake <= now and self.host_delay.sample(now - wake, now):
            d = self.host_delay.published
            for c in conns.values():
                c.core.set_host_delay(d)

    @staticmethod
    def next_wake(conns: dict[int, Conn], default: float) -> float:
        """The earliest timer of the cores (``default`` when none is armed)."""
        return min((d for c in conns.values() if (d := c.core.next_deadline()) is not None),
                   default=default)

    def close(self) -> None:
        for s in (self.rx, *self.path_socks.values()):
            s.close()
