"""The one event loop (transports/io/loop.py) on real UDP sockets over the loopback: what
the driver process and a worker's engine thread both run."""

import os
import random
import select
import socket
import time

import pytest

from transports.core.mrc import MrcConfig, MrcCore
from transports.core.rc import RcCore
from transports.io.loop import EventLoop
from transports.io.sockets import MAX_INTERNAL_ERRORS, Conn, HostSockets

CFG = MrcConfig(mtu_payload=1000)


def _host() -> HostSockets:
    return HostSockets("::1", 0)  # any free port: nothing else on the machine is disturbed


def _conn(core, peer: HostSockets) -> Conn:
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    tx.bind(("::1", 0))
    return Conn(core, ("::1", peer.rx.getsockname()[1]), [tx], [0])


def _pair(a_core, b_core):
    ha, hb = _host(), _host()
    ca, cb = _conn(a_core, hb), _conn(b_core, ha)
    done: list = []
    la = EventLoop(ha, {1: ca}, lambda conn, comp: done.append(("a", comp)), idle_s=0.002)
    lb = EventLoop(hb, {1: cb}, lambda conn, comp: done.append(("b", comp)), idle_s=0.002)
    return (ha, ca, la), (hb, cb, lb), done


def _run(loops, done, n: int, limit_s: float = 10.0) -> None:
    end = time.monotonic() + limit_s
    while len(done) < n and time.monotonic() < end:
        for loop in loops:
            loop.turn()


@pytest.mark.parametrize("kind", ["mrc", "rc"])
def test_one_loop_carries_a_message_between_two_cores(kind):
    make = (lambda: MrcCore(1, 1, CFG)) if kind == "mrc" else (lambda: RcCore(1))
    (ha, ca, la), (hb, cb, lb), done = _pair(make(), make())
    try:
        data = random.Random(1).randbytes(50_000)
        buf = bytearray(len(data))
        now = time.monotonic()
        hb.send(cb, cb.core.post_recv(7, buf, now))
        ha.send(ca, ca.core.post_send(7, data, now))
        _run((la, lb), done, 2)
        assert sorted((who, c.kind, c.msg, c.ok) for who, c in done) == [
            ("a", "send", 7, True), ("b", "recv", 7, True)]
        assert buf == data
        assert la.wakeups > 0 and lb.wakeups > 0 and la.unknown == lb.unknown == 0
    finally:
        for h in (ha, hb):
            h.close()


def test_the_owners_descriptors_are_served_before_the_datagrams():
    (ha, ca, la), (hb, cb, lb), done = _pair(MrcCore(1, 1, CFG), MrcCore(1, 1, CFG))
    r, w = os.pipe()
    try:
        seen: list = []
        os.write(w, b"x")
        la.turn([r], on_ready=lambda ready, now: seen.append((r in ready, now)))
        assert seen and seen[0][0] is True  # the pipe was readable: the owner saw it
        assert seen[0][1] <= time.monotonic()
    finally:
        os.close(r)
        os.close(w)
        for h in (ha, hb):
            h.close()


def test_a_datagram_for_no_connection_is_counted():
    (ha, ca, la), (hb, cb, lb), done = _pair(MrcCore(1, 1, CFG), MrcCore(1, 1, CFG))
    try:
        junk = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        junk.sendto(b"\x01\x01\x00\x00\x00\x00\x00\x63" + bytes(40), ha.rx.getsockname()[:2])
        junk.close()
        deadline = time.monotonic() + 1.0
        while la.unknown == 0 and time.monotonic() < deadline:
            la.turn()
        assert la.unknown == 1 and not done
    finally:
        for h in (ha, hb):
            h.close()


def test_idle_s_must_be_positive():
    h = _host()
    try:
        with pytest.raises(ValueError, match="idle_s=0"):
            EventLoop(h, {}, lambda conn, comp: None, idle_s=0)
    finally:
        h.close()


def test_hosts_in_one_loop_are_served_fairly_and_apart():
    """Three hosts on one loop: a flood of datagrams at one is read a bounded number of
    batches per wake-up, a transfer between the other two completes in the same turns, and
    each host's counters are its own."""
    from transports.io.sockets import RX_BATCH, RX_ROUNDS

    flooded, ha, hb = _host(), _host(), _host()
    ca, cb = _conn(MrcCore(1, 1, CFG), hb), _conn(MrcCore(1, 1, CFG), ha)
    done: list = []
    loop = EventLoop(idle_s=0.002, tick_s=0.0)
    loop.add(flooded, {}, lambda conn, comp: None)
    loop.add(ha, {1: ca}, lambda conn, comp: done.append(("a", comp)))
    loop.add(hb, {1: cb}, lambda conn, comp: done.append(("b", comp)))
    junk = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        n = 3 * RX_ROUNDS * RX_BATCH
        for _ in range(n):
            junk.sendto(b"\x01\x01\x00\x00\x00\x00\x00\x63" + bytes(40),
                        flooded.rx.getsockname()[:2])
        data = random.Random(2).randbytes(40_000)
        buf = bytearray(len(data))
        now = time.monotonic()
        hb.send(cb, cb.core.post_recv(7, buf, now))
        ha.send(ca, ca.core.post_send(7, data, now))
        loop.turn()
        assert loop.hosts[0].unknown == RX_ROUNDS * RX_BATCH  # bounded, then the next host
        end = time.monotonic() + 10.0
        while len(done) < 2 and time.monotonic() < end:
            loop.turn()
        assert buf == data and len(done) == 2
        assert loop.hosts[0].unknown == n == flooded.received  # all of it, in later turns
        assert loop.hosts[1].unknown == loop.hosts[2].unknown == 0  # none reached the others
        assert ca.core.stats["rx_ack"] > 0 and "rx_ack" not in cb.core.stats
    finally:
        junk.close()
        for h in (flooded, ha, hb):
            h.close()


class _Broken(MrcCore):
    """A core with a bug that every datagram reaches."""

    def on_packet(self, data, now, rx_t=None):
        raise RuntimeError("a bug one host's datagrams reach")


def test_a_hosts_failing_core_stays_its_own():
    """Three hosts on one loop: the first host's core raises on every datagram. Its
    errors are counted and kept on its own sockets; the transfer between the other two
    completes exactly in the same turns, with no error of theirs."""
    hx, ha, hb = _host(), _host(), _host()
    broken = _Broken(1, 1, CFG)
    cx = _conn(broken, ha)
    ca, cb = _conn(MrcCore(1, 1, CFG), hb), _conn(MrcCore(1, 1, CFG), ha)
    done: list = []
    loop = EventLoop(idle_s=0.002, tick_s=0.0)
    loop.add(hx, {1: cx}, lambda conn, comp: done.append(("x", comp)))
    loop.add(ha, {1: ca}, lambda conn, comp: done.append(("a", comp)))
    loop.add(hb, {1: cb}, lambda conn, comp: done.append(("b", comp)))
    junk = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        for _ in range(20):  # datagrams of connection 1 at the broken host
            junk.sendto(b"\x01\x01\x00\x00\x00\x00\x00\x01" + bytes(40), hx.rx.getsockname()[:2])
        data = random.Random(3).randbytes(60_000)
        buf = bytearray(len(data))
        now = time.monotonic()
        hb.send(cb, cb.core.post_recv(9, buf, now))
        ha.send(ca, ca.core.post_send(9, data, now))
        end = time.monotonic() + 10.0
        while len(done) < 2 and time.monotonic() < end:
            loop.turn()
        assert buf == data and sorted(w for w, _ in done) == ["a", "b"]
        assert broken.stats["internal_error"] == 20
        assert len(hx.internal_errors) == MAX_INTERNAL_ERRORS  # the first tracebacks kept
        assert "a bug one host's datagrams reach" in hx.internal_errors[0]
        assert ha.internal_errors == hb.internal_errors == []
        assert "internal_error" not in ca.core.stats and "internal_error" not in cb.core.stats
    finally:
        junk.close()
        for h in (hx, ha, hb):
            h.close()


def test_the_ack_that_completes_a_sender_leaves_before_the_owner_acts_on_the_message():
    # the owner's work on a completion (checking a received message) takes milliseconds:
    # the receiver's last ACK must already be on the wire when it starts, or the sender
    # times out waiting for it
    (ha, ca, la), (hb, cb, lb), done = _pair(MrcCore(1, 1, CFG), MrcCore(1, 1, CFG))
    seen: list = []

    def on_b(conn, comp):
        queued = sum(len(q) for q in conn.queued)
        readable = bool(select.select([ha.rx], [], [], 0)[0])
        seen.append((comp.kind, queued, readable))
        done.append(("b", comp))

    lb.hosts[0].on_completion = on_b
    try:
        data = random.Random(2).randbytes(30_000)
        buf = bytearray(len(data))
        now = time.monotonic()
        hb.send(cb, cb.core.post_recv(7, buf, now))
        ha.send(ca, ca.core.post_send(7, data, now))
        _run((la, lb), done, 2)
        assert buf == data and seen
        kind, queued, readable = seen[0]
        assert kind == "recv" and queued == 0  # nothing of the receiver's still waiting
        assert readable  # its ACK is at the sender already
    finally:
        for h in (ha, hb):
            h.close()
