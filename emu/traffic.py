"""Paced UDP flows between fabric hosts, for throughput and drop measurements.

Every flow is a socket in its source host's namespace (pinned to a path with
an SRH, or left to ECMP); one thread paces all senders from a schedule, one
thread drains every receiver. A datagram carries its flow id and sequence
number, so the receiver counts exactly what each flow delivered.
"""

from __future__ import annotations

import heapq
import random
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from emu.counters import queue_stats
from emu.fabric import Fabric
from emu.netns import entered
from emu.srv6 import pin_socket, srh_option
from topologies import Path

_HDR = struct.Struct("!IQ")  # flow id, sequence number
ETH_IPV6_UDP = 14 + 40 + 8
BASE_PORT = 40000
SO_RCVBUFFORCE = 33  # not exported by the socket module; root may exceed rmem_max


@dataclass(frozen=True)
class Flow:
    """One UDP flow: ``path`` pins it to a plane and spine; None leaves it to ECMP."""

    src: str
    dst: str
    path: Path | None = None
    sport: int = 0  # 0: any; a fixed port makes the ECMP hash reproducible


@dataclass(frozen=True)
class FlowResult:
    """One flow's datagrams sent and delivered (whole run) and goodput (measured window)."""

    flow: Flow
    sent: int
    received: int
    goodput_mbit: float  # payload bits that arrived during the window, per second
    frame_bytes: int  # bytes on the wire per datagram (the HTB counts these)
    payload: int
    max_gap_s: float = 0.0  # longest silence between two arrivals (an outage shows here)
    # The host's own part, to tell a slow fabric from a held-back measurement:
    offered_mbit: float = 0.0  # wire rate the sender managed during the window
    rx_stall_s: float = 0.0  # longest the receiving thread was held up within the window
    tx_stall_s: float = 0.0  # longest the sender was behind its schedule within the window
    # Datagrams the receiving host's UDP stack dropped for a full socket buffer during the
    # run: the receiver fell behind, not the fabric (one count per receiving host, the
    # same on every flow to it).
    rcvbuf_drops: int = 0

    def ceiling_mbit(self, link_mbit: float) -> float:
        """The goodput this flow gets alone on a link of ``link_mbit`` (headers cost wire time)."""
        return link_mbit * self.payload / self.frame_bytes

    @property
    def lost(self) -> int:
        return self.sent - self.received


def frame_bytes(payload: int, path: Path | None) -> int:
    """Ethernet + IPv6 (+ SRH) + UDP + payload of one datagram."""
    srh = len(srh_option(path)) if path is not None else 0
    return ETH_IPV6_UDP + srh + payload


def run_flows(fabric: Fabric, flows: list[Flow], rate_mbit: float, seconds: float,
              payload: int = 8000, warmup: float = 0.3, seed: int = 0) -> list[FlowResult]:
    """Offer every flow at ``rate_mbit`` (wire rate) for ``warmup + seconds``.

    Goodput counts what arrived during the last ``seconds`` (real time), after
    queues have filled and rate limits act. Datagrams the source's own NIC queue
    could not take (the socket would block) are not sent: that is the NIC's
    back-pressure, not loss. Send gaps are jittered by up to +-10 % (seeded),
    so flows sharing a tail-drop queue do not phase-lock onto who gets dropped.
    Once the senders stop, the totals close when every datagram arrived, or when
    the receiver, running, saw none for ``DRAIN_QUIET_S`` and the fabric's queues
    are empty (at most ``DRAIN_CAP_S``). Returns one result per flow, in order.
    """
    spec = fabric.spec
    if not _HDR.size <= payload <= spec.mtu - 112:
        raise ValueError(f"payload={payload} must be in [{_HDR.size}, {spec.mtu - 112}] "
                         f"for MTU {spec.mtu}")
    if rate_mbit <= 0 or seconds <= 0:
        raise ValueError(f"rate_mbit={rate_mbit} and seconds={seconds} must be > 0")
    receivers: dict[str, socket.socket] = {}
    senders: list[socket.socket] = []
    try:
        for f in flows:
            if f.dst not in receivers:
                with entered(fabric.node_kernel(f.dst).fd):
                    r = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
                r.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
                r.bind((str(spec.address(f.dst)), BASE_PORT))
                r.setblocking(False)
                receivers[f.dst] = r
            with entered(fabric.node_kernel(f.src).fd):
                s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            s.bind((str(spec.address(f.src)), f.sport))
            if f.path is not None:
                pin_socket(s, f.path)
            s.connect((str(spec.address(f.dst)), BASE_PORT))
            s.setblocking(False)
            senders.append(s)
        rcvbuf_before = {d: _rcvbuf_errors(fabric.node_kernel(d).pid) for d in receivers}
        t0 = time.monotonic()
        window = (t0 + warmup, t0 + warmup + seconds)
        counts = [0] * len(flows)
        in_window = [0] * len(flows)
        gaps = [0.0] * len(flows)
        stall = [0.0]
        idle = [0.0]
        stop = threading.Event()
        rx = threading.Thread(target=_receive, args=(list(receivers.values()), counts, in_window,
                                                     gaps, window, stop, stall, idle),
                              daemon=True)
        rx.start()
        try:
            sent, sent_in_window, tx_stall = _send(senders, flows, rate_mbit, payload, t0,
                                                   window, random.Random(seed))
            _await_delivery(counts, sum(sent), idle, lambda: _queues_empty(fabric))
        finally:
            stop.set()
            rx.join()
        rcvbuf = {d: _rcvbuf_errors(fabric.node_kernel(d).pid) - n
                  for d, n in rcvbuf_before.items()}
    finally:
        for s in senders + list(receivers.values()):
            s.close()
    return [FlowResult(f, sent[i], counts[i], in_window[i] * payload * 8 / seconds / 1e6,
                       frame_bytes(payload, f.path), payload, gaps[i],
                       sent_in_window[i] * frame_bytes(payload, f.path) * 8 / seconds / 1e6,
                       stall[0], tx_stall, rcvbuf[f.dst])
            for i, f in enumerate(flows)]


DRAIN_QUIET_S = 0.3  # no arrival for this long (receiver running, queues empty): all is in
DRAIN_CAP_S = 5.0  # the totals close at the latest this long after the senders stop


def _await_delivery(counts: list[int], total: int, idle: list[float],
                    queues_empty: Callable[[], bool]) -> None:
    """Wait until ``total`` datagrams arrived, or the receiver spent ``DRAIN_QUIET_S`` of
    its own running time (``idle``: its on-time empty polls, summed) without one while
    no queue of the fabric holds any. Silence is counted by the receiver, not the clock:
    a receiver the host holds off the CPU does not make the fabric look done."""
    deadline = time.monotonic() + DRAIN_CAP_S
    seen, base = -1, 0.0
    while time.monotonic() < deadline:
        n = sum(counts)
        if n >= total:
            return
        if n != seen:
            seen, base = n, idle[0]
        elif idle[0] - base >= DRAIN_QUIET_S and queues_empty():
            return
        time.sleep(0.005)


def _queues_empty(fabric: Fabric) -> bool:
    return all(q.backlog == 0 for k in fabric.kernels.values()
               for q in queue_stats(k).values())


def _rcvbuf_errors(pid: int) -> int:
    """The UDP-over-IPv6 receive-buffer overflows of ``pid``'s network namespace."""
    with open(f"/proc/{pid}/net/snmp6") as f:
        for line in f:
            key, _, value = line.partition(" ")
            if key == "Udp6RcvbufErrors":
                return int(value)
    return 0


def _send(socks: list[socket.socket], flows: list[Flow], rate_mbit: float, payload: int,
          t0: float, window: tuple[float, float], rng: random.Random
          ) -> tuple[list[int], list[int], float]:
    """Pace every flow until the window ends: datagrams sent per flow, overall and
    during the window, and the longest the sender was behind its schedule within
    the window (the host holding it back: a full NIC queue does not block it)."""
    t_start, t_end = window
    at_start: list[int] | None = None
    gaps = [frame_bytes(payload, f.path) * 8 / (rate_mbit * 1e6) for f in flows]
    # Pre-drawn jitter factors (mean 1): no random draw on the send path.
    jitter = [0.9 + 0.2 * rng.random() for _ in range(1024)]
    n = 0
    buf = bytearray(payload)
    heap = [(t0 + i * gaps[i] / len(flows), i) for i in range(len(flows))]
    seq = [0] * len(flows)
    behind = 0.0
    while True:
        due, i = heap[0]
        now = time.monotonic()
        if at_start is None and now >= t_start:
            at_start = list(seq)
        # How late the next slot is, counted within the window only.
        late = min(now, t_end) - max(due, t_start)
        if late > behind:
            behind = late
        if now >= t_end:
            return seq, [s - a for s, a in zip(seq, at_start or seq, strict=True)], behind
        if due > now:
            time.sleep(min(due - now, 0.001))
            continue
        _HDR.pack_into(buf, 0, i, seq[i])
        try:
            socks[i].send(buf)
            seq[i] += 1
        except BlockingIOError:
            pass  # the NIC queue is full: back-pressure, try at the next slot
        # A sender that fell behind does not burst to catch up.
        n = (n + 1) & 1023
        heapq.heapreplace(heap, (max(due + gaps[i] * jitter[n], now - gaps[i]), i))


def _receive(socks: list[socket.socket], counts: list[int], in_window: list[int],
             gaps: list[float], window: tuple[float, float], stop: threading.Event,
             stall: list[float], idle: list[float]) -> None:
    """Count every flow's arrivals until ``stop``, then read what the socket buffers
    still hold. ``stall``: the longest the loop was held up within the window, past
    what a select may wait or between two reads; ``idle``: the time it spent in
    select finding nothing, on time (the silence it really watched)."""
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    buf = bytearray(65536)
    n_flows = len(counts)
    last = [0.0] * n_flows
    t_a, t_b = window
    poll, mono = 0.05, time.monotonic
    mark = mono()
    while True:
        last_pass = stop.is_set()
        if last_pass:
            ready = socks
        else:
            ready = [cast(socket.socket, key.fileobj)  # only sockets are registered
                     for key, _ in sel.select(poll)]
        now = mono()
        late = min(now, t_b) - max(mark + poll, t_a)
        if late > stall[0]:  # the loop came round later than a select waits
            stall[0] = late
        if not ready:
            idle[0] += min(now - mark, poll)
        for s in ready:
            while True:
                try:
                    n = s.recv_into(buf)
                except BlockingIOError:
                    break
                t = mono()
                late = min(t, t_b) - max(now, t_a)
                if late > stall[0]:  # held up between two reads
                    stall[0] = late
                now = t
                if n < _HDR.size:
                    continue
                fid = _HDR.unpack_from(buf, 0)[0]
                if fid < n_flows:
                    if counts[fid] and now - last[fid] > gaps[fid]:
                        gaps[fid] = now - last[fid]
                    last[fid] = now
                    counts[fid] += 1
                    if t_a <= now < t_b:
                        in_window[fid] += 1
        if last_pass:
            break
        mark = now
    sel.close()
