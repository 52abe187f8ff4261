"""One microburst sender: the child process behind ``emu.microburst.Microburst``.

``python -m emu.burst_sender ...`` runs inside one source host's namespace (started
by ``emu.launch`` with ``nsenter``) so that burst timing shares no GIL with anything.
It imports only the standard library and ``emu.childproto``: it starts fast, even
on a busy machine.

Protocol (the emulator's child protocol, ``emu.childproto``; records on stdout):

1. it opens its socket (bound to the host loopback, SRH pinned, connected to the
   destination) and says ``ready``: it is *armed*;
2. it reads the ``start`` record: the common CLOCK_MONOTONIC start instant ``t0``
   (end of file instead: the parent gave up; it exits without sending);
3. per burst window (relative to ``t0``) it sleeps until the window opens (the last
   ``SPIN_S`` spun), sends the pre-built datagram as fast as its NIC queue takes it
   (non-blocking; on EAGAIN it counts and polls for write space, so it does not
   spin) until the window closes, then sleeps through the off-period. Right after
   the first datagram of its first burst it writes a ``started`` record: burst
   number ``burst`` began ``lag`` seconds after its scheduled start (the parent
   reads its actual start offset from it while the pattern runs);
4. on SIGTERM or at the end of a finite schedule it writes its counts and per-burst
   timing as one ``result`` record and exits; when its parent dies (the lifeline)
   it is killed at once.

Step-locked bursts (``{"on": s, "on_demand": true}``) have no pattern of their own:
window 0 opens at ``t0``, and each later window at the instant of the next ``window``
record the parent sends (``{"type": "window", "k": k, "t": T}``, as the training run
reaches the step boundary it belongs to); end of file ends them.

Its send buffer holds only ``NIC_INFLIGHT`` datagrams, so the source's own NIC queue
never overflows and a burst ends on the wire within a few frame times of its
scheduled end. With ``--realtime`` it runs at the lowest SCHED_FIFO priority (if
allowed; the JSON says), so bursts start on time on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import resource
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from emu import childproto

IPV6_RTHDR = 57
HEADER = struct.Struct("!IHHI")  # magic, source index, burst number (mod 2**16), seq in burst
MAGIC = 0x4D425354  # "MBST"
NIC_INFLIGHT = 3  # datagrams a source may have queued at its own NIC
SPIN_S = 0.0005  # the last part of a wait before a burst is spun, not slept
CHUNK_S = 0.02  # longest single sleep: bounds the reaction to SIGTERM
MAX_RECORDS = 20000  # per-burst timing records a source keeps (the latest ones)
FRAME_OVERHEAD = 14 + 40 + 8  # Ethernet, IPv6 and UDP headers around SRH + payload
WINDOW = "window"  # the control record that opens a step-locked burst's next window


def jitter_offset(seed: int, k: int, jitter: float) -> float:
    """How late burst ``k`` of a jittered pattern starts after its slot (s, in
    [0, ``jitter``)): drawn from ``seed`` and ``k`` alone, so the parent's record of the
    windows and every sender (each its own process) agree without sharing a stream."""
    if jitter <= 0.0:
        return 0.0
    return random.Random(f"{seed}:{k}").random() * jitter


def periodic(t0: float, w: dict[str, Any]) -> Iterator[tuple[float, float]]:
    """Absolute windows of a periodic pattern (``start``, ``on``, ``every``, ``until``,
    seconds relative to ``t0``; ``until`` None: unbounded; optional ``jitter`` and
    ``seed``: each burst starts up to ``jitter`` after its slot, see ``jitter_offset``)."""
    until = t0 + w["until"] if w["until"] is not None else math.inf
    jitter, seed = w.get("jitter", 0.0), w.get("seed", 0)
    k = 0
    while True:
        a = t0 + w["start"] + k * w["every"] + jitter_offset(seed, k, jitter)
        if a >= until:
            return
        yield a, min(a + w["on"], until)
        k += 1


def windows_from(t0: float, w: dict[str, Any]) -> Iterator[tuple[float, float]]:
    """Absolute windows of the pattern ``w`` (explicit ``schedule`` or periodic) from ``t0``."""
    if "schedule" in w:
        return ((t0 + a, t0 + b) for a, b in w["schedule"])
    return periodic(t0, w)


class Sender:
    """The sending loop of one source (its socket, counters and per-burst records)."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.stopping = False
        self.bursts = self.datagrams = self.eagain = self.errors = self.late = 0
        self.records: list[list[float]] = []  # [burst, start lag, end offset, datagrams]
        self.started: tuple[int, float] | None = None
        srh = bytes.fromhex(a.srh)
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        self.sock.bind((a.src, 0))
        if srh:
            self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RTHDR, srh)
        frame = FRAME_OVERHEAD + len(srh) + a.payload
        # A few datagrams in flight: the NIC queue never overflows and a burst stops
        # within a few frame times of its end. The kernel doubles what is asked.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, NIC_INFLIGHT * frame // 2)
        self.sock.connect((a.dst, a.port))
        self.sock.setblocking(False)
        self.buf = bytearray(os.urandom(a.payload))
        self.gap = frame * 8 / (a.rate_mbit * 1e6) if a.rate_mbit > 0 else 0.0
        self.poll = select.poll()
        self.poll.register(self.sock.fileno(), select.POLLOUT)

    def alive(self) -> bool:
        return not self.stopping

    def wait_until(self, t: float) -> bool:
        while self.alive():
            left = t - time.monotonic()
            if left <= 0:
                return True
            if left > SPIN_S:
                time.sleep(min(left - SPIN_S, CHUNK_S))
        return False

    def _announce(self, k: int, lag: float) -> None:
        # A few microseconds into the burst: the parent learns the actual start now.
        self.started = (k, lag)
        childproto.emit("started", burst=k, lag=lag)

    def burst(self, k: int, a: float, b: float) -> None:
        buf, sock, gap, poll = self.buf, self.sock, self.gap, self.poll
        n = eagain = errors = 0
        first = last = 0.0
        due = a
        while not self.stopping:
            now = time.monotonic()
            if now >= b:
                break
            if gap and now < due:
                time.sleep(min(due - now, b - now, CHUNK_S))
                continue
            HEADER.pack_into(buf, 0, MAGIC, self.a.index, k & 0xFFFF, n)
            try:
                sock.send(buf)
            except BlockingIOError:
                eagain += 1
                poll.poll(min(b - now, CHUNK_S) * 1000)
                continue
            except OSError:
                errors += 1
                time.sleep(0.0001)
                continue
            if n == 0:
                first = now
                if self.started is None:
                    self._announce(k, first - a)
            last = now
            n += 1
            if gap:
                due = max(due + gap, now - gap)  # no catching up with a lost slot
        self.datagrams += n
        self.eagain += eagain
        self.errors += errors
        if n:
            self.bursts += 1
            self.records.append([k, first - a, last - b, n])
            if len(self.records) > MAX_RECORDS:
                del self.records[: len(self.records) - MAX_RECORDS]

    def run(self, t0: float, windows: dict[str, Any]) -> None:
        if windows.get("on_demand"):
            self.run_on_demand(t0, float(windows["on"]))
            return
        for k, (a, b) in enumerate(windows_from(t0, windows)):
            if not self.window(k, a, b):
                return

    def window(self, k: int, a: float, b: float) -> bool:
        """Burst ``k`` in ``[a, b)``; False once stopping."""
        if not self.wait_until(a):
            return False
        if time.monotonic() >= b:
            self.late += 1  # the whole window passed while we were away
        else:
            self.burst(k, a, b)
        return self.alive()

    def run_on_demand(self, t0: float, on: float) -> None:
        """Step-locked windows: the first at ``t0``, each next one when its record comes."""
        inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()

        def read() -> None:  # stdin blocks: a thread of its own, so SIGTERM still stops us
            while True:
                rec = childproto.read_record()
                inbox.put(rec)
                if rec is None:
                    return

        threading.Thread(target=read, name="windows", daemon=True).start()
        k, a = 0, t0
        while self.window(k, a, a + on):
            rec = self._next_window(inbox)
            if rec is None:
                return
            k, a = int(rec.get("k", k + 1)), float(rec["t"])

    def _next_window(self, inbox: queue.Queue[dict[str, Any] | None]) -> dict[str, Any] | None:
        while self.alive():
            try:
                rec = inbox.get(timeout=CHUNK_S)
            except queue.Empty:
                continue
            if rec is None or rec.get("type") == WINDOW:
                return rec
        return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The sender's command line (built by ``Microburst.arm``)."""
    p = argparse.ArgumentParser(prog="python -m emu.burst_sender",
                                description="one microburst sender (started by Microburst)")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--srh", default="")
    p.add_argument("--payload", type=int, default=8000)
    p.add_argument("--rate-mbit", type=float, default=0.0)
    p.add_argument("--windows", type=json.loads, required=True)
    p.add_argument("--realtime", action="store_true")
    return p.parse_args(argv)


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main(argv: list[str] | None = None) -> int:
    childproto.die_with_parent()
    a = parse_args(argv)
    realtime = False
    if a.realtime:
        try:  # the lowest real-time priority: wakes on time on a busy machine
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            realtime = True
        except OSError:
            pass
    sender = Sender(a)

    def on_term(signum: int, frame: object) -> None:
        sender.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    t0 = childproto.ready_then_start(sleep=False)
    fired = t0 is not None and not sender.stopping
    w0, c0 = time.monotonic(), _cpu()
    try:
        if t0 is not None and fired:
            sender.run(t0, a.windows)
    finally:
        childproto.emit(
            "result", fired=fired, bursts=sender.bursts, datagrams=sender.datagrams,
            eagain=sender.eagain, errors=sender.errors, late_skipped=sender.late,
            realtime=realtime, cpu_s=_cpu() - c0, wall_s=time.monotonic() - w0,
            started=sender.started, records=sender.records)
        sender.sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
