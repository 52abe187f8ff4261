"""A core's next deadline is kept between calls (transports/core/mrc/connection.py): it
must always be what computing it afresh gives, whatever moved the core in between."""

import pytest

from transports.core.dblp import DblpCore, LossBound
from transports.core.mrc import MrcConfig, MrcCore
from transports.testing.fakenet import FakeNet, PathSpec, exchange

from corepair import messages

FAST = MrcConfig(mtu_payload=1000, rto_min=200e-6, rto_init=1e-3, probe_min=200e-6,
                 probe_max=5e-3, ack_wakeup=True, ack_every=16)


class Checked:
    """A core whose every ``next_deadline`` is checked against a fresh computation."""

    checks = 0

    def next_deadline(self):
        kept = super().next_deadline()  # type: ignore[misc]
        self._deadline_ok = False
        fresh = super().next_deadline()  # type: ignore[misc]
        assert kept == fresh, (kept, fresh)
        Checked.checks += 1
        return kept


class CheckedMrc(Checked, MrcCore):
    pass


class CheckedDblp(Checked, DblpCore):
    pass


@pytest.mark.parametrize("seed", [1, 2])
def test_the_kept_deadline_is_always_the_fresh_one(seed):
    # lossy, reordering paths, one of them dying: RTOs, tail and EV probes, reorder timers
    specs = [PathSpec(delay=300e-6, jitter=200e-6, loss=0.03, reorder=0.1,
                      reorder_delay=1e-3, rate=12.5e6, buffer=64_000)] * 4
    net = FakeNet(seed, tick_s=1e-3)
    a, b = CheckedMrc(1, 4, FAST, 1), CheckedMrc(1, 4, FAST, 2)
    net.connect("a", a, "b", b, specs)
    net.kill("a", "b", 1, at=5e-3)
    Checked.checks = 0
    msgs = messages(seed, [600_000, 50_000, 1])
    bufs = exchange(net, "a", "b", msgs, until=30.0)
    assert all(bufs[m] == d for m, d in msgs.items())
    assert a.stats["tx_retx"] > 0 and Checked.checks > 1000


def test_a_bounded_round_keeps_it_too():
    specs = [PathSpec(delay=300e-6, loss=0.05, rate=12.5e6, buffer=64_000)] * 4
    net = FakeNet(3, tick_s=1e-3)
    a, b = CheckedDblp(1, 4, FAST, 1), CheckedDblp(1, 4, FAST, 2)
    net.connect("a", a, "b", b, specs)
    data = messages(3, [400_000])[1]
    buf = bytearray(len(data))
    net.send("b", b.post_recv(1, buf, 0.0, LossBound(0.1)))
    net.send("a", a.post_send(1, data, 0.0, LossBound(0.1)))
    net.run(5.0, stop=lambda: bool(net.done["a"]) and bool(net.done["b"]))
    assert net.done["b"] and net.done["b"][0].ok and Checked.checks > 100
