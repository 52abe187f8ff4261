"""The receiving half of an MRC connection: PSN state, ACK coalescing, SACK.

``MrcReceiver`` places each DATA payload straight into its message's buffer
(transports/message.py ``Reassembly``) and keeps the next expected PSN
(``rcv_nxt``) and the PSN ranges received beyond it (``ooo``). Its ACKs carry the
cumulative ack, SACK blocks (at most ``max_sack_blocks``: the lowest ones and the
highest), ``ts_echo`` and the EV of the packet that triggered the ACK; ``ts_echo`` is
that packet's ``ts`` plus the time the ACK was held here, so coalescing does not
inflate the sender's RTT samples. ACKs are coalesced (every ``ack_every`` packets or
after ``ack_delay``) but sent at once for FLAG_ACK_REQ, for a packet that is out of
order or fills a gap, and for a duplicate (``dup_data``): an ACK sent at once holds
nothing, so it echoes its packet's ``ts`` exactly and the sender can tell which copy
arrived (transports/spurious.py). Every reply goes back on the EV its packet came in
on.
"""

from __future__ import annotations

from collections import Counter

from transports import wire
from transports.api import Tx
from transports.message import DROPPED, IntervalSet, Reassembly
from transports.wire import (
    ACK,
    FLAG_ACK_REQ,
    FLAG_SACK,
    FLAG_TAIL,
    HEADER_LEN,
    PROBE_ACK,
    pack_header,
)

INF = float("inf")


class MrcReceiver:
    """PSN bookkeeping and ACKs of one MRC connection end (``cfg``: an ``MrcConfig``)."""

    def __init__(self, conn: int, cfg, reasm: Reassembly, stats: Counter[str]) -> None:
        self.conn, self.cfg, self.reasm, self.stats = conn, cfg, reasm, stats
        self.rcv_nxt = 0
        self.ooo = IntervalSet()
        self.ack_pending = 0
        self.ack_at = INF  # when a coalesced ACK is due
        self.last_ts = 0
        self.last_rx = 0.0
        self.last_ev = 0

    def __repr__(self) -> str:
        return f"MrcReceiver(rcv_nxt={self.rcv_nxt}, ooo={len(self.ooo)} ranges)"

    def on_data(self, h: wire.Header, data: bytes | memoryview, now: float,
                out: list[Tx]) -> None:
        payload = memoryview(data)[HEADER_LEN:HEADER_LEN + h.length]
        cfg = self.cfg
        if h.crc:
            if wire.crc32(payload) != h.crc:
                self.stats["crc"] += 1
                return
        elif cfg.use_crc and h.length:
            self.stats["no_crc"] += 1
            return
        psn = h.psn
        if psn < self.rcv_nxt or psn in self.ooo:
            self.stats["dup_data"] += 1
            self.last_ts, self.last_ev, self.last_rx = h.ts, h.ev, now
            out.append(self.make_ack(now))
            return
        if psn >= self.rcv_nxt + cfg.window_pkts:
            self.stats["out_of_window"] += 1
            return
        if self.reasm.place(h.msg, h.offset, payload, h.msg_len, now) == DROPPED:
            return
        self.stats["rx_data_pkts"] += 1
        gap = psn != self.rcv_nxt or len(self.ooo) > 0
        if psn == self.rcv_nxt:
            self.rcv_nxt = self.ooo.pop_front_from(psn + 1)
        else:
            self.ooo.add(psn, psn + 1)
        self.last_ts, self.last_ev, self.last_rx = h.ts, h.ev, now
        self.ack_pending += 1
        if gap or h.flags & FLAG_ACK_REQ or self.ack_pending >= cfg.ack_every:
            out.append(self.make_ack(now))
        elif self.ack_at == INF:
            self.ack_at = now + cfg.ack_delay

    def make_ack(self, now: float) -> Tx:
        self.ack_pending = 0
        self.ack_at = INF
        ooo = self.ooo
        nb = len(ooo)
        flags = 0
        if nb:
            flags = FLAG_SACK
            mx = self.cfg.max_sack_blocks
            if nb <= mx:
                blocks = ooo.ranges()
            else:  # the lowest holes matter most; the highest tells how far data got
                blocks = list(zip(ooo.starts[:mx - 1], ooo.ends[:mx - 1], strict=True))
                blocks.append((ooo.starts[-1], ooo.ends[-1]))
            payload = wire.pack_sack(blocks)
        else:
            payload = b""
        buf = bytearray(HEADER_LEN + len(payload))
        echo = self.last_ts + int((now - self.last_rx) * 1e9) if self.last_ts else 0
        pack_header(buf, ACK, flags, self.conn, self.rcv_nxt, 0, 0, 0, self.last_ev,
                    len(payload), _ns(now), echo & 0xFFFFFFFFFFFFFFFF)
        buf[HEADER_LEN:] = payload
        self.stats["tx_ack"] += 1
        return (self.last_ev, buf)

    def on_probe(self, h: wire.Header, now: float, out: list[Tx]) -> None:
        if h.flags & FLAG_TAIL:  # after a silent RTO: everything this end has, at once
            self.last_ts, self.last_ev, self.last_rx = h.ts, h.ev, now
            out.append(self.make_ack(now))
            self.stats["rx_tail_probe"] += 1
            return
        buf = bytearray(HEADER_LEN)
        pack_header(buf, PROBE_ACK, 0, self.conn, h.psn, 0, 0, 0, h.ev, 0, _ns(now), h.ts)
        out.append((h.ev, buf))
        self.stats["rx_probe"] += 1


def _ns(now: float) -> int:
    return int(now * 1e9) & 0xFFFFFFFFFFFFFFFF
