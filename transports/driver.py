"""The UDP driver: runs transport cores for one host, inside that host's namespace.

One driver process per host (so the hosts' Python work spreads over the cores
of the machine). It is given a plan (JSON on stdin): its connections, the
messages to send and receive, and for MRC the transit segments of every path
(EV) to each peer. It binds one receive socket on the transport port of the
host's address; for MRC one send socket per distinct path (the socket carries
the path's SRH, shared by every peer behind the same transit SIDs); for RC one
socket with a fixed source port (ECMP hashes the 5-tuple once). Message bytes
are generated from a seed on both ends, so the receiver verifies them by
SHA-256 without the harness shipping data. A progress line per completed message
goes to stderr.

It speaks the emulator's child protocol (emu.childproto): line 1 of stdin is the
plan; the driver sets up, says ``ready``, reads the ``start`` record (the
CLOCK_MONOTONIC instant at which all drivers post their sends) and ends with one
``result`` record on stdout.

The driver samples its own resident memory (``/proc/self/statm``) every
``RSS_EVERY_S`` in its loop (never per packet) and reports it as ``rss``: (seconds
from the start, bytes) pairs, resolution halved whenever ``RSS_MAX_SAMPLES`` are kept.

**Streams** (``plan["streams"]``, for soak runs): instead of listing every message,
an entry ``{"conn", "kind": "send" | "recv", "size", "msg0", "seeds", "window",
"bound", "until_s"}`` keeps ``window`` messages of ``size`` bytes in flight on its
connection, ids ``msg0``, ``msg0 + 1``, ...; message k carries the bytes of
``seeds[k % len(seeds)]`` (generated once, before the start; the receiver keeps
their SHA-256 and checks every message, bytes missing from a bounded DBLP round
aside, then clears and reuses its ``window`` buffers: nothing grows with the number
of messages). A send stream posts no message after ``until_s`` from the start, says
``{"type": "sent"}`` once its last one completed, and is done; receive streams
keep a receive posted until the parent closes the driver's stdin (it does once
every sender said ``sent``). Each stream reports counts (posted, ok, failed, bytes,
bytes not exact, rounds outside their loss bound, ...) and the ids still open at
the end, never a record per message. ``plan["timeline_s"]`` sets the goodput
timeline's sampling period (default 0.01 s; a soak of minutes wants seconds).

    python -m transports.driver   (started by emu.launch; plan on stdin)
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import select
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field

from emu import childproto
from emu.srv6 import IPV6_RTHDR, srh_bytes
from topologies.qos import CTRL_TCLASS
from transports.api import Completion, Core
from transports.plan import AfterGate, make_core, message_bytes
from transports.rto import HostDelay
from transports.wire import DATA, FLAG_TAIL, UDP_PORT

SO_RCVBUFFORCE, SO_SNDBUFFORCE = 33, 32
PAGE = 4096
RX_BATCH = 64  # datagrams read per wake-up before timers are served
MAX_INTERNAL_ERRORS = 5  # tracebacks kept of a core raising on a datagram
RSS_EVERY_S = 0.5  # the driver samples its resident memory this often (in its loop)
RSS_MAX_SAMPLES = 2048  # then every other sample is dropped and the period doubled
TIMELINE_S = 0.01  # goodput timeline's default sampling period
MAX_STREAM_ERRORS = 5  # error strings a stream keeps (the rest are counted)
SENT = "sent"  # the record a driver writes once all its send streams are done


class RssSampler:
    """This process's resident set size, sampled at most every ``every_s`` (from the
    driver's loop: a ``pread`` of /proc/self/statm, about 10 us)."""

    def __init__(self, every_s: float = RSS_EVERY_S, cap: int = RSS_MAX_SAMPLES) -> None:
        self.fd = os.open("/proc/self/statm", os.O_RDONLY)
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.every, self.cap = every_s, cap
        self.samples: list[tuple[float, int]] = []
        self.next = 0.0

    def read(self) -> int:
        """Resident bytes now (statm's second field is resident pages)."""
        return int(os.pread(self.fd, 256, 0).split()[1]) * self.page

    def sample(self, now: float, t0: float, force: bool = False) -> None:
        """Record one sample if one is due (or ``force``)."""
        if now < self.next and not force:
            return
        self.samples.append((round(now - t0, 3), self.read()))
        self.next = now + self.every
        if len(self.samples) >= self.cap:  # bounded: halve the resolution
            del self.samples[1::2]
            self.every *= 2

    def close(self) -> None:
        os.close(self.fd)


def _bound(item: dict) -> dict:
    """The ``bound=`` argument of a bounded-loss (DBLP) message, if the plan gives one."""
    b = item.get("bound")
    if b is None:
        return {}
    from transports.bound import LossBound

    return {"bound": LossBound(**b)}


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
                if data[1] == DATA or data[3] & FLAG_TAIL:  # a tail probe queues as data
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
            conn = conns.get(_conn_of(view, n))
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


# The containers of a core whose size a soak watches (attribute paths; a core without
# one is skipped): each is bounded by the core, or emptied as messages complete.
STATE_SIZES = {"blame": ("loss", "blame"), "tail_probes": ("loss", "tail_probes"),
               "ev_log": ("paths", "events"), "inflight": ("snd", "inflight"),
               "out_msgs": ("snd", "out_msgs"), "recv_msgs": ("reasm", "msgs"),
               "retx_ledger": ("ledger",), "dblp_tx": ("bsend", "tx"),
               "dblp_rx": ("brecv", "rx"), "dblp_closed": ("brecv", "closed")}


def state_sizes(core: object) -> dict[str, int]:
    """How many entries each of a core's watched containers holds now."""
    out = {}
    for name, path in STATE_SIZES.items():
        obj: object = core
        for attr in path:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if obj is not None:
            try:
                out[name] = len(obj)  # type: ignore[arg-type]
            except TypeError:
                pass
    return out


class SendStream:
    """A send stream of the plan: ``window`` messages in flight until ``until_s``."""

    def __init__(self, spec: dict, conn: Conn) -> None:
        self.conn = conn
        self.msg0, self.size = int(spec["msg0"]), int(spec["size"])
        self.window = int(spec.get("window", 1))
        self.until_s = float(spec["until_s"])
        self.bound = _bound(spec)
        self.payloads = [message_bytes(seed, self.size) for seed in spec["seeds"]]
        self.next = 0  # messages posted
        self.posted_at: dict[int, float] = {}  # in flight: at most ``window``
        self.ok = self.failed = self.bytes = 0
        self.slowest_s = 0.0  # longest time a message took (post to completion)
        self.errors: list[str] = []
        self.finished = False

    def owns(self, msg: int) -> bool:
        return self.msg0 <= msg < self.msg0 + self.next

    def fill(self, now: float, t0: float, send) -> None:
        """Post messages while the window has room and ``until_s`` has not passed (nor
        a message failed: a failed connection would fail every later one at once)."""
        if self.failed or now - t0 >= self.until_s:
            self.finished = not self.posted_at
            return
        core, n = self.conn.core, len(self.payloads)
        while len(self.posted_at) < self.window:
            msg = self.msg0 + self.next
            self.next += 1
            self.posted_at[msg] = now
            send(self.conn, core.post_send(msg, self.payloads[(msg - self.msg0) % n], now,
                                           **self.bound))

    def complete(self, comp: Completion) -> None:
        self.slowest_s = max(self.slowest_s, comp.t - self.posted_at.pop(comp.msg, comp.t))
        if comp.ok:
            self.ok += 1
            self.bytes += comp.nbytes
        else:
            self.failed += 1
            if len(self.errors) < MAX_STREAM_ERRORS:
                self.errors.append(f"message {comp.msg}: {comp.error}")

    def report(self) -> dict:
        return {"conn": self.conn.core.conn, "kind": "send", "msg0": self.msg0,
                "size": self.size, "posted": self.next, "ok": self.ok,
                "failed": self.failed, "bytes": self.bytes,
                "open": sorted(self.posted_at), "slowest_s": round(self.slowest_s, 4),
                "errors": self.errors}

class RecvStream:
    """A receive stream of the plan: ``window`` receives posted, each checked on
    completion against the SHA-256 of its seed's bytes, its buffer then cleared and
    reused."""

    def __init__(self, spec: dict, conn: Conn, chunk: int) -> None:
        self.conn = conn
        self.msg0, self.size = int(spec["msg0"]), int(spec["size"])
        self.bound = _bound(spec)
        self.tolerance = float((spec.get("bound") or {}).get("tolerance", 0.0))
        self.chunk = chunk
        self.refs = [message_bytes(seed, self.size) for seed in spec["seeds"]]
        self.digests = [hashlib.sha256(r).digest() for r in self.refs]
        self.zeros = bytes(self.size)
        self.free = [bytearray(self.size) for _ in range(int(spec.get("window", 1)))]
        for buf in self.free:  # faulted in now, not during the run
            buf[::PAGE] = bytes(len(range(0, len(buf), PAGE)))
        self.posted: dict[int, bytearray] = {}
        self.next = 0
        self.ok = self.failed = self.bytes = self.not_exact = 0
        self.missing_chunks = self.deadline_rounds = self.outside_bound = 0
        self.delivered_min = 1.0
        self.errors: list[str] = []

    def owns(self, msg: int) -> bool:
        return self.msg0 <= msg < self.msg0 + self.next

    def fill(self, now: float, send) -> None:
        """Post a receive into every free buffer (none once a receive failed)."""
        core = self.conn.core
        while self.free and not self.failed:
            buf = self.free.pop()
            msg = self.msg0 + self.next
            self.next += 1
            self.posted[msg] = buf
            send(self.conn, core.post_recv(msg, buf, now, **self.bound))

    def complete(self, comp: Completion) -> None:
        """Count and check one completed receive; its buffer is free again."""
        buf = self.posted.pop(comp.msg, None)
        if buf is None:  # a second completion of one message: a core's bug, not a loss
            self.failed += 1
            if len(self.errors) < MAX_STREAM_ERRORS:
                self.errors.append(f"message {comp.msg}: completed twice")
            return
        if not comp.ok:
            self.failed += 1
            if len(self.errors) < MAX_STREAM_ERRORS:
                self.errors.append(f"message {comp.msg}: {comp.error}")
        else:
            self.ok += 1
            self.bytes += comp.nbytes
            k = (comp.msg - self.msg0) % len(self.refs)
            missing = getattr(comp, "missing", ()) or ()
            if missing:
                self.missing_chunks += len(missing)
                exact = self._placed_exact(buf, self.refs[k], set(missing))
            else:
                exact = hashlib.sha256(buf).digest() == self.digests[k]
            if not exact:
                self.not_exact += 1
                if len(self.errors) < MAX_STREAM_ERRORS:
                    self.errors.append(f"message {comp.msg}: bytes differ")
            delivered = getattr(comp, "delivered", 1.0)
            self.delivered_min = min(self.delivered_min, delivered)
            deadline = bool(getattr(comp, "deadline", False))
            self.deadline_rounds += deadline
            if delivered < 1.0 - self.tolerance - 1e-9 and not deadline:
                self.outside_bound += 1
        buf[:] = self.zeros
        self.free.append(buf)

    def _placed_exact(self, buf: bytearray, ref: bytes, missing: set[int]) -> bool:
        """Every chunk that was placed (all but ``missing``) equals the reference."""
        got, want, c = memoryview(buf), memoryview(ref), self.chunk
        return all(got[i:i + c] == want[i:i + c]
                   for i in range(0, self.size, c) if i // c not in missing)

    def report(self) -> dict:
        return {"conn": self.conn.core.conn, "kind": "recv", "msg0": self.msg0,
                "size": self.size, "posted": self.next, "ok": self.ok,
                "failed": self.failed, "bytes": self.bytes, "not_exact": self.not_exact,
                "missing_chunks": self.missing_chunks, "deadline_rounds": self.deadline_rounds,
                "outside_bound": self.outside_bound,
                "delivered_min": round(self.delivered_min, 6), "open": sorted(self.posted),
                "errors": self.errors}


class Driver:
    """Event loop: receive socket, per-EV send sockets, core timers."""

    def __init__(self, plan: dict) -> None:
        self.plan = plan
        self.addr = plan["addr"]
        self.transport = plan["transport"]
        self.socks = HostSockets()
        self.rx = self.socks.rx
        self.conns: dict[int, Conn] = {}
        self.malformed_conn = 0
        self.verify_cpu_s = 0.0  # CPU spent checking received bytes (not the transport's)
        self.wakeups = 0
        for c in plan["conns"]:
            core = make_core(self.transport, c["conn"], len(c.get("paths") or [[]]),
                             plan.get("config", {}), plan.get("seed", 0) * 1000 + c["conn"],
                             c.get("nics"))
            self.conns[c["conn"]] = self.socks.conn({"src_addr": self.addr, **c}, core)
        self._send = self.socks.send
        # streams (soak runs), by (connection, "send" | "recv"): payloads made now
        self.streams: dict[tuple[int, str], SendStream | RecvStream] = {}
        chunk = plan.get("config", {}).get("mtu_payload", 8000)
        for st in plan.get("streams", []):
            key = (st["conn"], st["kind"])
            if key in self.streams or st["kind"] not in ("send", "recv"):
                raise SystemExit(f"stream {key}: one send and one recv stream per connection")
            conn = self.conns[st["conn"]]
            self.streams[key] = (SendStream(st, conn) if st["kind"] == "send"
                                 else RecvStream(st, conn, chunk))
        self.stopping = False  # stdin ended: receive streams post no more
        self.ev_changes: dict[int, int] = {}  # EV state changes drained, per connection

    def run(self) -> dict:
        """Post every receive and send of the plan, loop until all complete or the deadline."""
        t_start = time.monotonic()
        deadline = t_start + self.plan.get("deadline_s", 60.0)
        pending = 0
        expect: dict[tuple[int, int, str], dict] = {}
        bufs: dict[tuple[int, int], bytearray] = {}
        # A receive with "after" (a message id or a list of them) is posted once the
        # receives of all those messages completed: a round's buffer (and its deadline
        # clock) starts when the previous round ended on every lane.
        recv_waiting = AfterGate()
        for r in self.plan.get("recvs", []):
            buf = bufs[(r["conn"], r["msg"])] = bytearray(r["size"])
            # Touch every page now: a first write during the run would fault it in and
            # charge the fault to the transport's CPU (a training job reuses its buffers).
            buf[::PAGE] = bytes(len(range(0, len(buf), PAGE)))
            expect[(r["conn"], r["msg"], "recv")] = r
            pending += 1
            if not recv_waiting.add(r.get("after"), r):
                self._post_recv(r, bufs, time.monotonic())
        # A send with "after" is posted once the sends of all those messages completed
        # (synchronous rounds: every lane of round i before any lane of round i + 1).
        first, waiting = [], AfterGate()
        for s in self.plan.get("sends", []):
            item = (s, message_bytes(s["seed"], s["size"]))
            if not waiting.add(s.get("after"), item):
                first.append(item)
            expect[(s["conn"], s["msg"], "send")] = s
            pending += 1
        self.posted: dict[int, float] = {}
        sends = [st for st in self.streams.values() if isinstance(st, SendStream)]
        recvs = [st for st in self.streams.values() if isinstance(st, RecvStream)]
        rss = RssSampler()
        t0 = wait_for_start()
        # The transport's CPU: the loop from the start on, less checking the received
        # bytes (generating messages is before it).
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        for r in recvs:
            r.fill(t0, self._send)
        for s, data in first:
            self._post_send(s, data, t0, t0)
        for st in sends:
            st.fill(t0, t0, self._send)
        sending = len(sends)  # send streams not finished
        done: list[dict] = []
        timeline: list[tuple[float, int]] = []  # (t, bytes placed so far) for goodput
        placed = 0
        next_sample = t0
        timeline_s = self.plan.get("timeline_s", TIMELINE_S)
        rx = self.rx
        # Receive streams end when the parent closes stdin: watched with the socket.
        stdin = sys.stdin.fileno() if recvs else -1
        rlist: list = [rx, stdin] if recvs else [rx]
        while ((pending or sending or (recvs and not self.stopping))
               and time.monotonic() < deadline):
            now = time.monotonic()
            wake = self.socks.next_wake(self.conns, now + 0.05)
            ready, _, _ = select.select(rlist, [], [], max(0.0, min(wake, deadline) - now))
            self.wakeups += 1
            if stdin in ready and self._stdin_ended(stdin):
                self.stopping = True
                rlist = [rx]
            self.socks.woke(wake, time.monotonic(), self.conns)
            # drained whether or not select saw it: a datagram that arrived while this
            # process waited for the CPU must reach its core before the core's timers run
            self.malformed_conn += self.socks.receive(self.conns)
            now = time.monotonic()
            for conn in self.conns.values():
                d = conn.core.next_deadline()
                if d is not None and d <= now:
                    self._send(conn, conn.core.on_timer(now))
                for comp in conn.core.completions():
                    if self.streams:
                        stream = self.streams.get((conn.core.conn, comp.kind))
                        if stream is not None and stream.owns(comp.msg):
                            self._stream_done(stream, comp, t0)
                            continue
                    pending -= 1
                    done.append(self._finish(conn, comp, expect, bufs, t0))
                    if comp.kind == "recv" and comp.ok:
                        placed += comp.nbytes
                    if comp.kind == "send":
                        for s, data in waiting.done(comp.msg):
                            self._post_send(s, data, time.monotonic(), t0)
                    else:
                        for r in recv_waiting.done(comp.msg):
                            self._post_recv(r, bufs, time.monotonic())
            if sending:
                for st in sends:
                    if not st.finished:
                        st.fill(now, t0, self._send)  # after until_s: finished once empty
                sending = sum(not st.finished for st in sends)
                if not sending:  # the parent may now end the receive streams
                    childproto.emit(SENT, host=self.plan["host"])
            if now >= next_sample:
                timeline.append((round(now - t0, 4), self._bytes_in(placed)))
                next_sample = now + timeline_s
            if now >= rss.next:
                rss.sample(now, t0)
                self._drain_ev_changes()
        rss.sample(time.monotonic(), t0, force=True)  # the last one, always
        rss.close()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.monotonic() - t0
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        for key, want in expect.items():
            if not any(d["conn"] == key[0] and d["msg"] == key[1] and d["kind"] == key[2]
                       for d in done):
                done.append({"conn": key[0], "msg": key[1], "kind": key[2], "ok": False,
                             "error": "deadline", "bytes": want["size"]})
        return {
            "host": self.plan["host"], "transport": self.transport, "t0": t0,
            "messages": done, "timeline": timeline, "posted": self.posted,
            "cpu_s": round(max(0.0, cpu - self.verify_cpu_s), 4), "wall_s": round(wall, 4),
            "verify_cpu_s": round(self.verify_cpu_s, 4),
            "cpu_user_s": round(cpu1.ru_utime - cpu0.ru_utime, 4),
            "cpu_sys_s": round(cpu1.ru_stime - cpu0.ru_stime, 4),
            "wakeups": self.wakeups,
            "sent_per_ev": {c: conn.sent_per_ev for c, conn in self.conns.items()},
            "stats": {c: dict(getattr(conn.core, "stats", {})) for c, conn in self.conns.items()},
            "unknown_conn": self.malformed_conn,
            "internal_errors": self.socks.internal_errors,
            "rss": rss.samples, "rss_every_s": rss.every, "ev_changes": self.ev_changes,
            "state": {c: state_sizes(conn.core) for c, conn in self.conns.items()},
            "streams": [st.report() for st in self.streams.values()],
        }

    def _drain_ev_changes(self) -> None:
        """Drain each core's EV change log (its owner is this driver, which only counts
        them): undrained, it would fill to its bound under a flapping link."""
        for c, conn in self.conns.items():
            paths = getattr(conn.core, "paths", None)
            if paths is not None and paths.events:
                self.ev_changes[c] = self.ev_changes.get(c, 0) + len(paths.changes())

    def _stream_done(self, st: SendStream | RecvStream, comp: Completion, t0: float) -> None:
        """A stream's message completed: count (and check) it, post the next."""
        now = time.monotonic()
        if isinstance(st, SendStream):
            st.complete(comp)
            st.fill(now, t0, self._send)
            return
        c0 = time.process_time()
        st.complete(comp)
        self.verify_cpu_s += time.process_time() - c0
        if not self.stopping:
            st.fill(now, self._send)

    def _stdin_ended(self, fd: int) -> bool:
        """The parent closed stdin (or wrote a ``stop`` record): streams end."""
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return False
        return not data or b'"stop"' in data

    def _post_recv(self, r: dict, bufs: dict, now: float) -> None:
        conn = self.conns[r["conn"]]
        self._send(conn, conn.core.post_recv(r["msg"], bufs[(r["conn"], r["msg"])], now,
                                             **_bound(r)))

    def _post_send(self, s: dict, data: bytes, now: float, t0: float) -> None:
        conn = self.conns[s["conn"]]
        self.posted[s["msg"]] = round(now - t0, 6)
        self._send(conn, conn.core.post_send(s["msg"], data, now, **_bound(s)))

    def _bytes_in(self, placed: int) -> int:
        # Bytes placed so far, including partially received messages, from the cores.
        total = 0
        for conn in self.conns.values():
            total += int(getattr(conn.core, "stats", {}).get("rx_data_bytes", 0))
        return total or placed

    def _finish(self, conn: Conn, comp: Completion, expect: dict, bufs: dict,
                t0: float) -> dict:
        c = conn.core.conn
        out = {"conn": c, "msg": comp.msg, "kind": comp.kind, "ok": comp.ok,
               "bytes": comp.nbytes, "t": round(comp.t - t0, 6), "error": comp.error}
        missing = tuple(getattr(comp, "missing", ()) or ())
        if hasattr(comp, "delivered"):
            out.update(delivered=round(comp.delivered, 6), missing=len(missing),
                       deadline=bool(getattr(comp, "deadline", False)))
        if comp.kind == "recv" and comp.ok:
            c0 = time.process_time()
            want = expect[(c, comp.msg, "recv")]
            got = bytearray(bufs[(c, comp.msg)])
            ref = bytearray(message_bytes(want["seed"], want["size"]))
            chunk = self.plan.get("config", {}).get("mtu_payload", 8000)
            for i in missing:  # every byte that was placed must be exact
                got[i * chunk:(i + 1) * chunk] = ref[i * chunk:(i + 1) * chunk] = bytes(
                    len(ref[i * chunk:(i + 1) * chunk]))
            out["sha256_ok"] = hashlib.sha256(got).digest() == hashlib.sha256(ref).digest()
            self.verify_cpu_s += time.process_time() - c0
        print(json.dumps({"host": self.plan["host"], **out}), file=sys.stderr, flush=True)
        return out


_CONN = struct.Struct("!I")
# Traffic class of control packets (topologies/qos.py: DSCP EF).
_CTRL_CMSG = [(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, struct.pack("i", CTRL_TCLASS))]


def _conn_of(view: memoryview, n: int) -> int:
    return _CONN.unpack_from(view, 4)[0] if n >= 8 else -1


def wait_for_start() -> float:
    """Say ready, read the common start time, sleep until it; return it."""
    start_at = childproto.ready_then_start()
    if start_at is None:
        raise SystemExit("the harness closed stdin before the start instant")
    # The common instant itself, not this process's wake-up: every driver then reports
    # times on exactly the same origin (wake-ups differ by scheduling jitter).
    return start_at


def main() -> int:
    childproto.die_with_parent()
    plan = childproto.read_config()
    if plan["transport"] == "tcp":
        from transports.tcp import run_tcp

        result = run_tcp(plan, message_bytes, wait_for_start)
    else:
        result = Driver(plan).run()
    childproto.emit("result", **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
