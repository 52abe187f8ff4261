"""The sending half of an MRC connection: PSNs, messages, acknowledgements, the window.

``Sender`` cuts each posted message into packets of ``mtu_payload`` bytes (by offset, or
in the message's own ``order``: ``OutMsg.order``), gives each a PSN and sprays it over
the GOOD EVs (spray.py ``Spray``: a path selector's choice, a
packet whose EV is out of service going to another EV of the same NIC, so every NIC
keeps its share). What may leave is bounded by the congestion window (bytes in flight,
transports/core/cc.py) and by ``window_pkts`` PSNs past the oldest unacknowledged one.
Lost packets (declared by the loss detector, lossdetect.py, into the ``Flight``,
flight.py) are resent first, on another EV than the one that lost them when that one
was blamed; a *forced* one (after an RTO) leaves whatever the window and carries
FLAG_ACK_REQ, on the next active EV in turn.

Acknowledgements (``ack``): the cumulative ack and SACK blocks take packets out of
flight (``sacked`` keeps the SACKed PSN ranges), a message completes when all its
packets are acknowledged. The sender tells its loss detector of every transmission and
of every first copy acknowledged (``LossHooks``); it never reads a clock or a socket:
``now`` comes in, datagrams (``Tx``) go out in the list the caller passes.

A bounded-loss policy (DBLP, transports/core/dblp/send.py) may be plugged in
(``use_policy``): it decides whether a lost packet is resent (``may_retransmit``), sees
every first transmission and acknowledgement (``on_transmit``, ``on_acked``) and runs
before each pump (``before_pump``). Without one, every lost packet is resent.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Protocol

from transports.core import wire
from transports.core.api import Completion, Tx
from transports.core.cc import Nscc
from transports.core.message import CompletionSink, IntervalSet, OutMsg
from transports.core.mrc.evtable import EvTable
from transports.core.mrc.flight import Flight, SentPacket
from transports.core.mrc.spray import Spray
from transports.core.spurious import RetxLedger
from transports.core.wire import (
    DATA,
    FLAG_ACK_REQ,
    FLAG_LAST,
    FLAG_RETX,
    HEADER_LEN,
    WIRE_VERSION,
    crc32_range,
    datagram,
)


class LossHooks(Protocol):
    """What the sender tells its loss detector (lossdetect.py)."""

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


class SenderConfig(Protocol):
    """The knobs a ``Sender`` reads (``MrcConfig`` has them)."""

    @property
    def mtu_payload(self) -> int: ...
    @property
    def window_pkts(self) -> int: ...
    @property
    def use_crc(self) -> bool: ...
    @property
    def trim_ok(self) -> bool: ...


class Sender:
    """Messages, PSNs and transmissions of one MRC connection end."""

    def __init__(self, conn: int, cfg: SenderConfig, stats: Counter[str], done: CompletionSink,
                 cc: Nscc, spray: Spray, paths: EvTable, flight: Flight, ledger: RetxLedger,
                 loss: LossHooks) -> None:
        self.conn, self.cfg, self.stats, self.done = conn, cfg, stats, done
        self.cc, self.spray, self.paths, self.flight = cc, spray, paths, flight
        self.ledger, self.loss = ledger, loss
        self.policy: SendPolicy | None = None
        self.snd_una = 0
        self.snd_nxt = 0
        self.sacked = IntervalSet()
        self.sendq: deque[OutMsg] = deque()
        self.out_msgs: dict[int, OutMsg] = {}
        self.ev_tx = [0] * paths.evs  # data packets sent per EV

    def __len__(self) -> int:
        """Messages being sent."""
        return len(self.out_msgs)

    def __repr__(self) -> str:
        flight = self.flight
        return (f"Sender(una={self.snd_una}, nxt={self.snd_nxt}, inflight={len(flight)}, "
                f"retxq={flight.n_waiting()}, bytes_in_flight={flight.bytes_in_flight})")

    def use_policy(self, policy: SendPolicy) -> None:
        """Plug in a bounded-loss policy (DBLP's sending half)."""
        self.policy = policy

    # ---- messages ---------------------------------------------------------------------------

    def sending(self, msg: int) -> bool:
        """Whether message ``msg`` is being sent."""
        return msg in self.out_msgs

    def post(self, om: OutMsg) -> None:
        """Queue message ``om`` behind the others."""
        self.out_msgs[om.msg] = om
        self.sendq.append(om)

    def stop(self, om: OutMsg) -> None:
        """Message ``om`` is abandoned (its receiver closed it): nothing more of it leaves
        and it is no longer being sent (its packets: ``Flight.forget``)."""
        if om in self.sendq:
            self.sendq.remove(om)
        om.done = True
        del self.out_msgs[om.msg]

    # ---- acknowledgements -------------------------------------------------------------------

    def ack(self, cum: int, blocks: list[tuple[int, int]], now: float,
            proof: list[int] | None) -> tuple[int, set[int], list[int]]:
        """Take what cumulative ack ``cum`` and SACK ``blocks`` acknowledge out of flight.
        Returns (bytes newly acknowledged, EVs whose first transmissions were acknowledged,
        retransmitted PSNs acknowledged); PSNs acknowledged go to ``proof`` if given."""
        acked_psn = self.flight.acked
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
                p = acked_psn(psn)
                if p is not None:
                    newly += self._acked(p, now, touched)
                    if p.retx:
                        acked.append(psn)
                    if proof is not None:
                        proof.append(psn)
        return newly, touched, acked

    def _acked(self, p: SentPacket, now: float, touched: set[int]) -> int:
        ev = p.ev
        if not p.retx:  # a retransmitted packet's ACK may be for the first copy: no reference
            self.loss.first_copy_acked(p, now)
            touched.add(ev)
        self.spray.acked(ev)
        om = p.om
        om.acked += 1
        if om.acked == om.npkts and not om.done:
            om.done = True
            del self.out_msgs[om.msg]
            self.done.append(Completion(om.msg, "send", True, om.nbytes, now))
        if self.policy is not None:
            self.policy.on_acked(p, now)
        return HEADER_LEN + p.length

    # ---- transmission -------------------------------------------------------------------------

    def pump(self, now: float, out: list[Tx]) -> None:
        """Send what the window allows: lost packets first, then new ones."""
        if not self.paths.active:
            return
        policy = self.policy
        if policy is not None:
            policy.before_pump(now)
        cwnd = self.cc.cwnd
        flight, spray = self.flight, self.spray
        last = None
        while (p := flight.next_waiting()) is not None:
            if policy is not None and not policy.may_retransmit(p):  # parked (bounded loss)
                flight.pop_waiting()
                continue
            forced = flight.forced(p.psn)
            bif = flight.bytes_in_flight
            if bif and bif + HEADER_LEN + p.length > cwnd and not forced:
                break
            flight.pop_waiting()
            if not p.retx:  # the first copy: a duplicate of it would name it too
                self.ledger.record(p.ts, p.ev, p.psn, now)
            p.retx = True
            if forced:  # an RTO probe: its ACK at once (an exact echo: transports/core/spurious.py)
                ev = spray.next_silent(p.ev)
            else:
                ev = spray.pick(p.psn, p.ev if p.avoid else -1)
            last = self._transmit(p, ev, now, out, FLAG_RETX | (FLAG_ACK_REQ if forced else 0))
            self.ledger.record(p.ts, p.ev, p.psn, now, p.why)
            self.stats["tx_retx"] += 1
        cfg = self.cfg
        mtu, window, use_crc = cfg.mtu_payload, cfg.window_pkts, cfg.use_crc
        trim_ok = wire.FLAG_TRIM_OK if cfg.trim_ok else 0
        sendq = self.sendq
        while sendq and self.snd_nxt - self.snd_una < window:
            om = sendq[0]
            order = om.order
            off = om.next_off if order is None else order[om.nsent] * mtu
            length = min(mtu, om.nbytes - off)
            bif = flight.bytes_in_flight
            if bif and bif + HEADER_LEN + length > cwnd:
                break
            om.next_off = off + length
            om.nsent += 1
            flags = trim_ok
            if om.nsent >= om.npkts:  # the first pass is over (by offset: next_off >= nbytes)
                sendq.popleft()
                flags |= FLAG_LAST
            crc = crc32_range(om.data, off, length) if use_crc and length else 0
            p = SentPacket(self.snd_nxt, om, off, length, flags, crc)
            flight.add(p)
            self.snd_nxt += 1
            last = self._transmit(p, spray.pick(p.psn, -1), now, out, 0)
        if last is not None and (not sendq or flight.waiting()):
            wire.request_ack(last)

    def _transmit(self, p: SentPacket, ev: int, now: float, out: list[Tx], flags: int) -> bytearray:
        seq, ts = self.flight.stamp(now)
        p.ev, p.sent, p.ts, p.seq, p.lost = ev, now, ts, seq, False
        n = p.length
        om = p.om
        buf = datagram(WIRE_VERSION, DATA, p.flags | flags, self.conn, p.psn, om.msg, p.offset,
                       om.nbytes, ev, ts, 0, p.crc, om.data, p.offset, n)
        self.flight.on_wire(p)
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
        self.flight.clear()
