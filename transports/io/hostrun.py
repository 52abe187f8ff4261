"""One host's plan run by the driver's engine (transports/io/driver.py): its connections,
the messages and streams it posts, their completions checked, its result record.

A host's state is its own, as if it ran in a process of its own: its sockets (made in
its namespace), cores, messages, streams, counters and EV change log. The engine only
calls :meth:`HostRun.begin` at the common start, :meth:`HostRun.after_turn` after each
turn of the loop, and :meth:`HostRun.result` at the end.
"""

from __future__ import annotations

import json
import sys
import time

from emu import childproto
from transports.core.api import Completion
from transports.core.cc import Nscc
from transports.io.footprint import state_sizes
from transports.io.sockets import Conn, HostSockets
from transports.io.streams import RecvStream, SendStream, bound_arg, prefault
from transports.plan import AfterGate, message_bytes, placed_exactly
from transports.planrecord import TIMELINE_S, HostPlan, MessagePlan
from transports.registry import make_core

__all__ = ["EV_LOG_MAX", "SENT", "TIMELINE_S", "HostRun"]
EV_LOG_MAX = 512  # EV state changes kept with their times (``ev_log``); later ones counted
SENT = "sent"  # the record a driver writes once all of a host's send streams are done


class HostRun:
    """One host's plan (transports/planrecord.py ``HostPlan``) on its sockets."""

    def __init__(self, plan: HostPlan, socks: HostSockets) -> None:
        self.plan = plan
        self.host = plan.host
        self.transport = plan.transport
        self.socks = socks
        self.conns: dict[int, Conn] = {}
        self.verify_cpu_s = 0.0  # CPU spent checking received bytes (not the transport's)
        for c in plan.conns:
            core = make_core(self.transport, c.conn, c.evs, plan.config,
                             plan.seed * 1000 + c.conn, c.nics)
            self.conns[c.conn] = socks.conn(c, core, plan.addr)
        self._send = socks.send
        self.chunk = int(getattr(plan.config, "mtu_payload", 8000))
        # streams (soak runs), by (connection, "send" | "recv"): payloads made now
        self.streams: dict[tuple[int, str], SendStream | RecvStream] = {}
        for st in plan.streams:
            key = (st.conn, st.kind)
            if key in self.streams or st.conn not in self.conns:
                raise SystemExit(f"stream {key}: one send and one recv stream per connection "
                                 f"of the plan (connections {sorted(self.conns)})")
            conn = self.conns[st.conn]
            self.streams[key] = (SendStream(st, conn) if st.kind == "send"
                                 else RecvStream(st, conn, self.chunk))
        self.sends = [st for st in self.streams.values() if isinstance(st, SendStream)]
        self.recvs = [st for st in self.streams.values() if isinstance(st, RecvStream)]
        self.stopping = False  # stdin ended: receive streams post no more
        self.ev_changes: dict[int, int] = {}  # EV state changes drained, per connection
        # the first EV_LOG_MAX of them: [t from the start, conn, ev, old state, new state]
        self.ev_log: list[list] = []
        self.t0 = 0.0
        self.pending = 0
        self.expect: dict[tuple[int, int, str], MessagePlan] = {}
        self.bufs: dict[tuple[int, int], bytearray] = {}
        self.refs: dict[tuple[int, int], bytes] = {}
        # A receive with "after" (a message id or a list of them) is posted once the
        # receives of all those messages completed: a round's buffer (and its deadline
        # clock) starts when the previous round ended on every lane.
        self.recv_waiting: AfterGate[MessagePlan] = AfterGate()
        # A send with "after" is posted once the sends of all those messages completed
        # (synchronous rounds: every lane of round i before any lane of round i + 1).
        self.waiting: AfterGate[tuple[MessagePlan, bytes]] = AfterGate()
        self.first: list[tuple[MessagePlan, bytes]] = []
        self.posted: dict[int, float] = {}
        self.done: list[dict] = []
        self.timeline: list[tuple[float, int]] = []  # (t, bytes placed so far) for goodput
        self.placed = 0
        self.sending = len(self.sends)  # send streams not finished
        self.next_sample = 0.0
        self.timeline_s = plan.timeline_s
        self._prepare()

    def __repr__(self) -> str:
        return f"HostRun({self.host}, conns={sorted(self.conns)}, pending={self.pending})"

    def _prepare(self) -> None:
        """Buffers and message contents, made before the start (not charged to the run)."""
        for r in self.plan.recvs:
            buf = self.bufs[(r.conn, r.msg)] = bytearray(r.size)
            prefault(buf)  # now, not charged to the transport's CPU during the run
            # the content it must receive, made now: during the run it would take the CPU
            # from the transfers still running on this machine
            self.refs[(r.conn, r.msg)] = message_bytes(r.seed, r.size)
            self.expect[(r.conn, r.msg, "recv")] = r
            self.pending += 1
            if not self.recv_waiting.add(r.after, r):
                self._post_recv(r, time.monotonic())
        for s in self.plan.sends:
            item = (s, message_bytes(s.seed, s.size))
            if not self.waiting.add(s.after, item):
                self.first.append(item)
            self.expect[(s.conn, s.msg, "send")] = s
            self.pending += 1

    @property
    def busy(self) -> bool:
        """Something of the plan is not finished."""
        return bool(self.pending or self.sending or (self.recvs and not self.stopping))

    def begin(self, t0: float) -> None:
        """The common start: post the first sends and fill the streams."""
        self.t0 = self.next_sample = t0
        for r in self.recvs:
            r.fill(t0, self._send)
        for s, data in self.first:
            self._post_send(s, data, t0)
        for st in self.sends:
            st.fill(t0, t0, self._send)

    def completed(self, conn: Conn, comp: Completion) -> None:
        """A completion of one of this host's cores (the loop's ``on_completion``)."""
        if self.streams:
            stream = self.streams.get((conn.core.conn, comp.kind))
            if stream is not None and stream.owns(comp.msg):
                self._stream_done(stream, comp)
                return
        self.pending -= 1
        self.done.append(self._finish(conn, comp))
        if comp.kind == "recv" and comp.ok:
            self.placed += comp.nbytes
        if comp.kind == "send":
            for s, data in self.waiting.done(comp.msg):
                self._post_send(s, data, time.monotonic())
        else:
            for r in self.recv_waiting.done(comp.msg):
                self._post_recv(r, time.monotonic())

    def after_turn(self, now: float) -> None:
        """After a turn of the loop: refill the send streams, sample the timeline."""
        if self.sending:
            for st in self.sends:
                if not st.finished:
                    st.fill(now, self.t0, self._send)  # after until_s: finished once empty
            self.sending = sum(not st.finished for st in self.sends)
            if not self.sending:  # the parent may now end the receive streams
                childproto.emit(SENT, host=self.host)
        if now >= self.next_sample:
            self.timeline.append((round(now - self.t0, 4), self._bytes_in()))
            self.next_sample = now + self.timeline_s

    def drain_ev_changes(self) -> None:
        """Drain each core's EV change log (its owner is this host, which only counts
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

    def result(self, unknown: int) -> dict:
        """The host's result record (without the process's CPU: the driver adds it)."""
        done = self.done
        for key, want in self.expect.items():
            if not any(d["conn"] == key[0] and d["msg"] == key[1] and d["kind"] == key[2]
                       for d in done):
                done.append({"conn": key[0], "msg": key[1], "kind": key[2], "ok": False,
                             "error": "deadline", "bytes": want.size})
        return {
            "host": self.host, "transport": self.transport, "t0": self.t0,
            "messages": done, "timeline": self.timeline, "posted": self.posted,
            "verify_cpu_s": round(self.verify_cpu_s, 4),
            "sent_per_ev": {c: conn.sent_per_ev for c, conn in self.conns.items()},
            "stats": {c: dict(getattr(conn.core, "stats", {})) for c, conn in self.conns.items()},
            # when each connection's retransmission timeouts fired (cores that log them: RC),
            # on the machine's monotonic clock
            "rto_log": {c: list(log) for c, conn in self.conns.items()
                        if (log := getattr(conn.core, "rto_log", None))},
            # NSCC's window per connection (cores that have one: MRC, DBLP)
            "cc": {c: cc.report() for c, conn in self.conns.items()
                   if isinstance(cc := getattr(conn.core, "cc", None), Nscc)},
            "unknown_conn": unknown,
            "internal_errors": self.socks.internal_errors,
            "datagrams": {"received": self.socks.received, "sent": self.socks.sent,
                          "refused": self.socks.refused},
            "ev_changes": self.ev_changes, "ev_log": self.ev_log,
            "state": {c: state_sizes(conn.core) for c, conn in self.conns.items()},
            "streams": [st.report() for st in self.streams.values()],
        }

    def _stream_done(self, st: SendStream | RecvStream, comp: Completion) -> None:
        """A stream's message completed: count (and check) it, post the next."""
        now = time.monotonic()
        if isinstance(st, SendStream):
            st.complete(comp)
            st.fill(now, self.t0, self._send)
            return
        c0 = time.process_time()
        st.complete(comp)
        self.verify_cpu_s += time.process_time() - c0
        if not self.stopping:
            st.fill(now, self._send)

    def _post_recv(self, r: MessagePlan, now: float) -> None:
        conn = self.conns[r.conn]
        self._send(conn, conn.core.post_recv(r.msg, self.bufs[(r.conn, r.msg)], now,
                                             **bound_arg(r.bound)))

    def _post_send(self, s: MessagePlan, data: bytes, now: float) -> None:
        conn = self.conns[s.conn]
        self.posted[s.msg] = round(now - self.t0, 6)
        self._send(conn, conn.core.post_send(s.msg, data, now, **bound_arg(s.bound)))

    def _bytes_in(self) -> int:
        # Bytes placed so far, including partially received messages, from the cores.
        total = 0
        for conn in self.conns.values():
            total += int(getattr(conn.core, "stats", {}).get("rx_data_bytes", 0))
        return total or self.placed

    def _finish(self, conn: Conn, comp: Completion) -> dict:
        c = conn.core.conn
        out = {"conn": c, "msg": comp.msg, "kind": comp.kind, "ok": comp.ok,
               "bytes": comp.nbytes, "t": round(comp.t - self.t0, 6), "error": comp.error}
        missing = tuple(getattr(comp, "missing", ()) or ())
        if hasattr(comp, "delivered"):
            out.update(delivered=round(comp.delivered, 6), missing=len(missing),
                       deadline=bool(getattr(comp, "deadline", False)))
        if comp.kind == "recv" and comp.ok:
            c0 = time.process_time()
            # every byte that was placed must be exact
            out["exact"] = placed_exactly(self.bufs[(c, comp.msg)], self.refs.pop((c, comp.msg)),
                                          missing, self.chunk)
            self.verify_cpu_s += time.process_time() - c0
        print(json.dumps({"host": self.host, **out}), file=sys.stderr, flush=True)
        return out
