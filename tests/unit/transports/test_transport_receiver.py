"""transports/core/receiver.py: the receiving half of MRC (SACK) and RC (in order).

The random tests drive a ``Receiver`` and a small reference model (a set of received
PSNs plus the ACK rules written out plainly) with the same arrival orders, and
compare after every packet: the cumulative/SACK state, every ACK's contents, when
ACKs are sent, what they echo, and which payloads are placed.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest

from transports.core import wire
from transports.core.api import Completion
from transports.core.message import Reassembly
from transports.core.rc import RcConfig, RcCore
from transports.core.receiver import Receiver
from transports.core.wire import ACK, DATA, FLAG_ACK_REQ, FLAG_SACK, HEADER_LEN, NACK

INF = float("inf")
CONN = 7
MSG = 1
US = 1e-6


@dataclass(frozen=True)
class Cfg:
    """The knobs a Receiver reads (MrcConfig's names)."""

    use_crc: bool = True
    window_pkts: int = 1000
    ack_every: int = 4
    ack_delay: float = 50e-6
    max_sack_blocks: int = 32


class Msg:
    """One message of ``n`` packets of ``size`` bytes (the last may be shorter)."""

    def __init__(self, n: int, size: int, short: int = 0) -> None:
        self.n, self.size = n, size
        self.data = random.Random(n * 1000 + size).randbytes(n * size - short)

    def chunk(self, psn: int) -> tuple[int, bytes]:
        off = psn * self.size
        return off, self.data[off:off + self.size]

    def packet(self, psn: int, ts: int, ev: int = 0, flags: int = 0,
               crc: bool = True) -> tuple[wire.Header, bytes]:
        """DATA packet ``psn`` (payload at offset psn * size) as (header, datagram)."""
        off, payload = self.chunk(psn)
        buf = bytearray(HEADER_LEN + len(payload))
        wire.pack_header(buf, DATA, flags, CONN, psn, MSG, off, len(self.data), ev,
                         len(payload), ts, 0, wire.crc32(payload) if crc else 0)
        buf[HEADER_LEN:] = payload
        return wire.parse(buf), bytes(buf)


def receiver(cfg: Cfg | RcConfig, msg: Msg, in_order: bool = False, **kw):
    """A Receiver with ``msg``'s buffer posted; (receiver, buffer, completions)."""
    stats: Counter[str] = Counter()
    done: list[Completion] = []
    reasm = Reassembly(1 << 30, stats, done)
    buf = bytearray(len(msg.data))
    reasm.post(MSG, buf, 0.0)
    return Receiver(CONN, cfg, reasm, stats, in_order, **kw), buf, done


def decode(tx) -> tuple[int, wire.Header, list[tuple[int, int]]]:
    """(reply EV, header, SACK blocks) of one reply."""
    ev, buf = tx
    h = wire.parse(buf)
    blocks = wire.sack_blocks(bytes(buf[HEADER_LEN:])) if h.flags & FLAG_SACK else []
    assert h.conn == CONN
    if not h.flags & FLAG_SACK:
        assert h.length == 0
    return ev, h, blocks


def merged(psns) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for p in sorted(psns):
        if out and out[-1][1] == p:
            out[-1][1] = p + 1
        else:
            out.append([p, p + 1])
    return [(a, b) for a, b in out]


class Ref:
    """The reference receiver: a set of PSNs and the ACK rules, written out plainly."""

    def __init__(self, cfg: Cfg, in_order: bool) -> None:
        self.cfg, self.in_order = cfg, in_order
        self.got: set[int] = set()  # received or marked
        self.placed: list[int] = []  # PSNs whose payload was placed, in placement order
        self.nack_sent = False
        self.pending = 0
        self.ack_at = INF
        self.last_ts, self.last_ev, self.last_rx = 0, 0, 0.0
        self.counts: Counter[str] = Counter()

    @property
    def nxt(self) -> int:
        p = 0
        while p in self.got:
            p += 1
        return p

    def ooo(self) -> list[tuple[int, int]]:
        nxt = self.nxt
        return merged(p for p in self.got if p > nxt)

    def blocks(self) -> list[tuple[int, int]]:
        if self.in_order:
            return []
        r, mx = self.ooo(), self.cfg.max_sack_blocks
        return r if len(r) <= mx else r[:mx - 1] + [r[-1]]

    def ack(self, now: float, kind: int = ACK) -> tuple:
        """What an ACK sent now must say; clears the coalescing state as one does."""
        self.pending, self.ack_at = 0, INF
        self.counts["tx_nack" if kind == NACK else "tx_ack"] += 1
        echo = self.last_ts + int((now - self.last_rx) * 1e9) if self.last_ts else 0
        return kind, self.nxt, self.blocks(), self.last_ev, echo

    def data(self, psn: int, ts: int, ev: int, flags: int, now: float) -> tuple[bool, list]:
        """(placed, expected replies) of one DATA packet."""
        nxt, cfg = self.nxt, self.cfg
        if self.in_order:
            self.last_ts, self.last_ev, self.last_rx = ts, ev, now
            if psn < nxt:
                self.counts["dup_data"] += 1
                return False, [self.ack(now)]
            if psn > nxt:
                self.counts["out_of_order"] += 1
                if self.nack_sent:
                    return False, []
                self.nack_sent = True
                return False, [self.ack(now, NACK)]
            # RC acks the packet that fills a gap like any other; only a hole that
            # mark_received left (PSNs beyond it counted received) is acked at once
            gap = any(p > nxt for p in self.got)
            self.nack_sent = False
        else:
            if psn in self.got:
                self.counts["dup_data"] += 1
                self.last_ts, self.last_ev, self.last_rx = ts, ev, now
                return False, [self.ack(now)]
            if psn >= nxt + cfg.window_pkts:
                self.counts["out_of_window"] += 1
                return False, []
            gap = psn != nxt or any(p > nxt for p in self.got)
            self.last_ts, self.last_ev, self.last_rx = ts, ev, now
        self.got.add(psn)
        self.placed.append(psn)
        self.counts["rx_data_pkts"] += 1
        self.pending += 1
        if gap or flags & FLAG_ACK_REQ or self.pending >= cfg.ack_every:
            return True, [self.ack(now)]
        if self.ack_at == INF:
            self.ack_at = now + cfg.ack_delay
        return True, []

    def mark(self, lo: int, hi: int, now: float) -> tuple | None:
        new = set(range(max(lo, self.nxt), hi)) - self.got
        if not new:
            return None
        if self.nxt in new:
            self.nack_sent = False
        self.got |= new
        return self.ack(now)


def check_replies(out: list, want: list) -> None:
    assert len(out) == len(want), (out, want)
    for tx, (kind, cum, blocks, ev, echo) in zip(out, want, strict=True):
        tx_ev, h, got_blocks = decode(tx)
        assert (h.kind, h.psn, got_blocks) == (kind, cum, blocks)
        assert tx_ev == h.ev == ev
        assert h.ts_echo == echo


def arrival_order(rng: random.Random, n: int) -> list[int]:
    """Every PSN once in one of a few shapes, then duplicates sprinkled in."""
    shape = rng.choice(["shuffle", "swaps", "blocks", "in_order"])
    order = list(range(n))
    if shape == "shuffle":
        rng.shuffle(order)
    elif shape == "swaps":  # mostly in order: a few late packets (reordering on a path)
        for _ in range(max(1, n // 5)):
            i = rng.randrange(n)
            j = min(n - 1, i + rng.randint(1, 6))
            order[i], order[j] = order[j], order[i]
    elif shape == "blocks":  # bursts that arrive in reverse order of each other
        k = rng.randint(1, 8)
        parts = [order[i:i + k] for i in range(0, n, k)]
        order = [p for part in reversed(parts) for p in part]
    for _ in range(rng.randint(0, n // 3 + 1)):
        order.insert(rng.randrange(len(order) + 1), rng.randrange(n))
    return order


def run_random(seed: int, in_order: bool, marks: bool) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 70)
    size = rng.choice([1, 3, 8])
    msg = Msg(n, size, rng.randrange(size))
    cfg = Cfg(window_pkts=rng.choice([3, 16, 1000]), ack_every=rng.choice([1, 2, 4, 8]),
              ack_delay=rng.choice([3, 20]) * US, max_sack_blocks=rng.choice([1, 2, 3, 32]))
    rx, buf, done = receiver(cfg, msg, in_order,
                             max_sack_blocks=None if in_order else cfg.max_sack_blocks)
    ref = Ref(cfg, in_order)
    tick = 0

    def step(psn: int) -> None:
        nonlocal tick
        tick += 1
        now = tick * US
        if rx.ack_at <= now:  # the owner's timer: the coalesced ACK is due
            assert ref.ack_at <= now
            check_replies([rx.make_ack(now)], [ref.ack(now)])
        if marks and rng.random() < 0.05:
            lo = rng.randrange(n)
            hi = min(n, lo + rng.randint(0, 4))
            tx = rx.mark_received(lo, hi, now)
            want = ref.mark(lo, hi, now)
            check_replies([] if tx is None else [tx], [] if want is None else [want])
        ev, flags = rng.randrange(4), FLAG_ACK_REQ if rng.random() < 0.1 else 0
        ts = int(now * 1e9) + rng.randint(1, 999)  # each copy its own nonzero timestamp
        h, data = msg.packet(psn, ts, ev, flags)
        out: list = []
        placed = rx.on_data(h, data, now, out)
        want_placed, want = ref.data(psn, ts, ev, flags, now)
        assert placed == want_placed, (psn, ref.nxt)
        check_replies(out, want)
        assert rx.rcv_nxt == ref.nxt
        assert rx.ooo.ranges() == ref.ooo()
        assert (rx.ack_pending, rx.ack_at) == (ref.pending, ref.ack_at)
        assert (rx.last_ts, rx.last_ev, rx.last_rx) == (ref.last_ts, ref.last_ev, ref.last_rx)

    for psn in arrival_order(rng, n):
        step(psn)
    while ref.nxt < n:  # the sender's retransmissions: what is missing, in order
        for psn in range(n):
            if psn not in ref.got:
                step(psn)
    assert rx.rcv_nxt == n and len(rx.ooo) == 0
    for key in ("dup_data", "out_of_window", "out_of_order", "rx_data_pkts", "tx_ack",
                "tx_nack"):
        assert rx.stats[key] == ref.counts[key], key
    # every payload placed exactly once; PSNs marked before they arrived never placed
    assert len(ref.placed) == len(set(ref.placed))
    want = bytearray(len(msg.data))
    for psn in ref.placed:
        off, payload = msg.chunk(psn)
        want[off:off + len(payload)] = payload
    assert buf == want
    assert rx.stats["rx_data_bytes"] == sum(len(msg.chunk(p)[1]) for p in ref.placed)
    assert rx.stats["dup_bytes_pkt"] == 0
    complete = len(ref.placed) == n
    assert [(c.msg, c.ok) for c in done] == ([(MSG, True)] if complete else [])


@pytest.mark.parametrize("marks", [False, True])
@pytest.mark.parametrize("seed", range(150))
def test_sack_receiver_matches_reference(seed, marks):
    run_random(seed, in_order=False, marks=marks)


@pytest.mark.parametrize("marks", [False, True])
@pytest.mark.parametrize("seed", range(60))
def test_in_order_receiver_matches_reference(seed, marks):
    run_random(seed, in_order=True, marks=marks)


def test_sack_blocks_truncated_to_lowest_and_highest():
    msg = Msg(20, 1)
    rx, _, _ = receiver(Cfg(max_sack_blocks=3), msg)
    out: list = []
    for i, psn in enumerate([2, 4, 6, 8, 10]):
        rx.on_data(*msg.packet(psn, 100 + i), 1e-6 * i, out)
    _, h, blocks = decode(out[-1])
    assert h.psn == 0 and h.flags & FLAG_SACK
    assert blocks == [(2, 3), (4, 5), (10, 11)]  # the lowest two and the highest


# ---- in order (RC) --------------------------------------------------------------------


def test_in_order_one_nack_per_gap_and_duplicates_reacked():
    msg = Msg(10, 4)
    rx, buf, _ = receiver(RcConfig(ack_every=100), msg, in_order=True)
    kinds = []
    for i, psn in enumerate([0, 1, 3, 4, 5, 2, 3, 1, 7, 8, 6]):
        out: list = []
        placed = rx.on_data(*msg.packet(psn, 1000 + i), i * US, out)
        kinds.append((psn, placed, [(decode(t)[1].kind, decode(t)[1].psn) for t in out]))
    assert kinds == [
        (0, True, []), (1, True, []),
        (3, False, [(NACK, 2)]),  # the first packet beyond the gap: one NACK
        (4, False, []), (5, False, []),  # beyond the same gap: nothing more
        (2, True, []),  # fills it (RC acks that packet like any other: no ACK at once)
        (3, True, []),
        (1, False, [(ACK, 4)]),  # a duplicate: acked at once
        (7, False, [(NACK, 4)]),  # a new gap (4..6): a new NACK
        (8, False, []), (6, False, []),  # beyond that gap too
    ]
    assert rx.stats["out_of_order"] == 6 and rx.stats["tx_nack"] == 2
    assert rx.stats["dup_data"] == 1 and rx.rcv_nxt == 4 and len(rx.ooo) == 0
    assert buf[:16] == msg.data[:16] and buf[16:] == bytes(len(buf) - 16)


def test_in_order_acks_carry_no_sack():
    msg = Msg(10, 1)
    rx, _, _ = receiver(RcConfig(ack_every=1), msg, in_order=True)
    out: list = []
    for i, psn in enumerate([0, 5, 1, 0]):
        rx.on_data(*msg.packet(psn, 10 + i), i * US, out)
    assert [(decode(t)[1].kind, decode(t)[1].psn, decode(t)[1].flags) for t in out] == [
        (ACK, 1, 0), (NACK, 1, 0), (ACK, 2, 0), (ACK, 2, 0)]
    with pytest.raises(ValueError):
        receiver(RcConfig(), msg, in_order=True, max_sack_blocks=4)
    with pytest.raises(AttributeError):  # SACK mode needs a block limit: RcConfig has none
        receiver(RcConfig(), msg)


def test_in_order_echo_is_the_latest_packet_that_passed_the_crc():
    msg = Msg(10, 1)
    rx, _, _ = receiver(RcConfig(ack_every=100), msg, in_order=True)
    out: list = []
    rx.on_data(*msg.packet(0, 1000), 1 * US, out)
    rx.on_data(*msg.packet(5, 2000), 2 * US, out)  # NACK
    rx.on_data(*msg.packet(6, 3000), 3 * US, out)  # beyond the same gap: no reply
    h, data = msg.packet(7, 4000)
    bad = bytearray(data)
    bad[-1] ^= 1
    rx.on_data(h, bytes(bad), 4 * US, out)  # a CRC error: not this packet
    assert rx.stats["crc"] == 1 and len(out) == 1
    _, ack, _ = decode(rx.make_ack(10 * US))
    assert abs(ack.ts_echo - (3000 + 7000)) <= 1


def test_rc_core_uses_the_receiver():
    a = RcCore(CONN, RcConfig())
    assert isinstance(a.rcv, Receiver) and a.rcv.in_order
    msg = Msg(4, 10)
    h, data = msg.packet(0, 5, ev=1)
    assert a.on_packet(data, 1e-6) == [] and a.stats["bad_ev"] == 1
    a.on_packet(msg.packet(0, 5, flags=FLAG_ACK_REQ)[1], 2e-6)
    assert a.rcv_nxt == 1 == a.rcv.rcv_nxt
    with pytest.raises(AttributeError):
        a.rcv_nxt = 5  # read-only: the receiver owns it


# ---- ACK coalescing ----------------------------------------------------------------------


@pytest.mark.parametrize("in_order", [False, True])
def test_coalescing_every_ack_every_or_at_ack_delay(in_order):
    msg = Msg(20, 2)
    cfg = Cfg(ack_every=4, ack_delay=50 * US)
    rx, _, _ = receiver(cfg, msg, in_order, max_sack_blocks=None if in_order else 32)
    out: list = []
    for k in range(3):
        assert rx.on_data(*msg.packet(k, 1000 + k, ev=k), k * US, out)
    assert out == [] and rx.ack_pending == 3
    assert rx.ack_at == pytest.approx(50 * US)  # from the first unacknowledged packet
    rx.on_data(*msg.packet(3, 1003, ev=3), 3 * US, out)  # the ack_every-th: at once
    assert len(out) == 1 and rx.ack_at == INF and rx.ack_pending == 0
    ev, h, _ = decode(out.pop())
    assert (h.psn, ev, h.ev, h.ts_echo) == (4, 3, 3, 1003)  # nothing held: exact echo
    rx.on_data(*msg.packet(4, 5000, ev=2), 10 * US, out)
    assert out == [] and rx.ack_at == pytest.approx(60 * US)
    rx.on_data(*msg.packet(5, 6000, ev=1), 20 * US, out)
    assert rx.ack_at == pytest.approx(60 * US)  # not pushed back by later packets
    ev, h, _ = decode(rx.make_ack(rx.ack_at))  # the owner's timer
    assert (h.psn, ev) == (6, 1)
    assert abs(h.ts_echo - (6000 + 40_000)) <= 1  # the last packet's ts + 40 us held
    assert rx.ack_at == INF and rx.ack_pending == 0


@pytest.mark.parametrize("in_order", [False, True])
def test_ack_req_and_duplicate_acked_at_once(in_order):
    msg = Msg(20, 2)
    rx, _, _ = receiver(Cfg(ack_every=100), msg, in_order,
                        max_sack_blocks=None if in_order else 32)
    out: list = []
    rx.on_data(*msg.packet(0, 700), 1 * US, out)
    assert out == []
    rx.on_data(*msg.packet(1, 800, flags=FLAG_ACK_REQ), 2 * US, out)
    assert [(decode(t)[1].psn, decode(t)[1].ts_echo) for t in out] == [(2, 800)]
    out.clear()
    rx.on_data(*msg.packet(2, 900), 3 * US, out)  # pending again ...
    assert out == [] and rx.ack_at < INF
    assert not rx.on_data(*msg.packet(0, 950, ev=3), 4 * US, out)  # ... a duplicate
    ev, h, _ = decode(out.pop())
    assert (h.kind, h.psn, ev, h.ts_echo) == (ACK, 3, 3, 950)  # echoes the duplicate
    assert rx.ack_at == INF and rx.stats["dup_data"] == 1


def test_gap_and_its_repair_acked_at_once():
    msg = Msg(20, 2)
    rx, _, _ = receiver(Cfg(ack_every=100), msg)
    out: list = []
    rx.on_data(*msg.packet(0, 100), 1 * US, out)
    assert out == []
    rx.on_data(*msg.packet(2, 200), 2 * US, out)  # a hole at 1
    rx.on_data(*msg.packet(3, 300), 3 * US, out)  # beyond it: still out of order
    rx.on_data(*msg.packet(1, 400), 4 * US, out)  # the repair
    acks = [decode(t) for t in out]
    assert [(h.psn, b, h.ts_echo) for _, h, b in acks] == [
        (1, [(2, 3)], 200), (1, [(2, 4)], 300), (4, [], 400)]
    assert not acks[-1][1].flags & FLAG_SACK


def test_out_of_window_and_crc_refused_silently():
    msg = Msg(20, 2)
    rx, _, _ = receiver(Cfg(window_pkts=4, use_crc=True), msg)
    out: list = []
    assert not rx.on_data(*msg.packet(4, 100), 1 * US, out)
    assert not rx.on_data(*msg.packet(0, 100, crc=False), 1 * US, out)
    assert out == [] and rx.stats["out_of_window"] == 1 and rx.stats["no_crc"] == 1
    assert rx.last_ts == 0  # neither is what the next ACK answers
    assert rx.on_data(*msg.packet(3, 100), 1 * US, out)


# ---- mark_received -----------------------------------------------------------------------


def test_mark_received_sack():
    msg = Msg(20, 1)
    rx, _, _ = receiver(Cfg(ack_every=100), msg)
    out: list = []
    for psn in (0, 1, 5, 8):
        rx.on_data(*msg.packet(psn, 10 + psn), psn * US, out)
    _, h, blocks = decode(rx.mark_received(2, 4, 9 * US))
    assert (rx.rcv_nxt, h.psn, blocks) == (4, 4, [(5, 6), (8, 9)])
    assert rx.mark_received(0, 3, 9 * US) is None  # all below rcv_nxt
    assert rx.mark_received(8, 9, 9 * US) is None  # received already
    assert rx.mark_received(3, 3, 9 * US) is None  # empty
    _, h, blocks = decode(rx.mark_received(4, 5, 9 * US))
    assert (rx.rcv_nxt, h.psn, blocks) == (6, 6, [(8, 9)])
    _, h, blocks = decode(rx.mark_received(7, 8, 9 * US))
    assert (rx.rcv_nxt, h.psn, blocks) == (6, 6, [(7, 9)])
    assert rx.ack_pending == 0 and rx.ack_at == INF
    out.clear()
    assert not rx.on_data(*msg.packet(7, 99), 10 * US, out)  # counted as received
    assert rx.stats["dup_data"] == 1 and len(out) == 1
    assert rx.on_data(*msg.packet(6, 99), 11 * US, out)
    assert rx.rcv_nxt == 9 and len(rx.ooo) == 0


def test_mark_received_in_order():
    msg = Msg(20, 1)
    rx, _, _ = receiver(RcConfig(ack_every=100), msg, in_order=True)
    out: list = []
    rx.on_data(*msg.packet(0, 10), 1 * US, out)
    rx.on_data(*msg.packet(3, 20), 2 * US, out)
    assert rx.nack_sent and [decode(t)[1].kind for t in out] == [NACK]
    _, h, _ = decode(rx.mark_received(1, 2, 3 * US))
    assert (h.kind, h.psn, rx.rcv_nxt, rx.nack_sent) == (ACK, 2, 2, False)
    out.clear()
    rx.on_data(*msg.packet(4, 30), 4 * US, out)  # a gap at 2 now: NACKed anew
    assert [(decode(t)[1].kind, decode(t)[1].psn) for t in out] == [(NACK, 2)]
    _, h, _ = decode(rx.mark_received(3, 5, 5 * US))
    assert (h.psn, h.flags & FLAG_SACK, rx.ooo.ranges()) == (2, 0, [(3, 5)])
    out.clear()
    assert rx.on_data(*msg.packet(2, 40), 6 * US, out)  # fills the hole mark_received left
    assert rx.rcv_nxt == 5 and [decode(t)[1].psn for t in out] == [5]


def test_a_coalesced_ack_states_how_long_its_oldest_packet_waited():
    # three packets arrive 1 ms apart and are answered by one ACK 0.5 ms after the last:
    # its echo is the last one's stamp advanced by its 0.5 ms, its hold field the first
    # one's 2.5 ms (the sender's RTO must allow that, wire.py)
    cfg = RcConfig(mtu_payload=100, ack_every=16, ack_wakeup=True)
    stats: Counter = Counter()
    rcv = Receiver(1, cfg, Reassembly(1 << 20, stats, []), stats, in_order=True)
    out: list = []
    for i in range(3):
        rcv.arrival = 1.0 + i * 1e-3
        buf = bytearray(HEADER_LEN + 100)
        wire.pack_header(buf, DATA, 0, 1, i, 1, i * 100, 300, 0, 100, 10**9 + i * 10**6, 0,
                         wire.crc32(bytes(100)))
        assert rcv.on_data(wire.parse(buf), buf, rcv.arrival, out)
    assert out == []  # coalesced: nothing at once
    ack = wire.parse(rcv.flush(1.0025)[1])
    assert ack.kind == ACK and ack.psn == 3
    assert ack.ts_echo == pytest.approx(10**9 + 2 * 10**6 + 500_000, abs=2)  # ns, floats
    assert ack.msg_len == pytest.approx(2_500_000, abs=2)
    assert rcv.flush(1.003) is None
