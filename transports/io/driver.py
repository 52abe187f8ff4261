"""The UDP driver: runs transport cores for one host, inside that host's namespace.

One driver process per host (so the hosts' Python work spreads over the cores
of the machine). It is given a plan (JSON on stdin): its connections, the
messages to send and receive, and for MRC the transit segments of every path
(EV) to each peer. Message bytes are generated from a seed on both ends, so the
receiver verifies them by SHA-256 without the harness shipping data. A progress
line per completed message goes to stderr.

It speaks the emulator's child protocol (emu.childproto): line 1 of stdin is the
plan; the driver sets up, says ``ready``, reads the ``start`` record (the
CLOCK_MONOTONIC instant at which all drivers post their sends) and ends with one
``result`` record on stdout.

This module is the process's entry point and what it does with the plan
(:class:`Driver`); the parts it runs, each in a module of its own:

* transports/io/loop.py: the event loop (shared with the in-process engine,
  transports/io/endpoint.py);
* transports/io/sockets.py: the host's sockets (one receive socket on the
  transport port; for MRC one send socket per distinct path, carrying its SRH; for RC
  one with a fixed source port) and the per-datagram hot path;
* transports/io/streams.py: the plan's send and receive streams (soak runs);
* transports/io/footprint.py: the resident-memory samples (``rss``) and the sizes
  of the cores' containers (``state``) a soak watches.

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

    python -m transports.io.driver   (started by emu.launch; plan on stdin)
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

from emu import childproto
from transports import registry
from transports.core.api import Completion
from transports.io.footprint import RssSampler, state_sizes
from transports.io.loop import EventLoop
from transports.io.sockets import Conn, HostSockets
from transports.io.streams import RecvStream, SendStream, bound_arg, prefault
from transports.plan import AfterGate, message_bytes, placed_exactly
from transports.registry import make_core

TIMELINE_S = 0.01  # goodput timeline's default sampling period
EV_LOG_MAX = 512  # EV state changes kept with their times (``ev_log``); later ones counted
SENT = "sent"  # the record a driver writes once all its send streams are done


class Driver:
    """One host's plan run on the event loop (transports/io/loop.py): its messages and
    streams posted, their completions checked, the result record built."""

    def __init__(self, plan: dict) -> None:
        self.plan = plan
        self.addr = plan["addr"]
        self.transport = plan["transport"]
        self.socks = HostSockets()
        self.conns: dict[int, Conn] = {}
        self.verify_cpu_s = 0.0  # CPU spent checking received bytes (not the transport's)
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
        # the first EV_LOG_MAX of them: [t from the start, conn, ev, old state, new state]
        self.ev_log: list[list] = []
        self.t0 = 0.0

    def run(self) -> dict:
        """Post every receive and send of the plan, loop until all complete or the deadline."""
        t_start = time.monotonic()
        deadline = t_start + self.plan.get("deadline_s", 60.0)
        pending = 0
        expect: dict[tuple[int, int, str], dict] = {}
        bufs: dict[tuple[int, int], bytearray] = {}
        refs: dict[tuple[int, int], bytes] = {}
        # A receive with "after" (a message id or a list of them) is posted once the
        # receives of all those messages completed: a round's buffer (and its deadline
        # clock) starts when the previous round ended on every lane.
        recv_waiting: AfterGate[dict] = AfterGate()
        for r in self.plan.get("recvs", []):
            buf = bufs[(r["conn"], r["msg"])] = bytearray(r["size"])
            prefault(buf)  # now, not charged to the transport's CPU during the run
            # the content it must receive, made now: during the run it would take the CPU
            # from the transfers still running on this host's cores
            refs[(r["conn"], r["msg"])] = message_bytes(r["seed"], r["size"])
            expect[(r["conn"], r["msg"], "recv")] = r
            pending += 1
            if not recv_waiting.add(r.get("after"), r):
                self._post_recv(r, bufs, time.monotonic())
        # A send with "after" is posted once the sends of all those messages completed
        # (synchronous rounds: every lane of round i before any lane of round i + 1).
        first: list[tuple[dict, bytes]] = []
        waiting: AfterGate[tuple[dict, bytes]] = AfterGate()
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
        t0 = self.t0 = wait_for_start()
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

        def completed(conn: Conn, comp: Completion) -> None:
            nonlocal pending, placed
            if self.streams:
                stream = self.streams.get((conn.core.conn, comp.kind))
                if stream is not None and stream.owns(comp.msg):
                    self._stream_done(stream, comp, t0)
                    return
            pending -= 1
            done.append(self._finish(conn, comp, bufs, refs, t0))
            if comp.kind == "recv" and comp.ok:
                placed += comp.nbytes
            if comp.kind == "send":
                for s, data in waiting.done(comp.msg):
                    self._post_send(s, data, time.monotonic(), t0)
            else:
                for r in recv_waiting.done(comp.msg):
                    self._post_recv(r, bufs, time.monotonic())

        def stdin_ready(ready: list, now: float) -> None:
            if stdin in ready and self._stdin_ended(stdin):
                self.stopping = True

        self.loop = loop = EventLoop(self.socks, self.conns, completed, idle_s=0.05)
        next_sample = t0
        timeline_s = self.plan.get("timeline_s", TIMELINE_S)
        # Receive streams end when the parent closes stdin: watched with the socket.
        stdin = sys.stdin.fileno() if recvs else -1
        while ((pending or sending or (recvs and not self.stopping))
               and time.monotonic() < deadline):
            watch = [stdin] if recvs and not self.stopping else []
            now = loop.turn(watch, deadline, stdin_ready)
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
        self._drain_ev_changes()
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
            "wakeups": loop.wakeups,
            "sent_per_ev": {c: conn.sent_per_ev for c, conn in self.conns.items()},
            "stats": {c: dict(getattr(conn.core, "stats", {})) for c, conn in self.conns.items()},
            "unknown_conn": loop.unknown,
            "internal_errors": self.socks.internal_errors,
            "rss": rss.samples, "rss_every_s": rss.every, "ev_changes": self.ev_changes,
            "ev_log": self.ev_log,
            "state": {c: state_sizes(conn.core) for c, conn in self.conns.items()},
            "streams": [st.report() for st in self.streams.values()],
        }

    def _drain_ev_changes(self) -> None:
        """Drain each core's EV change log (its owner is this driver, which only counts
        them and keeps the first ``EV_LOG_MAX`` with their times, which show when a failure
        retired an EV and when a probe re-admitted it): undrained, it would fill to its
        bound under a flapping link."""
        log = self.ev_log
        for c, conn in self.conns.items():
            drain = getattr(conn.core, "ev_changes", None)
            changes = drain() if drain is not None else None
            if changes:
                self.ev_changes[c] = self.ev_changes.get(c, 0) + len(changes)
                for t, ev, old, new in changes[:max(0, EV_LOG_MAX - len(log))]:
                    log.append([round(t - self.t0, 4), c, ev, old, new])

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
                                             **bound_arg(r)))

    def _post_send(self, s: dict, data: bytes, now: float, t0: float) -> None:
        conn = self.conns[s["conn"]]
        self.posted[s["msg"]] = round(now - t0, 6)
        self._send(conn, conn.core.post_send(s["msg"], data, now, **bound_arg(s)))

    def _bytes_in(self, placed: int) -> int:
        # Bytes placed so far, including partially received messages, from the cores.
        total = 0
        for conn in self.conns.values():
            total += int(getattr(conn.core, "stats", {}).get("rx_data_bytes", 0))
        return total or placed

    def _finish(self, conn: Conn, comp: Completion, bufs: dict, refs: dict,
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
            chunk = self.plan.get("config", {}).get("mtu_payload", 8000)
            # every byte that was placed must be exact
            out["exact"] = placed_exactly(bufs[(c, comp.msg)], refs.pop((c, comp.msg)),
                                          missing, chunk)
            self.verify_cpu_s += time.process_time() - c0
        print(json.dumps({"host": self.plan["host"], **out}), file=sys.stderr, flush=True)
        return out


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
    if registry.get(plan["transport"]).core is None:  # the kernel's TCP
        from transports.io.tcp import run_tcp

        result = run_tcp(plan, message_bytes, wait_for_start)
    else:
        result = Driver(plan).run()
    childproto.emit("result", **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
