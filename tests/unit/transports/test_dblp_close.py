"""How a bounded round closes (transports/core/dblp/recv.py, connection.py): at the
needed-th chunk, before the sender's first pass is over, the sender then sending nothing
more of it; the chunks a round leaves out move from round to round; the old rule
(``close = "first_pass"``) waits for that pass."""

import random

import pytest

from topologies.validate import InvalidValue
from transports.core import wire
from transports.core.dblp import DblpCore, LossBound
from transports.core.dblp.config import DblpCoreConfig
from transports.core.dblp.connection import first_chunk, rotated
from transports.core.mrc import MrcConfig
from transports.testing.fakenet import PathSpec

from corepair import connect_pair

FAST = MrcConfig(rto_min=200e-6, rto_init=1e-3, probe_min=200e-6, probe_max=5e-3)
MTU = FAST.mtu_payload
EVS = 8
# 8 paths at 12.5 MB/s each: a round of a few MB takes several RTTs of window
SLOW = PathSpec(delay=20e-6, rate=12.5e6)


def pair(seed, close, spec=SLOW, linger_s=None):
    a = DblpCore(7, EVS, FAST, seed * 2 + 1, linger_s, close)
    b = DblpCore(7, EVS, FAST, seed * 2 + 2, linger_s, close)
    net, a, b = connect_pair(a, b, [spec] * EVS, seed)
    net.offsets = []  # the chunk of every DATA first transmission a sent, in order

    def watch(rec, data):
        if rec.src == "a" and rec.kind == wire.DATA and not rec.flags & wire.FLAG_RETX:
            net.offsets.append(wire.peek(data).offset // MTU)

    net.tamper = watch
    return net, a, b


def one_round(net, a, b, data, bound, msg=1):
    buf = bytearray(len(data))
    na, nb = len(net.done["a"]), len(net.done["b"])
    net.send("b", b.post_recv(msg, buf, net.now, bound))
    net.send("a", a.post_send(msg, data, net.now, bound))
    net.run(net.now + 5.0, stop=lambda: len(net.done["a"]) > na and len(net.done["b"]) > nb)
    return buf, net.done["a"][-1], net.done["b"][-1]


def first_transmissions(net):
    """(time, flags) of every DATA first transmission a sent."""
    return [(r.t, r.flags) for r in net.sent("a", kind=wire.DATA)
            if not r.flags & wire.FLAG_RETX]


def check_bytes(buf, data, missing):
    miss = set(missing)
    for i in range(-(-len(data) // MTU)):
        s, e = i * MTU, min((i + 1) * MTU, len(data))
        assert buf[s:e] == (bytes(e - s) if i in miss else data[s:e]), f"chunk {i}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_round_closes_at_its_needed_chunk_and_the_sender_stops(seed):
    # 2 MB: NSCC's window holds a 1 MB round whole on these paths (the first pass would be
    # over before the needed-th chunk arrived)
    data = random.Random(seed).randbytes(2_000_000)
    n = -(-len(data) // MTU)
    bound = LossBound(0.2)
    net, a, b = pair(seed, "needed")
    buf, cs, cr = one_round(net, a, b, data, bound)
    assert cs.ok and cr.ok and not cr.deadline
    assert cr.delivered == bound.needed(n) / n  # closed at the needed-th chunk, no later
    assert (cs.delivered, cs.missing) == (cr.delivered, cr.missing)
    check_bytes(buf, data, cr.missing)
    # the first pass had not ended when the round closed: its last chunk (FLAG_LAST) was
    # never sent, or sent after the close; and once the STOP was in, nothing more left
    last = [t for t, f in first_transmissions(net) if f & wire.FLAG_LAST]
    assert not last or last[0] > cr.t
    sent = len(first_transmissions(net))
    assert sent < n
    net.run(net.now + 0.1)  # STOP_OK, late data, acks: nothing more of the round leaves
    assert len(first_transmissions(net)) == sent
    assert not a.inflight and a.bytes_in_flight == 0 and not b.brecv.closed
    assert b.rcv_nxt == a.snd_nxt  # the cumulative ack passed the PSNs never sent


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_old_rule_waits_for_the_first_pass(seed):
    data = random.Random(seed).randbytes(1_000_000)
    times = {}
    for close in ("needed", "first_pass"):
        net, a, b = pair(seed, close, linger_s=1.0)  # no linger: the pass's end only
        buf, cs, cr = one_round(net, a, b, data, LossBound(0.2))
        times[close] = cr.t
        if close == "first_pass":  # no loss: every chunk, after the first pass's last one
            assert cr.delivered == 1.0 and buf == data
            (t_last,) = [r.t_arrive for r in net.sent("a", kind=wire.DATA)
                         if r.flags & wire.FLAG_LAST]
            assert cr.t >= t_last
            assert net.offsets == list(range(-(-len(data) // MTU)))  # by offset, as MRC
    assert times["needed"] < times["first_pass"]


def test_consecutive_rounds_leave_out_different_chunks():
    data = random.Random(9).randbytes(400_000)
    n = -(-len(data) // MTU)
    bound = LossBound(0.1)
    net, a, b = pair(9, "needed")
    left_out = []
    for msg in range(1, 9):
        buf, cs, cr = one_round(net, a, b, data, bound, msg)
        assert cr.ok and cr.delivered == bound.needed(n) / n
        check_bytes(buf, data, cr.missing)
        left_out.append(set(cr.missing))
    assert len({frozenset(m) for m in left_out}) == len(left_out)  # never the same chunks
    # over the rounds, most chunks were left out at least once: none always arrives first
    assert len(set().union(*left_out)) > n // 2


def test_reliable_messages_go_by_offset_and_rotation_covers_every_chunk():
    for n in (1, 2, 7, 33, 125):
        for msg in range(1, 40):
            order = list(rotated(first_chunk(msg, n), n))
            assert sorted(order) == list(range(n))
            s = order[0]
            assert order == [(s + k) % n for k in range(n)]
    assert len({first_chunk(m, 33) for m in range(1, 34)}) > 20  # rounds start far apart
    net, a, b = pair(4, "needed")
    data = random.Random(4).randbytes(300_000)
    buf, cs, cr = one_round(net, a, b, data, LossBound(0.0))  # reliable: MRC's order
    assert buf == data and cr.delivered == 1.0
    assert net.offsets == list(range(-(-len(data) // MTU)))


def test_the_close_setting_is_checked():
    assert DblpCoreConfig().close == "needed"
    assert DblpCoreConfig(close="first_pass").close == "first_pass"
    with pytest.raises(InvalidValue, match=r"close='at_once'.*'needed', 'first_pass'"):
        DblpCoreConfig(close="at_once")
    with pytest.raises(ValueError, match="close='x'"):
        DblpCore(1, 2, FAST, close="x")


@pytest.mark.parametrize("seed", [1, 2])
def test_a_stopped_rounds_chunks_on_the_wire_stay_counted_until_they_are_out(seed):
    """The chunks a closed round left on the wire are no packet's any more, but their
    bytes stay in flight (so the next round's window does not land on top of them) until
    the latest one's send time + the smoothed RTT, then leave the count."""
    data = random.Random(seed).randbytes(1_000_000)
    net, a, b = pair(seed, "needed")
    _, cs, cr = one_round(net, a, b, data, LossBound(0.2))
    assert cs.ok and cr.ok and cr.delivered < 1
    held = sum(n for _, n in a.bsend.held)
    assert held > 0 and a.bytes_in_flight >= held and not a.inflight
    due = max(t for t, _ in a.bsend.held)
    assert due > net.now
    net.run(due + 1e-3)
    assert not a.bsend.held and a.bytes_in_flight == 0
