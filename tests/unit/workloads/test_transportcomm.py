"""TransportComm on a fake endpoint: striping, completion, fail-fast, stall guard."""

import threading

import pytest

from transports.core.api import Completion
from transports.planrecord import ConnPlan
from workloads.collectives import transportcomm
from workloads.collectives.comm import CommError


class FakeEndpoint:
    """Records posts; the test completes them (from another thread, as the engine)."""

    def __init__(self, transport, conns, config=None, seed=0):
        self.posts = []
        self.error = None
        self.closed = False

    def start(self):
        pass

    def alive(self):
        return not self.closed

    def close(self):
        self.closed = True

    def describe(self):
        return "conn 1: FakeCore(stuck)"

    def post_send(self, conn, msg, data, on_done, bound=None):
        self.posts.append(("send", conn, msg, bytes(data), on_done))

    def post_recv(self, conn, msg, buf, on_done, bound=None):
        self.posts.append(("recv", conn, msg, len(buf), on_done))


def make(monkeypatch, lanes=1, **kw):
    monkeypatch.setattr(transportcomm, "Endpoint", FakeEndpoint)
    conns = {1: [ConnPlan(conn=10 + lane, peer="h1", peer_addr="::1") for lane in range(lanes)]}
    return transportcomm.TransportComm("rc", 0, 2, conns, {}, **kw)


def complete(post, ok=True, error=None):
    kind, conn, msg, data, on_done = post
    n = len(data) if isinstance(data, bytes) else data
    on_done(Completion(msg, kind, ok, n if ok else 0, 0.0, error))


def test_rc_message_striped_evenly_over_the_planes_qps(monkeypatch):
    comm = make(monkeypatch, lanes=3)
    data = bytes(range(10))
    h = comm.isend(1, data)
    parts = comm.endpoint.posts
    assert [p[1] for p in parts] == [10, 11, 12]
    assert b"".join(p[3] for p in parts) == data
    assert [len(p[3]) for p in parts] == [4, 3, 3]
    for p in parts[:2]:
        complete(p)
    assert not h.done  # done only once every QP's part is
    complete(parts[2])
    comm.wait([h])
    assert h.completion.ok and h.completion.nbytes == 10


def test_messages_numbered_per_peer_and_direction(monkeypatch):
    comm = make(monkeypatch)
    comm.isend(1, b"a")
    comm.isend(1, b"b")
    comm.irecv(1, bytearray(1))
    assert [(p[0], p[2]) for p in comm.endpoint.posts] == [("send", 1), ("send", 2),
                                                         ("recv", 1)]


def test_a_failed_send_fails_a_wait_on_other_handles_at_once(monkeypatch):
    # a collective waits for its sends only at its end: the failed send must not leave
    # the rank waiting for a receive its peer will never complete
    comm = make(monkeypatch, stall_s=60.0)
    comm.isend(1, b"x" * 8)
    r = comm.irecv(1, bytearray(8))
    send = comm.endpoint.posts[0]
    t = threading.Timer(0.05, complete, (send, False, "peer unreachable: 8 timeouts"))
    t.start()
    with pytest.raises(CommError, match=r"send to rank 1 \(message 1\) failed: peer unre"):
        comm.wait([r], timeout=30.0)
    t.join()
    with pytest.raises(CommError, match="peer unreachable"):  # and every later wait
        comm.wait([comm.irecv(1, bytearray(1))])


def test_no_completion_for_stall_s_raises_with_connection_state(monkeypatch):
    comm = make(monkeypatch, stall_s=0.05)
    r = comm.irecv(1, bytearray(8))
    with pytest.raises(CommError, match=r"no message completed .*FakeCore\(stuck\)"):
        comm.wait([r])


def test_stall_s_validated(monkeypatch):
    with pytest.raises(ValueError, match="stall_s=0"):
        make(monkeypatch, stall_s=0)
