"""RC with DCQCN over a marking switch (the fake network): notifications cut the rate,
pacing keeps the queue short, the bytes arrive whole; the rate recovers on its timers."""

from __future__ import annotations

import random

import pytest

from transports.core import wire
from transports.core.dcqcn import Dcqcn, DcqcnConfig
from transports.core.rc import RcConfig, RcCore
from transports.testing.fakenet import FakeNet, PathSpec, exchange

FRAME = wire.HEADER_LEN + 8000


def _run(dcqcn: bool) -> tuple[FakeNet, RcCore]:
    cfg = RcConfig(rto_init=5e-3, rto_min=1e-3, dcqcn=dcqcn, window_pkts=64)
    a, b = RcCore(5, cfg, 1), RcCore(5, cfg, 2)
    net = FakeNet(1)
    net.connect("a", a, "b", b, [PathSpec(delay=50e-6, rate=5e6, buffer=40 * FRAME,
                                          mark=4 * FRAME)])
    data = random.Random(1).randbytes(300 * 8000)
    assert exchange(net, "a", "b", {1: data}, until=30.0)[1] == data
    return net, a


def test_notifications_cut_the_rate_and_keep_the_queue_short() -> None:
    net, a = _run(True)
    assert a.stats["rx_cnp"] > 0 and a.stats["dcqcn_cut"] > 0
    assert a.dcqcn is not None and a.dcqcn.n_cut == a.stats["dcqcn_cut"]
    plain_net, plain = _run(False)
    assert plain.stats["rx_cnp"] == 0 and plain.dcqcn is None

    def count(log: list, what: str) -> int:
        return sum(1 for r in log if (r.flags & wire.FLAG_CE if what == "ce"
                                      else r.fate == "queue_drop"))
    # paced at its cut rate, the QP overflows the buffer less and meets fewer marks
    # (the first window still leaves at once: the fake network has no NIC to pace it)
    assert count(net.log, "drop") < count(plain_net.log, "drop")
    assert count(net.log, "ce") < count(plain_net.log, "ce")
    assert a.stats["tx_retx"] < plain.stats["tx_retx"]


def test_rate_cut_then_recovery() -> None:
    cfg = DcqcnConfig(period=1e-3, cut_interval=0.0, cut_rtts=0.0)
    d = Dcqcn(cfg)
    for i in range(1, 11):  # 1 MB/s delivered over 10 ms
        d.on_acked(1000, i * 1e-3)
    assert d.rc == float("inf")
    assert d.on_cnp(10e-3)
    first = d.rc
    assert first == pytest.approx(d.max_rate / 1.25 * 0.5)
    assert d.on_cnp(10.1e-3) and d.rc < first  # alpha grew: a deeper cut
    low = d.rc
    d.on_acked(0, 30e-3)  # 20 periods without a notification
    assert d.rc > low and d.rc <= d.max_rate and d.alpha < 1.0
    # pacing: back-to-back up to the burst, then one packet per rc
    t = 40e-3
    d.sent(1000, t)
    assert d.send_at(t) <= t + 1e-12
    d.sent(1000, t)
    assert d.send_at(t) == pytest.approx(t + 1000 / d.rc)
