"""A userspace delay line between two namespaces: the long-haul DCI link of a ScaleAcross.

This kernel has no netem, so a DCI link is two TAP devices, one in each DCI
router's namespace, and a relay process that holds every Ethernet frame for the
one-way delay before writing it to the other TAP (both directions), optionally
dropping a seeded, reproducible fraction of them::

    namespace A                 relay process                 namespace B
    [ TAP ifname_a ] --fd--> FIFO (delay, loss) --fd--> [ TAP ifname_b ]
                     <--fd-- FIFO (delay, loss) <--fd--

The delay line only delays (and drops): the caller configures the TAPs like any
interface (addresses, neighbours, and an HTB class + FIFO on each TAP's egress,
e.g. ``emu.kernel.set_egress_queue``, which sets the DCI rate and buffer).

The TAP devices exist exactly as long as the relay: the parent opens them (in
their namespaces) and hands the fds to the relay, keeping no copy, so they
vanish when the relay exits or is killed. The relay is a child of ``emu.launch``:
it exits on ``stop()`` (end of file on its stdin) and when the parent process
dies (its lifeline), whichever thread started it.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import socket
import struct
import sys
from dataclasses import dataclass

from emu import delayline_relay as _relay
from emu.errors import EmuError
from emu.launch import Child
from emu.netns import entered
from emu.timeouts import scaled

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
SIOCSIFMTU = 0x8922
IFNAMSIZ = 16

MAX_DELAY_MS = 1000.0
# Headroom over the MTU in each frame buffer: Ethernet header, a VLAN tag, slack.
# A frame longer than its buffer would be cut short by the read, so be generous.
FRAME_HEADROOM = 64
DEFAULT_QUEUE_FRAMES = 4096
# Poll (instead of sleeping on a timer) during the last SPIN_S before a due time:
# timer wake-ups on a shared, busy core come tens of microseconds late.
DEFAULT_SPIN_S = 150e-6
# The relay asks for SCHED_FIFO at this priority (falls back to normal scheduling
# without CAP_SYS_NICE): on two shared cores it cuts the tail of its wake-up
# latency by an order of magnitude. The kernel's RT throttling (95 % by default)
# still bounds what a real-time task can take.
DEFAULT_RT_PRIORITY = 10
READY_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class DirectionStats:
    """Counters of one direction of a delay line since it started."""

    relayed: int  # frames written to the far TAP
    bytes: int  # their bytes (Ethernet frames, no FCS)
    lost: int  # frames dropped by the configured random loss
    overflow: int  # frames dropped because the direction's queue was full
    errors: int  # frames the far TAP refused (e.g. it was down)
    max_queue: int  # most frames ever held at once
    late_max_us: float  # worst lateness of a write past its due time (relay's own clock)
    late_mean_us: float  # mean lateness of the writes


@dataclass(frozen=True)
class DelayLineStats:
    a_to_b: DirectionStats
    b_to_a: DirectionStats
    running: bool
    rt_priority: int  # SCHED_FIFO priority the relay got (0: normal scheduling)


def _check_ifname(name: str, what: str) -> None:
    if not isinstance(name, str) or not 0 < len(name.encode()) < IFNAMSIZ:
        raise ValueError(f"{what}={name!r} must be an interface name of 1 to {IFNAMSIZ - 1} "
                         "bytes")
    if name in (".", "..") or any(c in name for c in "/: \t\n"):
        raise ValueError(f"{what}={name!r} is not a valid interface name")


def check_delay(delay_ms: float) -> None:
    """Raise ValueError unless ``delay_ms`` is a number of milliseconds in [0, MAX_DELAY_MS]."""
    if (isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float))
            or not 0.0 <= delay_ms <= MAX_DELAY_MS):  # NaN fails the comparison too
        raise ValueError(f"delay_ms={delay_ms!r} must be a number in [0, {MAX_DELAY_MS:g}] ms")


def validate(ns_a_fd: int, ifname_a: str, ns_b_fd: int, ifname_b: str, delay_ms: float,
             loss: float, seed: int, mtu: int, queue_frames: int) -> None:
    """Raise ValueError naming the first bad argument of a DelayLine."""
    for what, fd in (("ns_a_fd", ns_a_fd), ("ns_b_fd", ns_b_fd)):
        if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
            raise ValueError(f"{what}={fd!r} must be an open namespace file descriptor (int >= 0)")
    _check_ifname(ifname_a, "ifname_a")
    _check_ifname(ifname_b, "ifname_b")
    check_delay(delay_ms)
    if (isinstance(loss, bool) or not isinstance(loss, (int, float))
            or not 0.0 <= loss <= 1.0):
        raise ValueError(f"loss={loss!r} must be a fraction in [0, 1]")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} must be an int >= 0")
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not 68 <= mtu <= 65535:
        raise ValueError(f"mtu={mtu!r} must be an int in [68, 65535]")
    if (isinstance(queue_frames, bool) or not isinstance(queue_frames, int)
            or not 1 <= queue_frames <= 1_000_000):
        raise ValueError(f"queue_frames={queue_frames!r} must be an int in [1, 1000000]")


def open_tap(ns_fd: int, ifname: str, mtu: int) -> int:
    """Create TAP ``ifname`` (IFF_TAP | IFF_NO_PI) in namespace ``ns_fd``; return its fd.

    The device lives until the last copy of the fd closes. Its MTU is set; it is
    left down, without addresses (the caller configures it).
    """
    with entered(ns_fd):
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
        try:
            ifr = struct.pack(f"{IFNAMSIZ}sH22x", ifname.encode(), IFF_TAP | IFF_NO_PI)
            try:
                fcntl.ioctl(fd, TUNSETIFF, ifr)
            except OSError as e:
                raise OSError(e.errno, f"cannot create TAP {ifname!r} ({e.strerror}): "
                              "is the name taken in that namespace?") from None
            with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
                fcntl.ioctl(s, SIOCSIFMTU, struct.pack(f"{IFNAMSIZ}si20x", ifname.encode(), mtu))
        except BaseException:
            os.close(fd)
            raise
    return fd


class DelayLine:
    """Two TAPs (``ifname_a`` in namespace ``ns_a_fd``, ``ifname_b`` in ``ns_b_fd``) joined
    by a relay process that delays every frame by ``delay_ms`` each way and drops a
    fraction ``loss`` of them (seeded RNG per direction: the same frame sequence
    loses the same frames).

    ``queue_frames`` bounds the frames held per direction (beyond it frames are
    dropped and counted as overflow); the default holds 20 ms of 9000-byte frames
    at 14 Gbit/s, far more than a Python relay can move. Memory use follows the
    frames actually in flight.
    """

    def __init__(self, ns_a_fd: int, ifname_a: str, ns_b_fd: int, ifname_b: str,
                 delay_ms: float, loss: float = 0.0, seed: int = 0, mtu: int = 9000, *,
                 queue_frames: int = DEFAULT_QUEUE_FRAMES, spin_s: float = DEFAULT_SPIN_S,
                 rt_priority: int = DEFAULT_RT_PRIORITY) -> None:
        validate(ns_a_fd, ifname_a, ns_b_fd, ifname_b, delay_ms, loss, seed, mtu, queue_frames)
        if not 0.0 <= spin_s <= 0.01:
            raise ValueError(f"spin_s={spin_s!r} must be in [0, 0.01] s")
        if isinstance(rt_priority, bool) or rt_priority not in range(100):
            raise ValueError(f"rt_priority={rt_priority!r} must be an int in [0, 99]")
        self.ns_a_fd, self.ifname_a = ns_a_fd, ifname_a
        self.ns_b_fd, self.ifname_b = ns_b_fd, ifname_b
        self.delay_ms, self.loss, self.seed, self.mtu = float(delay_ms), float(loss), seed, mtu
        self.queue_frames, self.spin_s, self.rt_priority = queue_frames, spin_s, rt_priority
        self._proc: Child | None = None
        self._shm: mmap.mmap | None = None
        self._stopped = False
        self._final: DelayLineStats | None = None
        self._cpu_s = 0.0

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> DelayLine:
        """Create both TAPs and start the relay; return once it runs. Returns self."""
        if self._proc is not None:
            raise RuntimeError("this DelayLine was already started")
        tap_a = open_tap(self.ns_a_fd, self.ifname_a, self.mtu)
        child_fds = [tap_a]
        try:
            tap_b = open_tap(self.ns_b_fd, self.ifname_b, self.mtu)
            child_fds.append(tap_b)
            shm_fd = os.memfd_create("sae-delayline-stats", os.MFD_CLOEXEC)
            child_fds.append(shm_fd)
            os.ftruncate(shm_fd, _relay.STATS_BYTES)
            self._shm = mmap.mmap(shm_fd, _relay.STATS_BYTES)
            cmd = [sys.executable, "-m", "emu.delayline_relay",
                   "--fd-a", str(tap_a), "--fd-b", str(tap_b),
                   "--delay", repr(self.delay_ms / 1000.0), "--loss", repr(self.loss),
                   "--seed", str(self.seed), "--slot", str(self.mtu + FRAME_HEADROOM),
                   "--slots", str(self.queue_frames), "--spin", repr(self.spin_s),
                   "--rt-priority", str(self.rt_priority), "--stats-fd", str(shm_fd)]
            self._proc = Child(f"the delay-line relay {self.ifname_a}<->{self.ifname_b}",
                               cmd, pass_fds=child_fds)
        except BaseException:
            if self._shm is not None:
                self._shm.close()
                self._shm = None
            raise
        finally:
            # The relay holds the only copies now: the TAPs die with it.
            for fd in child_fds:
                os.close(fd)
        try:
            self._proc.wait_ready(scaled(READY_TIMEOUT_S))
        except EmuError as e:
            self.stop()
            raise RuntimeError(str(e)) from None
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the relay (its TAPs vanish with it) and keep its final counters. Idempotent."""
        proc = self._proc
        if proc is None or self._stopped:
            return
        self._stopped = True
        if proc.poll() is None:
            self._cpu_s = self._read_cpu() or self._cpu_s
        proc.close_stdin()  # end of file on its stdin: the relay returns
        try:
            proc.wait(timeout)
        except EmuError:
            proc.kill()
        self._final = self.stats()
        if self._shm is not None:
            self._shm.close()
            self._shm = None

    def __enter__(self) -> DelayLine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- observation --------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The relay's pid (None before start)."""
        return self._proc.proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and not self._stopped and self._proc.poll() is None

    def _read_cpu(self) -> float | None:
        """User + system CPU seconds of the relay so far (None once it is gone)."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cpu_seconds(self) -> float:
        """CPU time the relay used (user + system), up to now or up to stop()."""
        if self.running:
            return self._read_cpu() or self._cpu_s
        return self._cpu_s

    def set_delay(self, delay_ms: float) -> None:
        """Change the one-way delay of a running line (frames already held keep theirs;
        order is kept, so a shorter delay takes effect as the old frames drain)."""
        check_delay(delay_ms)
        if self._shm is None or not self.running:
            raise RuntimeError("set_delay() needs a running delay line")
        struct.pack_into("Q", self._shm, 8 * _relay.W_DELAY_NS, round(delay_ms * 1e6))
        self.delay_ms = float(delay_ms)

    def stats(self) -> DelayLineStats:
        """Frames relayed and dropped per direction (live while running, final after stop)."""
        if self._shm is None:
            if self._final is not None:
                return self._final
            zero = DirectionStats(0, 0, 0, 0, 0, 0, 0.0, 0.0)
            return DelayLineStats(zero, zero, False, 0)
        words = struct.unpack_from(f"{_relay.STATS_WORDS}Q", self._shm)
        return DelayLineStats(_direction(words, 0), _direction(words, 1), self.running,
                              words[_relay.W_SCHED])


def _direction(words: tuple[int, ...], d: int) -> DirectionStats:
    b = _relay.dir_base(d)
    relayed = words[b + _relay.F_RELAYED]
    late_sum = words[b + _relay.F_LATE_SUM_NS]
    return DirectionStats(
        relayed=relayed, bytes=words[b + _relay.F_BYTES], lost=words[b + _relay.F_LOST],
        overflow=words[b + _relay.F_OVERFLOW], errors=words[b + _relay.F_ERRORS],
        max_queue=words[b + _relay.F_MAX_QUEUE],
        late_max_us=words[b + _relay.F_LATE_MAX_NS] / 1e3,
        late_mean_us=late_sum / relayed / 1e3 if relayed else math.nan)
