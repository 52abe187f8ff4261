"""MRC when one plane queues and the other does not, on the fake network.

Two planes (NICs) of four EVs each; each plane reaches the receiver through a port of
its own (``FakeNet.port(..., evs=...)``), as a host's two NICs hang off two switches.
Microbursts of other traffic fill one plane's port, or both out of step (as the
training bench's bursts onto one host do): a packet on the queued plane then arrives
tens of RTTs after packets sent later on the other plane. That order across planes
says nothing about loss (each plane is its own FIFO), so MRC must not resend on it:
a burst that drops nothing costs no retransmission, and one that drops costs few
spurious ones, every data byte still placed exactly.
"""

import random

import pytest

from transports.core import wire
from transports.core.mrc import MrcConfig, MrcCore
from transports.core.mrc.evtable import EV_GOOD
from transports.testing.fakenet import FakeNet, PathSpec

MS = 1e-3
NICS = [0] * 4 + [1] * 4
PORT_RATE = 12.5e6  # bytes/s: each plane's port to the receiver (100 Mbit/s)
PKT = 8000 + wire.HEADER_LEN
SIZE = 10 << 20
BURST_RATE = 2 * PORT_RATE  # other traffic entering a port during a burst
ON, EVERY, FIRST = 20 * MS, 100 * MS, 50 * MS


def _transfer(seed: int, buffer_pkts: int, planes: tuple[int, ...], offset: float):
    """A ``SIZE`` transfer while bursts hit the ports of ``planes`` (each next plane's
    ``offset`` s later); returns the sender, the ports and the data packets they
    dropped."""
    cfg = MrcConfig(rto_max=2.0)
    a = MrcCore(7, 8, cfg, seed * 2 + 1, nics=NICS)
    b = MrcCore(7, 8, cfg, seed * 2 + 2, nics=NICS)
    net = FakeNet(seed)
    net.connect("a", a, "b", b, [PathSpec(delay=0.25 * MS)] * 8)
    ports = [net.port("a", "b", rate=PORT_RATE, buffer=buffer_pkts * PKT,
                      evs=[ev for ev, n in enumerate(NICS) if n == plane])
             for plane in (0, 1)]
    for i, plane in enumerate(planes):
        for k in range(8):
            at = FIRST + i * offset + k * EVERY
            net.port_burst("a", "b", at, at + ON, rate=BURST_RATE, port=ports[plane])
    data = random.Random(seed).randbytes(SIZE)
    buf = bytearray(SIZE)
    net.post_recv("b", 1, buf)
    net.post_send("a", 1, data)
    net.run(30.0, stop=lambda: bool(net.done["a"] and net.done["b"]))
    assert net.done["a"][0].ok and net.done["b"][0].ok and buf == data
    dropped = sum(1 for r in net.log if r.fate == "port_drop" and r.kind == wire.DATA)
    return a, ports, dropped


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_queue_on_one_plane_is_not_a_loss(seed):
    a, ports, _ = _transfer(seed, buffer_pkts=10_000, planes=(0,), offset=0.0)
    assert ports[0].dropped == 0 and ports[0].other_dropped == 0  # a delay, nothing lost
    assert ports[0].other_bytes > 0
    assert a.stats["tx_retx"] <= 2, dict(a.stats)
    assert all(a.ev_state(ev) == EV_GOOD for ev in range(8))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bursts_out_of_step_on_two_planes_resend_few_packets_twice(seed):
    a, ports, dropped = _transfer(seed, buffer_pkts=16, planes=(0, 1), offset=40 * MS)
    assert ports[0].dropped > 0 and ports[1].dropped > 0  # the bursts bit on both planes
    retx, spurious = a.stats["tx_retx"], a.stats["tx_retx_spurious"]
    assert retx >= dropped  # each data packet dropped was resent
    assert spurious <= 0.10 * retx, dict(a.stats)
