"""What a packet costs in CPU: the transports' drivers against the kernel's own cost.

Every driver reports the CPU of its loop from the common start on, less checking
the received bytes (transports/io/driver.py), split into user and system time, with
its wall time and wake-ups. System time is not only the driver's syscalls: the
kernel forwards a datagram across the emulated fabric (veth hops, HTB, SRv6) in
softirq context, and charges that work to whichever process it interrupted or
whose send triggered it, mostly the sender. So the figure that isolates the
transport is its CPU per packet *less* the kernel's cost of the same datagram on
the same path, measured here by a bare paced ``sendto`` / ``recv_into`` pair of
threads (``bare_path``): the difference is the transport's own work (cores,
driver loop, its ACKs).
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
import threading
import time
from collections.abc import Sequence

from emu.fabric import Fabric
from emu.netns import entered
from emu.srv6 import IPV6_RTHDR, srh_bytes
from topologies import MultiPlaneClos
from transports.testing.harness import TransferResult

BARE_PORT = 4799  # a port no transport uses
RX_POLL_S = 0.3  # how often the bare receiver, idle, looks whether the run is over
SILENCE_S = 5.0  # no datagram for this long: the bare receiver gives up on the rest


def driver_cpu(r: TransferResult) -> dict:
    """CPU per data packet of one run (every driver together), its user / system split,
    the packets one core sustains at that cost, each driver process's share of a core (an
    engine's, when engines serve the hosts), and the ACKs sent per data packet."""
    packets = sum(sum(sum(v) for v in d.get("sent_per_ev", {}).values())
                  for d in r.drivers.values())
    # one engine process serving many hosts (transports/io/driver.py) or a process per host
    procs = ({f"engine {i}": e for i, e in r.engines.items()} if r.engines else r.drivers)
    out: dict = {"data_packets": packets, "processes": len(procs),
                 "share": {h: round(d["cpu_s"] / d["wall_s"], 3) if d.get("wall_s") else None
                           for h, d in procs.items()}}
    if not packets:  # TCP: the kernel does the per-packet work, no datagram count
        return out
    cpu = sum(d["cpu_s"] for d in procs.values())
    user = sum(d.get("cpu_user_s", 0.0) for d in procs.values())
    verify = sum(d.get("verify_cpu_s", 0.0) for d in procs.values())
    sys_ = sum(d.get("cpu_sys_s", 0.0) for d in procs.values())
    wakeups = sum(d.get("wakeups", 0) for d in procs.values())
    acks = sum(v.get("tx_ack", 0) + v.get("tx_nack", 0) for d in r.drivers.values()
               for v in d.get("stats", {}).values())
    out["acks_per_packet"] = round(acks / packets, 3)
    us = cpu / packets * 1e6
    out.update(us_per_packet=round(us, 2), packets_per_core_s=round(1e6 / us) if us else None,
               # checking the bytes is user time; it is left out of both
               user_us=round(max(0.0, user - verify) / packets * 1e6, 2),
               sys_us=round(sys_ / packets * 1e6, 2),
               wakeups_per_packet=round(wakeups / packets, 3))
    return out


def _thread_cpu() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return ru.ru_utime, ru.ru_stime


def paced_sends(txs: Sequence[tuple[socket.socket, tuple[str, int]]], buf: bytes,
                gap: float, seconds: float) -> int:
    """Send ``buf`` once on every (socket, destination) each ``gap`` seconds for
    ``seconds``; the datagrams sent. Slots missed while this thread was held back are
    skipped, not caught up in a burst, as a NIC never sends above its line rate."""
    sent = 0
    t = time.monotonic()
    due, end = t, t + seconds
    while t < end:
        if due > t + 0.0005:
            time.sleep(due - t)
        elif t - due > 4 * gap:
            due = t
        for tx, dest in txs:
            try:
                tx.sendto(buf, dest)
                sent += 1
            except OSError:
                pass
        due += gap
        t = time.monotonic()
    return sent


def bare_path(fab: Fabric, src: str, dst: str, rate_mbit: float, payload: int,
              seconds: float = 1.0, srv6: bool = True) -> dict:
    """The kernel's cost of one datagram from ``src`` to ``dst`` over the fabric: a
    ``sendto`` loop paced at ``rate_mbit`` and a ``recv_into`` loop, one thread each
    (each thread's own CPU, RUSAGE_THREAD, so the two are told apart). ``srv6``: the
    datagrams carry the SRH of the pair's first path, as MRC's do (else: routed)."""
    spec = fab.spec
    with entered(fab.node_kernel(dst).fd):
        rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with entered(fab.node_kernel(src).fd):
        tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    rx.bind((str(spec.address(dst)), BARE_PORT))
    tx.bind((str(spec.address(src)), 0))
    if srv6:
        transit = [str(x) for x in spec.paths(src, dst)[0].segments[:-1]]
        tx.setsockopt(socket.IPPROTO_IPV6, IPV6_RTHDR, srh_bytes(transit))
    rx.settimeout(RX_POLL_S)
    dest = (str(spec.address(dst)), BARE_PORT)
    gap = payload * 8 / (rate_mbit * 1e6)
    res: dict = {}

    def send() -> None:
        buf = bytes(payload)
        u0, s0 = _thread_cpu()
        n = paced_sends([(tx, dest)], buf, gap, seconds)
        u1, s1 = _thread_cpu()
        res["tx"] = (n, u1 - u0, s1 - s0)

    def recv() -> None:
        # The end is seen only at a timeout, so a datagram costs no more than a blocking
        # read: the sender done and every datagram in, or SILENCE_S with none arriving
        # (a sender held up mid-run is not its end; what never came is counted missing).
        buf = bytearray(payload + 64)
        u0, s0 = _thread_cpu()
        n = seen = quiet = 0
        while True:
            try:
                rx.recv_into(buf)
            except TimeoutError:
                if "tx" in res and n >= res["tx"][0]:
                    break
                quiet = quiet + 1 if n == seen else 1
                seen = n
                if quiet * RX_POLL_S >= SILENCE_S:
                    break
                continue
            n += 1
        u1, s1 = _thread_cpu()
        res["rx"] = (n, u1 - u0, s1 - s0)

    threads = [threading.Thread(target=f, daemon=True) for f in (recv, send)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(seconds + SILENCE_S + 10)
    finally:
        rx.close()
        tx.close()
    (sent, tu, ts), (got, ru, rs) = res["tx"], res["rx"]
    per = max(got, 1)
    return {"rate_mbit": rate_mbit, "payload": payload, "srv6": srv6, "sent": sent,
            "received": got,
            "tx_us": round((tu + ts) / max(sent, 1) * 1e6, 2),
            "rx_us": round((ru + rs) / per * 1e6, 2),
            "us_per_packet": round(((tu + ts) / max(sent, 1) + (ru + rs) / per) * 1e6, 2),
            "sys_share": round((ts + rs) / max(tu + ts + ru + rs, 1e-9), 3)}


class MachineCpu:
    """What the whole machine's CPUs did between :meth:`start` and :meth:`stop` (from
    /proc/stat): the busy share of all CPUs, and within it softirq (the kernel forwarding
    datagrams across the emulated fabric) and steal (a hypervisor running others on
    these CPUs). A measurement at a busy share near 1 was limited by the machine's CPU,
    whatever the transports' own figures say."""

    def __init__(self) -> None:
        self._t0: list[int] | None = None

    @staticmethod
    def _read() -> list[int]:
        with open("/proc/stat") as f:  # cpu  user nice system idle iowait irq softirq steal
            return [int(x) for x in f.readline().split()[1:9]]

    def start(self, _t0: float | None = None) -> None:
        """Take the first sample (usable as a harness ``on_start`` callback)."""
        self._t0 = self._read()

    def stop(self) -> dict:
        """Take the second sample; the shares between the two, and the busy CPU seconds
        (``cpu_s``, every CPU together)."""
        if self._t0 is None:
            raise RuntimeError("MachineCpu.stop() before start()")
        d = [b - a for a, b in zip(self._t0, self._read(), strict=True)]
        total = sum(d) or 1
        busy = total - d[3] - d[4]  # all but idle and iowait
        return {"busy": round(busy / total, 3), "softirq": round(d[6] / total, 3),
                "steal": round(d[7] / total, 3),
                "cpu_s": round(busy / os.sysconf("SC_CLK_TCK"), 3)}


def bare_permutation(fab: Fabric, transfers: Sequence[tuple[str, str]], payload: int,
                     seconds: float = 2.0) -> dict:
    """The kernel alone carrying a permutation's load: for every (src, dst) pair, one
    ``sendto`` per NIC paced at the NIC's line rate over the SRH of one path of that
    plane (pair i on spine i, so every uplink carries one flow, as spraying's ideal),
    and a ``recv_into`` loop per destination. No transport: what is delivered, and the
    whole machine's CPU per delivered datagram, is the fabric's own cost, the floor
    under any transport's on this machine."""
    spec = fab.spec
    assert isinstance(spec, MultiPlaneClos)  # the bench's fabric
    rxs: dict[str, socket.socket] = {}
    txs: list[tuple[socket.socket, tuple[str, int]]] = []
    got: dict[str, int] = {}
    stop = threading.Event()
    threads: list[threading.Thread] = []
    srh_len = 0
    try:
        for i, (src, dst) in enumerate(transfers):
            if dst not in rxs:
                with entered(fab.node_kernel(dst).fd):
                    rx = rxs[dst] = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
                rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                rx.bind((str(spec.address(dst)), BARE_PORT))
                rx.settimeout(RX_POLL_S)
                got[dst] = 0
            paths = spec.paths(src, dst)
            for plane in range(spec.planes):
                on_plane = [p for p in paths if p.plane == plane]
                path = on_plane[i % len(on_plane)]
                with entered(fab.node_kernel(src).fd):
                    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
                tx.bind((str(spec.address(src)), 0))
                srh = srh_bytes([str(x) for x in path.segments[:-1]])
                tx.setsockopt(socket.IPPROTO_IPV6, IPV6_RTHDR, srh)
                txs.append((tx, (str(spec.address(dst)), BARE_PORT)))
                srh_len = max(srh_len, len(srh))

        def recv(dst: str) -> None:
            buf = bytearray(payload + 64)
            rx = rxs[dst]
            while not stop.is_set():
                try:
                    rx.recv_into(buf)
                except TimeoutError:
                    continue
                got[dst] += 1

        threads = [threading.Thread(target=recv, args=(d,), daemon=True) for d in rxs]
        for th in threads:
            th.start()
        gap = (payload + 14 + 40 + srh_len + 8) * 8 / (spec.host_link.rate_mbit * 1e6)
        # (Ethernet, IPv6, SRH, UDP: each NIC at its line rate)
        buf = bytes(payload)
        machine = MachineCpu()
        machine.start()
        sent = paced_sends(txs, buf, gap, seconds)  # each NIC at its line rate
        # the last datagrams are still queued on the fabric: wait until the counts settle
        last = -1
        while sum(got.values()) != last:
            last = sum(got.values())
            time.sleep(RX_POLL_S)
        res = machine.stop()
    finally:
        stop.set()
        for th in threads:  # each sees the stop within one receive timeout
            th.join(RX_POLL_S * 3)
        for sock in [*rxs.values(), *(tx for tx, _ in txs)]:
            sock.close()
    offered = len(txs) * seconds / gap
    delivered = sum(got.values())
    return {"seconds": seconds, "nics": len(txs), "sent": sent, "received": delivered,
            "offered_fraction": round(sent / offered, 3),
            "delivered_fraction": round(delivered / offered, 3), "machine_cpu": res,
            "machine_us_per_packet": round(res["cpu_s"] / max(delivered, 1) * 1e6, 1)}


def summary(values: Sequence[float | None]) -> dict:
    """Median and [min, max] of the values that are known."""
    v = [x for x in values if x is not None]
    if not v:
        return {"median": None, "min": None, "max": None}
    return {"median": round(statistics.median(v), 3), "min": round(min(v), 3),
            "max": round(max(v), 3)}
