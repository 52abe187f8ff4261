"""The fake network itself: delay, queueing, loss, death, determinism."""

import pytest

from transports.core import wire
from transports.testing.fakenet import FakeNet, PathSpec


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


def test_store_and_forward_hops_send_each_datagram_whole():
    a, b = Echo(), Echo()
    net = FakeNet(1)
    net.connect("a", a, "b", b, [PathSpec(delay=1e-3, rate=1e6, hops=3)])
    # two 1000-byte frames back to back, then a 100-byte probe behind them
    net.send("a", [(0, _pkt(1)), (0, _pkt(2)), (0, _pkt(3, n=100 - wire.HEADER_LEN))])
    net.run(1.0)
    # the first frame: 1 ms per hop, three hops, then the propagation
    # the second: pipelined, one frame time behind it; the probe waits for it at each hop
    assert [round(t, 6) for t, _ in b.got] == [0.004, 0.005, 0.0051]
    with pytest.raises(ValueError, match="hops=0"):
        PathSpec(hops=0)


def test_evs_sharing_a_first_hop_queue_behind_each_other():
    a, b = Echo(), Echo()
    net = FakeNet(1)
    net.connect("a", a, "b", b, [PathSpec(delay=1e-3, rate=1e6, hops=2)] * 4)
    net.share_first_hop("a", "b", [0, 1])  # one NIC for EVs 0 and 1; 2 and 3 their own
    net.send("a", [(ev, _pkt(ev)) for ev in range(4)])
    net.run(1.0)
    at = {wire.parse(d).psn: round(t, 6) for t, d in b.got}
    # EV 1 waits for EV 0 at the shared hop only; EVs 2 and 3 leave at once
    assert at == {0: 0.003, 1: 0.004, 2: 0.003, 3: 0.003}
    with pytest.raises(ValueError, match=r"EVs \[7\]"):
        net.share_first_hop("a", "b", [0, 7])


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


def test_receivers_port_is_one_fifo_for_every_ev():
    # EV 1 is 1 ms longer than EV 0; both end in one 1 MB/s port (1000-byte packets: 1 ms)
    a, b = Echo(), Echo()
    net = FakeNet(3)
    net.connect("a", a, "b", b, [PathSpec(delay=1e-3), PathSpec(delay=2e-3)])
    net.port("a", "b", rate=1e6, buffer=5000)
    net.send("a", [(1, _pkt(0)), (0, _pkt(1))])
    net.run(1.0)
    # psn 1 reaches the port at 1 ms and leaves at 2; psn 0 reaches it at 2, leaves at 3
    assert [(round(t, 6), wire.HEADER.unpack_from(d)[4]) for t, d in b.got] == [(0.002, 1),
                                                                               (0.003, 0)]


def test_port_burst_queues_every_ev_then_drops_at_the_buffer():
    a, b = Echo(), Echo()
    net = FakeNet(4)
    net.connect("a", a, "b", b, [PathSpec(delay=1e-3)] * 2)
    port = net.port("a", "b", rate=1e6, buffer=5000)
    # 4000 bytes of other traffic at once at 0.5 ms: the port is busy until 4.5 ms
    net.port_burst("a", "b", 0.5e-3, 0.5e-3 + 1e-6, rate=4000 / 1e-6, step=1e-6)
    net.send("a", [(0, _pkt(0)), (1, _pkt(1))])  # both reach the port at 1 ms
    net.run(1.0)
    # 3500 bytes still queued at 1 ms: the first packet fits (leaves at 5.5 ms), not the next
    assert [round(t, 6) for t, _ in b.got] == [0.0055]
    assert [r.fate for r in net.log] == ["delivered", "port_drop"]
    assert port.dropped == 1 and port.other_bytes == 4000 and port.other_dropped == 0
    # a burst larger than the buffer: what does not fit is dropped
    net.port_burst("a", "b", 0.1, 0.1 + 1e-6, rate=8000 / 1e-6, step=1e-6)
    net.run(1.0)
    assert port.other_bytes == 12_000 and port.other_dropped == 3000


def test_a_port_per_plane_queues_only_its_evs():
    # EVs 0 and 1 on plane 0, EV 2 on plane 1; a burst fills plane 0's port only
    a, b = Echo(), Echo()
    net = FakeNet(6)
    net.connect("a", a, "b", b, [PathSpec(delay=1e-3)] * 3)
    p0 = net.port("a", "b", rate=1e6, buffer=5000, evs=[0, 1])
    p1 = net.port("a", "b", rate=1e6, buffer=5000, evs=[2])
    net.port_burst("a", "b", 0.5e-3, 0.5e-3 + 1e-6, rate=4000 / 1e-6, step=1e-6, port=p0)
    net.send("a", [(0, _pkt(0)), (2, _pkt(2))])  # both reach their ports at 1 ms
    net.run(1.0)
    # plane 0: behind 3500 queued bytes, leaves at 5.5 ms; plane 1: an empty port, 2 ms
    assert sorted((round(t, 6), wire.HEADER.unpack_from(d)[4]) for t, d in b.got) == [
        (0.002, 2), (0.0055, 0)]
    assert p0.other_bytes == 4000 and p1.other_bytes == 0
    with pytest.raises(ValueError, match="cross a port already"):
        net.port("a", "b", rate=1e6, evs=[1])
    with pytest.raises(ValueError, match=r"evs=\[3\]: EVs of 'b' -> 'a' are 0..2"):
        net.port("b", "a", rate=1e6, evs=[3])
    with pytest.raises(ValueError, match="per plane already"):
        net.port("a", "b", rate=1e6)


def test_port_errors_name_what_is_wrong():
    net = FakeNet(5)
    net.connect("a", Echo(), "b", Echo(), [PathSpec()])
    with pytest.raises(ValueError, match="no connection"):
        net.port("a", "c", rate=1e6)
    with pytest.raises(ValueError, match="rate"):
        net.port("a", "b", rate=0)
    with pytest.raises(ValueError, match="call port"):
        net.port_burst("b", "a", 0.0, 1.0, rate=1e6)
    net.port("a", "b", rate=1e6)
    with pytest.raises(ValueError, match="until > at"):
        net.port_burst("a", "b", 1.0, 1.0, rate=1e6)


def test_stall_holds_arrivals_until_the_receiver_runs_again():
    from transports.core.mrc import MrcCore

    net = FakeNet(1)
    net.connect("a", MrcCore(1, 1), "b", MrcCore(1, 1), [PathSpec(delay=1e-3)])
    net.stall("b", every=0.1, length=0.02, start=0.0)
    buf = bytearray(100)
    net.post_recv("b", 1, buf)
    net.post_send("a", 1, b"z" * 100)  # arrives at 1 ms, inside the stall [0, 20 ms)
    net.run(1.0, stop=lambda: bool(net.done["b"]))
    data = [r for r in net.log if r.src == "a" and r.kind == wire.DATA]
    assert data[0].t_arrive == pytest.approx(0.02) and buf == b"z" * 100
    with pytest.raises(ValueError, match="length=0.2, every=0.1"):
        net.stall("b", every=0.1, length=0.2)
    with pytest.raises(ValueError, match="no core 'c'"):
        net.stall("c", every=0.1, length=0.01)


def test_a_port_counting_frames_gives_a_probe_a_slot_like_a_frame():
    a, b = Echo(), Echo()
    net = FakeNet(7)
    net.connect("a", a, "b", b, [PathSpec(delay=1e-3)])
    port = net.port("a", "b", rate=1e6, buffer=1 << 30, frames=3)
    with pytest.raises(ValueError, match="frame size"):
        net.port_burst("a", "b", 0.0, 1e-3, rate=1e6, port=port)
    # whole 1000-byte frames at 4x the port's rate: at 0.4, 0.65, 0.9, ... 2.15 ms
    net.port_burst("a", "b", 0.4e-3, 2.3e-3, rate=4e6, frame=1000)
    probe = _pkt(0, n=0)  # a header alone: 48 bytes
    net.send("a", [(0, probe)])  # reaches the port at 1 ms
    net.run(1.0)
    # At 1 ms the first frame is out, two wait (leaving the queue at 1.4 and 2.4 ms): the
    # probe takes the third slot and leaves at 3.4 + 0.048 ms. The frames of 1.15, 1.65,
    # 1.9 and 2.15 ms find three waiting and are dropped (the one of 1.15 only for the
    # probe's slot); the one of 1.4 ms gets the slot the second frame frees.
    assert [round(t, 7) for t, _ in b.got] == [0.003448]
    assert port.dropped == 0
    assert port.other_bytes == 8000 and port.other_dropped == 4000
    alone = FakeNet(7)  # the same frames without the probe: one more gets in
    alone.connect("a", Echo(), "b", Echo(), [PathSpec(delay=1e-3)])
    free = alone.port("a", "b", rate=1e6, buffer=1 << 30, frames=3)
    alone.port_burst("a", "b", 0.4e-3, 2.3e-3, rate=4e6, frame=1000)
    alone.run(1.0)
    assert free.other_dropped == 3000
    with pytest.raises(ValueError, match="frames=0"):
        net.port("b", "a", rate=1e6, frames=0)
