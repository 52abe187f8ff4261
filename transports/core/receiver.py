"""The receiving half of a connection (MRC and RC): PSN state, ACK coalescing, SACK.

``Receiver`` places each DATA payload straight into its message's buffer
(transports/core/message.py ``Reassembly``) and keeps the next expected PSN (``rcv_nxt``)
and the PSN ranges received beyond it (``ooo``). Two modes:

* SACK (``in_order=False``, MRC): any PSN in ``[rcv_nxt, rcv_nxt + window_pkts)``
  is placed; ACKs carry the cumulative ack and SACK blocks (at most
  ``max_sack_blocks``: the lowest ones and the highest). A packet that is out of
  order or fills a gap is acknowledged at once, so the sender learns of the hole
  (or its repair) without waiting for the coalescing timer.
* In order (``in_order=True``, RC, go-back-N as RoCE NICs do): only ``psn ==
  rcv_nxt`` is placed; a later PSN is dropped (``out_of_order``) and the first one
  beyond each gap is answered by one NACK carrying ``rcv_nxt`` (``tx_nack``), since
  the sender resends everything from there anyway and one NACK per packet would
  only make it go back again. ACKs are cumulative, never SACK.

In both modes ACKs are coalesced (every ``ack_every`` packets or after
``ack_delay``: the owner calls ``make_ack`` when ``ack_at`` is due) but sent at
once for FLAG_ACK_REQ and for a duplicate (``dup_data``). ``ts_echo`` is the
triggering packet's ``ts`` plus the time the ACK was held here, so coalescing does
not inflate the sender's RTT samples, and an ACK sent at once echoes its packet's
``ts`` exactly so the sender can tell which copy arrived (transports/core/spurious.py).
What the echo leaves out, the ACK states: its ``msg_len`` is how long the oldest packet
it covers waited here (ns; QUIC's ACK Delay), so the sender's RTO allows the hold a
coalesced ACK adds to every packet but the last it answers.
Every reply goes back on the EV its packet came in on.

Congestion signals (transports/core/wire.py): a packet that arrived marked CE is
acknowledged at once, and an ACK carries FLAG_ECE when the packet it answers (``last_*``)
was marked; a trimmed packet (SACK mode) is answered by a NACK naming its PSN
(``on_trimmed``).

With ``ack_wakeup`` (the I/O loop serves datagrams in batches, as a NIC's interrupt
coalescing: transports/io/loop.py), ACKs are coalesced as RoCE and UET NICs do: one per
wake-up (the loop calls ``flush`` once the batch is in) or per ``ack_every`` packets,
the SACK blocks carrying the rest; a gap and FLAG_ACK_REQ no longer cost an ACK each but
are answered by the wake-up's one. Duplicates, CE marks and NACKs still go at once. The hold time
is measured from the packet's arrival (``arrival``: the kernel's receive timestamp the
loop passes in), so the echo stays exact however late the engine woke; a tail probe is
answered with its own stamp, unadvanced, as the sender finds the probe by it.

Per-packet code: no logging, no allocation beyond the reply, attributes read into
locals once.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from transports.core import wire
from transports.core.api import Tx
from transports.core.message import DROPPED, IntervalSet, Reassembly
from transports.core.wire import (
    ACK,
    FLAG_ACK_REQ,
    FLAG_CE,
    FLAG_ECE,
    FLAG_SACK,
    FLAG_TAIL,
    HEADER_LEN,
    NACK,
    PROBE_ACK,
    pack_header,
)

INF = float("inf")
HOLD_MAX_NS = 0xFFFFFFFF  # an ACK's hold field (``msg_len``, u32 ns) saturates at 4.29 s


class ReceiverConfig(Protocol):
    """The knobs a ``Receiver`` reads (``MrcConfig`` and ``RcConfig`` both have them)."""

    @property
    def use_crc(self) -> bool: ...  # a DATA packet with a payload but no CRC is refused
    @property
    def window_pkts(self) -> int: ...  # SACK mode: PSNs accepted beyond rcv_nxt
    @property
    def ack_every(self) -> int: ...  # an ACK at least every this many placed packets
    @property
    def ack_delay(self) -> float: ...  # ... or this long after the first unacknowledged one


class Receiver:
    """PSN bookkeeping and ACKs of one connection end.

    ``max_sack_blocks``: SACK mode only; ``None`` reads ``cfg.max_sack_blocks`` (an
    ``MrcConfig`` has it, an ``RcConfig`` does not, which is why it is not required of
    ``cfg``). An in-order receiver sends no SACK blocks at all.
    """

    def __init__(self, conn: int, cfg: ReceiverConfig, reasm: Reassembly,
                 stats: Counter[str], in_order: bool = False, *,
                 max_sack_blocks: int | None = None) -> None:
        if in_order:
            if max_sack_blocks:
                raise ValueError("an in-order receiver sends no SACK blocks")
            max_sack_blocks = 0
        else:
            if max_sack_blocks is None:
                max_sack_blocks = cfg.max_sack_blocks  # type: ignore[attr-defined]
            if max_sack_blocks < 1:
                raise ValueError(f"max_sack_blocks={max_sack_blocks}: must be >= 1")
        self.conn, self.cfg, self.reasm, self.stats = conn, cfg, reasm, stats
        self.in_order = in_order
        self.max_sack_blocks = max_sack_blocks  # 0: no SACK (in order)
        self.rcv_nxt = 0
        self.ooo = IntervalSet()  # PSNs received beyond rcv_nxt (in order: mark_received only)
        self.nack_sent = False  # in order: this gap was NACKed already
        self.ack_pending = 0  # packets placed since the last ACK
        self.ack_at = INF  # when a coalesced ACK is due
        self.last_ts = 0  # ts, EV and arrival time of the packet the next ACK answers
        self.last_rx = 0.0
        self.last_ev = 0
        self.last_ce = 0  # FLAG_CE of that packet: the ACK echoes it (FLAG_ECE)
        self.first_rx = 0.0  # arrival of the oldest packet placed since the last ACK
        # when the datagram being handled reached the host (None: ``now``); the owner
        # sets it before each one (the kernel's receive timestamp)
        self.arrival: float | None = None
        # one ACK per wake-up (``flush``) or per ack_every packets (a config without the
        # knob: per packet, as before)
        self.ack_wakeup = bool(getattr(cfg, "ack_wakeup", False))

    def __repr__(self) -> str:
        mode = "in order" if self.in_order else "sack"
        return f"Receiver({mode}, rcv_nxt={self.rcv_nxt}, ooo={len(self.ooo)} ranges)"

    def on_data(self, h: wire.Header, data: bytes | memoryview, now: float,
                out: list[Tx]) -> bool:
        """Take one DATA packet (``data``: the whole datagram); replies go to ``out``.

        True when the packet's PSN was newly accepted (its payload placed, or its bytes
        already there under another PSN), False when it was refused or a duplicate.
        """
        payload = memoryview(data)[HEADER_LEN:HEADER_LEN + h.length]
        cfg = self.cfg
        stats = self.stats
        rx = now if self.arrival is None else self.arrival
        if h.crc:
            if wire.crc32(payload) != h.crc:
                stats["crc"] += 1
                return False
        elif cfg.use_crc and h.length:
            stats["no_crc"] += 1
            return False
        psn = h.psn
        ce = h.flags & FLAG_CE
        rcv_nxt = self.rcv_nxt
        ooo = self.ooo
        if self.in_order:
            # RC echoes the latest packet that passed the CRC, whatever became of it
            self.last_ts, self.last_ev, self.last_rx = h.ts, h.ev, rx
            self.last_ce = ce
            if psn < rcv_nxt:
                stats["dup_data"] += 1
                out.append(self.make_ack(now))
                return False
            if psn > rcv_nxt:
                stats["out_of_order"] += 1
                if not self.nack_sent:
                    self.nack_sent = True
                    out.append(self.make_ack(now, NACK))
                return False
            if self.reasm.place(h.msg, h.offset, payload, h.msg_len, now) == DROPPED:
                return False
            stats["rx_data_pkts"] += 1
            gap = len(ooo) > 0  # only after mark_received left a hole: it just shrank
            self.rcv_nxt = ooo.pop_front_from(psn + 1)
            self.nack_sent = False
        else:
            if psn < rcv_nxt or psn in ooo:
                stats["dup_data"] += 1
                self.last_ts, self.last_ev, self.last_rx = h.ts, h.ev, rx
                self.last_ce = ce
                out.append(self.make_ack(now))
                return False
            if psn >= rcv_nxt + cfg.window_pkts:
                stats["out_of_window"] += 1
                return False
            if self.reasm.place(h.msg, h.offset, payload, h.msg_len, now) == DROPPED:
                return False
            stats["rx_data_pkts"] += 1
            gap = psn != rcv_nxt or len(ooo) > 0
            if psn == rcv_nxt:
                self.rcv_nxt = ooo.pop_front_from(psn + 1)
            else:
                ooo.add(psn, psn + 1)
            self.last_ts, self.last_ev, self.last_rx = h.ts, h.ev, rx
            self.last_ce = ce
        if not self.ack_pending:  # the oldest packet the next ACK covers arrived now
            self.first_rx = rx
        self.ack_pending += 1
        # a CE mark is echoed at once, on the EV it came by (its own ACK, as DCTCP's
        # receiver acknowledges a change of CE state at once): a coalesced ACK answers
        # only the wake-up's last packet and would drop the marks before it
        at_once = ce or self.ack_pending >= cfg.ack_every
        if not self.ack_wakeup:  # per packet: a gap and FLAG_ACK_REQ are answered too
            at_once = at_once or gap or h.flags & FLAG_ACK_REQ
        if at_once:
            out.append(self.make_ack(now))
        elif self.ack_at == INF:  # coalesced: also for an owner that never flushes
            self.ack_at = now + cfg.ack_delay
        return True

    def flush(self, now: float) -> Tx | None:
        """The end of a wake-up: the ACK of the packets taken since the last one (None if
        there are none)."""
        return self.make_ack(now) if self.ack_pending else None

    def make_ack(self, now: float, kind: int = ACK) -> Tx:
        """The ACK (or, ``kind=NACK``, the NACK) of everything received so far.

        It answers the last packet taken (``last_ts``, ``last_ev``) and clears the
        coalescing state: whatever was pending is acknowledged by this one.
        """
        # the longest any packet this ACK covers waited here (its ACK delay, sent to the
        # peer, whose RTO must allow it: the echo below takes it out of the RTT)
        held = now - (self.first_rx if self.ack_pending else self.last_rx)
        held_ns = min(int(held * 1e9), HOLD_MAX_NS) if held > 0 and self.last_ts else 0
        self.ack_pending = 0
        self.ack_at = INF
        ooo = self.ooo
        nb = len(ooo)
        mx = self.max_sack_blocks
        flags = FLAG_ECE if self.last_ce else 0
        if nb and mx:
            flags |= FLAG_SACK
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
        pack_header(buf, kind, flags, self.conn, self.rcv_nxt, 0, 0, held_ns, self.last_ev,
                    len(payload), _ns(now), echo & 0xFFFFFFFFFFFFFFFF)
        if payload:
            buf[HEADER_LEN:] = payload
        self.stats["tx_nack" if kind == NACK else "tx_ack"] += 1
        return (self.last_ev, buf)

    def on_trimmed(self, h: wire.Header, now: float, out: list[Tx]) -> None:
        """A DATA packet a switch trimmed (its header alone): a NACK naming its PSN goes
        back at once on its EV, echoing its ``ts`` (the sender resends that transmission
        without blaming the path). A PSN already received needs nothing."""
        psn = h.psn
        if psn < self.rcv_nxt or psn in self.ooo:
            self.stats["dup_trimmed"] += 1
            return
        buf = bytearray(HEADER_LEN)
        pack_header(buf, NACK, 0, self.conn, psn, h.msg, h.offset, h.msg_len, h.ev, 0,
                    _ns(now), h.ts)
        self.stats["rx_trimmed"] += 1
        self.stats["tx_trim_nack"] += 1
        out.append((h.ev, buf))

    def on_probe(self, h: wire.Header, now: float, out: list[Tx]) -> None:
        """Answer a PROBE on its EV; a tail probe (FLAG_TAIL) by a full ACK instead."""
        if h.flags & FLAG_TAIL:  # after a silent RTO: everything this end has, at once
            # echoed exactly (no hold added): the sender finds its probe by this stamp
            self.last_ts, self.last_ev, self.last_rx = h.ts, h.ev, now
            out.append(self.make_ack(now))
            self.stats["rx_tail_probe"] += 1
            return
        buf = bytearray(HEADER_LEN)
        pack_header(buf, PROBE_ACK, 0, self.conn, h.psn, 0, 0, 0, h.ev, 0, _ns(now), h.ts)
        out.append((h.ev, buf))
        self.stats["rx_probe"] += 1

    def mark_received(self, lo: int, hi: int, now: float) -> Tx | None:
        """Count PSNs ``[lo, hi)``, which the sender will never send, as received.

        DBLP's receiver uses it once the sender confirmed it abandoned a message
        (STOP_OK): its PSNs must not hold ``rcv_nxt`` back forever. Returns the ACK
        that tells the sender, or None when nothing changed (all of them were
        received already).
        """
        rcv_nxt = self.rcv_nxt
        a = max(lo, rcv_nxt)
        if hi <= a or not self.ooo.add(a, hi):
            return None
        nxt = self.ooo.pop_front_from(rcv_nxt)
        if nxt != rcv_nxt:
            self.rcv_nxt = nxt
            self.nack_sent = False  # in order: the gap it reported is gone
        return self.make_ack(now)


def _ns(now: float) -> int:
    return int(now * 1e9) & 0xFFFFFFFFFFFFFFFF
