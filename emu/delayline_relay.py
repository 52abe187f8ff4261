"""The relay process of a delay line (see emu.delayline): TAP A <-> TAP B, each frame held.

Run as its own process (``python -m emu.delayline_relay ...``, started by
``DelayLine.start`` through ``emu.launch``) so that its timing never waits for the
caller's GIL. It imports the standard library and ``emu.childproto`` only.

The hot loop: one ``select`` over both TAP fds, its stdin and its lifeline, with a
timeout computed from the earliest due frame; a frame is read straight into a
preallocated slot of an anonymous mapping (``os.readv``), gets its due time
(read time + delay) and joins its direction's FIFO of slot numbers (the delay is
constant, so FIFO order is due order). Timer wake-ups come late (tens of
microseconds in a VM, more on a busy core), so the relay sets its timer early by
the smoothed lateness of its past wake-ups plus a margin (at most ``spin``) and
polls (``select`` with a zero timeout) for the last stretch: precise delivery at
the cost of a short spin per frame. Free slots are a LIFO stack, so the memory
actually touched is the peak number of frames in flight, not the whole ring. A
frame that finds no free slot is dropped and counted (overflow); the configured
random loss is decided when a frame is read, with one seeded RNG per direction.

Counters live in a shared memory file (``--stats-fd``, unsigned 64-bit words,
layout below); the parent reads them at any time. It says ``ready`` (the child
protocol) once it runs, and exits at end of file on its stdin (``DelayLine.stop``)
or on its lifeline (the parent's death). The TAP devices vanish with its fds.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import random
import select
import signal
import sys
import time
from collections import deque

from emu import childproto

PR_SET_TIMERSLACK = 29

# Shared statistics: STATS_WORDS unsigned 64-bit words; direction d (0: A->B,
# 1: B->A) starts at word 1 + d * DIR_WORDS.
STATS_WORDS = 32
W_STATE = 0  # 0 starting, 1 running, 2 exited
W_SCHED = STATS_WORDS - 1  # the real-time priority the relay runs at (0: normal scheduling)
W_DELAY_NS = STATS_WORDS - 2  # the one-way delay in ns: the parent may change it at run time
DIR_WORDS = 8
F_RELAYED, F_BYTES, F_LOST, F_OVERFLOW, F_ERRORS, F_MAX_QUEUE, F_LATE_MAX_NS, F_LATE_SUM_NS = (
    range(DIR_WORDS))
STATS_BYTES = STATS_WORDS * 8
# The relay wakes ahead of a due time by the (smoothed) lateness of its timer
# wake-ups plus this margin, never more than --spin ahead, and polls the rest.
SPIN_MARGIN = 20e-6


def dir_base(d: int) -> int:
    """Index of the first counter word of direction ``d`` (0: A->B, 1: B->A)."""
    return 1 + d * DIR_WORDS


class _Direction:
    """One direction's FIFO: frames read from ``src`` wait here before going out of ``dst``."""

    __slots__ = ("src", "dst", "views", "bufs", "lens", "due", "free", "fifo", "rng",
                 "st", "base", "scratch")

    def __init__(self, src: int, dst: int, slot: int, slots: int, seed: int,
                 st: memoryview, base: int) -> None:
        self.src, self.dst = src, dst
        area = mmap.mmap(-1, slot * slots)  # zero pages until touched: RSS follows the peak
        whole = memoryview(area)
        self.views = [whole[i * slot:(i + 1) * slot] for i in range(slots)]
        self.bufs = [[v] for v in self.views]  # the readv argument of each slot, prebuilt
        self.lens = [0] * slots
        self.due = [0.0] * slots
        self.free = list(range(slots - 1, -1, -1))  # a stack: the lowest slots stay hot
        self.fifo: deque[int] = deque()
        self.rng = random.Random(seed)
        self.st, self.base = st, base
        self.scratch = [bytearray(slot)]


def _read_all(d: _Direction, delay: float, loss: float, batch: int) -> None:
    """Read up to ``batch`` frames from ``d.src`` into free slots, stamping their due time."""
    st, b = d.st, d.base
    free, fifo, lens, due, bufs = d.free, d.fifo, d.lens, d.due, d.bufs
    readv, mono = os.readv, time.monotonic
    for _ in range(batch):
        if not free:
            try:
                readv(d.src, d.scratch)
            except BlockingIOError:
                return
            st[b + F_OVERFLOW] += 1
            continue
        slot = free[-1]
        try:
            n = readv(d.src, bufs[slot])
        except BlockingIOError:
            return
        if loss and d.rng.random() < loss:
            st[b + F_LOST] += 1
            continue
        free.pop()
        lens[slot] = n
        due[slot] = mono() + delay
        fifo.append(slot)
        if len(fifo) > st[b + F_MAX_QUEUE]:
            st[b + F_MAX_QUEUE] = len(fifo)


def _deliver(d: _Direction, now: float) -> None:
    """Write out every frame of ``d`` that is due at ``now``, in order."""
    fifo, due, free = d.fifo, d.due, d.free
    st, b = d.st, d.base
    while fifo and due[fifo[0]] <= now:
        slot = fifo.popleft()
        n = d.lens[slot]
        try:
            os.write(d.dst, d.views[slot][:n])
        except OSError:  # the peer TAP is down (EIO) or out of memory: the frame is lost
            st[b + F_ERRORS] += 1
        else:
            st[b + F_RELAYED] += 1
            st[b + F_BYTES] += n
            late = int((time.monotonic() - due[slot]) * 1e9)
            st[b + F_LATE_SUM_NS] += late
            if late > st[b + F_LATE_MAX_NS]:
                st[b + F_LATE_MAX_NS] = late
        free.append(slot)


def relay(fd_a: int, fd_b: int, loss: float, seed: int, slot: int, slots: int,
          st: memoryview, stop_fds: list[int], spin: float, batch: int = 64) -> None:
    """Relay frames both ways until one of ``stop_fds`` becomes readable (EOF); never
    returns early.

    The delay is read from ``st[W_DELAY_NS]`` (frames keep FIFO order when it changes).
    """
    os.set_blocking(fd_a, False)
    os.set_blocking(fd_b, False)
    ab = _Direction(fd_a, fd_b, slot, slots, 2 * seed, st, dir_base(0))
    ba = _Direction(fd_b, fd_a, slot, slots, 2 * seed + 1, st, dir_base(1))
    fifo_ab, fifo_ba, due_ab, due_ba = ab.fifo, ba.fifo, ab.due, ba.due
    rlist = [fd_a, fd_b, *stop_fds]
    sel, mono = select.select, time.monotonic
    lead = spin  # wake this long before a due time, then poll: adapts to the timer's lateness
    while True:
        now = mono()
        if fifo_ab and due_ab[fifo_ab[0]] <= now:
            _deliver(ab, now)
        if fifo_ba and due_ba[fifo_ba[0]] <= now:
            _deliver(ba, now)
        if fifo_ab:
            nxt = due_ab[fifo_ab[0]]
            if fifo_ba and due_ba[fifo_ba[0]] < nxt:
                nxt = due_ba[fifo_ba[0]]
        elif fifo_ba:
            nxt = due_ba[fifo_ba[0]]
        else:
            nxt = None
        if nxt is None:
            timeout = None
        else:
            timeout = nxt - now - lead
            if timeout < 0.0:
                timeout = 0.0  # close to a due time: poll, do not sleep
        ready = sel(rlist, (), (), timeout)[0]
        if not ready:
            if timeout:  # a timer wake-up: learn how late they come
                late = mono() - now - timeout
                lead += (late + SPIN_MARGIN - lead) * 0.0625
                if lead > spin:
                    lead = spin
            continue
        delay = st[W_DELAY_NS] * 1e-9  # one word read per wake-up: a run-time change applies
        for fd in ready:
            if fd == fd_a:
                _read_all(ab, delay, loss, batch)
            elif fd == fd_b:
                _read_all(ba, delay, loss, batch)
            else:
                return


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="delay-line relay between two TAP fds")
    p.add_argument("--fd-a", type=int, required=True)
    p.add_argument("--fd-b", type=int, required=True)
    p.add_argument("--delay", type=float, required=True, help="one-way delay, seconds")
    p.add_argument("--loss", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slot", type=int, required=True, help="bytes per frame buffer")
    p.add_argument("--slots", type=int, required=True, help="frames queued per direction")
    p.add_argument("--spin", type=float, default=0.0, help="poll this long before a due time")
    p.add_argument("--rt-priority", type=int, default=0,
                   help="SCHED_FIFO priority (0: normal scheduling)")
    p.add_argument("--stats-fd", type=int, required=True)
    a = p.parse_args(argv)
    lifeline = childproto.lifeline_fd()
    stop_fds = [sys.stdin.fileno()] + ([lifeline] if lifeline is not None else [])

    libc = _libc()
    libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)  # 1 ns: timer wake-ups as exact as the kernel can
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the caller's terminal: it stops us
    shm = mmap.mmap(a.stats_fd, STATS_BYTES)
    st = memoryview(shm).cast("Q")
    if a.rt_priority > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(a.rt_priority))
            st[W_SCHED] = a.rt_priority
        except OSError:  # no CAP_SYS_NICE, or no real-time budget in this cgroup
            pass
    st[W_DELAY_NS] = round(a.delay * 1e9)
    st[W_STATE] = 1
    childproto.emit(childproto.READY)
    try:
        relay(a.fd_a, a.fd_b, a.loss, a.seed, a.slot, a.slots, st, stop_fds, a.spin)
    finally:
        st[W_STATE] = 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
