"""A host's datagram path in batches (transports/io/sockets.py): what is waiting is read
with as few ``recvmmsg`` calls as it fills, and a short batch ends the read (no call to
learn that the socket is empty); what the cores queue is sent with one ``sendmmsg``
batch per EV and wake-up, however many datagrams and calls queued it. Real UDP sockets
over the loopback; the compiled batches are counted through a wrapper."""

from __future__ import annotations

import socket

import pytest

from transports.core.wire import ACK, DATA
from transports.io.sockets import RX_BATCH, RX_ROUNDS, Conn, HostSockets


class Counting:
    """A compiled batch with its calls counted (and what each returned)."""

    def __init__(self, batch) -> None:
        self.batch, self.calls = batch, []

    def recv(self, fd):
        got = self.batch.recv(fd)
        self.calls.append(len(got))
        return got

    def send(self, fd, dest, grams):
        n = self.batch.send(fd, dest, grams)
        self.calls.append((fd, len(grams), n))
        return n

    @property
    def data_given(self):
        return self.batch.data_given


@pytest.fixture
def host():
    h = HostSockets("::1", 0)
    h._rxb = Counting(h._rxb)
    h._txb = Counting(h._txb)
    yield h
    h.close()


def _flood(h: HostSockets, n: int) -> None:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        for i in range(n):  # connection 99: none of the host's, counted as unknown
            s.sendto(bytes([1, DATA, 0, 0, 0, 0, 0, 99]) + i.to_bytes(4, "big"),
                     h.rx.getsockname()[:2])
    finally:
        s.close()


@pytest.mark.parametrize(("n", "calls"), [
    (0, [0]),  # woken with nothing waiting: one call, no more
    (1, [1]),
    (RX_BATCH + 36, [RX_BATCH, 36]),  # the short batch says the socket is drained
    (RX_BATCH, [RX_BATCH, 0]),  # a full batch cannot say it: one more call
])
def test_what_is_waiting_is_read_in_full_batches_and_a_short_one_ends_it(host, n, calls):
    _flood(host, n)
    assert host.receive({}, 0.0, set()) == n  # every one read, none for a connection
    assert host._rxb.calls == calls and host.received == n


def test_a_flood_is_read_a_bounded_number_of_batches_per_wake_up(host):
    n = RX_ROUNDS * RX_BATCH + 10
    _flood(host, n)
    assert host.receive({}, 0.0, set()) == RX_ROUNDS * RX_BATCH  # then the next host's turn
    assert host._rxb.calls == [RX_BATCH] * RX_ROUNDS
    assert host.receive({}, 0.0, set()) == 10 and host._rxb.calls[-1] == 10


def test_each_ev_sends_its_queue_in_one_batch(host):
    rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    ev_socks = []
    try:
        rx.bind(("::1", 0))
        rx.settimeout(5.0)
        for _ in range(3):
            s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            s.bind(("::1", 0))
            ev_socks.append(s)
        conn = Conn(object(), ("::1", rx.getsockname()[1]), ev_socks)  # type: ignore[arg-type]

        def gram(kind: int, i: int) -> bytes:
            return bytes([1, kind, 0, 0, 0, 0, 0, 1]) + i.to_bytes(4, "big")

        # three calls of a core's output, EVs 0 and 2 only, data and ACKs mixed
        host.send(conn, [(0, gram(DATA, 0)), (2, gram(ACK, 1))])
        host.send(conn, [(0, gram(DATA, 2)), (0, gram(ACK, 3))])
        host.send(conn, [(2, gram(DATA, 4))] + [(0, gram(DATA, 5 + i)) for i in range(100)])
        host.flush()
        calls = host._txb.calls
        assert [(fd, k) for fd, k, _ in calls] == [(ev_socks[0].fileno(), 103),
                                                   (ev_socks[2].fileno(), 2)]
        assert host.sent == 105 and host.refused == 0
        assert conn.sent_per_ev == [102, 0, 1]  # data counted per EV, ACKs not
        got = sorted(int.from_bytes(rx.recv(100)[8:12], "big") for _ in range(105))
        assert got == list(range(105))  # every datagram, each once
        host.flush()  # nothing queued: no call
        assert len(host._txb.calls) == 2 and not any(conn.queued)
    finally:
        rx.close()
        for s in ev_socks:
            s.close()
