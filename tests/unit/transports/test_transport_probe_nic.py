"""MRC's tail probes and the FIFOs in front of the probed packet: each plane has a NIC
of its own, a FIFO the connections of a host share (and each EV its own switch
queues), so a probe sent on another EV than the probed packet can overtake it while it
still waits; its answer would then condemn a packet that was only late (a spurious
retransmission). One copy goes on the packet's own EV, behind it, and only its answer
condemns the packet (transports/core/mrc/lossdetect.py); the other copy's answer (around the
packet's NIC from the second silent RTO of a transmission on) condemns nothing by
itself, so a dead plane is still found: the packet's next RTO blames it.
"""

import random

import pytest
import test_transport_incast as incast

from transports.core.mrc import MrcConfig, MrcCore
from transports.core.wire import DATA, FLAG_RETX
from transports.testing.fakenet import FakeNet, PathSpec

NICS = [0] * 4 + [1] * 4


def test_all_to_all_probe_answers_condemn_no_delivered_packet(monkeypatch):
    """The fake all-to-all (incast.all_to_all: per-plane NIC FIFOs shared by 12
    connections, ~1 s queues): every retransmission resends a packet that was dropped,
    and the dropped tails are still resent within the incast test's bound."""
    cores: list[MrcCore] = []

    def core(*args, **kwargs):
        c = MrcCore(*args, **kwargs)
        cores.append(c)
        return c

    monkeypatch.setattr(incast, "MrcCore", core)
    ends, _, dropped, _ = incast.all_to_all(seed=1)
    total = sum((c.stats for c in cores), start=type(cores[0].stats)())
    assert dropped > 0 and total["rto_silent"] > 0  # tails were lost, probes were sent
    # before: 32 delivered packets condemned by answers of probes on the other plane
    assert total["tx_retx_spurious"] == 0 and total["dup_data"] == 0, total
    assert total["tx_retx"] == dropped  # each drop resent once, nothing else
    npkts = -(-incast.SIZE // 8000)
    ideal = 12 * npkts * incast.PKT / (2 * incast.LINK)
    assert max(ends) <= ideal + incast.CFG.rto_max


def _nic_pair(seed: int, cfg: MrcConfig):
    """Two cores over 2 planes x 4 EVs; each end's NIC per plane is one FIFO (1 MB/s)."""
    a, b = (MrcCore(5, 8, cfg, seed * 2 + i, nics=NICS) for i in (1, 2))
    net = FakeNet(seed)
    net.connect("a", a, "b", b, [PathSpec()] * 8)
    for src, dst in (("a", "b"), ("b", "a")):
        fifo = [net.paths[(src, dst)][0], net.paths[(src, dst)][4]]
        for f in fifo:
            f.spec = PathSpec(delay=50e-6, rate=1e6, buffer=1 << 30)
        net.paths[(src, dst)] = [fifo[NICS[ev]] for ev in range(8)]
    return net, a, b


CFG = MrcConfig(rto_init=1e-3, rto_min=200e-6, rto_max=0.5)


class _Fixed:
    """A selector that sends every packet on the EVs of one plane."""

    def __init__(self, inner, plane: int) -> None:
        self.inner, self.plane = inner, plane

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def next_ev(self, psn: int) -> int:
        return 4 * self.plane + psn % 4


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tail_on_a_dead_plane_is_resent_on_the_live_one(seed):
    """The last packet of a message leaves on a plane that is dead (every EV of it,
    still GOOD: nothing else was in flight to tell): probes on its NIC go unanswered,
    the one sent around it is answered, and the packet's next RTO resends it on the
    live plane within a few RTOs (the retry budget is not spent)."""
    net, a, b = _nic_pair(seed, CFG)
    for ev in range(4):
        net.kill("a", "b", ev, at=0.0)
    a.spray.sel = _Fixed(a.spray.sel, 0)
    data = random.Random(seed).randbytes(1000)
    buf = bytearray(len(data))
    net.post_recv("b", 1, buf)
    net.post_send("a", 1, data)
    net.run(0.01)
    a.spray.sel = a.spray.sel.inner
    net.run(10.0, stop=lambda: bool(net.done["b"]))
    assert net.done["b"] and net.done["b"][0].ok and buf == data
    assert not a.failed and a.stats["tail_answered_around"] >= 1
    retx = [r for r in net.log if r.src == "a" and r.kind == DATA and r.flags & FLAG_RETX]
    assert retx and NICS[retx[-1].ev] == 1 and retx[-1].fate == "delivered"
    # rto_init 1 ms doubling: each copy is resent two or three RTOs after it left (it goes
    # to another EV of the dead NIC first, retiring one EV per round)
    assert net.done["b"][0].t < 0.1, net.done["b"][0].t
