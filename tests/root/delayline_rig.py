"""The rig of the DCI delay line's root tests: two namespaces joined by TAPs and a relay
process, and the measurements the tests make through it (no tests here: they are in
tests/root/test_delayline.py, test_delayline_loss.py and test_delayline_lifecycle.py,
each holding its own pair of namespaces for its module).

Delay is measured two ways. Idle, by a UDP ping-pong (one-way = RTT / 2, the
test's own send/receive overhead included). Under load, by kernel timestamps of
small probe frames taken by packet sockets on both TAPs (SO_TIMESTAMPNS): the
frame leaving TAP A's qdisc (the DCI router's egress) and entering at TAP B. That
is exactly what the delay line holds; the HTB queueing and serialization in
front of it belong to the DCI link's rate, not to its delay, and are reported
separately (probe send time to its kernel receive time at B).
"""

from __future__ import annotations

import ctypes
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.ifaddrmsg import IFA_F_NODAD
from pyroute2.netlink.rtnl.ifinfmsg import IFF_MULTICAST, IFF_NOARP, IFF_UP

from emu.delayline import DelayLine
from emu.kernel import NUD_PERMANENT, set_egress_queue, wait_addresses_local
from emu.netns import entered, ns_inode, write_sysctl
from topologies import LinkSpec

from .hostnoise import Summary

IF_A, IF_B = "dci-a", "dci-b"
MAC_A, MAC_B = "02:dc:00:00:00:0a", "02:dc:00:00:00:0b"
ADDR_A, ADDR_B = "fd5a:dc1::a", "fd5a:dc1::b"
ECHO_PORT, PROBE_PORT, BLAST_PORT = 7100, 7101, 7102
MTU = 9000
ETH_IPV6_UDP = 14 + 40 + 8
SO_TIMESTAMPNS = 35
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33
ETH_P_ALL = 0x0003


# -- namespaces and TAP configuration ---------------------------------------------------------


class Namespace:
    """A network namespace held by a sleeping ``unshare -n`` process."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["unshare", "-n", "sleep", "3600"])
        home = ns_inode("self")
        deadline = time.monotonic() + 5
        while ns_inode(self.proc.pid) in (home, None):
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("unshare -n did not enter a new namespace")
            time.sleep(0.005)
        self.fd = os.open(f"/proc/{self.proc.pid}/ns/net", os.O_RDONLY)
        with entered(self.fd):
            for key, value in (("net.ipv6.conf.default.addr_gen_mode", 1),
                               ("net.ipv6.conf.default.accept_dad", 0),
                               ("net.ipv6.conf.all.accept_dad", 0),
                               ("net.ipv6.conf.default.router_solicitations", 0)):
                write_sysctl(key, value)

    def links(self) -> set[str]:
        with entered(self.fd), IPRoute() as ipr:
            return {link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}

    def close(self) -> None:
        os.close(self.fd)
        self.proc.kill()
        self.proc.wait()


def configure_tap(ns: Namespace, ifname: str, mac: str, addr: str, peer: str, peer_mac: str,
                  rate_mbit: float | None = None, queue: int = 100) -> None:
    """Like a fabric interface: MAC, up, no ND/multicast, address, static neighbour, HTB."""
    with entered(ns.fd), IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=ifname)[0]
        ipr.link("set", index=idx, address=mac, flags=IFF_UP | IFF_NOARP,
                 change=IFF_UP | IFF_NOARP | IFF_MULTICAST)
        ipr.addr("add", index=idx, address=addr, prefixlen=64, flags=IFA_F_NODAD)
        ipr.neigh("add", dst=peer, lladdr=peer_mac, ifindex=idx, state=NUD_PERMANENT)
        if rate_mbit is not None:
            set_egress_queue(ipr, idx, LinkSpec(rate_mbit, queue), MTU)
        wait_addresses_local(ipr, [addr], ifname)


def namespace_pair() -> Iterator[tuple[Namespace, Namespace]]:
    """Two fresh namespaces for a test module's ``pair`` fixture, closed at its end."""
    a, b = Namespace(), Namespace()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def open_line(pair: tuple[Namespace, Namespace], delay_ms: float, loss: float = 0.0,
              rate_mbit: float | None = None, seed: int = 0) -> DelayLine:
    a, b = pair
    line = DelayLine(a.fd, IF_A, b.fd, IF_B, delay_ms, loss=loss, seed=seed, mtu=MTU).start()
    try:
        configure_tap(a, IF_A, MAC_A, ADDR_A, ADDR_B, MAC_B, rate_mbit)
        configure_tap(b, IF_B, MAC_B, ADDR_B, ADDR_A, MAC_A, rate_mbit)
    except BaseException:
        line.stop()
        raise
    return line


def udp(ns: Namespace, addr: str, port: int = 0) -> socket.socket:
    with entered(ns.fd):
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.bind((addr, port))
    return s


# -- measurements -----------------------------------------------------------------------------


def ping_pong(pair: tuple[Namespace, Namespace], count: int, gap: float = 0.002) -> list[float]:
    """One-way delays (RTT / 2) of ``count`` ping-pongs from A to an echo in B."""
    a, b = pair
    echo = udp(b, ADDR_B, ECHO_PORT)
    ping = udp(a, ADDR_A)
    ping.connect((ADDR_B, ECHO_PORT))

    def serve() -> None:
        while True:
            data, addr = echo.recvfrom(2048)
            if data == b"stop":
                return
            echo.sendto(data, addr)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    out: list[float] = []
    try:
        for seq in range(count):
            msg = struct.pack("!I", seq)
            t0 = time.perf_counter()
            ping.send(msg)
            while True:
                r, _, _ = select.select([ping], [], [], 2.0)
                if not r:
                    break  # lost: no sample
                if ping.recv(2048) == msg:
                    out.append((time.perf_counter() - t0) / 2)
                    break
            time.sleep(gap)
    finally:
        ping.sendto(b"stop", (ADDR_B, ECHO_PORT))
        t.join(5)
        echo.close()
        ping.close()
    return out


def sniffer(ns: Namespace, ifname: str, port: int) -> socket.socket:
    """A packet socket on ``ifname`` that sees only IPv6/UDP frames to ``port``, timestamped."""
    with entered(ns.fd):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    # ldh [12]; jeq IPv6; ldb [20]; jeq UDP; ldh [56]; jeq port; ret 0; ret 256
    prog = [(0x28, 0, 0, 12), (0x15, 0, 4, 0x86DD), (0x30, 0, 0, 20), (0x15, 0, 2, 17),
            (0x28, 0, 0, 56), (0x15, 1, 0, port), (0x06, 0, 0, 0), (0x06, 0, 0, 256)]
    insns = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in prog))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER,
                 struct.pack("HL", len(prog), ctypes.addressof(insns)))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind((ifname, 0))
    s.setblocking(False)
    while True:  # frames queued before the filter was attached
        try:
            s.recv(64)
        except BlockingIOError:
            break
    return s


def read_stamped(s: socket.socket, into: dict[int, float], seq_at: int) -> None:
    """Drain ``s``: map the 4-byte sequence number at ``seq_at`` to the kernel timestamp."""
    while True:
        try:
            data, anc, _, _ = s.recvmsg(seq_at + 4, socket.CMSG_SPACE(16))
        except BlockingIOError:
            return
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", payload[:16])
                into[struct.unpack_from("!I", data, seq_at)[0]] = sec + nsec * 1e-9


BLASTER = r"""
import os, socket, sys, time
from emu.netns import setns
ns, dst, port, rate_bps, payload, seconds = sys.argv[1:]
setns(os.open(ns, os.O_RDONLY))
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.connect((dst, int(port)))
buf = bytes(int(payload))
gap = (int(payload) + 62) * 8 / float(rate_bps)
sched = os.open("/proc/self/schedstat", os.O_RDONLY)
def waited():  # seconds this process has spent runnable but kept off a CPU
    return int(os.pread(sched, 64, 0).split()[1]) / 1e9
mono, prev = time.monotonic, waited()
now = mono()
end, due, sent, held, free = now + float(seconds), now, 0, 0.0, now
while due < end:
    now = mono()
    if due > now:
        time.sleep(due - now)
        now = mono()
        late = now - due  # a late wake-up
    else:
        late = now - free  # held between two sends while behind
    if now - due > 20 * gap:
        due = now  # fell far behind: do not burst to catch up
    s.send(buf)  # blocks while the link's queue is full: the link's pace, not the host's
    free = mono()
    w = waited()
    # What the host took this round: its lateness outside send() (a vCPU taken away)
    # or its wait for a CPU (woken from the sleep or the send on a busy host), the
    # longer, past the 1 ms a normal wake-up takes.
    held += max(0.0, max(late, w - prev) - 0.001)
    prev = w
    sent += 1
    due += gap
print(sent, held)
"""


@dataclass
class LoadResult:
    hold: list[float]  # TAP A egress -> TAP B ingress, per probe (the delay line alone)
    one_way: list[float]  # probe send -> kernel receive at B (plus HTB queueing at A)
    blast_sent: int
    seconds: float
    blast_held_s: float = 0.0  # schedule the blaster skipped while the host held it back
    blast_mbit: float = 0.0  # wire rate the blaster offered (probes included), over seconds


def under_load(pair: tuple[Namespace, Namespace], rate_mbit: float, seconds: float,
               probe_gap: float = 0.004, payload: int = MTU - 48) -> LoadResult:
    """Blast A -> B at ``rate_mbit`` (wire rate) from another process while probing."""
    a, b = pair
    sink = udp(b, ADDR_B, BLAST_PORT)  # never read: full, it drops silently (no ICMP)
    rx = udp(b, ADDR_B, PROBE_PORT)
    rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    rx.setblocking(False)
    tx = udp(a, ADDR_A)
    tx.connect((ADDR_B, PROBE_PORT))
    tx.setblocking(False)
    snif_a, snif_b = sniffer(a, IF_A, PROBE_PORT), sniffer(b, IF_B, PROBE_PORT)
    seq_at = ETH_IPV6_UDP  # the sequence number opens the probe payload
    sent_at: dict[int, float] = {}
    at_a: dict[int, float] = {}
    at_b: dict[int, float] = {}
    at_rx: dict[int, float] = {}
    # The probes share the link: leave them their share of the rate.
    probe_bps = (ETH_IPV6_UDP + 12) * 8 / probe_gap
    blast = subprocess.Popen(
        [sys.executable, "-c", BLASTER, f"/proc/{a.proc.pid}/ns/net", ADDR_B, str(BLAST_PORT),
         str(rate_mbit * 1e6 - probe_bps), str(payload), str(seconds)],
        stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)  # let the blast and queues settle
        start = time.monotonic()
        seq, nxt = 0, start
        while time.monotonic() - start < seconds - 0.6:
            timeout = max(0.0, nxt - time.monotonic())
            r, _, _ = select.select([snif_a, snif_b, rx], [], [], timeout)
            for s in r:
                if s is snif_a:
                    read_stamped(snif_a, at_a, seq_at)
                elif s is snif_b:
                    read_stamped(snif_b, at_b, seq_at)
                else:
                    read_stamped(rx, at_rx, 0)
            if time.monotonic() >= nxt:
                sent_at[seq] = time.time()
                try:
                    tx.send(struct.pack("!I8x", seq))
                except BlockingIOError:
                    del sent_at[seq]
                seq += 1
                nxt += probe_gap
        # At least 0.5 s for the last probes, longer while a probe that left A is
        # still in the relay (the relay held up at the end: its hold is still measured).
        settle, deadline = time.monotonic() + 0.5, time.monotonic() + 5.0
        while time.monotonic() < deadline and (time.monotonic() < settle
                                               or not at_a.keys() <= at_b.keys()):
            select.select([snif_a, snif_b, rx], [], [], 0.05)
            read_stamped(snif_a, at_a, seq_at)
            read_stamped(snif_b, at_b, seq_at)
            read_stamped(rx, at_rx, 0)
        out, _ = blast.communicate(timeout=seconds + 10)
    finally:
        if blast.poll() is None:
            blast.kill()
            blast.wait()
        for s in (sink, rx, tx, snif_a, snif_b):
            s.close()
    hold = [at_b[k] - at_a[k] for k in at_a if k in at_b]
    one_way = [at_rx[k] - sent_at[k] for k in sent_at if k in at_rx]
    blast_sent, held = (out.split() + ["0", "0"])[:2]
    wire = int(blast_sent) * (payload + ETH_IPV6_UDP) + len(sent_at) * (ETH_IPV6_UDP + 12)
    return LoadResult(hold, one_way, int(blast_sent), seconds, float(held),
                      wire * 8 / seconds / 1e6)


def within(measured: float, target: float, frac: float = 0.10) -> bool:
    return abs(measured - target) <= frac * target



def idle_hold(pair: tuple[Namespace, Namespace], count: int, gap: float = 0.003) -> list[float]:
    """The delay line's hold (TAP A egress -> TAP B ingress) of ``count`` lone probes."""
    a, b = pair
    snif_a, snif_b = sniffer(a, IF_A, PROBE_PORT), sniffer(b, IF_B, PROBE_PORT)
    rx, tx = udp(b, ADDR_B, PROBE_PORT), udp(a, ADDR_A)
    at_a: dict[int, float] = {}
    at_b: dict[int, float] = {}
    try:
        for seq in range(count):
            tx.sendto(struct.pack("!I8x", seq), (ADDR_B, PROBE_PORT))
            time.sleep(gap)
            read_stamped(snif_a, at_a, ETH_IPV6_UDP)
            read_stamped(snif_b, at_b, ETH_IPV6_UDP)
        # Until every probe sent has left A and come out at B: a relay (or this
        # process) held up at the end is late, not lossy; the deadline leaves the
        # missing ones to the caller's count.
        deadline = time.monotonic() + 5.0
        while len(at_a) < count or not at_a.keys() <= at_b.keys():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            select.select([snif_a, snif_b], [], [], min(left, 0.05))
            read_stamped(snif_a, at_a, ETH_IPV6_UDP)
            read_stamped(snif_b, at_b, ETH_IPV6_UDP)
    finally:
        for s in (snif_a, snif_b, rx, tx):
            s.close()
    return [at_b[k] - at_a[k] for k in at_a if k in at_b]


def check_hold(s: list[float], delay_ms: float, host: list[float]) -> None:
    """Never early; median within 10 %; holds late by more than 10 % or 0.5 ms (whichever
    is larger) at most 1 % of the time, plus three times as often as the host's own wake-ups
    (``host``, sampled meanwhile) were that late.

    The tail bound is a regression guard, not the accuracy claim. On two shared vCPUs
    the hypervisor now and then takes a core away for milliseconds, which no relay can
    beat; on a quiet host the bound is a p99 within the guard. What it catches is
    lateness of the relay's own making (a missed spin, lost real-time priority) beyond
    what a task waking the same way saw at the time.
    """
    target = delay_ms / 1e3
    hold = Summary.of(s)
    assert hold.lo >= target, hold
    assert within(hold.median, target), hold
    guard = max(0.10 * target, 500e-6)
    late = sum(x - target > guard for x in s) / len(s)
    host_late = sum(x > guard for x in host) / len(host)
    print(f"  late by more than {guard * 1e3:.2f} ms: {late:.2%} of holds, {host_late:.2%} of "
          f"host wake-ups")
    assert late <= 0.01 + 3 * host_late, (
        f"{late:.1%} of holds late by more than {guard * 1e3:.2f} ms, against "
        f"{host_late:.1%} of host wake-ups ({hold}; host {Summary.of(host)})")


def interleaved_ping_pong(pair: tuple[Namespace, Namespace], line: DelayLine, delay_ms: float,
                          count: int, block: int = 20) -> tuple[list[float], list[float]]:
    """One-way delays through ``line`` at ``delay_ms`` and at zero delay, in alternating
    blocks of ``block`` ping-pongs: the two share the test's own wake-up overheads at
    each moment, so their difference is what the delay adds."""
    delayed: list[float] = []
    zero: list[float] = []
    while len(delayed) < count:
        n = min(block, count - len(delayed))
        for ms, into in ((0.0, zero), (delay_ms, delayed)):
            line.set_delay(ms)
            ping_pong(pair, 1)  # settles the change before the block's samples
            into.extend(ping_pong(pair, n))
    return delayed, zero
