"""Root tests of the DCI delay line's random loss: its fraction, and the same drops
for the same seed (the rig in tests/root/delayline_rig.py)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from pyroute2 import IPRoute

from emu.delayline import DelayLine
from emu.kernel import RTN_LOCAL
from emu.netns import entered

from .delayline_rig import (
    ADDR_A,
    ADDR_B,
    PROBE_PORT,
    SO_RCVBUFFORCE,
    Namespace,
    namespace_pair,
    open_line,
    udp,
)

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Namespace, Namespace]]:
    yield from namespace_pair()


def survivors(line: DelayLine, rx: socket.socket, n: int) -> set[int]:
    """The sequence numbers that crossed the line, once its relay has decided on all
    ``n`` datagrams sent and every one it relayed has been read, however late a busy
    host relays them. A set: a TAP's frames may reach the socket out of order when
    the relay moves between cores (per-CPU backlogs)."""
    rx.settimeout(5.0)
    got: set[int] = set()
    while True:
        st = line.stats().a_to_b
        if st.lost + st.relayed == n and len(got) == st.relayed:
            return got
        try:
            got.add(struct.unpack("!I", rx.recv(64))[0])
        except TimeoutError:
            raise AssertionError(f"{len(got)} of {n} datagrams read, then 5 s of silence; "
                                 f"the relay's counters: {st}") from None


def test_loss_fraction(pair: tuple[Namespace, Namespace]) -> None:
    loss, n = 0.1, 3000
    line = open_line(pair, 0.5, loss=loss, seed=7)
    a, b = pair
    rx = udp(b, ADDR_B, PROBE_PORT)
    rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)  # holds all n datagrams
    tx = udp(a, ADDR_A)
    try:
        for seq in range(n):
            tx.sendto(struct.pack("!I", seq), (ADDR_B, PROBE_PORT))
            if seq % 50 == 49:
                time.sleep(0.002)  # stay far below every queue limit
        got = survivors(line, rx, n)
    finally:
        rx.close()
        tx.close()
        line.stop()
    st = line.stats().a_to_b
    sigma = (n * loss * (1 - loss)) ** 0.5
    print(f"loss {loss}: {n - len(got)} of {n} lost (expected {n * loss:.0f} +- {sigma:.1f})")
    assert st.lost + st.relayed == n  # every frame A sent crossed the relay or was dropped
    assert st.overflow == st.errors == 0
    assert len(got) == st.relayed
    assert abs(st.lost - n * loss) <= 5 * sigma


def test_loss_is_reproducible(pair: tuple[Namespace, Namespace]) -> None:
    a, b = pair

    def run(seed: int) -> set[int]:
        line = open_line(pair, 0.0, loss=0.5, seed=seed)
        rx = udp(b, ADDR_B, PROBE_PORT)
        tx = udp(a, ADDR_A)
        try:
            for seq in range(200):
                tx.sendto(struct.pack("!I", seq), (ADDR_B, PROBE_PORT))
                time.sleep(0.0002)
            return survivors(line, rx, 200)
        finally:
            rx.close()
            tx.close()
            line.stop()

    first, again, other = run(3), run(3), run(4)
    assert first == again
    assert first != other
    assert 60 < len(first) < 140


def test_first_datagram_arrives(pair: tuple[Namespace, Namespace]) -> None:
    """A line is ready when open_line returns: B's address already has its local route
    (the kernel installs it from a work queue after acknowledging the address; a
    datagram that beat it would be dropped as not B's, Ip6InAddrErrors)."""
    a, b = pair
    for attempt in range(30):
        line = open_line(pair, 0.0)
        rx = udp(b, ADDR_B, PROBE_PORT)
        tx = udp(a, ADDR_A)
        try:
            with entered(b.fd), IPRoute() as ipr:
                assert ipr.route("get", dst=ADDR_B)[0]["type"] == RTN_LOCAL, attempt
            tx.sendto(struct.pack("!I", attempt), (ADDR_B, PROBE_PORT))
            rx.settimeout(5.0)
            assert struct.unpack("!I", rx.recv(64))[0] == attempt
        finally:
            rx.close()
            tx.close()
            line.stop()
