"""The fake network itself: delay, queueing, loss, death, determinism."""

import pytest

from transports import wire
from transports.fakenet import FakeNet, PathSpec


class Echo:
    """A minimal core: records arrivals, answers nothing, one timer."""

    conn = 1

    def __init__(self, timer=None):
        self.got, self.timer, self.fired = [], timer, []

    def post_send(self, msg, data, now):
        return []

    def post_recv(self, msg, buf, now):
        return []

    def on_packet(self, data, now):
        self.got.append((now, bytes(data)))
        return []

    def on_timer(self, now):
        self.fired.append(now)
        self.timer = None
        return []

    def next_deadline(self):
        return self.timer

    def completions(self):
        return []


def _pkt(psn, n=952):
    buf = bytearray(wire.HEADER_LEN + n)
    wire.pack_header(buf, wire.DATA, 0, 1, psn, 1, 0, n, 0, n, 0)
    return buf


def test_rate_queue_delay_and_tail_drop():
    a, b = Echo(timer=5e-3), Echo()
    net = FakeNet(1)
    net.connect("a", a, "b", b, [PathSpec(delay=1e-3, rate=1e6, buffer=5000)])
    net.send("a", [(0, _pkt(i)) for i in range(8)])  # 1000 B each at 1 MB/s: 1 ms apart
    net.run(1.0)
    assert len(b.got) == 5 and [r.fate for r in net.log].count("queue_drop") == 3
    assert [round(t, 6) for t, _ in b.got] == [0.002, 0.003, 0.004, 0.005, 0.006]
    assert a.fired == [5e-3]


def test_death_and_revival():
    a, b = Echo(), Echo()
    net = FakeNet(2)
    net.connect("a", a, "b", b, [PathSpec(delay=1e-3)] * 2)
    net.kill("a", "b", 1, at=0.0, until=0.01)
    net.send("a", [(0, _pkt(0)), (1, _pkt(1))])
    net.at(0.02, lambda: net.send("a", [(1, _pkt(2))]))
    net.run(1.0)
    assert [r.fate for r in net.log] == ["delivered", "dead", "delivered"]
    assert net.delivered[("a", "b")] == [952, 952]


@pytest.mark.parametrize("seed", [1, 2])
def test_loss_and_dup_rates_and_determinism(seed):
    def run():
        a, b = Echo(), Echo()
        net = FakeNet(seed)
        net.connect("a", a, "b", b, [PathSpec(loss=0.2, dup=0.1, jitter=1e-6)])
        net.send("a", [(0, _pkt(i, 10)) for i in range(2000)])
        net.run(1.0)
        return [(r.fate, r.t_arrive) for r in net.log]
    log = run()
    assert log == run()
    lost = sum(f == "lost" for f, _ in log) / 2000
    assert 0.17 < lost < 0.23
    assert len(log) > 2000  # duplicates
