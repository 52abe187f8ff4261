"""MRC's probe timeout and its rounds of silent RTOs, on the fake network.

A lost tail (nothing sent after it to reveal it) is probed two smoothed RTTs after the
last activity (RACK-TLP's PTO), not after an RTO, which RTT samples taken under a queue
that came and went push far beyond that (``srtt + 4 rttvar``); the probe strikes nothing.
And when several packets of a tail time out together, each is probed in that one round:
the strike the first one takes does not defer the others by a doubled RTO. The answer
to a tail probe is no RTT sample: a header's round trip is not a packet's.
"""

import random
from dataclasses import replace

from transports.core import wire
from transports.core.mrc import MrcConfig, MrcCore
from transports.testing.fakenet import FakeNet, PathSpec

MS = 1e-3
CFG = MrcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=2.0)
EVS = 4


def lose_first_copies(net, psns):
    """The first DATA copy of each of ``psns`` that a sends is lost."""
    left = set(psns)

    def tamper(rec, data):
        if (rec.src == "a" and rec.kind == wire.DATA and rec.psn in left
                and not rec.flags & wire.FLAG_RETX):
            left.discard(rec.psn)
            return b""
        return None

    net.tamper = tamper


def setup(seed, pto=True):
    cfg = replace(CFG, pto=pto)
    a, b = MrcCore(3, EVS, cfg, seed), MrcCore(3, EVS, cfg, seed + 50)
    net = FakeNet(seed)
    net.connect("a", a, "b", b, [PathSpec(delay=0.25 * MS)] * EVS)
    return net, a, b


def send(net, msg, data):
    buf = bytearray(len(data))
    net.post_recv("b", msg, buf)
    net.post_send("a", msg, data)
    net.run(net.now + 5.0, stop=lambda: len(net.done["a"]) >= msg and len(net.done["b"]) >= msg)
    assert all(c.ok for c in net.done["a"] + net.done["b"]) and buf == data


def retx(net, psn):
    return [r for r in net.log if r.src == "a" and r.kind == wire.DATA and r.psn == psn
            and r.flags & wire.FLAG_RETX]


def test_a_lost_tail_is_probed_two_srtts_on_not_an_inflated_rto_later():
    net, a, b = setup(1)
    # message 1 meets a 40 ms queue in front of the receiver that then drains: its RTT
    # samples spread the estimate (rttvar grows with the jump)
    net.port("a", "b", rate=25e6, buffer=8 << 20)
    net.port_burst("a", "b", 1 * MS, 1 * MS + 50e-6, rate=1_000_000 / 50e-6)
    net.run(0.5 * MS)
    send(net, 1, random.Random(1).randbytes(40 * CFG.mtu_payload))
    net.run(net.now + 60 * MS)  # the queue has drained
    srtt, rto = a.loss.timeouts.srtt.srtt, a.loss.timeouts.rto(0)
    assert rto > 2 * srtt + 10 * MS  # the RTO is far beyond two smoothed RTTs
    before = dict(a.stats)
    first = 40  # message 2's packets are PSNs 40..42: its last one is lost
    lose_first_copies(net, [first + 2])
    t0 = net.now
    send(net, 2, random.Random(2).randbytes(3 * CFG.mtu_payload))
    (r,) = retx(net, first + 2)
    assert r.t - t0 < rto  # resent before its RTO would have fired ...
    assert r.t - t0 <= 2 * srtt + 3 * MS  # ... about two smoothed RTTs after it was sent
    new = {k: a.stats[k] - before.get(k, 0) for k in a.stats}
    assert new["pto"] == 1 and new.get("rto_silent", 0) == 0 and new["loss_tail_probe"] == 1
    assert a.loss.timeouts.strikes == 0  # no back-off: the probe struck nothing


def test_the_probe_timeout_resends_nothing_under_a_mere_delay():
    net, a, b = setup(2)
    net.port("a", "b", rate=25e6, buffer=8 << 20)
    send(net, 1, random.Random(3).randbytes(4 * CFG.mtu_payload))  # RTT samples, no queue
    net.port_burst("a", "b", net.now + 0.1 * MS, net.now + 0.15 * MS,
                   rate=1_000_000 / 50e-6)  # then a 40 ms queue: ~80 base RTTs
    send(net, 2, random.Random(4).randbytes(3 * CFG.mtu_payload))
    assert a.stats["pto"] >= 1 and a.stats["tx_tail_probe"] >= 1  # the timeout fired
    assert a.stats["tx_retx"] == 0 and b.stats["dup_data"] == 0  # and resent nothing
    assert a.stats["ev_retired"] == 0


def test_a_tail_lost_together_is_probed_in_one_round():
    net, a, b = setup(3, pto=False)  # the silent RTOs alone (MrcConfig.pto off)
    lose_first_copies(net, [1, 2])  # the last two of 3 packets, on two EVs
    send(net, 1, random.Random(5).randbytes(3 * CFG.mtu_payload))
    (r1,), (r2,) = retx(net, 1), retx(net, 2)
    assert a.stats["rto_silent"] == 1  # one round of silent RTOs ...
    probed = {r.psn for r in net.log if r.src == "a" and r.kind == wire.PROBE
              and r.flags & wire.FLAG_TAIL}
    assert probed == {1, 2} and a.stats["tx_tail_probe"] == 4  # ... probed both packets
    assert abs(r1.t - r2.t) < 1 * MS  # resent together, not a doubled RTO apart


def test_the_answer_to_a_tail_probe_is_no_rtt_sample():
    # a header's RTT (no serialization anywhere) would pull the estimate below a packet's
    net, a, b = setup(4)
    send(net, 1, random.Random(5).randbytes(4 * CFG.mtu_payload))
    samples: list[float] = []
    answers: list[float] = []
    real_sample, real_answer = a.loss.sample, a.loss.on_tail_answer
    a.loss.sample = lambda ev, rtt: (samples.append(net.now), real_sample(ev, rtt))[1]
    a.loss.on_tail_answer = lambda probe, now: (answers.append(now), real_answer(probe, now))[1]
    lose_first_copies(net, [4 + 3])  # message 2's last packet (PSNs 4..7): a lost tail
    send(net, 2, random.Random(6).randbytes(4 * CFG.mtu_payload))
    assert answers and a.stats["loss_tail_probe"] == 1
    assert samples and not set(answers) & set(samples)
