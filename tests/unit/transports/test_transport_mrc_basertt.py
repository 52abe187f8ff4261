"""MRC on the fake network with DCI-like paths (10 ms RTT): the window survives a host stall
that makes RTT samples read too short, and EVs on a longer path."""

import pytest

from transports.core.mrc import MrcConfig, MrcCore
from transports.testing.fakenet import FakeNet, PathSpec

RATE = 25e6  # bytes/s over all EVs (2 planes of 100 Mbit/s)
MSG = 128 << 10


class StaleClock:
    """A core whose host thread stamps the clock at t0, then is descheduled until t1 while it
    reads its socket: packets arriving in [t0, t1) are handled at t1 with ``now = t0`` (the
    ACKs among them give RTT samples that are too short), timers wait for t1."""

    def __init__(self, core, net, name):
        self.core, self.net, self.name = core, net, name
        self.win = None
        self.held = []

    def stall(self, t0, t1):
        def start():
            self.win = (t0, t1)

        def flush():
            out = []
            for d in self.held:
                out += self.core.on_packet(d, t0)
            self.held.clear()
            d = self.core.next_deadline()
            if d is not None and d <= t0:
                out += self.core.on_timer(t0)
            self.win = None
            self.net.send(self.name, out)
            self.net._collect(self.name)

        self.net.at(t0, start)
        self.net.at(t1, flush)

    def on_packet(self, data, now):
        if self.win is not None:
            self.held.append(bytes(data))
            return []
        return self.core.on_packet(data, now)

    def next_deadline(self):
        d = self.core.next_deadline()
        if self.win is not None and d is not None and d <= self.win[1]:
            return self.win[1] + 1e-9
        return d

    def __getattr__(self, name):
        return getattr(self.core, name)


def pipeline(seed, specs, steps, stall_steps=(), stall=20e-3, events=()):
    """Per step: 4 x 128 KB a -> b, then 4 x 128 KB b -> a, then 100 ms of compute; in the
    steps ``stall_steps`` each sender stalls for ``stall`` 20 ms into its transfer, as its
    ACKs come in. Returns each step's communication time, and the two cores."""
    net = FakeNet(seed)
    evs = len(specs)
    a0, b0 = MrcCore(1, evs, MrcConfig(), seed * 2 + 1), MrcCore(1, evs, MrcConfig(), seed * 2 + 2)
    a, b = StaleClock(a0, net, "a"), StaleClock(b0, net, "b")
    net.connect("a", a, "b", b, specs)
    for t, fn in events:
        net.at(t, lambda fn=fn: fn(net))
    msg, comm = 0, []
    for step in range(steps):
        t0 = net.now
        for src, dst in (("a", "b"), ("b", "a")):
            if step in stall_steps:
                (a if src == "a" else b).stall(net.now + 20e-3, net.now + 20e-3 + stall)
            n0 = len(net.done[src])
            for _ in range(4):
                msg += 1
                net.post_recv(dst, msg, bytearray(MSG))
                net.post_send(src, msg, bytes(MSG))
            net.run(net.now + 30.0, stop=lambda src=src, n0=n0: len(net.done[src]) >= n0 + 4)
            assert all(c.ok for c in net.done[src])
        comm.append(net.now - t0)
        net.run(net.now + 0.1)
    return comm, a0, b0


def dci(evs=4, delay=5e-3, **kw):
    return PathSpec(delay=delay, jitter=0.2e-3, rate=RATE / evs, buffer=64 * 8100, **kw)


@pytest.mark.parametrize("seed", [1, 2])
def test_window_recovers_after_a_host_stall(seed):
    # each host stalls for 20 ms once while its ACKs arrive: their RTT samples read short
    comm, a, b = pipeline(seed, [dci()] * 4, steps=14, stall_steps=(6,))
    healthy = sorted(comm[2:6])[1]
    after = comm[-4:]
    assert max(after) < 1.5 * healthy, (healthy, after)
    for core in (a, b):
        assert core.cc.base_rtt > 0.75 * 10e-3
        assert core.cc.cwnd > 16 * core.cc.mtu


@pytest.mark.parametrize("seed", [1, 2])
def test_an_ev_on_a_longer_path_does_not_throttle_the_others(seed):
    # EV 0 over a 20 ms fibre (40 ms RTT), EVs 1-3 at 10 ms: no queue anywhere
    long = [dci(delay=20e-3)] + [dci()] * 3
    comm_long, a, _ = pipeline(seed, long, steps=6)
    comm_even, _, _ = pipeline(seed, [dci()] * 4, steps=6)
    # the long EV's RTT adds ~30 ms per direction; its ACKs must not cut the window
    assert sum(comm_long[2:]) < 2.2 * sum(comm_even[2:]), (comm_long, comm_even)
    assert a.cc.base(0) > 3 * a.cc.base(1)


def test_path_restored_after_a_delay_step():
    # plane 0's long-haul link goes 5 -> 20 ms and back (as the DCI delay event)
    def set_delay(d):
        def fn(net):
            for src, dst in (("a", "b"), ("b", "a")):
                net.set_path(src, dst, 0, delay=d)
        return fn

    comm, a, b = pipeline(3, [dci()] * 4, steps=14,
                          events=[(0.5, set_delay(20e-3)), (1.0, set_delay(5e-3))])
    healthy = sorted(comm[:3])[1]
    assert max(comm[-4:]) < 1.5 * healthy, comm
    assert a.cc.base(0) < 1.5 * a.cc.base(1)
