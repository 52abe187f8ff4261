"""A host's UDP sockets and the hot path between them and the transport cores, in batches.

One receive socket on the transport port of all the host's addresses, stamped by the
kernel on arrival (SO_TIMESTAMPNS); for MRC one send socket per distinct path (the socket
carries the path's SRH, shared by every peer behind the same transit SIDs); for RC one
socket with a fixed source port (ECMP hashes the 5-tuple once).

:meth:`HostSockets.receive` reads what is waiting in ``recvmmsg`` batches (the compiled
helper, transports/native/batchio.pyx) and feeds each datagram to its core by the
connection id at offset 4, with its kernel arrival time; :meth:`HostSockets.send` queues
a core's datagrams on their EVs and :meth:`HostSockets.flush` sends each EV's queue in
one ``sendmmsg`` (control packets in the switches' priority class). Used by the event
loop (transports/io/loop.py) of the driver process and of a worker's engine thread.
"""

from __future__ import annotations

import os
import socket
import traceback
from dataclasses import dataclass, field

from emu.srv6 import IPV6_RTHDR, srh_bytes
from topologies.qos import CTRL_TCLASS
from transports.core.api import Core, Tx
from transports.core.rto import HostDelay
from transports.core.wire import DATA, FLAG_TAIL, UDP_PORT
from transports.native.batchio import RxBatch, TxBatch, enable_timestamps, sockaddr
from transports.planrecord import ConnPlan

SO_RCVBUFFORCE, SO_SNDBUFFORCE = 33, 32
RX_BATCH = 64  # datagrams one recvmmsg reads
RX_ROUNDS = 4  # recvmmsg calls per host and wake-up at most (then the other hosts' turn)
TX_BATCH = 64  # datagrams one sendmmsg sends
RX_SLOT = 9216  # bytes of a receive slot: a jumbo frame's datagram
MAX_INTERNAL_ERRORS = 5  # tracebacks kept of a core raising on a datagram
# Where wire.py puts the kind and the flags' low byte: what tells a data datagram (DATA,
# and MRC's tail probes, which queue behind the data they probe) from a control one
_KIND_AT, _FLAGS_LOW_AT = 1, 3


@dataclass
class Conn:
    """One connection of this host: its core, peer address and the socket of each EV;
    the datagrams queued on each EV until the loop's next flush."""

    core: Core
    peer: tuple[str, int]
    ev_socks: list[socket.socket]
    sent_per_ev: list[int] = field(default_factory=list)
    dest: bytes = b""  # the peer as a struct sockaddr_in6
    queued: list[list[bytes | bytearray]] = field(default_factory=list)  # per EV
    dirty: bool = False  # something is queued

    def __post_init__(self) -> None:
        self.dest = sockaddr(*self.peer)
        self.queued = [[] for _ in self.ev_socks]
        if len(self.sent_per_ev) < len(self.ev_socks):
            self.sent_per_ev = [0] * len(self.ev_socks)


class HostSockets:
    """A host's UDP sockets: one receive socket on the transport port (all its
    addresses) and one send socket per distinct path (SRH) or per (source, port)."""

    def __init__(self, addr: str = "::", port: int = UDP_PORT) -> None:
        self.rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        if os.geteuid() == 0:
            self.rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
        self.rx.bind((addr, port))  # "::": the loopback and the per-plane addresses
        self.rx.setblocking(False)
        enable_timestamps(self.rx)
        self.path_socks: dict[tuple[str, ...], socket.socket] = {}
        self._rxb = RxBatch(RX_BATCH, RX_SLOT)
        self._txb = TxBatch(TX_BATCH, CTRL_TCLASS, _KIND_AT, _FLAGS_LOW_AT, DATA, FLAG_TAIL)
        self._dirty: list[Conn] = []  # connections with datagrams queued
        self.host_delay = HostDelay()
        # a core that raised on a datagram: the first tracebacks (the rest are counted)
        self.internal_errors: list[str] = []
        self.received = self.sent = self.refused = 0  # datagrams

    def conn(self, c: ConnPlan, core: Core, src: str = "::") -> Conn:
        """The ``Conn`` of plan entry ``c`` (transports.plan.conn_spec), its sockets bound
        to ``c.src_addr``, else to ``src``."""
        paths = c.paths or ((),)
        src = c.src_addr or src
        socks = [self._sock_for(p, c.sport, src) for p in paths]
        return Conn(core, (c.peer_addr, UDP_PORT), socks, [0] * len(paths))

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

    def send(self, conn: Conn, txs: list[Tx]) -> None:
        """Queue a core's datagrams on their EVs (sent by the next ``flush``)."""
        if not txs:
            return
        queued = conn.queued
        for ev, data in txs:
            queued[ev].append(data)
        if not conn.dirty:
            conn.dirty = True
            self._dirty.append(conn)

    def flush(self) -> None:
        """Send every queued datagram: one ``sendmmsg`` per EV with datagrams queued (a
        datagram the kernel refuses is lost, as on a full NIC queue or a dead first hop)."""
        txb = self._txb
        send = txb.send
        for conn in self._dirty:
            conn.dirty = False
            for ev, q in enumerate(conn.queued):
                if not q:
                    continue
                n = send(conn.ev_socks[ev].fileno(), conn.dest, q)
                self.sent += n
                self.refused += len(q) - n
                conn.sent_per_ev[ev] += txb.data_given  # DATA and tail probes (wire.py)
                q.clear()
        self._dirty.clear()

    def receive(self, conns: dict[int, Conn], now: float, touched: set[int]) -> int:
        """Feed the datagrams waiting (at most ``RX_ROUNDS`` batches: then the other hosts'
        turn) to their cores, each with its kernel arrival time; the connections fed go to
        ``touched``. Returns how many datagrams named no connection of ``conns``."""
        recv, fd, send = self._rxb.recv, self.rx.fileno(), self.send
        unknown = 0
        for _ in range(RX_ROUNDS):
            batch = recv(fd)
            self.received += len(batch)
            for cid, view, rx_t in batch:
                conn = conns.get(cid)
                if conn is None:
                    unknown += 1
                    continue
                touched.add(cid)
                try:
                    txs = conn.core.on_packet(view, now, rx_t)
                except Exception:  # a bug one datagram reaches must not end the host's transport
                    self._internal_error(conn)
                    continue
                if txs:
                    send(conn, txs)
            if len(batch) < RX_BATCH:
                break  # the socket is drained: no call to learn it is empty
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
