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
        t0 = wait_for_start()
        # The transport's CPU: the loop from the start on, less checking the received
        # bytes (generating messages is before it).
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        for s, data in first:
            self._post_send(s, data, t0, t0)
        done: list[dict] = []
        timeline: list[tuple[float, int]] = []  # (t, bytes placed so far) for goodput
        placed = 0
        next_sample = t0
        rx = self.rx
        while pending and time.monotonic() < deadline:
            now = time.monotonic()
            wake = self.socks.next_wake(self.conns, now + 0.05)
            select.select([rx], [], [], max(0.0, min(wake, deadline) - now))
            self.wakeups += 1
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
            if now >= next_sample:
                timeline.append((round(now - t0, 4), self._bytes_in(placed)))
                next_sample = now + 0.01
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
        }

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
