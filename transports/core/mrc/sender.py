"""The sending half of an MRC connection: PSNs, the packets in flight, spraying, the window.

``Sender`` cuts each posted message into packets of ``mtu_payload`` bytes, gives each
a PSN and sprays it over the GOOD EVs a path selector picks (transports/core/mrc/pathsel.py;
a packet whose EV is out of service goes to another EV of the same NIC, so every NIC
keeps its share). What may leave is bounded by the congestion window (bytes in flight,
transports/core/cc.py) and by ``window_pkts`` PSNs past the oldest unacknowledged one.
Lost packets (declared by the loss detector, transports/core/mrc/lossdetect.py) wait in
``retxq`` and are resent first, on another EV than the one that lost them when that
one was blamed; a *forced* one (after a silent RTO) leaves whatever the window and
carries FLAG_ACK_REQ, on the next active EV in turn.

Acknowledgements (``ack``): the cumulative ack and SACK blocks take packets out of
flight (``sacked`` keeps the SACKed PSN ranges), a message completes when all its
packets are acknowledged. The sender never reads a clock or a socket: ``now`` comes
in, datagrams (``Tx``) go out in the list the caller passes.

A bounded-loss policy (DBLP, transports/core/dblp/connection.py) may be plugged in: it decides
whether a lost packet is resent (``may_retransmit``), sees every first transmission
and acknowledgement (``on_transmit``, ``on_acked``) and runs before each pump
(``before_pump``). Without one, every lost packet is resent (reliable MRC).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Sequence
from typing import Protocol

from transports.core import wire
from transports.core.api import Completion, Tx
from transports.core.cc import Nscc
from transports.core.message import IntervalSet, OutMsg, SentPacket
from transports.core.mrc.evtable import EV_GOOD, EvTable
from transports.core.mrc.pathsel import DELAY, GOOD, PathSelector
from transports.core.spurious import RetxLedger
from transports.core.wire import FLAG_ACK_REQ, FLAG_LAST, FLAG_RETX, HEADER_LEN, pack_header


class LossHooks(Protocol):
    """What the sender tells its loss detector (transports/core/mrc/lossdetect.py)."""

    def on_sent(self, p: SentPacket, now: float) -> None:
        """``p`` just left on ``p.ev``."""

    def first_copy_acked(self, p: SentPacket, now: float) -> None:
        """A first transmission was acknowledged."""


class SendPolicy(Protocol):
    """What a bounded-loss mode decides on the sending side (transports/core/dblp/send.py)."""

    def may_retransmit(self, p: SentPacket) -> bool:
        """Whether lost packet ``p`` is resent now (False: it is parked)."""

    def on_transmit(self, p: SentPacket, first: bool) -> None:
        """``p`` was just sent (``first``: its first transmission)."""

    def on_acked(self, p: SentPacket, now: float) -> None:
        """``p`` was just acknowledged."""

    def before_pump(self, now: float) -> None:
        """A pump starts: parked packets the bound needs go back to the queue."""


class Sender:
    """PSN state, packets in flight and transmission of one MRC connection end."""

    def __init__(self, conn: int, cfg, stats: Counter[str], done: list[Completion],
                 cc: Nscc, sel: PathSelector, paths: EvTable, ledger: RetxLedger,
                 nic_of: Sequence[int] | None) -> None:
        self.conn, self.cfg, self.stats, self.done = conn, cfg, stats, done
        self.cc, self.sel, self.paths, self.ledger = cc, sel, paths, ledger
        self.state = paths.state  # (the same list)
        self.nic_of = list(nic_of) if nic_of is not None else None
        self.loss: LossHooks  # the core's LossDetector, set once both exist
        self.policy: SendPolicy | None = None
        self.snd_una = 0
        self.snd_nxt = 0
        self.inflight: dict[int, SentPacket] = {}
        self.sacked = IntervalSet()
        self.sendq: deque[OutMsg] = deque()
        self.out_msgs: dict[int, OutMsg] = {}
        self.retxq: deque[int] = deque()
        self.forced: set[int] = set()  # silent-RTO retransmissions: sent whatever the window
        self.silent_ev = -1  # the EV the last of them went on (they take turns)
        self.bytes_in_flight = 0
        self.tx_seq = 0  # transmission number (global send order, probes included)
        self.tx_ts = 0  # the last DATA timestamp: each is unique, so an ACK names one copy
        self.congested = [False] * paths.evs  # the selector's delay signal per EV
        self.ev_tx = [0] * paths.evs  # data packets sent per EV

    def __repr__(self) -> str:
        return (f"Sender(una={self.snd_una}, nxt={self.snd_nxt}, inflight={len(self.inflight)}, "
                f"retxq={len(self.retxq)}, bytes_in_flight={self.bytes_in_flight})")

    def post(self, om: OutMsg) -> None:
        """Queue message ``om`` behind the others."""
        self.out_msgs[om.msg] = om
        self.sendq.append(om)

    def stamp(self, now: float) -> tuple[int, int]:
        """A new transmission's (seq, ts): packets sent at one instant are 1 ns apart, so
        each timestamp names one transmission."""
        self.tx_seq += 1
        ts = max(_ns(now), self.tx_ts + 1)
        self.tx_ts = ts
        return self.tx_seq, ts

    # ---- acknowledgements -------------------------------------------------------------------

    def ack(self, cum: int, blocks: list[tuple[int, int]], now: float,
            proof: list[int] | None) -> tuple[int, set[int], list[int]]:
        """Take what cumulative ack ``cum`` and SACK ``blocks`` acknowledge out of flight.
        Returns (bytes newly acknowledged, EVs whose first transmissions were acknowledged,
        retransmitted PSNs acknowledged); PSNs acknowledged go to ``proof`` if given."""
        inflight = self.inflight
        touched: set[int] = set()
        acked: list[int] = []
        newly = 0
        ranges: list[tuple[int, int]] = []
        if cum > self.snd_una:
            ranges.append((self.snd_una, cum))
            self.snd_una = cum
            self.sacked.discard_below(cum)
        for a, b in blocks:
            if b > self.snd_una:
                ranges.extend(self.sacked.add(max(a, self.snd_una), b))
        for s, e in ranges:
            for psn in range(s, e):
                p = inflight.pop(psn, None)
                if p is not None:
                    newly += self._acked(p, now, touched)
                    if p.retx:
                        acked.append(psn)
                    if proof is not None:
                        proof.append(psn)
        return newly, touched, acked

    def _acked(self, p: SentPacket, now: float, touched: set[int]) -> int:
        size = HEADER_LEN + p.length
        if not p.lost:
            self.bytes_in_flight -= size
        ev = p.ev
        if not p.retx:  # a retransmitted packet's ACK may be for the first copy: no reference
            self.loss.first_copy_acked(p, now)
            touched.add(ev)
        self.sel.feedback(ev, DELAY if self.congested[ev] else GOOD)
        om = p.om
        om.acked += 1
        if om.acked == om.npkts and not om.done:
            om.done = True
            del self.out_msgs[om.msg]
            self.done.append(Completion(om.msg, "send", True, om.nbytes, now))
        if self.policy is not None:
            self.policy.on_acked(p, now)
        return size

    def requeue(self, p: SentPacket, why: str, avoid: bool = True) -> None:
        """Take ``p`` out of flight and queue it for retransmission (on another EV than its
        last if ``avoid``); ``why``: what declared it lost (a ``loss_*`` statistic's name,
        kept to tell which rule a spurious retransmission came from)."""
        p.lost, p.avoid, p.why = True, avoid, why
        self.bytes_in_flight -= HEADER_LEN + p.length
        self.retxq.append(p.psn)

    def forget(self, p: SentPacket) -> None:
        """``p`` will never be sent again (its message was stopped): out of flight for good."""
        if self.inflight.get(p.psn) is p:
            del self.inflight[p.psn]
            if not p.lost:
                self.bytes_in_flight -= HEADER_LEN + p.length

    # ---- transmission -------------------------------------------------------------------------

    def pick_ev(self, psn: int, avoid: int) -> int:
        """The EV of packet ``psn``: the selector's choice among GOOD EVs (its NIC's others
        first if that one is out of service), not ``avoid`` if another is active."""
        active = self.paths.active
        ev = self.sel.next_ev(psn)
        if self.state[ev] != EV_GOOD:
            nic_of = self.nic_of
            if nic_of is not None:  # its NIC's other EVs in service, if any
                nic = nic_of[ev]
                same = [e for e in active if nic_of[e] == nic]
                ev = same[psn % len(same)] if same else active[psn % len(active)]
            else:
                ev = active[psn % len(active)]
        if ev == avoid and len(active) > 1:
            for _ in range(len(active)):
                ev = self.sel.next_ev(psn)
                if ev != avoid and self.state[ev] == EV_GOOD:
                    return ev
            ev = next(e for e in active if e != avoid)
        return ev

    def nic(self, ev: int) -> int:
        """The NIC (plane) EV ``ev`` leaves by (0 for every EV without a connection plan)."""
        return self.nic_of[ev] if self.nic_of is not None else 0

    def next_silent_ev(self, avoid: int, nic: int = -1, other: bool = False) -> int:
        """The EV of a silent RTO's retransmission or tail probe: with no evidence against
        any path, each active EV in turn after the previous one's, skipping ``avoid`` (the
        packet's last). With ``nic`` (>= 0), only that NIC's active EVs (``other``: only
        the other NICs'), as long as it has (they have) any (a tail probe's second copy:
        transports/core/mrc/lossdetect.py)."""
        active = self.paths.active
        nic_of = self.nic_of
        if nic >= 0 and nic_of is not None:
            some = [e for e in active if (nic_of[e] == nic) != other]
            if some:
                active = some
        i = bisect_right(active, self.silent_ev) % len(active)
        if active[i] == avoid and len(active) > 1:
            i = (i + 1) % len(active)
        self.silent_ev = active[i]
        return self.silent_ev

    def pump(self, now: float, out: list[Tx]) -> None:
        """Send what the window allows: lost packets first, then new ones."""
        if not self.paths.active:
            return
        policy = self.policy
        if policy is not None:
            policy.before_pump(now)
        cwnd = self.cc.cwnd
        inflight = self.inflight
        retxq = self.retxq
        last = None
        forced_set = self.forced
        while retxq:
            p = inflight.get(retxq[0])
            if p is None or not p.lost:
                forced_set.discard(retxq.popleft())
                continue
            if policy is not None and not policy.may_retransmit(p):  # parked (bounded loss)
                forced_set.discard(retxq.popleft())
                continue
            forced = p.psn in forced_set
            if (self.bytes_in_flight and self.bytes_in_flight + HEADER_LEN + p.length > cwnd
                    and not forced):
                break
            retxq.popleft()
            if not p.retx:  # the first copy: a duplicate of it would name it too
                self.ledger.record(p.ts, p.ev, p.psn, now)
            p.retx = True
            if forced:  # an RTO probe: its ACK at once (an exact echo: transports/core/spurious.py)
                forced_set.discard(p.psn)
                ev = self.next_silent_ev(p.ev)
            else:
                ev = self.pick_ev(p.psn, p.ev if p.avoid else -1)
            last = self._transmit(p, ev, now, out, FLAG_RETX | (FLAG_ACK_REQ if forced else 0))
            self.ledger.record(p.ts, p.ev, p.psn, now, p.why)
            self.stats["tx_retx"] += 1
        cfg = self.cfg
        mtu, window, use_crc = cfg.mtu_payload, cfg.window_pkts, cfg.use_crc
        sendq = self.sendq
        while sendq and self.snd_nxt - self.snd_una < window:
            om = sendq[0]
            off = om.next_off
            length = min(mtu, om.nbytes - off)
            if self.bytes_in_flight and self.bytes_in_flight + HEADER_LEN + length > cwnd:
                break
            om.next_off = off + length
            flags = 0
            if om.next_off >= om.nbytes:
                sendq.popleft()
                flags = FLAG_LAST
            crc = wire.crc32(om.data[off:off + length]) if use_crc and length else 0
            p = SentPacket(self.snd_nxt, om, off, length, flags, crc)
            inflight[self.snd_nxt] = p
            self.snd_nxt += 1
            last = self._transmit(p, self.pick_ev(p.psn, -1), now, out, 0)
        if last is not None and (not sendq or retxq):
            last[3] |= FLAG_ACK_REQ  # the low byte of the big-endian flags field

    def _transmit(self, p: SentPacket, ev: int, now: float, out: list[Tx], flags: int) -> bytearray:
        seq, ts = self.stamp(now)
        p.ev, p.sent, p.ts, p.seq, p.lost = ev, now, ts, seq, False
        n = p.length
        om = p.om
        buf = bytearray(HEADER_LEN + n)
        pack_header(buf, wire.DATA, p.flags | flags, self.conn, p.psn, om.msg, p.offset,
                    om.nbytes, ev, n, ts, 0, p.crc)
        if n:
            buf[HEADER_LEN:] = om.data[p.offset:p.offset + n]
        self.bytes_in_flight += HEADER_LEN + n
        self.loss.on_sent(p, now)
        self.ev_tx[ev] += 1
        self.stats["tx_data_pkts"] += 1
        if self.policy is not None:
            self.policy.on_transmit(p, not flags)
        out.append((ev, buf))
        return buf

    def fail(self, now: float, error: str) -> None:
        """The connection failed: every message being sent completes with ``error``."""
        for om in list(self.out_msgs.values()):
            self.done.append(Completion(om.msg, "send", False, 0, now, error))
        self.out_msgs.clear()
        self.sendq.clear()
        self.inflight.clear()
        self.retxq.clear()
        self.forced.clear()
        self.bytes_in_flight = 0


def _ns(now: float) -> int:
    return int(now * 1e9) & 0xFFFFFFFFFFFFFFFF
