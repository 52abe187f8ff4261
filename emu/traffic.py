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
from dataclasses import dataclass
from typing import cast

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
    rx_stall_s: float = 0.0  # longest the receiving thread went unscheduled past its poll

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
    Returns one result per flow, in order.
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
        t0 = time.monotonic()
        window = (t0 + warmup, t0 + warmup + seconds)
        counts = [0] * len(flows)
        in_window = [0] * len(flows)
        gaps = [0.0] * len(flows)
        stall = [0.0]
        stop = threading.Event()
        rx = threading.Thread(target=_receive, args=(list(receivers.values()), counts, in_window,
                                                     gaps, window, stop, stall), daemon=True)
        rx.start()
        sent, sent_in_window = _send(senders, flows, rate_mbit, payload, t0, window,
                                     random.Random(seed))
        time.sleep(0.3)  # queues drain to the receivers before the totals close
        stop.set()
        rx.join()
    finally:
        for s in senders + list(receivers.values()):
            s.close()
    return [FlowResult(f, sent[i], counts[i], in_window[i] * payload * 8 / seconds / 1e6,
                       frame_bytes(payload, f.path), payload, gaps[i],
                       sent_in_window[i] * frame_bytes(payload, f.path) * 8 / seconds / 1e6,
                       stall[0])
            for i, f in enumerate(flows)]


def _send(socks: list[socket.socket], flows: list[Flow], rate_mbit: float, payload: int,
          t0: float, window: tuple[float, float], rng: random.Random
          ) -> tuple[list[int], list[int]]:
    """Pace every flow until the window ends: datagrams sent per flow, overall and
    during the window."""
    t_start, t_end = window
    at_start: list[int] | None = None
    gaps = [frame_bytes(payload, f.path) * 8 / (rate_mbit * 1e6) for f in flows]
    # Pre-drawn jitter factors (mean 1): no random draw on the send path.
    jitter = [0.9 + 0.2 * rng.random() for _ in range(1024)]
    n = 0
    buf = bytearray(payload)
    heap = [(t0 + i * gaps[i] / len(flows), i) for i in range(len(flows))]
    seq = [0] * len(flows)
    while True:
        due, i = heap[0]
        now = time.monotonic()
        if at_start is None and now >= t_start:
            at_start = list(seq)
        if now >= t_end:
            return seq, [s - a for s, a in zip(seq, at_start or seq, strict=True)]
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
             stall: list[float]) -> None:
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    buf = bytearray(65536)
    n_flows = len(counts)
    last = [0.0] * n_flows
    t_a, t_b = window
    poll, mono = 0.05, time.monotonic
    while not stop.is_set():
        asleep = mono()
        ready = sel.select(poll)
        now = mono()
        if now - asleep - poll > stall[0]:  # a wake-up the host delayed
            stall[0] = now - asleep - poll
        for key, _ in ready:
            s = cast(socket.socket, key.fileobj)  # only sockets are registered
            measured = t_a <= now < t_b
            while True:
                try:
                    n = s.recv_into(buf)
                except BlockingIOError:
                    break
                if n < _HDR.size:
                    continue
                fid = _HDR.unpack_from(buf, 0)[0]
                if fid < n_flows:
                    if counts[fid] and now - last[fid] > gaps[fid]:
                        gaps[fid] = now - last[fid]
                    last[fid] = now
                    counts[fid] += 1
                    if measured:
                        in_window[fid] += 1
    sel.close()
