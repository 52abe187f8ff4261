"""DBLP core on the fake network: bounds, reliability at tolerance 0, bursts, CRC, STOP."""

import random
import re

import pytest

from transports.core import wire
from transports.core.dblp import DblpCore, LossBound
from transports.core.mrc import MrcConfig, MrcCore
from transports.testing.fakenet import PathSpec

from corepair import connect_pair

FAST = MrcConfig(rto_min=200e-6, rto_init=1e-3, probe_min=200e-6, probe_max=5e-3)
MTU = FAST.mtu_payload


def pair(seed, spec=None, cls=DblpCore, evs=8):
    spec = spec or PathSpec(delay=10e-6)
    a, b = cls(7, evs, FAST, seed * 2 + 1), cls(7, evs, FAST, seed * 2 + 2)
    return connect_pair(a, b, [spec] * evs, seed)


def round_trip(net, a, b, data, bound, until=5.0, msg=1, buf=None):
    buf = bytearray(len(data)) if buf is None else buf
    net.send("b", b.post_recv(msg, buf, net.now, bound))
    net.send("a", a.post_send(msg, data, net.now, bound))
    net.run(until, stop=lambda: net.done["a"] and net.done["b"])
    return buf


def check_placed(buf, data, missing, before):
    """Delivered chunks byte-exact; missing chunks untouched (``before``)."""
    miss = set(missing)
    for i in range(-(-len(data) // MTU)):
        s, e = i * MTU, min((i + 1) * MTU, len(data))
        want = before[s:e] if i in miss else data[s:e]
        assert buf[s:e] == want, f"chunk {i}"


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("loss", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("tol", [0.0, 0.05, 0.2])
def test_delivered_fraction_respects_the_bound(seed, loss, tol):
    net, a, b = pair(seed, PathSpec(delay=10e-6, jitter=2e-6, loss=loss))
    data = random.Random(seed).randbytes(600_000)
    buf = round_trip(net, a, b, data, LossBound(tol))
    (cs,), (cr,) = net.done["a"], net.done["b"]
    assert cs.ok and cr.ok and not cr.deadline
    assert cr.delivered >= 1 - tol - 1e-12
    n = -(-len(data) // MTU)
    assert cr.delivered == (n - len(cr.missing)) / n
    assert (cs.delivered, cs.missing) == (cr.delivered, cr.missing)  # the STOP bitmap
    check_placed(buf, data, cr.missing, bytes(len(data)))
    if tol == 0:
        assert buf == data and cr.missing == ()
    # after the STOP exchange the receiver's cumulative ack passed the abandoned PSNs
    # (STOP / STOP_OK may be lost too: the STOP's resend backs off from 1 ms)
    net.run(net.now + 0.2)
    assert not b.brecv.closed and b.rcv_nxt == a.snd_nxt
    assert not a.inflight and a.bytes_in_flight == 0


@pytest.mark.parametrize("seed", [1, 2])
def test_deadline_ends_the_round_and_says_so(seed):
    net, a, b = pair(seed, PathSpec(delay=10e-6, rate=50e6))
    data = random.Random(seed).randbytes(2_000_000)  # ~5 ms at 400 MB/s
    buf = round_trip(net, a, b, data, LossBound(0.0, deadline_s=1e-3))
    (cs,), (cr,) = net.done["a"], net.done["b"]
    assert cr.ok and cr.deadline and cr.delivered < 1.0 and abs(cr.t - 1e-3) < 1e-9
    assert cs.ok and cs.deadline and cs.missing == cr.missing
    check_placed(buf, data, cr.missing, bytes(len(data)))
    assert b.stats["deadline_fired"] == 1


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("bound", [None, LossBound(0.0)])
def test_tolerance_zero_is_mrc(seed, bound):
    spec = PathSpec(delay=10e-6, jitter=2e-6, loss=0.1)
    logs = []
    for cls in (MrcCore, DblpCore):
        net, a, b = pair(seed, spec, cls)
        data = random.Random(seed).randbytes(300_000)
        buf = bytearray(len(data))
        kw = {} if cls is MrcCore else {"bound": bound}
        net.send("b", b.post_recv(1, buf, 0.0, **kw))
        net.send("a", a.post_send(1, data, 0.0, **kw))
        done = net.done
        net.run(5.0, stop=lambda d=done: d["a"] and d["b"])
        assert buf == data
        assert [c.ok for c in net.done["a"] + net.done["b"]] == [True, True]
        logs.append([(r.t, r.ev, r.kind, r.flags, r.psn, r.fate) for r in net.log])
    assert logs[0] == logs[1]  # the very same packets at the same times


def spike(seed, cls, bound):
    net, a, b = pair(seed, PathSpec(delay=10e-6, rate=125e6), cls)

    def loss(p):
        for ev in range(8):
            net.set_path("a", "b", ev, loss=p)

    net.at(0.8e-3, lambda: loss(0.8))  # a 200 us microburst at 80 % loss on every path
    net.at(1.0e-3, lambda: loss(0.0))
    data = random.Random(seed).randbytes(2_000_000)
    buf = bytearray(len(data))
    kw = {} if bound is None else {"bound": bound}
    net.send("b", b.post_recv(1, buf, 0.0, **kw))
    net.send("a", a.post_send(1, data, 0.0, **kw))
    net.run(5.0, stop=lambda: net.done["a"] and net.done["b"])
    lost = sum(1 for r in net.log if r.kind == wire.DATA and r.fate == "lost")
    return net, a, lost


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_microburst_no_retransmission_storm(seed):
    net_m, mrc, lost_m = spike(seed, MrcCore, None)
    net_d, dblp, lost_d = spike(seed, DblpCore, LossBound(0.1))
    assert lost_m > 5 and lost_d > 5
    assert mrc.stats["tx_retx"] >= lost_m  # reliable: every lost chunk resent
    assert dblp.stats["tx_retx"] <= mrc.stats["tx_retx"] // 4
    (cr,) = net_d.done["b"]
    assert net_d.done["a"][0].ok and cr.ok and cr.delivered >= 0.9 and not cr.deadline
    assert cr.t < net_m.done["b"][0].t  # finished before MRC's retransmissions did
    # the window was cut on a timeout no more often than MRC's (the cuts on queueing delay
    # after the burst depend on how each refilled its paths, not on the losses)
    assert dblp.cc.n_rto <= mrc.cc.n_rto


@pytest.mark.parametrize("seed", [1, 2])
def test_corrupted_chunks_are_counted_and_never_placed(seed):
    net, a, b = pair(seed)
    r = random.Random(seed)
    hit = set()

    def tamper(rec, data):
        if rec.kind == wire.DATA and rec.size > wire.HEADER_LEN and r.random() < 0.1:
            d = bytearray(data)
            d[wire.HEADER_LEN + r.randrange(rec.size - wire.HEADER_LEN)] ^= 0xFF
            hit.add(rec.psn)
            return bytes(d)
        return None

    net.tamper = tamper
    data = r.randbytes(400_000)
    before = bytes([0x5A]) * len(data)
    buf = round_trip(net, a, b, data, LossBound(0.2), buf=bytearray(before))
    (cr,) = net.done["b"]
    assert hit and b.stats["crc_bad"] >= 1
    assert cr.ok and cr.delivered >= 0.8
    check_placed(buf, data, cr.missing, before)  # no corrupted byte ever landed


def test_late_data_is_dropped_and_stop_resent():
    net, a, b = pair(4, PathSpec(delay=10e-6, loss=0.2))
    data = random.Random(4).randbytes(400_000)
    buf = bytearray(len(data))
    net.send("b", b.post_recv(1, buf, 0.0, LossBound(0.2)))
    net.send("a", a.post_send(1, data, 0.0, LossBound(0.2)))
    net.run(5.0, stop=lambda: net.done["b"])  # the receiver closed; STOP_OK not yet back
    (cr,) = net.done["b"]
    assert cr.missing and 1 in b.brecv.closed
    i = cr.missing[0]
    payload = bytes(MTU)
    pkt = bytearray(wire.HEADER_LEN + MTU)
    wire.pack_header(pkt, wire.DATA, 0, 7, 10**6, 1, i * MTU, len(data), 0, MTU, 1, 0,
                     wire.crc32(payload))
    pkt[wire.HEADER_LEN:] = payload
    stops = b.stats["tx_stop"]
    net.deliver_raw("b", bytes(pkt))  # late data at once: the STOP just left, none resent
    assert b.stats["late_data"] == 1 and b.stats["tx_stop"] == stops
    net.now += b.timeouts.srtt.srtt or FAST.rto_init  # an RTT on (b sent no data: rto_init)
    net.deliver_raw("b", bytes(pkt))  # a late retransmission of a missing chunk
    assert b.stats["late_data"] == 2 and b.stats["tx_stop"] == stops + 1
    assert buf[i * MTU:(i + 1) * MTU] == bytes(MTU)  # still the old bytes, not placed
    net.run(5.0, stop=lambda: net.done["a"] and not b.brecv.closed)
    (cs,) = net.done["a"]
    assert cs.ok and cs.missing == cr.missing
    assert any(x.flags & wire.FLAG_STOP_OK for x in net.sent("a", kind=wire.ACK))


def test_foreign_and_malformed_chunks_are_counted():
    net, a, b = pair(5)
    buf = bytearray(20_000)
    net.send("b", b.post_recv(1, buf, 0.0, LossBound(0.1)))

    def data_pkt(conn=7, offset=0, payload=b"x" * 100, msg_len=20_000, crc=None):
        p = bytearray(wire.HEADER_LEN + len(payload))
        wire.pack_header(p, wire.DATA, 0, conn, 0, 1, offset, msg_len, 0, len(payload), 1, 0,
                         wire.crc32(payload) if crc is None else crc)
        p[wire.HEADER_LEN:] = payload
        return bytes(p)

    net.deliver_raw("b", data_pkt(conn=9))
    net.deliver_raw("b", data_pkt(offset=19_950))  # beyond the message
    net.deliver_raw("b", data_pkt(crc=1234))
    net.deliver_raw("b", data_pkt(crc=0))
    net.deliver_raw("b", data_pkt(offset=100))  # not a chunk
    s = b.stats
    assert (s["wrong_conn"], s["malformed_bounds"], s["crc_bad"], s["bad_chunk"]) == (1, 1, 2, 1)
    assert buf == bytearray(20_000) and s["rx_data_pkts"] == 0


def test_bad_bounds_refused():
    for kw, word in [({"tolerance": 1.0}, "tolerance=1.0"), ({"tolerance": -0.1}, "[0, 1)"),
                     ({"deadline_s": 0}, "deadline_s=0"), ({"deadline_s": -1.0}, "> 0")]:
        with pytest.raises(ValueError, match=re.escape(word)):
            LossBound(**kw)
    # the fill policy is the caller's (workloads/collectives/fill.py)
    with pytest.raises(TypeError):
        LossBound(fill="zeros")
    with pytest.raises(TypeError):
        DblpCore(1, 2).post_send(1, b"x", 0.0, bound=0.1)
    with pytest.raises(ValueError, match="use_crc"):
        DblpCore(1, 2, MrcConfig(use_crc=False))
    assert LossBound(0.1).needed(10) == 9 and LossBound(0.29).needed(100) == 71
    assert LossBound(0.99).needed(1) == 1
