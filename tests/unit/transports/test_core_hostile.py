"""Hostile and stray datagrams against the cores and the driver's receive loop: a reliable
message never completes undelivered, a STOP never answered fails the connection loudly,
state a peer can grow stays bounded, an oversized SACK is refused before unpacking, and a
core that raises on a datagram does not end the host's transport."""

import socket
import time

import pytest

from transports.core import wire
from transports.core.dblp import DblpCore, LossBound
from transports.core.message import UNPOSTED_MSG_COST, Reassembly
from transports.core.mrc import MrcConfig, MrcCore
from transports.core.wire import ACK, DATA, FLAG_SACK, FLAG_STOP, HEADER_LEN, pack_header
from transports.io.sockets import Conn, HostSockets

CFG = MrcConfig(rto_min=200e-6, rto_init=1e-3, probe_min=200e-6, probe_max=5e-3,
                max_retries=3, give_up_s=0.5)
MTU = CFG.mtu_payload
CONN = 7


def stop(msg: int, msg_len: int, bitmap: bytes, ev: int = 0) -> bytes:
    buf = bytearray(HEADER_LEN + len(bitmap))
    pack_header(buf, ACK, FLAG_STOP, CONN, 0, msg, 0, msg_len, ev, len(bitmap), 1)
    buf[HEADER_LEN:] = bitmap
    return bytes(buf)


def test_a_stray_stop_never_completes_a_reliable_message():
    a = DblpCore(CONN, 4, CFG, 1)
    data = bytes(range(256)) * 100  # 25,600 B: 4 chunks
    a.on_packet(stop(5, len(data), b"\x00"), 0.0)  # STOP of a message not posted yet
    assert a.stats["stop_unknown"] == 1
    out = a.post_send(5, data, 0.001)  # reliable: the STOP does not apply
    assert out and a.completions() == []
    assert a.stats["stop_early_ignored"] == 1


def test_an_early_stop_applies_only_to_its_bounded_round_of_that_length():
    a = DblpCore(CONN, 4, CFG, 1)
    data = bytes(4 * MTU)
    a.on_packet(stop(5, len(data) + 1, b"\x00"), 0.0)  # another length: not this round
    assert a.post_send(5, data, 0.001, LossBound(0.5)) and a.completions() == []
    a.on_packet(stop(6, len(data), b"\x00"), 0.002)
    assert a.post_send(6, data, 0.003, LossBound(0.5)) == []
    (c,) = a.completions()
    assert (c.msg, c.ok, c.nbytes, c.delivered, c.missing) == (6, True, 0, 0.0, (0, 1, 2, 3))


def test_early_stops_are_bounded():
    from transports.core.dblp.send import MAX_EARLY_STOPS
    a = DblpCore(CONN, 4, CFG, 1)
    for msg in range(3 * MAX_EARLY_STOPS):
        a.on_packet(stop(msg, 100, b"\x00"), 0.0)
    assert len(a.bsend.early) == MAX_EARLY_STOPS


def test_a_stop_of_a_reliable_message_in_flight_fails_it_not_succeeds():
    a = DblpCore(CONN, 4, CFG, 1)
    data = bytes(4 * MTU)
    assert a.post_send(5, data, 0.0)  # reliable
    a.on_packet(stop(5, len(data), bytes([0b0101])), 0.001)  # chunks 0 and 2 arrived
    (c,) = a.completions()
    assert not c.ok and "posted reliably" in c.error and c.missing == (1, 3)
    assert a.stats["stop_reliable"] == 1 and not a.inflight and a.bytes_in_flight == 0


def test_a_stop_never_acknowledged_fails_the_connection_loudly():
    b = DblpCore(CONN, 4, CFG, 2)
    buf = bytearray(4 * MTU)
    b.post_recv(1, buf, 0.0, LossBound(0.5, deadline_s=0.01))
    t = 0.0
    while not b.failed and t < 30.0:  # the peer never answers anything
        d = b.next_deadline()
        assert d is not None, "a closed round with its STOP unanswered must keep a timer"
        t = max(t, d)
        b.on_timer(t)
    assert b.failed and "never acknowledged the STOP of message 1" in b.failed
    assert b.stats["tx_stop"] > CFG.max_retries + 1 and t >= CFG.give_up_s
    (c, *rest) = b.completions()
    assert c.ok and c.deadline and c.delivered == 0.0  # the round itself ended at its deadline
    assert b.stats["conn_failed"] == 1


def test_an_ack_with_more_sack_blocks_than_a_peer_sends_is_dropped_unread():
    cfg = MrcConfig(max_sack_blocks=4)
    a = MrcCore(CONN, 4, cfg, 1)
    a.post_send(1, bytes(64 * MTU), 0.0)
    nxt = a.snd_nxt
    blocks = [(2 * i + 1, 2 * i + 2) for i in range(cfg.max_sack_blocks + 1)]
    assert blocks[-1][1] <= nxt
    payload = wire.pack_sack(blocks)
    buf = bytearray(HEADER_LEN + len(payload))
    pack_header(buf, ACK, FLAG_SACK, CONN, 0, 0, 0, 0, 0, len(payload), 1, 0)
    buf[HEADER_LEN:] = payload
    inflight = len(a.inflight)
    assert a.on_packet(bytes(buf), 0.001) == []
    assert a.stats["sack_too_many"] == 1 and a.stats["rx_ack"] == 0
    assert len(a.inflight) == inflight


def test_unposted_messages_cost_their_bookkeeping():
    stats, done = {}, []
    r = Reassembly(100 * UNPOSTED_MSG_COST, stats, done)
    for msg in range(1000):  # 0-byte DATA of fresh message ids
        r.place(msg, 0, memoryview(b""), 0, 0.0)
    assert len(r.msgs) == 100 and stats["unposted_limit"] == 900


class _Raising:
    """A core that raises on a datagram whose first payload byte is 0xEE."""

    conn = CONN

    def __init__(self):
        self.stats = {}
        self.seen = 0

    def on_packet(self, data, now, rx_t=None):
        self.seen += 1
        if bytes(data[HEADER_LEN:HEADER_LEN + 1]) == b"\xee":
            raise RuntimeError("a bug one datagram reaches")
        return []


def _datagram(first: int) -> bytes:
    buf = bytearray(HEADER_LEN + 1)
    pack_header(buf, DATA, 0, CONN, 0, 0, 0, 1, 0, 1, 1)
    buf[HEADER_LEN] = first
    return bytes(buf)


def test_a_core_raising_on_a_datagram_is_counted_and_the_loop_goes_on():
    try:
        hs = HostSockets("::1", 0)
    except OSError as e:  # no IPv6 loopback here
        pytest.skip(f"no IPv6 loopback: {e}")
    core = _Raising()
    conns = {CONN: Conn(core, ("::1", 9), [], [])}
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        dst = hs.rx.getsockname()[:2]
        for first in (0xEE, 0x01, 0xEE, 0x02):
            tx.sendto(_datagram(first), dst)
        deadline = time.monotonic() + 5.0
        while core.seen < 4 and time.monotonic() < deadline:
            hs.receive(conns, time.monotonic(), set())
        assert core.seen == 4  # the datagrams after each exception were still read
        assert core.stats["internal_error"] == 2
        assert len(hs.internal_errors) == 2
        assert "a bug one datagram reaches" in hs.internal_errors[0]
    finally:
        tx.close()
        hs.close()
