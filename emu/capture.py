"""Packet captures on a fabric port (tcpdump inside the node's namespace), decoded with scapy.

    with Capture(fab, "p0s1", "l1", tmp / "spine.pcap") as cap:
        ...send traffic...
    cap.stats                      # CaptureStats(captured=..., dropped=...)
    for pkt in transports.core.scapy_layer.read_pcap(cap.path):  # Ether/IPv6/SRH/UDP/SaeTransport
        ...

``Capture`` opens PATH itself (never through a symlink: ``emu.safefs``) and starts
``nsenter --net=/run/netns/NS tcpdump -i IFNAME -w - -U ...`` writing into that descriptor,
returns from ``__enter__`` only once tcpdump says "listening on" (the socket is
open and filtered: nothing sent afterwards is missed), and on exit stops it with
SIGINT and waits for it, so the pcap is complete and closed. The process runs
in the node's namespace, so a fabric teardown kills it too if it is still up.

The default filter is ``udp_port_filter()``: UDP 4791 behind an SRH too (plain
``udp port 4791`` misses every SRv6 packet, see there).
"""

from __future__ import annotations

import logging
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from emu import safefs
from emu.errors import EmuError
from topologies.errors import TopologyError

if TYPE_CHECKING:
    from emu.fabric import Fabric
    from topologies import MultiPlaneClos, ScaleAcross

    Topology = MultiPlaneClos | ScaleAcross

PORT = 4791  # transports.core.wire.UDP_PORT (emu/ sits below transports/ and never imports it)


def udp_port_filter(port: int = PORT) -> str:
    """A tcpdump filter for UDP ``port`` (either end) over IPv6 with or without one routing
    header (our SRH) before UDP, and over IPv4.

    Plain ``udp port N`` is not enough: for IPv6, libpcap's ``udp`` only looks at the
    fixed header's next-header field, so every SRv6 packet (next header 43) is missed.
    """
    udp = "ip6[40 + (ip6[41] + 1) * 8{off} : 2] = {port}"
    return (f"udp port {port} or (ip6[6] = 43 and ip6[40] = 17 and ("
            f"{udp.format(off='', port=port)} or {udp.format(off=' + 2', port=port)}))")


DEFAULT_FILTER = udp_port_filter()

log = logging.getLogger(__name__)
# What SIGUSR1 makes tcpdump print (one line); at exit it prints the same, one per line.
_INFO = re.compile(rb"(\d+) packets? captured, (\d+) packets? received by filter, "
                   rb"(\d+) packets? dropped by kernel")
_COUNT = re.compile(r"^(\d+) packets? (captured|received by filter|dropped by kernel)", re.M)


@dataclass(frozen=True)
class CaptureStats:
    """tcpdump's own counters, printed when it stops (None if it did not print them)."""

    captured: int | None
    received: int | None
    dropped: int | None


def check_port(spec: Topology, node: str, ifname: str) -> None:
    """Raise unless ``node`` of ``spec`` has the interface ``ifname``: TopologyError naming
    the valid nodes for an unknown node, EmuError naming its interfaces for an unknown
    interface."""
    spec.node(node)  # TopologyError listing valid node names
    ports = [p.ifname for p in spec.ports(node)]
    if ifname not in ports:
        raise EmuError(f"node {node!r} has no interface {ifname!r}: valid interfaces are "
                       f"{', '.join(ports)}")


def capture_point(spec: Topology, where: str) -> tuple[str, str]:
    """``where`` ("NODE:IFNAME", e.g. "h4:p0" or "p0l1:h4") checked against ``spec``, before
    anything is built: (node, ifname)."""
    node, sep, ifname = where.partition(":")
    if not sep or not node or not ifname:
        raise EmuError(f"capture point {where!r} is invalid: must be NODE:IFNAME, e.g. 'h4:p0' "
                       "(host h4's plane-0 port) or 'p0l1:h4' (leaf p0l1's port to h4)")
    try:
        check_port(spec, node, ifname)
    except (EmuError, TopologyError) as e:
        raise EmuError(f"capture point {where!r}: {e}") from None
    return node, ifname


class Capture:
    """A tcpdump on one interface of one node of a running fabric, as a context manager."""

    def __init__(self, fab: Fabric, node: str, ifname: str, path: str | os.PathLike[str],
                 filter: str = DEFAULT_FILTER, snaplen: int = 256,
                 start_timeout: float = 5.0, stop_timeout: float = 5.0,
                 exclusive: bool = False) -> None:
        if fab.net is None or not fab.kernels:
            raise EmuError("Capture needs a running fabric (inside `with Fabric(...)`)")
        check_port(fab.spec, node, ifname)
        if not isinstance(snaplen, int) or snaplen < 0:
            raise EmuError(f"snaplen={snaplen!r} is invalid: a byte count >= 0 (0: no limit)")
        self.fab = fab
        self.node = node
        self.ifname = ifname
        self.path = Path(path)
        self.filter = filter
        self.snaplen = snaplen
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.exclusive = exclusive  # the pcap must be a new file (a run's own directory)
        self.stats: CaptureStats | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr = b""

    def __repr__(self) -> str:
        state = "running" if self._proc is not None else "stopped"
        return f"Capture({self.node}:{self.ifname} -> {str(self.path)!r}, {state})"

    def command(self) -> list[str]:
        """The command line that runs the capture."""
        # -w -: the pcap goes to stdout, a descriptor this process opened (tcpdump never
        # opens a path as root). -Z root: no privilege drop, which would gain nothing here.
        # --immediate-mode: packets reach the file at once, none wait in a ring block at exit.
        cmd = self.fab.in_netns(self.node, "tcpdump", "-i", self.ifname, "-w", "-",
                                "-U", "-s", str(self.snaplen), "-n", "-Z", "root",
                                "--immediate-mode")
        return cmd + ([self.filter] if self.filter else [])

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Capture:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.stop()
            return
        try:
            self.stop()
        except EmuError as err:  # the body's exception matters more than a failed stop
            log.warning("%s", err)

    def start(self) -> Capture:
        """Start tcpdump; returns once it captures. EmuError (with its output) otherwise."""
        if self._proc is not None:
            raise EmuError(f"{self!r} is already running")
        safefs.mkdir_private(self.path.parent)
        self.stats = None
        self._stderr = b""
        opener = safefs.open_new if self.exclusive else safefs.open_write
        with opener(self.path, binary=True) as pcap:
            # Own session: a Ctrl-C at the terminal must not end the capture before stop().
            proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=pcap,
                                    stderr=subprocess.PIPE, start_new_session=True)
        self._proc = proc
        try:
            self._wait_listening(proc)
        except BaseException:
            self._kill()
            raise
        return self

    def _wait_listening(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.start_timeout
        found = self._read_until(proc, lambda: b"listening on" in self._stderr, deadline)
        if found is None:
            raise EmuError(f"tcpdump on {self.node}:{self.ifname} exited with {proc.wait()} "
                           f"before capturing: {self.output!r}")
        if not found:
            raise EmuError(f"tcpdump on {self.node}:{self.ifname} did not start capturing "
                           f"within {self.start_timeout} s: {self.output!r}")

    def _read_until(self, proc: subprocess.Popen[bytes], done: Callable[[], bool],
                    deadline: float) -> bool | None:
        """Read tcpdump's stderr until ``done()``: True, False at ``deadline``, None at EOF."""
        assert proc.stderr is not None
        fd = proc.stderr.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 4096)
                if not chunk:
                    return None
                self._stderr += chunk
        return True

    def _catch_up(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        """Wait until tcpdump has written every packet the kernel passed its filter.

        SIGINT makes libpcap break its loop at once: packets already queued on the socket
        but not yet read would be lost. So first ask for its counters (SIGUSR1 prints
        them) until captured + dropped reaches received by filter, bounded by ``deadline``.
        """
        while time.monotonic() < deadline and proc.poll() is None:
            mark = len(self._stderr)
            proc.send_signal(signal.SIGUSR1)

            def counters_printed(m: int = mark) -> bool:
                return _INFO.search(self._stderr, m) is not None

            found = self._read_until(proc, counters_printed, deadline)
            if not found:
                return
            *_, last = _INFO.finditer(self._stderr, mark)
            captured, received, dropped = (int(x) for x in last.groups())
            if captured + dropped >= received:
                return
            time.sleep(0.005)

    def stop(self) -> CaptureStats | None:
        """Stop tcpdump once it has written every packet it was given (SIGINT: it flushes
        and closes the pcap) and wait for it; idempotent. Returns (and keeps in ``stats``)
        tcpdump's counters."""
        proc = self._proc
        if proc is None:
            return self.stats
        try:
            if proc.poll() is None:
                self._catch_up(proc, time.monotonic() + self.stop_timeout / 2)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=self.stop_timeout)
            self._stderr += err or b""
        except subprocess.TimeoutExpired:
            self._kill()
            raise EmuError(f"tcpdump on {self.node}:{self.ifname} did not stop within "
                           f"{self.stop_timeout} s of SIGINT (killed; {self.path} may be "
                           "incomplete)") from None
        self._proc = None
        self.stats = _parse_stats(self._stderr.decode(errors="replace"))
        if proc.returncode not in (0, -signal.SIGINT, -signal.SIGKILL, -signal.SIGTERM):
            raise EmuError(f"tcpdump on {self.node}:{self.ifname} failed ({proc.returncode}): "
                           f"{self.output!r}")
        return self.stats

    def _kill(self) -> None:
        proc = self._proc
        self._proc = None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()  # this one process, by its pid
        try:
            _, err = proc.communicate(timeout=self.stop_timeout)
            self._stderr += err or b""
        except subprocess.TimeoutExpired:
            pass

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def output(self) -> str:
        """What tcpdump wrote to stderr so far."""
        return self._stderr.decode(errors="replace").strip()


def _parse_stats(text: str) -> CaptureStats:
    counts = {kind: int(n) for n, kind in _COUNT.findall(text)}
    return CaptureStats(counts.get("captured"), counts.get("received by filter"),
                        counts.get("dropped by kernel"))
