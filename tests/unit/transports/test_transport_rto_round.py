"""MRC's timeouts in a round of losses: a blamed RTO resends the first lost packet at
once whatever the window holds (RFC 6298, 5.4), and backed-off RTOs are jittered so that
repeated timeouts do not keep one phase of a periodic impairment (a microburst every
200 ms meets a 2 s rto_max at the same instant every time)."""

import random

from transports.core import wire
from transports.core.mrc import MrcConfig, MrcCore
from transports.core.mrc.timeouts import BACKOFF_JITTER
from transports.testing.fakenet import PathSpec

from corepair import connect_pair

MS = 1e-3
CFG = MrcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=50e-3)


def test_a_blamed_timeout_resends_past_a_full_window():
    a = MrcCore(1, 8, CFG, 1)
    r = random.Random(1)
    a.post_send(1, r.randbytes(2 * CFG.mtu_payload), 0.0)  # psn 0-1
    a.post_send(2, r.randbytes(4 * CFG.mtu_payload), 0.004)  # psn 2-5, on other EVs
    # A transmission sent after psn 0-1 got through, so their RTO (1 ms) is blamed; the
    # window is cut to its floor while psn 2-5 (their RTOs not due) stay in flight.
    ev = a.loss.evidence
    ev.raise_hi(max(p.seq for p in a.inflight.values()), ev.hi_rtt)
    a.cc.cwnd = a.cc.min_cwnd
    out = a.on_timer(0.0045)
    retx = [h for _ev, buf in out if (h := wire.parse(buf)).kind == wire.DATA
            and h.flags & wire.FLAG_RETX]
    assert a.stats["loss_rto"] == 2
    assert a.bytes_in_flight > a.cc.cwnd  # the window alone would hold every resend
    assert [h.psn for h in retx] == [0]  # the first lost one, at once
    assert retx[0].flags & wire.FLAG_ACK_REQ  # its ACK comes back at once


def test_backed_off_timeouts_are_jittered_and_bounded():
    a, b = MrcCore(2, 4, CFG, 3), MrcCore(2, 4, CFG, 53)
    net, a, b = connect_pair(a, b, [PathSpec(delay=0.25 * MS)] * 4, 3)
    net.tamper = lambda rec, data: b"" if rec.src == "b" else None  # every answer lost
    net.post_recv("b", 1, bytearray(CFG.mtu_payload))
    net.post_send("a", 1, bytes(CFG.mtu_payload))
    net.run(3.0, stop=lambda: bool(net.done["a"]))
    rounds = sorted({round(r.t, 9) for r in net.log if r.src == "a" and r.kind == wire.PROBE
                     and r.flags & wire.FLAG_TAIL})
    gaps = [t1 - t0 for t0, t1 in zip(rounds, rounds[1:], strict=False)]
    capped = [g for g in gaps if g >= CFG.rto_max * 0.999]
    assert len(capped) >= 5, gaps  # the timer reached rto_max and kept firing there
    assert all(g <= CFG.rto_max * (1 + BACKOFF_JITTER) + 1e-6 for g in capped), capped
    assert len({round(g, 6) for g in capped}) == len(capped)  # no two rounds alike
