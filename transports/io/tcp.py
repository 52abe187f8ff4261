"""The kernel-TCP baseline: the same messages over plain TCP sockets (one per peer pair).

Framing: a 16-byte prefix (message id, size) then the bytes. The receiver reads
straight into the message's buffer and, once a message is whole, writes its id
back (8 bytes) on the same connection: the sender's completion, as MRC's and
RC's send completes when the peer acknowledged every byte. So a send with
``after`` (a message id or a list of them, as in transports/io/driver.py) is posted
when those messages were placed at the receiver: chained rounds, one at a time.
ECMP hashes each connection's 5-tuple once (the fabric hashes no flow label),
so a connection keeps one path for its life.

The kernel's TCP is left as it is (its RTO floor is Linux's 200 ms, TCP_RTO_MIN;
RACK, TLP and SACK on). The plan's ``config`` is transports/kernel.py's ``TcpConfig``:
``cc`` (a congestion control for TCP_CONGESTION, else the namespace's default),
``sport`` (the source port of the connections this host opens: with 5-tuple ECMP it
picks the path), ``port`` (the listening port, TCP_PORT by default). Sockets run with TCP_NODELAY,
as ML collectives' sockets do (Gloo, NCCL's socket transport).

Per connection the result's ``tcp_info`` (connections this host opened) and
``tcp_info_in`` (accepted ones) have the kernel's TCP_INFO at the end
(retransmitted segments, RTO expiries on kernels >= 6.7, current RTO and RTTs);
``netstat`` has the namespace's TCP counters over the run (tail loss probes,
timeouts, SACK recoveries, spurious RTOs (``TCPSpuriousRTOs``), duplicates reported
by D-SACK (``TCPDSACKRecv``: sender side; ``TCPDSACKOldSent``: receiver side): what
``nstat`` shows); every send completion carries how many segments were
retransmitted, how many of them the receiver reported as duplicates (D-SACK) and
how many RTOs fired while it was out. ``stats`` has per connection the UDP cores'
names (``conn_stats``): ``tx_data_pkts``, ``tx_retx``, ``tx_retx_spurious``
(TCP_INFO's ``dsack_dups``: retransmitted segments the receiver already had) and
``rto``. ``rto_log`` has per connection this host opened the times (the machine's
monotonic clock) at which the driver saw the kernel's RTO count go up (``_poll_rtos``):
it reads it every ``RTO_POLL_S`` while a send is out, so a time is late by about that
(plus the handling of the datagrams of one wake-up).
"""

from __future__ import annotations

import resource
import selectors
import socket
import struct
import time

from transports.core.rc import RTO_LOG_MAX
from transports.kernel import TCP_PORT, TcpConfig
from transports.plan import AfterGate, placed_exactly
from transports.planrecord import HostPlan, MessagePlan

_PREFIX = struct.Struct("!QQ")
_ACK = struct.Struct("!Q")
TCP_INFO_LEN = 256
RTO_POLL_S = 0.005  # how often the kernel's RTO count is read while a send is out
_RTO_COUNT = struct.Struct("H")  # tcpi_total_rto, at offset 240
__all__ = ["TCP_PORT", "conn_stats", "netstat", "parse_tcp_info", "rto_count", "run_tcp",
           "send_deltas", "tcp_info"]


def parse_tcp_info(raw: bytes) -> dict:
    """The fields of a TCP_INFO answer the baseline reports (times in ms); the RTO
    counters only where the kernel fills them (Linux >= 6.7: 248 bytes or more)."""
    u32 = lambda off: struct.unpack_from("I", raw, off)[0]  # noqa: E731
    u64 = lambda off: struct.unpack_from("Q", raw, off)[0]  # noqa: E731
    out = {"state": raw[0], "ca_state": raw[1], "backoff": raw[4],
           "rto_ms": u32(8) / 1000, "snd_mss": u32(16), "lost": u32(32),
           "rtt_ms": u32(68) / 1000, "rttvar_ms": u32(72) / 1000, "snd_cwnd": u32(80),
           "total_retrans": u32(100)}
    if len(raw) >= 160:
        out.update(min_rtt_ms=u32(148) / 1000, data_segs_out=u32(156))
    if len(raw) >= 224:
        out.update(bytes_retrans=u64(208), dsack_dups=u32(216), reord_seen=u32(220))
    if len(raw) >= 248:
        out.update(total_rto=_RTO_COUNT.unpack_from(raw, 240)[0],
                   total_rto_recoveries=struct.unpack_from("H", raw, 242)[0],
                   total_rto_time_ms=u32(244))
    return out


def rto_count(raw: bytes) -> int:
    """The kernel's RTO count of a TCP_INFO answer: ``tcpi_total_rto`` where it has it
    (Linux >= 6.7, 248 bytes or more), else ``tcpi_retransmits`` (the timeouts since the
    last progress: an ACK resets it, so a timeout answered between two reads is lost)."""
    return _RTO_COUNT.unpack_from(raw, 240)[0] if len(raw) >= 248 else raw[2]


NETSTAT_KEYS = ("TcpExt:TCPLossProbes", "TcpExt:TCPLossProbeRecovery", "TcpExt:TCPTimeouts",
                "TcpExt:TCPSackRecovery", "TcpExt:TCPLostRetransmit",
                "TcpExt:TCPSpuriousRTOs", "TcpExt:TCPDSACKRecv", "TcpExt:TCPDSACKOldSent",
                "TcpExt:TCPSynRetrans", "Tcp:RetransSegs", "Tcp:OutSegs", "Tcp:InSegs")
# TCP_INFO counters -> the per-message names of a send completion (differences over the send)
SEND_DELTAS = {"total_retrans": "retrans", "dsack_dups": "retrans_spurious",
               "total_rto": "rto"}


def conn_stats(info: dict) -> dict[str, int]:
    """One connection's counters under the UDP cores' names (transports/core/mrc/): data
    segments sent, retransmitted, retransmitted but reported duplicate by the receiver
    (D-SACK), and RTOs (0 where the kernel does not report them)."""
    return {"tx_data_pkts": info.get("data_segs_out", 0),
            "tx_retx": info.get("total_retrans", 0),
            "tx_retx_spurious": info.get("dsack_dups", 0), "rto": info.get("total_rto", 0)}


def send_deltas(before: dict, after: dict) -> dict[str, int]:
    """What a send's TCP_INFO counters moved by while it was out (only those both have)."""
    return {name: after[k] - before[k] for k, name in SEND_DELTAS.items()
            if k in before and k in after}


def netstat() -> dict[str, int]:
    """This namespace's TCP counters (what ``nstat`` shows), from /proc/net/{snmp,netstat}."""
    out: dict[str, int] = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for names, values in zip(lines[::2], lines[1::2], strict=False):
            proto, *keys = names.split()
            for k, v in zip(keys, values.split()[1:], strict=False):
                if v.lstrip("-").isdigit():
                    out[f"{proto}{k}"] = int(v)
    return out


def tcp_info(sock: socket.socket) -> dict:
    try:
        return parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN))
    except OSError:
        return {}


class _Conn:
    """One TCP socket: bytes still to write, and a partial frame being read."""

    def __init__(self, sock: socket.socket, conn: int | None) -> None:
        self.sock, self.conn = sock, conn
        self.out = bytearray()
        self.head = bytearray()
        self.cur: tuple[int, int] | None = None  # (msg, size) of the frame being read
        self.got = 0
        self.eof = False
        # msg -> (send, TCP_INFO at post)
        self.inflight: dict[int, tuple[MessagePlan, dict]] = {}
        self.retransmits = 0  # the kernel's RTO count when last polled (_poll_rtos)
        self.rto_log: list[float] = []  # when the polls saw that count go up


def _poll_rtos(conns: list[_Conn], now: float) -> bool:
    """Log when each sending connection's RTO count (``rto_count``) went up while a send
    of it was out; the count is read whatever, so a timeout while nothing was out is
    never logged late. Returns whether any send is out (the loop polls only then)."""
    out = False
    for c in conns:
        try:
            n = rto_count(c.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN))
        except OSError:
            continue
        if c.inflight:
            out = True
            if n > c.retransmits and len(c.rto_log) < RTO_LOG_MAX:
                c.rto_log.extend([now] * min(n - c.retransmits, RTO_LOG_MAX - len(c.rto_log)))
        c.retransmits = n
    return out


def run_tcp(plan: HostPlan, message_bytes, start) -> dict:
    """Run a driver plan over TCP; ``start()`` blocks until the common start time."""
    addr = plan.addr
    cfg = plan.config
    if not isinstance(cfg, TcpConfig):  # HostPlan checks config against its transport
        raise ValueError(f"host {plan.host}: the TCP driver runs transport 'tcp', "
                         f"not {plan.transport!r}")
    port = cfg.port
    deadline = time.monotonic() + plan.deadline_s
    sel = selectors.DefaultSelector()
    lst = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((addr, port))
    lst.listen(64)
    lst.setblocking(False)
    sel.register(lst, selectors.EVENT_READ, None)
    recvs = {r.msg: r for r in plan.recvs}
    bufs = {m: bytearray(r.size) for m, r in recvs.items()}
    # Every message's bytes made before the start: during the run, making them would take
    # the CPU from the transfers still running on this host's cores.
    refs = {m: message_bytes(r.seed, r.size) for m, r in recvs.items()}
    payloads = {s.msg: _PREFIX.pack(s.msg, s.size) + message_bytes(s.seed, s.size)
                for s in plan.sends}
    conn_peer = {c.conn: c for c in plan.conns}
    gate: AfterGate[MessagePlan] = AfterGate()
    sends = plan.sends
    first_sends = [s for s in sends if not gate.add(s.after, s)]
    pending = len(recvs) + len(sends)
    done: list[dict] = []
    posted: dict[int, float] = {}
    ns0 = netstat()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = start()
    out_conns: dict[int, _Conn] = {}
    for conn in dict.fromkeys(s.conn for s in sends):  # opened before any post
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if cfg.cc:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cfg.cc.encode())
        if cfg.sport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, cfg.sport))
        sock.settimeout(10)
        sock.connect((conn_peer[conn].peer_addr, port))
        sock.setblocking(False)
        c = out_conns[conn] = _Conn(sock, conn)
        sel.register(sock, selectors.EVENT_READ, c)
    all_conns: list[_Conn] = list(out_conns.values())

    def post(s: MessagePlan) -> None:
        c = out_conns[s.conn]
        posted[s.msg] = round(time.monotonic() - t0, 6)
        c.inflight[s.msg] = (s, tcp_info(c.sock))
        c.out += payloads.pop(s.msg)
        _flush(c, sel)

    for s in first_sends:
        post(s)
    senders = list(out_conns.values())
    _poll_rtos(senders, time.monotonic())  # the counts at the start (the handshake's)
    next_poll, polling = 0.0, False
    while pending and (now := time.monotonic()) < deadline:
        if now >= next_poll:
            polling = _poll_rtos(senders, now)
            next_poll = now + RTO_POLL_S
        for key, ev in sel.select(timeout=max(0.0, next_poll - now) if polling else 0.05):
            c = key.data
            if c is None:  # the listener: a peer connects to send to us
                sock, _ = lst.accept()
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                c = _Conn(sock, None)
                all_conns.append(c)
                sel.register(sock, selectors.EVENT_READ, c)
                continue
            if ev & selectors.EVENT_WRITE:
                _flush(c, sel)
            if not ev & selectors.EVENT_READ:
                continue
            if c.conn is None:  # data from a sender
                for msg in _read_data(c, recvs, bufs, sel):
                    r = recvs[msg]
                    ok = placed_exactly(bufs[msg], refs.pop(msg))
                    done.append({"conn": r.conn, "msg": msg, "kind": "recv", "ok": True,
                                 "bytes": r.size, "t": round(time.monotonic() - t0, 6),
                                 "exact": ok})
                    pending -= 1
                    c.out += _ACK.pack(msg)
                    _flush(c, sel)
                continue
            for msg in _read_acks(c, sel):  # acks from our receiver
                s, info0 = c.inflight.pop(msg)
                info = tcp_info(c.sock)
                rec = {"conn": c.conn, "msg": msg, "kind": "send", "ok": True,
                       "bytes": s.size, "t": round(time.monotonic() - t0, 6),
                       **send_deltas(info0, info)}
                rec["rto_ms"] = info.get("rto_ms")
                done.append(rec)
                pending -= 1
                for nxt in gate.done(msg):
                    post(nxt)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    infos = {c.conn: tcp_info(c.sock) for c in out_conns.values()}
    infos_in = [tcp_info(c.sock) for c in all_conns if c.conn is None]
    ns1 = netstat()
    expect = [(m, "recv", r) for m, r in recvs.items()] + [
        (s.msg, "send", s) for s in sends]
    have = {(d["msg"], d["kind"]) for d in done}
    for msg, kind, item in expect:
        if (msg, kind) not in have:
            done.append({"conn": item.conn, "msg": msg, "kind": kind, "ok": False,
                         "error": "deadline", "bytes": item.size})
    for c in out_conns.values():  # every byte was acknowledged: no TIME_WAIT on the port
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    for c in all_conns:
        c.sock.close()
    lst.close()
    return {"host": plan.host, "transport": "tcp", "t0": t0, "messages": done,
            "timeline": [], "posted": posted,
            "cpu_s": round((cpu1.ru_utime - cpu0.ru_utime)
                           + (cpu1.ru_stime - cpu0.ru_stime), 4),
            "sent_per_ev": {}, "tcp_info": infos, "tcp_info_in": infos_in,
            # the namespace's counters over the run (only this driver's TCP runs there)
            "netstat": {k: ns1[k] - ns0[k] for k in NETSTAT_KEYS if k in ns0 and k in ns1},
            "stats": {conn: conn_stats(i) for conn, i in infos.items()},
            "rto_log": {c.conn: c.rto_log for c in out_conns.values() if c.rto_log},
            "unknown_conn": 0}


def _flush(c: _Conn, sel: selectors.BaseSelector) -> None:
    """Write what the socket takes; wait for writability only while bytes remain."""
    try:
        while c.out:
            n = c.sock.send(c.out[:1 << 20])
            del c.out[:n]
    except (BlockingIOError, InterruptedError):
        pass
    if c.eof:
        return
    events = selectors.EVENT_READ | (selectors.EVENT_WRITE if c.out else 0)
    if sel.get_key(c.sock).events != events:
        sel.modify(c.sock, events, c)


def _recv(c: _Conn, sel: selectors.BaseSelector) -> bytes | None:
    try:
        chunk = c.sock.recv(1 << 20)
    except (BlockingIOError, InterruptedError):
        return None
    except ConnectionResetError:  # a sender done with every message closes abortively
        chunk = b""
    if not chunk:  # the peer closed: keep the socket for its TCP_INFO until the end
        sel.unregister(c.sock)
        c.eof = True
        return None
    return chunk


def _read_acks(c: _Conn, sel: selectors.BaseSelector) -> list[int]:
    """The message ids the receiver acknowledged in what is there."""
    out = []
    while (chunk := _recv(c, sel)) is not None:
        c.head += chunk
        n = len(c.head) // _ACK.size * _ACK.size
        out += [m for (m,) in _ACK.iter_unpack(c.head[:n])]
        del c.head[:n]
    return out


def _read_data(c: _Conn, recvs: dict[int, MessagePlan], bufs: dict[int, bytearray],
               sel: selectors.BaseSelector) -> list[int]:
    """Read what is there, place it; the messages that became whole."""
    completed = []
    while (chunk := _recv(c, sel)) is not None:
        view = memoryview(chunk)
        while view:
            if c.cur is None:  # reading a prefix
                need = _PREFIX.size - len(c.head)
                c.head += view[:need]
                view = view[need:]
                if len(c.head) < _PREFIX.size:
                    break
                msg, size = _PREFIX.unpack(c.head)
                c.head.clear()
                if msg not in recvs or recvs[msg].size != size:
                    raise RuntimeError(f"unexpected message {msg} ({size} B) from a peer")
                c.cur, c.got = (msg, size), 0
            msg, size = c.cur
            take = min(size - c.got, len(view))
            bufs[msg][c.got:c.got + take] = view[:take]
            c.got += take
            view = view[take:]
            if c.got == size:
                completed.append(msg)
                c.cur, c.got = None, 0
    return completed
