"""MRC core on the fake network: delivery, path states, loss recovery, CC, robustness."""

import random

import pytest

from transports.core import wire
from transports.core.cc import NsccConfig
from transports.core.mrc import EV_ASSUMED_BAD, EV_DENIED, EV_GOOD, MrcConfig, MrcCore
from transports.testing.fakenet import PathSpec, exchange

from corepair import check_all, connect_pair, messages

DEFAULT_SPEC = PathSpec()
FAST = MrcConfig(rto_min=200e-6, rto_init=1e-3, probe_min=200e-6, probe_max=5e-3)


def pair(evs=8, cfg=FAST, seed=0, spec=DEFAULT_SPEC, specs=None):
    a, b = MrcCore(7, evs, cfg, seed * 2 + 1), MrcCore(7, evs, cfg, seed * 2 + 2)
    return connect_pair(a, b, specs or [spec] * evs, seed)


SIZES = [0, 1, 7999, 8000, 8001, 100_000, 600_000]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("loss", [0.0, 0.01, 0.05, 0.20])
def test_every_byte_once_under_loss(seed, loss):
    net, a, b = pair(seed=seed, spec=PathSpec(delay=10e-6, jitter=2e-6, loss=loss))
    msgs = messages(seed, SIZES)
    bufs = exchange(net, "a", "b", msgs, until=5.0)
    check_all(net, msgs, bufs)
    assert b.stats["rx_data_bytes"] == sum(map(len, msgs.values()))  # each byte counted once
    if loss == 0:
        assert a.stats["tx_retx"] == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reordering_and_duplication(seed):
    spec = PathSpec(delay=10e-6, reorder=0.2, reorder_delay=40e-6, dup=0.1)
    specs = [spec] + [PathSpec(delay=10e-6 + 5e-6 * i, dup=0.05) for i in range(1, 8)]
    net, a, b = pair(seed=seed, specs=specs)
    msgs = messages(seed, SIZES)
    bufs = exchange(net, "a", "b", msgs, until=5.0, post_recv_first=seed % 2 == 0)
    check_all(net, msgs, bufs)
    assert b.stats["rx_data_bytes"] == sum(map(len, msgs.values()))


# seed 5 once starved: packets already on a dead EV held the window until their own RTOs
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_half_the_evs_die_mid_message(seed):
    net, a, b = pair(seed=seed, spec=PathSpec(delay=10e-6, rate=125e6))
    t_death = 1e-3
    for ev in range(0, 8, 2):
        net.kill("a", "b", ev, at=t_death)
    msgs = messages(seed, [3_000_000])
    bufs = exchange(net, "a", "b", msgs, until=5.0)
    check_all(net, msgs, bufs)
    t_done = net.done["a"][0].t
    assert t_done > t_death  # the death happened mid-message
    # the dead EVs stop carrying data within a bounded time (a few RTOs) ...
    settle = t_death + 10 * FAST.rto_min
    for ev in range(0, 8, 2):
        late = net.sent("a", ev=ev, kind=wire.DATA, after=settle)
        assert late == [], f"EV {ev} still used after death"
        assert a.ev_state(ev) == EV_ASSUMED_BAD
    # ... what they lost went out again on live EVs
    lost = {r.psn for r in net.log if r.fate == "dead" and r.kind == wire.DATA}
    assert lost
    data = net.sent("a", kind=wire.DATA)
    delivered = {r.psn for r in data if r.fate == "delivered"}
    assert lost <= delivered
    retx_live = {r.psn for r in data if r.flags & wire.FLAG_RETX and r.ev % 2 == 1
                 and r.fate == "delivered"}
    assert lost - {r.psn for r in data if r.fate == "delivered" and not r.flags & wire.FLAG_RETX} \
        <= retx_live
    assert a.stats["tx_probe"] > 0


def test_assumed_bad_ev_carries_no_data_until_probe_answers():
    net, a, b = pair(seed=5, spec=PathSpec(delay=10e-6, rate=125e6))
    net.kill("a", "b", 3, at=0.5e-3, until=4e-3)
    msgs = messages(5, [8_000_000])
    bufs = exchange(net, "a", "b", msgs, until=5.0)
    check_all(net, msgs, bufs)
    changes = [c for c in a.ev_changes() if c[1] == 3]
    bad_at = next(t for t, _, _, new in changes if new == EV_ASSUMED_BAD)
    good_again = [t for t, _, old, new in changes if new == EV_GOOD and t > bad_at]
    assert good_again, "EV 3 never re-admitted after revival"
    t_good = good_again[0]
    assert t_good >= 4e-3  # only after the path revived ...
    ok_probe = [r for r in net.sent("b", ev=3, kind=wire.PROBE_ACK) if r.fate == "delivered"]
    assert ok_probe and ok_probe[0].t_arrive <= t_good + 1e-12  # ... and a probe was answered
    data_between = net.sent("a", ev=3, kind=wire.DATA, after=bad_at, before=t_good)
    assert data_between == []
    assert net.sent("a", ev=3, kind=wire.DATA, after=t_good)  # and it is used again


def test_denied_ev_carries_no_data_until_allowed_and_probed():
    net, a, b = pair(seed=6, spec=PathSpec(delay=10e-6, rate=125e6))
    net.at(1e-3, lambda: a.deny(2, net.now))
    net.at(3e-3, lambda: a.allow(2, net.now))
    msgs = messages(6, [6_000_000])
    bufs = exchange(net, "a", "b", msgs, until=5.0)
    check_all(net, msgs, bufs)
    ch = [c for c in a.ev_changes() if c[1] == 2]
    assert ch[0][3] == EV_DENIED and ch[1][3] == EV_ASSUMED_BAD and ch[2][3] == EV_GOOD
    t_good = ch[2][0]
    # packets already in flight at deny time may still be on the wire: look at send times
    assert net.sent("a", ev=2, kind=wire.DATA, after=1e-3, before=t_good) == []
    assert net.sent("a", ev=2, kind=wire.PROBE, after=3e-3, before=t_good + 1e-12)
    assert net.sent("a", ev=2, kind=wire.DATA, after=t_good)


def test_ev_min_active_keeps_paths_in_use():
    cfg = MrcConfig(rto_min=200e-6, probe_min=200e-6, ev_min_active=3)
    net, a, b = pair(evs=4, cfg=cfg, seed=7, spec=PathSpec(delay=10e-6, loss=0.3))
    msgs = messages(7, [400_000])
    bufs = exchange(net, "a", "b", msgs, until=5.0)
    check_all(net, msgs, bufs)
    assert a.stats["ev_forced_back"] > 0
    assert sum(s == EV_GOOD for s in a.state) >= 3


@pytest.mark.parametrize("give_up_s", [0.0, 0.5])
def test_peer_gone_fails_pending_sends_in_bounded_time(give_up_s):
    cfg = MrcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=10e-3, max_retries=5,
                    give_up_s=give_up_s)
    net, a, b = pair(seed=8, cfg=cfg)
    for ev in range(8):
        net.kill("a", "b", ev, at=30e-6)
    net.post_recv("b", 1, bytearray(1_000_000))
    net.post_send("a", 1, bytes(1_000_000))
    net.post_send("a", 2, bytes(10))
    t = net.run(10.0, stop=lambda: len(net.done["a"]) >= 2)
    # bounded by the retry budget (its count, then its time), not the run limit
    assert give_up_s <= t < give_up_s + 0.2
    assert {c.msg for c in net.done["a"]} == {1, 2}
    assert all(not c.ok and "peer unreachable" in c.error for c in net.done["a"])
    assert a.next_deadline() is None  # nothing left armed: no hang, no busy timer
    assert a.post_send(3, b"x", t) == [] and not a.completions()[0].ok


@pytest.mark.parametrize("seed", [1, 2])
def test_cwnd_follows_queueing_delay(seed):
    # one slow path with a FIFO: 50 MB/s, 0.3 ms propagation (a window of about seven
    # packets, well above NSCC's floor of two, so that a cut shows)
    nscc = NsccConfig(target_delay=40e-6)
    cfg = MrcConfig(rto_min=2e-3, probe_min=1e-3, nscc=nscc)
    spec = PathSpec(delay=0.3e-3, rate=50e6, buffer=4 << 20)
    net, a, b = pair(evs=1, cfg=cfg, seed=seed, spec=spec)
    samples = []

    def sample():
        samples.append((net.now, a.cc.cwnd))
        if net.now < 0.06:
            net.at(net.now + 0.5e-3, sample)

    net.at(0.0, sample)
    # cross traffic fills the queue (4 ms of backlog) at 20 ms, then drains
    net.cross_traffic("a", "b", 0, 200_000, at=0.02)
    msgs = messages(seed, [3_000_000])
    bufs = exchange(net, "a", "b", msgs, until=1.0)
    check_all(net, msgs, bufs)
    before = max(c for t, c in samples if 0.015 <= t < 0.02)
    during = min(c for t, c in samples if 0.02 <= t < 0.03)
    after = max(c for t, c in samples if 0.035 <= t < 0.06)
    assert during < 0.6 * before
    assert after > 1.5 * during
    # a delay target of 40 us on a 50 MB/s path: about 2 KB of standing queue plus the BDP
    assert a.cc.n_md > 0


def test_goodput_fraction_of_aggregate_capacity():
    rate, evs = 125e6, 8
    net, a, b = pair(evs=evs, seed=9, spec=PathSpec(delay=10e-6, rate=rate))
    msgs = messages(9, [8_000_000])
    bufs = exchange(net, "a", "b", msgs, until=5.0)
    check_all(net, msgs, bufs)
    t = net.done["b"][0].t
    frac = 8_000_000 / t / (rate * evs)
    assert frac > 0.6, frac
    counts = a.ev_tx
    assert min(counts) > 0.7 * max(counts)  # sprayed over every EV


def _hdr(kind=wire.DATA, conn=7, psn=0, msg=1, offset=0, msg_len=4, ev=0, payload=b"abcd",
         flags=0, version=wire.WIRE_VERSION, crc=None):
    buf = bytearray(wire.HEADER_LEN + len(payload))
    wire.HEADER.pack_into(buf, 0, version, kind, flags, conn, psn, msg, offset, msg_len, ev,
                          len(payload), 1, 0, wire.crc32(payload) if crc is None else crc)
    buf[wire.HEADER_LEN:] = payload
    return bytes(buf)


@pytest.mark.parametrize("seed", [1, 2])
def test_malformed_datagrams_are_counted_and_harmless(seed):
    net, a, b = pair(seed=seed, spec=PathSpec(delay=10e-6, loss=0.02))
    r = random.Random(seed)
    bad = {
        "malformed_truncated": [b"", b"\x01", _hdr()[:30]],
        "malformed_version": [_hdr(version=9)],
        "malformed_kind": [_hdr(kind=77)],
        "malformed_length": [_hdr() + b"extra", _hdr()[:-1]],
        "malformed_bounds": [_hdr(offset=10)],
        "malformed_sack": [_hdr(kind=wire.ACK, flags=wire.FLAG_SACK, payload=b"123")],
        "wrong_conn": [_hdr(conn=8)],
        "bad_ev": [_hdr(ev=999)],
        "crc": [_hdr(crc=12345)],
        "no_crc": [_hdr(crc=0)],
        "ack_beyond_sent": [_hdr(kind=wire.ACK, psn=10**6, payload=b"")],
        "sack_out_of_window": [_hdr(kind=wire.ACK, psn=0, flags=wire.FLAG_SACK,
                                    payload=wire.pack_sack([(5, 10**6)]))],
        "stale_probe_ack": [_hdr(kind=wire.PROBE_ACK, psn=3, payload=b"")],
        "nack_unknown": [_hdr(kind=wire.NACK, psn=10**5, payload=b"")],
    }
    garbage = [r.randbytes(r.randrange(0, 200)) for _ in range(200)]
    msgs = messages(seed, [500_000, 100])

    def inject():
        for pkts in bad.values():
            for p in pkts:
                net.deliver_raw("b", p)
                net.deliver_raw("a", p)
        for g in garbage:
            net.deliver_raw("b", g)
            net.deliver_raw("b", memoryview(bytearray(g)))
        if net.now < 2e-3:
            net.at(net.now + 100e-6, inject)

    net.at(50e-6, inject)
    bufs = exchange(net, "a", "b", msgs, until=5.0)
    check_all(net, msgs, bufs)
    for reason in bad:
        assert a.stats[reason] + b.stats[reason] > 0, reason
    assert a.stats["conn_failed"] == b.stats["conn_failed"] == 0


def test_zero_byte_and_unposted_messages():
    net, a, b = pair(seed=11)
    data = messages(11, [0, 20_000, 5])
    # sends first: the receiver holds unposted data and hands it over (copied) on post
    for m, d in data.items():
        net.post_send("a", m, d)
    net.run(0.01, stop=lambda: len(net.done["a"]) == 3)
    assert all(c.ok for c in net.done["a"])
    assert net.done["b"] == []
    bufs = {m: bytearray(len(d)) for m, d in data.items()}
    for m, buf in bufs.items():
        net.post_recv("b", m, buf)
    assert [c.msg for c in net.done["b"]] == [1, 2, 3]
    for m, d in data.items():
        assert bufs[m] == d


def test_unposted_limit_drops_and_recovers_after_post():
    cfg = MrcConfig(rto_min=200e-6, probe_min=200e-6, unposted_limit=10_000)
    net, a, b = pair(seed=12, cfg=cfg)
    d = messages(12, [50_000])[1]
    net.post_send("a", 1, d)
    net.run(1e-3)
    assert b.stats["unposted_limit"] > 0
    buf = bytearray(len(d))
    net.post_recv("b", 1, buf)
    net.run(1.0, stop=lambda: net.done["a"] and net.done["b"])
    assert net.done["b"][0].ok and buf == d


def test_deterministic_for_a_seed():
    def run():
        net, a, b = pair(seed=13, spec=PathSpec(delay=10e-6, jitter=3e-6, loss=0.05))
        exchange(net, "a", "b", messages(13, [300_000]), until=5.0)
        return [(r.t, r.ev, r.kind, r.psn, r.fate) for r in net.log]
    assert run() == run()


def test_outage_longer_than_the_retry_count_but_shorter_than_give_up_survives():
    # every path dead for 0.3 s: 6 strikes of RTOs capped at 10 ms are spent in ~60 ms,
    # but give_up_s is 1 s: the connection keeps probing and delivers every byte
    cfg = MrcConfig(rto_min=200e-6, rto_init=1e-3, rto_max=10e-3, max_retries=5,
                    give_up_s=1.0)
    net, a, b = pair(seed=9, cfg=cfg)
    for ev in range(8):
        net.kill("a", "b", ev, at=0.0, until=0.3)
    msgs = messages(9, [400_000, 10])
    bufs = exchange(net, "a", "b", msgs, until=5.0)
    check_all(net, msgs, bufs)
    assert a.stats["rto_silent"] > cfg.max_retries and a.stats["conn_failed"] == 0



def test_blamed_losses_are_forgotten_once_no_copy_can_come_back():
    # Two EVs flap for the whole connection: losses are blamed all along, but undo needs
    # an entry only while a copy may still be acknowledged (2 x rto_max), so the blame map
    # keeps only the recent ones instead of filling up to MAX_BLAME.
    cfg = MrcConfig(rto_min=200e-6, rto_init=1e-3, probe_min=200e-6, probe_max=5e-3,
                    rto_max=5e-3)
    net, a, b = pair(cfg=cfg, spec=PathSpec(delay=10e-6, rate=12.5e6))
    for k in range(40):
        for ev in (0, 1):
            net.kill("a", "b", ev, at=k * 10e-3 + ev * 5e-3, until=k * 10e-3 + ev * 5e-3 + 3e-3)
    msgs = messages(3, [400_000] * 30)
    bufs = exchange(net, "a", "b", msgs, until=10.0)
    check_all(net, msgs, bufs)
    times = [at for _, at, _ in a.loss.blame.entries()]
    assert net.now > 20 * cfg.rto_max  # the run outlived many horizons
    # (entries go when the next loss is blamed: measured from the latest one)
    assert max(times) - min(times) <= 2 * cfg.rto_max, (min(times), max(times))
    assert a.stats["tx_retx"] > 5 * max(1, len(times)), (a.stats, len(times))
