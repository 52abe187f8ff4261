"""RC core on the fake network: go-back-N correctness, NACK once per gap, peer gone."""

import random

import pytest

from transports.core import wire
from transports.core.rc import RcConfig, RcCore
from transports.testing.fakenet import PathSpec, exchange

from corepair import check_all, connect_pair, messages

FAST = RcConfig(rto_min=200e-6, rto_init=1e-3, window_pkts=32)
SIZES = [0, 1, 8000, 8001, 100_000, 400_000]


def pair(cfg=FAST, seed=0, spec=None):
    return connect_pair(RcCore(9, cfg, 1), RcCore(9, cfg, 2), [spec or PathSpec(delay=10e-6)],
                        seed)


@pytest.mark.parametrize("aimd", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("loss", [0.0, 0.01, 0.05])
def test_every_byte_once_under_loss(seed, loss, aimd):
    cfg = RcConfig(rto_min=200e-6, rto_init=1e-3, window_pkts=32, aimd=aimd)
    net, a, b = pair(cfg, seed, PathSpec(delay=10e-6, loss=loss, dup=0.02))
    msgs = messages(seed, SIZES)
    bufs = exchange(net, "a", "b", msgs, until=10.0)
    check_all(net, msgs, bufs)
    assert b.stats["rx_data_bytes"] == sum(map(len, msgs.values()))
    data = net.sent("a", kind=wire.DATA)
    assert {r.ev for r in data} == {0}
    if loss == 0:
        assert a.stats["tx_retx"] == 0


@pytest.mark.parametrize("seed", [1, 2])
def test_reordering_is_slow_but_correct(seed):
    spec = PathSpec(delay=10e-6, reorder=0.05, reorder_delay=30e-6)
    net, a, b = pair(seed=seed, spec=spec)
    msgs = messages(seed, SIZES + [2_000_000])
    bufs = exchange(net, "a", "b", msgs, until=10.0)
    check_all(net, msgs, bufs)
    assert b.stats["out_of_order"] > 0 and a.stats["tx_retx"] > 0
    # one NACK per gap, not one per out-of-order packet
    assert b.stats["tx_nack"] < b.stats["out_of_order"]


def test_window_limits_outstanding_packets():
    cfg = RcConfig(window_pkts=4)
    net, a, b = pair(cfg, 1, PathSpec(delay=100e-6))
    net.post_recv("b", 1, bytearray(100_000))
    net.post_send("a", 1, bytes(100_000))
    assert len(net.sent("a", kind=wire.DATA)) == 4


@pytest.mark.parametrize("give_up_s", [0.0, 0.5])
def test_peer_gone_fails_in_bounded_time(give_up_s):
    cfg = RcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=10e-3, max_retries=4,
                   give_up_s=give_up_s)
    net, a, b = pair(cfg, 3)
    net.kill("a", "b", 0, at=30e-6)
    net.post_send("a", 1, bytes(2_000_000))
    net.post_send("a", 2, b"x")
    t = net.run(10.0, stop=lambda: len(net.done["a"]) >= 2)
    # the count alone (4 doubling RTOs capped at 10 ms) is spent in < 0.1 s; the time
    # budget keeps the QP probing every rto_max until give_up_s has passed
    assert give_up_s <= t < give_up_s + 0.1
    assert all(not c.ok and "peer unreachable" in c.error for c in net.done["a"])
    assert a.next_deadline() is None


def test_outage_longer_than_the_retry_count_but_shorter_than_give_up_survives():
    # as a fabric reconvergence: 8 RTOs (capped at 10 ms) are spent in ~50 ms, the path
    # is back after 0.3 s, within give_up_s: the QP resumes and delivers every byte
    cfg = RcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=10e-3, max_retries=3,
                   give_up_s=1.0, aimd=True)
    net, a, b = pair(cfg, 5)
    net.kill("a", "b", 0, at=0.0, until=0.3)
    msgs = messages(5, [400_000, 100_000])
    bufs = exchange(net, "a", "b", msgs, until=5.0)
    check_all(net, msgs, bufs)
    assert a.stats["rto"] > cfg.max_retries and a.stats["conn_failed"] == 0
    # every timeout's time is logged: doubling up to rto_max within the outage, and the
    # retry that got through is the first one after the path came back at 0.3 s
    log = a.rto_log
    assert len(log) == a.stats["rto"] and log == sorted(log)
    gaps = [y - x for x, y in zip(log, log[1:], strict=False)]
    assert max(gaps[:3]) <= cfg.rto_max * 1.01
    through = [t for t in log if t >= 0.3]
    assert through and through[0] < 0.3 + cfg.rto_max * 1.01


def test_give_up_s_validated():
    with pytest.raises(ValueError, match="give_up_s=-1"):
        RcConfig(give_up_s=-1)


def test_malformed_counted():
    net, a, b = pair(seed=4, spec=PathSpec(delay=10e-6, loss=0.01))
    r = random.Random(4)
    msgs = messages(4, [200_000])

    def inject():
        for _ in range(50):
            net.deliver_raw("b", r.randbytes(r.randrange(0, 100)))
        bad = bytearray(wire.HEADER_LEN)
        wire.pack_header(bad, wire.DATA, 0, 123, 0, 1, 0, 0, 0, 0, 0)
        net.deliver_raw("b", bad)
        wire.pack_header(bad, wire.ACK, 0, 9, 10**6, 0, 0, 0, 0, 0, 0)
        net.deliver_raw("a", bad)
        if net.now < 1e-3:
            net.at(net.now + 100e-6, inject)

    net.at(20e-6, inject)
    bufs = exchange(net, "a", "b", msgs, until=5.0)
    check_all(net, msgs, bufs)
    assert b.stats["wrong_conn"] > 0 and a.stats["ack_beyond_sent"] > 0
    assert sum(v for k, v in b.stats.items() if k.startswith("malformed_")) > 0
