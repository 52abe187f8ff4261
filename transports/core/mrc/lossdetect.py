"""MRC's loss detection: which packets are lost, whose fault that is, and when to give up.

The ``LossDetector`` of one sender takes events in (a transmission left, a first copy
was acknowledged, an ACK of new data, an RTT sample, an ACK naming a retransmission, a
probe answered, the clock) and decides: a packet is lost (``Flight.requeue``: it waits
to be resent), its EV is retired (``EvTable.retire``) and the window cut
(``Nscc.on_timeout``), a probe goes out (datagrams appended to the caller's list), or
the connection fails (``expire`` returns the error). Its parts, each an object of its
own (``Timeouts`` is the connection's, shared with DBLP's halves; the rest are its own):

- evidence.py ``Evidence``: send orders and the latest transmissions delivered; rules A
  (a later packet on the same EV acknowledged) and B (``dupthresh`` later ones on the
  same plane, with RACK timing; or a reorder timer);
- timeouts.py ``Timeouts``: RTT estimators, the RTO floor, back-off and strikes;
- probes.py ``Probes``: tail probes after a silent RTO or a probe timeout, plane probes
  after another plane's evidence;
- blame.py ``Blame``: losses blamed on a path, for undo.

Rule C (here, ``expire``): per packet RTO, the larger of ``srtt + 4 rttvar`` of the EV
it was sent on and of all EVs together, within [floor, rto_max], doubled per RTO
without progress and then jittered (timeouts.py), counted from the packet's send time
and, as long as nothing sent after it has been acknowledged, restarted by every ACK of
new data (RFC 6298: while that ACK clock runs, a queue ahead of the packet is still
draining; once something sent after it is acknowledged, it is due from its send time
again and its timer is re-armed to that, so a lost tail does not wait an RTO after the
last ACK). When only another plane got something sent after it through, its expiry is
no loss yet: its plane may be queued (the two ports of a host fill out of step), so a
plane probe goes behind it and the RTO blames its path only once its plane has been
silent (no ACK of data sent on it) and that probe unanswered for an RTO: a dead plane,
not a queue (``rto_plane_suspect`` counts the expiries that waited).

Blame: a path, or the fabric in front of the receiver? A loss is blamed on its EV only
on **evidence that the fabric still delivers: a transmission sent after the lost packet
has been acknowledged** (its first copy, any EV; or a retransmission whose ACK names it
exactly; A and B have the evidence by construction). Then the EV is retired and, so
that a dead path does not hold the window until each of its packets times out, more of
its packets are declared lost: after B those that B's timing condemns (without
``dupthresh``), after a blamed RTO all sent before it came due; it also quick-adapts the
window, and the first lost packet waiting is resent at once, past the window (RFC 6298,
5.4: packets of live EVs still counted in flight would otherwise hold it until their own
RTOs). Without that evidence an RTO is **silent** (``rto_silent``): nothing is resent
yet, tail probes go after the packet (probes.py), the first packet already declared
lost and waiting for the window, if any, is sent past the window (the window may be held
by packets whose ACKs were lost), and every timer backs off (a strike); no EV is
retired, nothing flushed, the window kept. A FIFO queue that every EV crosses delivers
in send order, so nothing sent later can get through first: a common-mode delay never
blames an EV however long it lasts (where the paths before the queue differ by more than
a packet's spacing, a later packet can overtake and blame one; the late packet's own ACK
then undoes it, below). Packets whose RTOs expire together form one round: each of them
(up to ``MAX_SILENT_PROBED``) gets its tail probes and the round takes one strike.

A NACK is read as a trimmed packet: retransmitted, the EV not blamed (connection.py).

Spurious retransmissions (transports/core/spurious.py): the receiver acknowledges a
duplicate at once, echoing its timestamp on its EV, so the sender names the copy that
arrived twice (``tx_retx_spurious``; the receiver counts ``dup_data``). Undo
(Eifel-style): an ACK that comes back on a retired EV and acknowledges, or names as a
duplicate, a packet whose loss retired that EV proves both the path and the packet: the
EV is GOOD again (``ev_undo``) and a window cut made by that loss is taken back unless
another cut came since (``cwnd_undo``).
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Sequence
from typing import Protocol

from transports.core.api import Tx
from transports.core.cc import Nscc
from transports.core.mrc.blame import Blame
from transports.core.mrc.evidence import Evidence, EvidenceConfig
from transports.core.mrc.evtable import EV_ASSUMED_BAD, EvTable
from transports.core.mrc.flight import Flight, SentPacket
from transports.core.mrc.pathsel import NACK, TIMEOUT
from transports.core.mrc.probes import MAX_SILENT_PROBED, PlaneProbe, ProbeConfig, Probes, TailProbe
from transports.core.mrc.spray import Spray
from transports.core.mrc.timeouts import TimeoutConfig, Timeouts
from transports.core.spurious import RetxLedger

INF = float("inf")


class LossConfig(TimeoutConfig, EvidenceConfig, ProbeConfig, Protocol):
    """The knobs the loss detector and its parts read (``MrcConfig`` has them)."""


class LossDetector:
    """Rules A, B and C, blame, flush, undo and the retry budget of one MRC sender.

    Built on the sender's ``flight`` (packets, retransmission queue, stamps), its EV
    choice ``spray``, the per-EV states ``paths``, the window ``cc``, the ``ledger`` of
    retransmissions and the connection's ``timeouts`` (RTOs and strikes, which DBLP's
    halves read too); ``nic_of`` is each EV's NIC (None: one NIC)."""

    def __init__(self, conn: int, cfg: LossConfig, stats: Counter[str], flight: Flight,
                 spray: Spray, paths: EvTable, cc: Nscc, ledger: RetxLedger,
                 nic_of: Sequence[int] | None, timeouts: Timeouts) -> None:
        self.conn, self.cfg, self.stats = conn, cfg, stats
        self.flight, self.spray, self.paths, self.cc, self.ledger = flight, spray, paths, cc, ledger
        evs = paths.evs
        self.timeouts = timeouts
        self.evidence = Evidence(cfg, evs, nic_of, self.timeouts, flight)
        self.probes = Probes(conn, cfg, evs, stats, flight, spray, paths)
        self.blame = Blame(2 * cfg.rto_max)
        self.rto_heap: list[tuple[float, int, int]] = []  # (due, seq, psn)
        # packets whose RTO an ACK clock restarted (rule C): due from their send time again
        # once something sent after them is acknowledged, so their timer is re-armed then
        self.restarted: deque[tuple[int, int]] = deque()  # (seq, psn)
        self.progress_at = -INF  # the last ACK that acknowledged new data
        self.sent_at = -INF  # the last data transmission

    def __repr__(self) -> str:
        return (f"LossDetector(hi_seq={self.evidence.hi_seq}, "
                f"strikes={self.timeouts.strikes}, rto_heap={len(self.rto_heap)}, "
                f"blame={len(self.blame)})")

    # ---- what the sender reports (transports/core/mrc/sender.py LossHooks) ----------------------

    def on_sent(self, p: SentPacket, now: float) -> None:
        """``p`` just left on ``p.ev``: in every send order, its RTO armed."""
        self.sent_at = now
        self.evidence.sent(p)
        heapq.heappush(self.rto_heap, (now + self.timeouts.jittered(p.ev), p.seq, p.psn))

    def first_copy_acked(self, p: SentPacket, now: float) -> None:
        """A first transmission was acknowledged: the reference for rules A and B."""
        self.evidence.first_copy_acked(p, now)

    # ---- what an ACK brings (transports/core/mrc/connection.py) ----------------------------------

    def progress(self, now: float) -> None:
        """An ACK acknowledged new data: the retry budget starts again."""
        self.timeouts.reset()
        self.progress_at = now

    def sample(self, ev: int, rtt: float) -> None:
        """One RTT sample of a data packet on EV ``ev`` (seconds)."""
        self.timeouts.sample(ev, rtt)

    def new_floor(self) -> None:
        """NSCC's base RTT may have moved: the RTO floor too."""
        self.timeouts.new_floor(self.cc.base_rtt)

    def set_host_delay(self, delay: float) -> None:
        """The I/O loop's measured scheduling delay (transports/core/rto.py ``HostDelay``)."""
        self.timeouts.set_host_delay(delay, self.cc.base_rtt)

    def answers_probe(self, ts_echo: int) -> bool:
        """Whether the ACK echoing ``ts_echo`` answers a probe (its RTT is a header's)."""
        return self.probes.answers(ts_echo)

    def tail_answered(self, ts_echo: int, now: float) -> bool:
        """Whether the ACK echoing ``ts_echo`` answers a tail or plane probe (then acted
        on)."""
        plane = self.probes.take_plane(ts_echo)
        if plane is not None:
            self.plane_probe_answered(plane, now)
            return True
        probe = self.probes.take_tail(ts_echo)
        if probe is None:
            return False
        self.on_tail_answer(probe, now)
        return True

    def plane_probe_answered(self, probe: PlaneProbe, now: float) -> None:
        """The full ACK answering a plane probe has been processed: the probe, sent after
        every packet out on its EV, got through, so A condemns those still missing (as
        would a later first transmission acknowledged on that EV)."""
        seq, sent, ev = probe
        self.stats["plane_probe_answered"] += 1
        self.probes.plane_answered(seq, ev)
        self.evidence.acked_on(ev, seq, sent)
        self.evidence.got_through(seq, sent, now, ev)
        self._same_ev(ev, now)

    def on_tail_answer(self, probe: TailProbe, now: float) -> None:
        """The full ACK answering a tail probe (sent after the silent packet ``psn``) has
        been processed: the peer is there (strikes end). A probe sent on the packet's own
        EV got through behind it, so it is evidence like any later transmission
        acknowledged and the packet, if still unacknowledged, is lost. One sent on
        another EV may have overtaken the packet: while the packet is outstanding, that
        answer becomes evidence only when the packet's RTO next expires."""
        seq, sent, psn, ordered = probe
        self.stats["tail_answered"] += 1
        self.timeouts.reset()  # the peer answers: the retry budget is for one that does not
        p = self.flight.get(psn)
        if not ordered and p is not None and not p.lost and p.seq < seq:
            self.probes.note_around(psn, p.seq, seq, now - sent)
            return
        # behind it on its path, so on its plane
        self.evidence.got_through(seq, sent, now, p.ev if p is not None and ordered else None)
        if p is not None and not p.lost and p.seq < seq:
            self.lose(p, now, NACK, "loss_tail_probe")

    def check_spurious(self, ts: int, ev: int, ack_ts: int,
                       named: list[tuple[int, SentPacket | None]], now: float) -> None:
        """The ACK (sent at ``ack_ts`` by the receiver's clock) was sent for the transmission
        ``(ts, ev)`` of one of ``named`` (PSN, packet in flight before the ACK): a duplicate
        arrival if that packet was acknowledged by an earlier ACK, so one retransmission
        was not needed (and the loss is undone if this copy came back on the EV blamed for
        it)."""
        get = self.flight.get
        for psn, p in named:
            if p is not None and get(psn) is None:  # this ACK acknowledged it: first in
                self.ledger.resolve(ts, ev, psn)
                if ts == p.ts and ev == p.ev:
                    # its latest copy got through: evidence like a first transmission's
                    self.evidence.got_through(p.seq, p.sent, now, ev)
                return
        for psn, p in named:
            if p is None and self.ledger.duplicate(psn, ack_ts):  # a duplicate arrival
                # by the rule that resent it: the rule to look at when they are many
                self.stats["spurious_" + (self.ledger.why(psn) or "unknown")] += 1
                self.ledger.resolve(ts, ev, psn)
                self.stats["tx_retx_spurious"] += 1
                self.undo(psn, now, ev)
                return

    def undo(self, psn: int, now: float, via: int) -> None:
        """An ACK came back on EV ``via`` for a copy of ``psn`` sent on it: if the loss of
        ``psn`` was blamed on ``via``, it was not one (the path answers both ways): re-admit
        the EV that loss retired and restore the window it cut, if nothing changed them
        since."""
        b = self.blame.take(psn, via)
        if b is None:
            return
        ev, at, cwnd = b
        if self.paths.state_of(ev) == EV_ASSUMED_BAD and self.paths.retired_at(ev) == at:
            self.paths.readmit(ev, now)  # its own ACK proved the path both ways
            self.stats["ev_undo"] += 1
        if cwnd is not None and self.cc.undo(cwnd, at):
            self.stats["cwnd_undo"] += 1

    def detect(self, now: float, touched: set[int], out: list[Tx]) -> None:
        """Rules A and B after an ACK that acknowledged first transmissions on ``touched``
        (or answered a probe); plane probes for the packets only another plane condemns."""
        if self.restarted:
            self.rearm_restarted()
        for ev in touched:
            self._same_ev(ev, now)
        if self.timeouts.srtt.srtt:
            # B: dupthresh later transmissions on its plane acked, older than its path RTT
            for p in self.evidence.plane_condemned(now):
                self.lose(p, now, NACK, "loss_cross_ev")
            for p in self.evidence.cross_plane(now):  # another plane's evidence only
                self.probes.suspect(p, now)
        if self.probes.plane_due():
            self.probes.send_plane(now, out)

    def _same_ev(self, ev: int, now: float) -> None:
        """A: a later packet on the same (FIFO) path got through."""
        for p in self.evidence.same_ev(ev, now):
            self.lose(p, now, NACK, "loss_same_ev")

    # ---- decisions ----------------------------------------------------------------------------

    def lose(self, p: SentPacket, now: float, kind: int, reason: str,
             due: float = INF) -> None:
        """``p`` is lost: resend it; blame its EV only if a later transmission got through.
        ``due``: when its RTO came due (a blamed RTO)."""
        blamed = self.evidence.later_delivered(p.seq)
        self.flight.requeue(p, reason, avoid=blamed)
        self.stats[reason] += 1
        ev = p.ev
        if not blamed:  # no evidence against the path (every EV was silent)
            self.stats["loss_unblamed"] += 1
            return
        self.spray.feedback(ev, kind)
        retired = self.paths.retire(ev, now, self.timeouts.rto(ev))
        if kind == TIMEOUT:  # silent for an RTO while later packets got through: all lost
            self._flush(ev, now, since=due)
        elif retired and reason in ("loss_cross_ev", "loss_reorder"):
            self._flush(ev, now)
        self.blame.record(p.psn, ev, now)

    def _flush(self, ev: int, now: float, since: float | None = None) -> None:
        """``ev`` went silent: the packets out on it that ``Evidence.flush`` condemns are
        lost too, each blamed on it."""
        for p in self.evidence.flush(ev, now, since):
            self.flight.requeue(p, "loss_ev_flush")
            self.stats["loss_ev_flush"] += 1
            self.blame.record(p.psn, ev, now)

    def _plane_lost(self, p: SentPacket, now: float) -> bool:
        """Whether the RTO of ``p``, something sent after it having been acknowledged, is
        a loss on its path: with one plane, or on its own plane's evidence, yes; on
        another plane's only, when its plane has been silent for the RTO (no ACK of its
        data) and a plane probe sent after it has gone unanswered as long (a dead path,
        not a queue)."""
        if not self.evidence.multi_nic or self.evidence.own_plane_delivered(p):
            return True
        rto = self.timeouts.rto(p.ev)
        return (self.probes.unanswered_for(p, now, rto)
                and now - self.evidence.plane_progress(p.ev) >= rto)

    # ---- the clock ----------------------------------------------------------------------------

    def next_rto(self) -> float:
        """When the earliest live RTO, the probe timeout or the reorder timer fires (stale
        heap entries are dropped)."""
        heap, get = self.rto_heap, self.flight.get
        while heap:
            _, seq, psn = heap[0]
            p = get(psn)
            if p is None or p.seq != seq or p.lost:
                heapq.heappop(heap)
                continue
            return min(heap[0][0], self.pto_deadline(), self.evidence.reorder_deadline())
        return INF

    def pto_deadline(self) -> float:
        """When the probe timeout fires (probes.py), INF if it does not."""
        t = self.timeouts
        return self.probes.pto_deadline(self._activity(), t.srtt.srtt, t.floor,
                                        t.peer_hold.value)

    def _activity(self) -> float:
        """The last data sent or ACK of new data: what the probe timeout counts from."""
        return self.sent_at if self.sent_at > self.progress_at else self.progress_at

    def probe_timeout(self, now: float) -> None:
        """Tail loss probing before the RTO (RACK-TLP's PTO, RFC 8985): nothing was sent or
        acknowledged for two smoothed RTTs, so the packets out that long get a tail probe
        each (at most ``MAX_SILENT_PROBED``, oldest first). Unlike a silent RTO it strikes
        nothing and backs nothing off: a probe under a mere delay costs a header, and its
        answer condemns only a packet it queued behind."""
        self.probes.pto_fired(self._activity())
        if self.evidence.oldest() is None:
            return
        limit = now - 2.0 * self.timeouts.srtt.srtt
        n = added = 0
        for p in self.evidence.outstanding():
            if p.sent > limit or n >= MAX_SILENT_PROBED:
                break
            if self.probes.add_tail_once(p.psn):  # (an RTO that fired with it probes it)
                added += 1
            n += 1
        if added:
            self.stats["pto"] += 1

    def expire(self, now: float) -> str | None:
        """Rule C: the packets whose RTO expired; the error if the connection must fail."""
        heap, get, timeouts = self.rto_heap, self.flight.get, self.timeouts
        evidence, probes = self.evidence, self.probes
        fired = False
        blamed: list[int] = []
        # Packets already due when this round began are judged on the RTO they were due by:
        # the strike a silent one takes below must not defer the others (a tail of several
        # packets lost together would get one probe per round, and the last one the RTO
        # doubled as many times as it has predecessors).
        strikes = timeouts.strikes
        silent = 0
        for late, lost in evidence.reorder_expired(now):  # before the RTOs: B's, no timeout
            if lost:
                self.lose(late, now, NACK, "loss_reorder")
            else:
                probes.suspect(late, now)
        while heap and heap[0][0] <= now:
            due, seq, psn = heapq.heappop(heap)
            p = get(psn)
            if p is None or p.seq != seq or p.lost:
                continue
            got = probes.take_around(psn)  # a probe on another EV was answered: evidence now
            if got is not None and got[0] == seq:
                evidence.raise_hi(got[1], got[2])
            # until nothing sent after it is acknowledged, the RTO restarts with each ACK of
            # new data (RFC 6298): while that ACK clock runs, a queue ahead of it drains
            later_ok = evidence.later_delivered(p.seq)
            start = p.sent if later_ok else max(p.sent, self.progress_at)
            later = start + timeouts.backed_off(p.ev, strikes)
            if later > now:  # the RTT estimate grew, or ACKs came since: wait
                heapq.heappush(heap, (later, seq, psn))
                if start > p.sent:  # restarted: due earlier once a later packet gets through
                    self.restarted.append((seq, psn))
                continue
            fired = True
            if later_ok:  # something sent after it got through
                if self._plane_lost(p, now):  # its path lost it
                    self.lose(p, now, TIMEOUT, "loss_rto", due)
                    blamed.append(psn)
                else:  # only on another plane: its plane may be queued
                    self.stats["rto_plane_suspect"] += 1
                    probes.suspect(p, now)
                    heapq.heappush(heap, (now + timeouts.jittered(p.ev), seq, psn))
            else:  # silent since it was sent: probe behind it (common-mode delay?)
                if not silent:  # one per round of silent RTOs (however many packets)
                    self.flight.force_first()  # a known loss waiting for the window (ACKs lost?)
                    self.stats["rto_silent"] += 1
                    timeouts.strike(now)  # one per round: every timer backs off now
                silent += 1
                if silent <= MAX_SILENT_PROBED:  # beyond: they wait for the answers
                    probes.add_tail(psn)
                heapq.heappush(heap, (now + timeouts.jittered(p.ev), seq, psn))
        if self.pto_deadline() <= now:  # after the RTOs: a packet they probed is not again
            self.probe_timeout(now)
        if blamed:
            # RFC 6298 (5.4): a timeout resends the first lost packet waiting at once,
            # whatever the window (cut to its floor now) holds: packets still counted in
            # flight may be lost too and would hold it until their own, backed-off, RTOs
            self.flight.force_first()
            before = self.cc.on_timeout(now)
            if before is not None:
                for psn in blamed:
                    self.blame.cut(psn, before)
            if not timeouts.in_round(now):  # one strike per round of blamed RTOs
                timeouts.strike(now)
        if fired and timeouts.exhausted(now):
            return (f"peer unreachable: {timeouts.strikes} retransmission timeouts "
                    f"without progress over {now - timeouts.strike_at:.3g} s")
        return None

    def rearm_restarted(self) -> None:
        """Rule C: a packet whose RTO an ACK clock restarted counts from its send time
        again as soon as a transmission sent after it has been acknowledged (the queue
        ahead of it drained past it); its timer is re-armed to that earlier deadline (the
        later heap entry goes stale), so a lost tail does not wait a whole RTO from the
        last ACK of new data."""
        q, get = self.restarted, self.flight.get
        hi = self.evidence.hi_seq
        for _ in range(len(q)):
            seq, psn = q.popleft()
            p = get(psn)
            if p is None or p.seq != seq or p.lost:
                continue
            if seq < hi:
                heapq.heappush(self.rto_heap, (p.sent + self.timeouts.backed_off(p.ev), seq, psn))
            else:
                q.append((seq, psn))

    # ---- probes due ---------------------------------------------------------------------------

    def send_probes(self, now: float, out: list[Tx]) -> None:
        """The tail and plane probes due (after ``expire``)."""
        probes = self.probes
        if probes.tail_due:
            probes.send_tail(now, out)
        if probes.plane_due():
            probes.send_plane(now, out)

    def state_sizes(self) -> dict[str, int]:
        """Its containers a soak watches (transports/io/footprint.py)."""
        return {"blame": len(self.blame), "tail_probes": len(self.probes.tail_probes)}

    def clear(self) -> None:
        """The connection failed: no timer, no probe, nothing to undo."""
        self.probes.clear()
        self.rto_heap.clear()
        self.restarted.clear()
        self.evidence.clear()
        self.blame.clear()
