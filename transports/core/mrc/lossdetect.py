"""MRC's loss detection, blame and retransmission timeouts: the ``LossDetector`` of a sender.

Loss detection (sprayed traffic reorders across paths, not within one):
  A. per EV (RACK-like): a packet is lost when a packet sent *later on the same
     EV* has been acknowledged and it was sent more than ``reo_wnd`` earlier than
     that one, ``reo_wnd = max(reorder_min, reorder_frac * srtt(EV))``; a path is a
     FIFO, so this holds whatever the other paths' delays are;
  B. across the EVs of one NIC (plane): a packet is lost when a packet ``dupthresh``
     transmissions later on an EV of its NIC has been acknowledged *and* it has been
     out longer than its own EV's
     loss bound ``max(srtt * (1 + reorder_frac) + reorder_min, min(srtt + 4 rttvar,
     3 srtt))`` (about an RTO of that EV without the floor: a slow path is not blamed
     for being slower than a fast one; capped at three smoothed RTTs because a queue
     that came and went leaves a variance of its whole depth, and ``srtt + 4 rttvar``
     then outlasts the very queue the evidence just crossed: under the demo's host-port
     bursts it held rule B near the RTO, 45 ms after the ACKs of the packets that got
     through showed the loss; an EV without RTT samples of its own takes the overall estimator's
     uncapped, as it mixes packet sizes) and than the RTT of the latest-sent packet
     acknowledged plus the EV's ``reo_wnd`` (RACK: a queue that every EV crosses is
     not a loss).
     Fewer than ``dupthresh`` later transmissions (a message's short tail, say) are
     enough for the reorder timer (RACK's, RFC 8985; ``MrcConfig.reorder_timer``),
     which fires when the oldest packet out has been out longer than its EV's loss
     bound and than that RTT plus the larger of ``reo_wnd`` and ``reorder_frac`` of
     that RTT, plus the ACK delay (one later transmission is weaker evidence, and a
     queue that grew meanwhile is no reordering), on an EV whose RTT is known. Without
     it such a loss waited for the probe timeout and its probe's round trip, or an RTO.
     Each plane is its own FIFO system (its NIC's queue, its switches, its port at the
     receiver), so order across planes says nothing about loss: a microburst at the
     receiver fills the two planes' ports out of step, tens of RTTs apart. When B's
     evidence comes only from another plane, the packet is *suspected*: a plane probe
     (``tx_plane_probe``: a PROBE with FLAG_TAIL, no payload) goes on its own EV, behind
     it in every FIFO of its path, once per EV for all its packets out; the full ACK
     answering it (``plane_probe_answered``) is a later transmission on that EV
     acknowledged, so A judges every packet the probe followed;
  C. per packet RTO: the larger of ``srtt + 4 rttvar`` of the EV it was sent on and
     of all EVs together, within [floor, rto_max], doubled per RTO without progress
     (and then stretched by up to ``BACKOFF_JITTER`` at random, so that repeated
     timeouts keep no fixed phase of a periodic impairment such as microbursts),
     counted from the packet's send time and, as long as nothing sent after it has
     been acknowledged, restarted by every ACK of new data (RFC 6298: while that
     ACK clock runs, a queue ahead of the packet is still draining; once something
     sent after it is acknowledged, it is due from its send time again and its timer
     is re-armed to that, so a lost tail does not wait an RTO after the last ACK). When
     only another plane got something sent after it through, its expiry is no loss
     yet: its plane may be queued (the two ports of a host fill out of step), so a
     plane probe goes behind it and the RTO blames its path only once its plane has
     been silent (no ACK of data sent on it) and that probe unanswered for an RTO: a
     dead plane, not a queue (``rto_plane_suspect`` counts the expiries that waited).
     The floor is
     ``max(rto_min, rto_min_rtts * base RTT)``, the base RTT being NSCC's
     (transports/core/rto.py): it scales with the path.
A lost packet is retransmitted (same PSN, FLAG_RETX) on another EV than the one
that lost it. A NACK is read as a trimmed packet (its ``psn`` field names it):
retransmitted, the EV not blamed.

Blame: a path, or the fabric in front of the receiver? A loss is blamed on its EV
only on **evidence that the fabric still delivers: a transmission sent after the
lost packet has been acknowledged** (its first copy, any EV; or a retransmission
whose ACK names it exactly, below; A and B have the evidence by construction).
Then the EV is retired (transports/core/mrc/evtable.py) and, so that a dead path does not
hold the window until each of its packets times out, more of its packets are
declared lost: after B those that B's timing condemns (without ``dupthresh``),
after a blamed RTO all sent before it came due; it also quick-adapts the window, and the
first lost packet waiting is resent at once, past the window (RFC 6298, 5.4: packets
of live EVs still counted in flight would otherwise hold it until their own RTOs).

Without that evidence (every EV silent since the packet was sent: a delay spike at
the receiver's port that every EV crosses, a lost tail, a lost ACK, or the peer
gone) an RTO is **silent** (``rto_silent``) and nothing is resent yet: a tail probe
(``tx_tail_probe``: a PROBE with FLAG_TAIL and FLAG_ACK_REQ, no payload) goes on the
packet's own EV, in the data class, so it queues behind the packet in every FIFO of
its path (its NIC's, the switches', the receiver's port), and the receiver answers
it at once with a full ACK (cumulative and SACK) echoing its timestamp. The probe is
a transmission sent after the packet: if its answer comes and the packet is still
unacknowledged, the packet is lost (``loss_tail_probe``) and resent; if the packet
was only queued, it arrived first and that answer acknowledges it; if an ACK was
lost, the answer carries what it did. A second copy (against a lost probe or
answer, or a dead path) goes on the next active EV in turn of the packet's NIC,
from the second silent RTO of one transmission on around it (on another NIC's EV).
That copy does not follow the packet (each plane has a NIC of its own, a FIFO the
host's connections share, and each EV its own switch queues), so while the packet
is outstanding its answer condemns nothing at once (``tail_answered_around``): it
is evidence against the packet's path only when the packet's next RTO expires (a
blamed ``loss_rto``), so a path or plane that died under a tail is still found
while a queue shorter than that RTO costs nothing. The first
packet already declared lost and waiting for the window, if any, is sent past the
window (the window may be held by packets whose ACKs were lost); every timer backs
off (a strike); nothing else happens: no EV retired, nothing flushed, the window
kept. A lost tail costs one probe round trip more than a resend at the RTO would;
a delay spike costs a header-sized probe instead of duplicate data. A FIFO queue that every EV
crosses delivers in send order, so nothing sent later can get through first: a
common-mode delay never blames an EV however long it lasts (where the paths before
the queue differ by more than a packet's spacing, a later packet can overtake and
blame one; the late packet's own ACK then undoes it, below). A dead path among live
ones is blamed as soon as a later packet on another EV is acknowledged. Strikes
count RTOs without progress for the retry budget.

Packets whose RTOs expire together form one round: each of them (up to
``MAX_SILENT_PROBED``) gets its tail probes and the round takes one strike, so a
tail of several packets lost together is not probed one packet per doubled RTO.

Probe timeout (RACK-TLP's PTO, RFC 8985; ``MrcConfig.pto``): two smoothed RTTs
(all EVs; at least the RTO floor) after the last data sent or ACK of new data,
once per such activity, the packets out that long get the same tail probes, without
a strike or a back-off. RTT samples taken under a queue that came and went spread
the estimate, so ``srtt + 4 rttvar`` can be several times two smoothed RTTs: a
lost tail would wait that long. A probe under a mere delay costs a header and
condemns nothing (it queues behind the packet).

Spurious retransmissions (transports/core/spurious.py): the receiver acknowledges a
duplicate at once, echoing its timestamp on its EV, so the sender names the copy
that arrived twice (``tx_retx_spurious``; the receiver counts ``dup_data``). Undo
(Eifel-style): an ACK that comes back on a retired EV and acknowledges, or names as
a duplicate, a packet whose loss retired that EV proves both the path and the
packet: the EV is GOOD again (``ev_undo``) and a window cut made by that loss is
taken back unless another cut came since (``cwnd_undo``).

``LossDetector`` owns the state these rules need (per-EV send order ``ev_q``,
global send order ``order``, the RTO heap, RTT estimators, the latest transmission
acknowledged, blame, strikes, tail probes) and acts on the sender
(transports/core/mrc/sender.py) only through ``requeue``: a lost packet goes back to its
retransmission queue. It tells the core that the connection failed by what
``expire`` returns; what it sends is tail probes (headers, no data).
"""


from __future__ import annotations

import heapq
import random
from collections import Counter, deque
from typing import TYPE_CHECKING

from transports.core.api import Tx
from transports.core.cc import Nscc
from transports.core.mrc.evtable import EV_ASSUMED_BAD, EvTable
from transports.core.mrc.pathsel import NACK, TIMEOUT, PathSelector
from transports.core.rto import RttEstimator, rto_floor
from transports.core.spurious import RetxLedger
from transports.core.wire import FLAG_ACK_REQ, FLAG_TAIL, HEADER_LEN, PROBE, pack_header

if TYPE_CHECKING:
    from transports.core.message import SentPacket
    from transports.core.mrc.sender import Sender

INF = float("inf")
# A backed-off RTO is stretched by up to this fraction at random: a timeout that repeats
# at a fixed period (rto_max, a multiple of a periodic impairment's period) would meet
# the same phase of it every time, e.g. each retransmission the tail of a microburst.
BACKOFF_JITTER = 0.25
MAX_TAIL_PROBES = 1024  # unanswered ones kept (lost, or the peer is gone)
# Silent packets probed in one round of RTOs (a whole window may time out at once under a
# delay spike: its first ones' answers tell about the rest)
MAX_SILENT_PROBED = 8
MAX_BLAME = 4096  # blamed losses kept for undo (a duplicate comes back within ~an RTO)


class LossDetector:
    """Rules A, B and C, blame, flush, undo and the retry budget of one sender."""

    def __init__(self, conn: int, cfg, stats: Counter[str], snd: Sender, paths: EvTable,
                 cc: Nscc, sel: PathSelector, ledger: RetxLedger,
                 rng: random.Random | None = None) -> None:
        self.conn, self.cfg, self.stats = conn, cfg, stats
        self.rng = rng if rng is not None else random.Random(conn)
        self.snd, self.paths, self.cc, self.sel, self.ledger = snd, paths, cc, sel, ledger
        evs = paths.evs
        self.inflight = snd.inflight  # (the same dict)
        self.ev_q: list[deque[tuple[int, int]]] = [deque() for _ in range(evs)]  # (seq, psn)
        self.order: deque[tuple[int, int]] = deque()
        self.rto_heap: list[tuple[float, int, int]] = []
        self.rtt = [RttEstimator() for _ in range(evs)]
        self.srtt = RttEstimator()  # all EVs together
        self.hi_seq = 0  # the latest-sent first transmission acknowledged (any EV) ...
        self.hi_rtt = 0.0  # ... and how long it took: what the fabric takes now (RACK)
        self.hi_acked_seq = [0] * evs
        self.hi_acked_sent = [-INF] * evs
        # per NIC (plane): rule B's send order, latest-sent first transmission acknowledged
        # and its RTT, the last ACK of data sent on it (whether the plane is silent)
        self.nic_of = list(snd.nic_of) if snd.nic_of is not None else [0] * evs
        nics = max(self.nic_of) + 1
        self.multi_nic = nics > 1
        # one plane: its order is the global one (no suspicion across planes)
        self.nic_order: list[deque[tuple[int, int]]] = (
            [deque() for _ in range(nics)] if self.multi_nic else [self.order])
        self.nic_hi_seq = [0] * nics
        self.nic_hi_rtt = [0.0] * nics
        self.nic_progress = [-INF] * nics
        # plane probes: the seq of the latest per EV (packets sent before it are behind
        # it), EVs due for one, and those out: ts -> (seq, sent, EV)
        self.plane_probe_seq = [0] * evs
        self.plane_probe_open = [False] * evs  # ... unanswered
        self.plane_probe_sent = [-INF] * evs
        self.plane_probe_due: list[int] = []
        self.plane_probes: dict[int, tuple[int, float, int]] = {}
        # psn -> (its EV, when that loss was declared, the window before a cut then)
        self.blame: dict[int, tuple[int, float, float | None]] = {}
        self.tail_due: list[int] = []  # PSNs of silent RTOs whose tail probe is due
        # ts -> (seq, sent, PSN, whether it went on that packet's own EV, behind it)
        self.tail_probes: dict[int, tuple[int, float, int, bool]] = {}
        # PSN -> (its seq, the seq and RTT of a probe on another EV answered while it was
        # out): evidence against its path once its next RTO expires
        self.around: dict[int, tuple[int, int, float]] = {}
        self.probed: dict[int, int] = {}  # PSN -> the seq of its transmission probed already
        self.strikes = 0
        self.strike_at = INF  # when the first strike without progress came
        self.strike_until = -INF
        self.progress_at = -INF  # the last ACK that acknowledged new data
        self.sent_at = -INF  # the last data transmission
        self.pto_for = -INF  # the activity (max of the two) the last probe timeout answered
        # packets whose RTO an ACK clock restarted (rule C): due from their send time again
        # once something sent after them is acknowledged, so their timer is re-armed then
        self.restarted: deque[tuple[int, int]] = deque()  # (seq, psn)
        self.host_delay = 0.0  # the I/O loop's scheduling delay, part of the floor
        self.floor = cfg.rto_min  # the RTO floor (rto_floor())

    def __repr__(self) -> str:
        return (f"LossDetector(hi_seq={self.hi_seq}, strikes={self.strikes}, "
                f"rto_heap={len(self.rto_heap)}, blame={len(self.blame)})")

    # ---- what the sender reports -------------------------------------------------------------

    def on_sent(self, p: SentPacket, now: float) -> None:
        """``p`` just left on ``p.ev``: in both send orders, its RTO armed."""
        seq, psn = p.seq, p.psn
        self.sent_at = now
        self.ev_q[p.ev].append((seq, psn))
        self.order.append((seq, psn))
        if self.multi_nic:
            self.nic_order[self.nic_of[p.ev]].append((seq, psn))
        heapq.heappush(self.rto_heap, (now + self.jittered(p.ev), seq, psn))

    def first_copy_acked(self, p: SentPacket, now: float) -> None:
        """A first transmission was acknowledged: the reference for rules A and B."""
        ev = p.ev
        if p.seq > self.hi_acked_seq[ev]:
            self.hi_acked_seq[ev] = p.seq
            self.hi_acked_sent[ev] = p.sent
        if p.seq > self.hi_seq:
            self.hi_seq, self.hi_rtt = p.seq, now - p.sent
        n = self.nic_of[ev]
        self.nic_progress[n] = now
        if p.seq > self.nic_hi_seq[n]:
            self.nic_hi_seq[n], self.nic_hi_rtt[n] = p.seq, now - p.sent

    def progress(self, now: float) -> None:
        """An ACK acknowledged new data: the retry budget starts again."""
        self.strikes = 0
        self.strike_at = INF
        self.strike_until = -INF
        self.progress_at = now

    def sample(self, ev: int, rtt: float) -> None:
        """One RTT sample of EV ``ev`` (seconds)."""
        self.rtt[ev].sample(rtt)
        self.srtt.sample(rtt)

    def send_tail_probes(self, now: float, out: list[Tx]) -> None:
        """Tail probes per silent RTO: transmissions after the packet (each its own
        ``seq`` and unique ``ts``), queued as data, each answered at once by a full ACK
        that echoes its ``ts`` (transports/core/receiver.py). One goes on the packet's own EV
        (behind it in every FIFO of its path: its answer condemns it if still missing),
        one on the next active EV in turn of the packet's NIC, or, from the second
        silent RTO of one transmission on, of another NIC (two chances against a lost
        probe or answer, or a dead path, as two resends would have). That one may
        overtake the packet (in its NIC's FIFO, in its path's switch queues): its answer
        alone turns the packet's next RTO into a blamed loss (``around``), as a first
        copy acknowledged on another path would."""
        probes = self.tail_probes
        snd = self.snd
        multi = snd.nic_of is not None
        copies = min(2, len(self.paths.active))
        for psn in self.tail_due:
            p = self.inflight.get(psn)
            if p is None or p.lost:
                continue
            nic = snd.nic(p.ev)
            # probed before and still silent: the other copy goes around its NIC
            around = multi and self.probed.pop(psn, -1) == p.seq
            self.probed[psn] = p.seq  # re-inserted last: the dict stays in probe order
            own = p.ev in self.paths.active
            for i in range(copies):
                seq, ts = snd.stamp(now)
                if own and i == copies - 1:  # its own path: behind it in every FIFO
                    ev = p.ev
                else:
                    ev = snd.next_silent_ev(p.ev, nic, other=around)
                buf = bytearray(HEADER_LEN)
                pack_header(buf, PROBE, FLAG_ACK_REQ | FLAG_TAIL, self.conn, psn, 0, 0, 0, ev,
                            0, ts)
                out.append((ev, buf))
                probes[ts] = (seq, now, psn, ev == p.ev)
                self.stats["tx_tail_probe"] += 1
            while len(probes) > MAX_TAIL_PROBES:
                del probes[next(iter(probes))]
            while len(self.probed) > MAX_TAIL_PROBES:
                del self.probed[next(iter(self.probed))]
        self.tail_due.clear()

    def answers_probe(self, ts_echo: int) -> bool:
        """Whether an ACK echoing ``ts_echo`` answers a tail or plane probe: its RTT is a
        header's, not a packet's (no serialization behind the packets before it on its
        NIC, none at each hop), so it is kept out of the RTT estimators that judge
        packets."""
        return ts_echo in self.tail_probes or ts_echo in self.plane_probes

    def tail_answered(self, ts_echo: int, now: float) -> bool:
        """Whether the ACK echoing ``ts_echo`` answers a tail or plane probe (then acted
        on)."""
        if self.plane_probes and ts_echo:
            plane = self.plane_probes.pop(ts_echo, None)
            if plane is not None:
                self.plane_probe_answered(plane, now)
                return True
        probe = self.tail_probes.pop(ts_echo, None) if self.tail_probes and ts_echo else None
        if probe is None:
            return False
        self.on_tail_answer(probe, now)
        return True

    def clear(self) -> None:
        """The connection failed: no timer, no probe, nothing to undo."""
        self.tail_due.clear()
        self.tail_probes.clear()
        self.plane_probe_due.clear()
        self.plane_probes.clear()
        self.around.clear()
        self.probed.clear()
        self.rto_heap.clear()
        self.restarted.clear()
        self.order.clear()
        for q in self.ev_q:
            q.clear()
        for q in self.nic_order:
            q.clear()
        self.blame.clear()

    def next_rto(self) -> float:
        """When the earliest live RTO or the probe timeout fires (stale heap entries are
        dropped)."""
        heap, inflight = self.rto_heap, self.inflight
        while heap:
            _, seq, psn = heap[0]
            p = inflight.get(psn)
            if p is None or p.seq != seq or p.lost:
                heapq.heappop(heap)
                continue
            return min(heap[0][0], self.pto_deadline(), self.reorder_deadline())
        return INF

    def pto_deadline(self) -> float:
        """When the probe timeout fires: ``max(2 srtt + ack_delay, floor)`` after the last
        data sent or ACK of new data, once per such activity (INF: no RTT sample yet, or
        it fired already since)."""
        activity = self._activity()
        srtt = self.srtt.srtt
        if activity == self.pto_for or not srtt or not self.cfg.pto:
            return INF
        pto = 2.0 * srtt + self.cfg.ack_delay
        return activity + (pto if pto > self.floor else self.floor)

    def _activity(self) -> float:
        """The last data sent or ACK of new data: what the probe timeout counts from."""
        return self.sent_at if self.sent_at > self.progress_at else self.progress_at

    def probe_timeout(self, now: float) -> None:
        """Tail loss probing before the RTO (RACK-TLP's PTO, RFC 8985): nothing was sent or
        acknowledged for two smoothed RTTs, so the packets out that long get a tail probe
        each (at most ``MAX_SILENT_PROBED``, oldest first). Unlike a silent RTO it strikes
        nothing and backs nothing off: a probe under a mere delay costs a header, and its
        answer condemns only a packet it queued behind."""
        self.pto_for = self._activity()
        if self.live_head(self.order) is None:
            return
        limit = now - 2.0 * self.srtt.srtt
        inflight, due = self.inflight, self.tail_due
        n = added = 0
        for seq, psn in self.order:
            p = inflight.get(psn)
            if p is None or p.seq != seq or p.lost:
                continue
            if p.sent > limit or n >= MAX_SILENT_PROBED:
                break
            if psn not in due:  # (an RTO that fired with it probes it already)
                due.append(psn)
                added += 1
            n += 1
        if added:
            self.stats["pto"] += 1

    def expire(self, now: float) -> str | None:
        """Rule C: the packets whose RTO expired; the error if the connection must fail."""
        heap = self.rto_heap
        fired = False
        blamed: list[int] = []
        # Packets already due when this round began are judged on the RTO they were due by:
        # the strike a silent one takes below must not defer the others (a tail of several
        # packets lost together would get one probe per round, and the last one the RTO
        # doubled as many times as it has predecessors).
        strikes = self.strikes
        silent = 0
        self._reorder_expired(now)  # before the RTOs: a loss B sees is no timeout
        while heap and heap[0][0] <= now:
            due, seq, psn = heapq.heappop(heap)
            p = self.inflight.get(psn)
            if p is None or p.seq != seq or p.lost:
                continue
            if self.around:  # a probe on another EV was answered: evidence from now on
                got = self.around.pop(psn, None)
                if got is not None and got[0] == seq and got[1] > self.hi_seq:
                    self.hi_seq, self.hi_rtt = got[1], got[2]
            # until nothing sent after it is acknowledged, the RTO restarts with each ACK of
            # new data (RFC 6298): while that ACK clock runs, a queue ahead of it drains
            start = p.sent if self.hi_seq > p.seq else max(p.sent, self.progress_at)
            later = start + self.backed_off(p.ev, strikes)
            if later > now:  # the RTT estimate grew, or ACKs came since: wait
                heapq.heappush(heap, (later, seq, psn))
                if start > p.sent:  # restarted: due earlier once a later packet gets through
                    self.restarted.append((seq, psn))
                continue
            fired = True
            if self.hi_seq > p.seq:  # something sent after it got through
                if self._plane_lost(p, now):  # its path lost it
                    self.lose(p, now, TIMEOUT, "loss_rto", due)
                    blamed.append(psn)
                else:  # only on another plane: its plane may be queued
                    self.stats["rto_plane_suspect"] += 1
                    self._suspect(p, now)
                    heapq.heappush(heap, (now + self.jittered(p.ev), seq, psn))
            else:  # silent since it was sent: probe behind it (common-mode delay?)
                if not silent:  # one per round of silent RTOs (however many packets)
                    if self.snd.retxq:  # a known loss waiting for the window goes (ACKs lost?)
                        self.snd.forced.add(self.snd.retxq[0])
                    self.stats["rto_silent"] += 1
                    self._strike(now)  # one per round: every timer backs off now
                silent += 1
                if silent <= MAX_SILENT_PROBED:  # beyond: they wait for the answers
                    self.tail_due.append(psn)
                heapq.heappush(heap, (now + self.jittered(p.ev), seq, psn))
        if self.pto_deadline() <= now:  # after the RTOs: a packet they probed is not again
            self.probe_timeout(now)
        if blamed:
            # RFC 6298 (5.4): a timeout resends the first lost packet waiting at once,
            # whatever the window (cut to its floor now) holds: packets still counted in
            # flight may be lost too and would hold it until their own, backed-off, RTOs
            if self.snd.retxq:
                self.snd.forced.add(self.snd.retxq[0])
            before = self.cc.on_timeout(now)
            if before is not None:
                for psn in blamed:
                    ev, at, _ = self.blame[psn]
                    self.blame[psn] = (ev, at, before)
            if now >= self.strike_until:  # one strike per round of blamed RTOs
                self._strike(now)
        if (fired and self.strikes > self.cfg.max_retries
                and now - self.strike_at >= self.cfg.give_up_s):
            return (f"peer unreachable: {self.strikes} retransmission timeouts "
                    f"without progress over {now - self.strike_at:.3g} s")
        return None

    def _strike(self, now: float) -> None:
        """One more RTO round without progress (the retry budget's count and time); blamed
        RTOs within half an RTO of it belong to the same round."""
        if self.strikes == 0:
            self.strike_at = now
        self.strikes += 1
        self.strike_until = now + 0.5 * self.rto_any()

    def rto_floor(self) -> float:
        """The RTO floor: ``max(rto_min, rto_min_rtts * base RTT) + host delay``
        (transports/core/rto.py), the base RTT being NSCC's (the smallest EV's windowed
        minimum)."""
        return self.floor

    def set_host_delay(self, delay: float) -> None:
        """The I/O loop's measured scheduling delay (transports/core/rto.py ``HostDelay``)."""
        self.host_delay = delay
        self.new_floor()

    def new_floor(self) -> None:
        """NSCC's base RTT may have moved (an RTT sample, an EV forgotten): the floor too."""
        cfg = self.cfg
        self.floor = rto_floor(cfg.rto_min, cfg.rto_min_rtts, self.cc.base_rtt, self.host_delay)

    def rto(self, ev: int) -> float:
        cfg = self.cfg
        floor = self.floor
        overall = self.srtt.rto(floor, cfg.rto_max, cfg.rto_init)
        return max(overall, self.rtt[ev].rto(floor, cfg.rto_max, overall))

    def backed_off(self, ev: int, strikes: int | None = None) -> float:
        """EV ``ev``'s RTO doubled per strike (``strikes``, the current count by default),
        capped at ``rto_max``."""
        n = self.strikes if strikes is None else strikes
        return min(self.cfg.rto_max, self.rto(ev) * (1 << min(n, 30)))

    def jittered(self, ev: int) -> float:
        """``backed_off(ev)``, stretched by up to ``BACKOFF_JITTER`` at random once backed
        off, so that repeated timeouts keep no fixed phase of a periodic impairment."""
        rto = self.backed_off(ev)
        return rto * (1.0 + BACKOFF_JITTER * self.rng.random()) if self.strikes else rto

    def rto_any(self) -> float:
        cfg = self.cfg
        return min(cfg.rto_max, self.srtt.rto(self.floor, cfg.rto_max, cfg.rto_init)
                   * (1 << min(self.strikes, 30)))

    def check_spurious(self, ts: int, ev: int, ack_ts: int,
                        named: list[tuple[int, SentPacket | None]], now: float) -> None:
        """The ACK (sent at ``ack_ts`` by the receiver's clock) was sent for the transmission
        ``(ts, ev)`` of one of ``named`` (PSN, packet in flight before the ACK): a duplicate
        arrival if that packet was acknowledged by an earlier ACK, so one retransmission
        was not needed (and the loss is undone if this copy came back on the EV blamed for
        it)."""
        inflight = self.inflight
        for psn, p in named:
            if p is not None and psn not in inflight:  # this ACK acknowledged it: first in
                self.ledger.resolve(ts, ev, psn)
                if ts == p.ts and ev == p.ev:
                    # its latest copy got through: evidence like a first transmission's
                    self._got_through(p.seq, p.sent, now, ev)
                return
        for psn, p in named:
            if p is None and self.ledger.duplicate(psn, ack_ts):  # a duplicate arrival
                # by the rule that resent it: the rule to look at when they are many
                self.stats["spurious_" + (self.ledger.why(psn) or "unknown")] += 1
                self.ledger.resolve(ts, ev, psn)
                self.stats["tx_retx_spurious"] += 1
                self.undo(psn, now, ev)
                return

    def rearm_restarted(self) -> None:
        """Rule C: a packet whose RTO an ACK clock restarted counts from its send time
        again as soon as a transmission sent after it has been acknowledged (the queue
        ahead of it drained past it); its timer is re-armed to that earlier deadline (the
        later heap entry goes stale), so a lost tail does not wait a whole RTO from the
        last ACK of new data."""
        q = self.restarted
        hi = self.hi_seq
        for _ in range(len(q)):
            seq, psn = q.popleft()
            p = self.inflight.get(psn)
            if p is None or p.seq != seq or p.lost:
                continue
            if seq < hi:
                heapq.heappush(self.rto_heap, (p.sent + self.backed_off(p.ev), seq, psn))
            else:
                q.append((seq, psn))

    def detect(self, now: float, touched: set[int]) -> None:
        if self.restarted:
            self.rearm_restarted()
        for ev in touched:
            self._same_ev(ev, now)
        if not self.srtt.srtt:
            return
        # B: dupthresh later transmissions on its plane acked, and older than its path RTT
        for n, q in enumerate(self.nic_order):
            hi, hi_rtt = self.nic_hi_seq[n], self.nic_hi_rtt[n]
            while (p := self._pop_condemned(q, hi, hi_rtt, now)) is not None:
                self.lose(p, now, NACK, "loss_cross_ev")
        if self.multi_nic:  # B's timing on another plane's evidence: suspected, probed
            q, hi, hi_rtt = self.order, self.hi_seq, self.hi_rtt
            while (p := self._pop_condemned(q, hi, hi_rtt, now)) is not None:
                self._suspect(p, now)

    def _pop_condemned(self, q: deque[tuple[int, int]], hi: int, hi_rtt: float,
                       now: float) -> SentPacket | None:
        """The oldest packet of send order ``q``, taken out of it, if ``dupthresh`` later
        transmissions (up to seq ``hi``, the latest of RTT ``hi_rtt``) and rule B's timing
        condemn it; None otherwise."""
        p = self.live_head(q)
        if p is None or hi - p.seq < self.cfg.dupthresh:
            return None
        if not self._condemned(p, now, hi, hi_rtt):
            return None
        q.popleft()
        return p

    def _same_ev(self, ev: int, now: float) -> None:
        """A: a later packet on the same (FIFO) path got through."""
        q = self.ev_q[ev]
        hi = self.hi_acked_seq[ev]
        lim = self.hi_acked_sent[ev] - self._reo_wnd(ev)
        while (p := self.live_head(q)) is not None and p.seq < hi and p.sent <= lim:
            q.popleft()
            self.lose(p, now, NACK, "loss_same_ev")

    def _suspect(self, p: SentPacket, now: float) -> None:
        """Only another plane's ACKs condemn ``p``: a plane probe goes behind it on its EV
        (unless one sent after it is out already)."""
        self.stats["plane_suspect"] += 1
        ev = p.ev
        if not (self.plane_probe_open[ev] and self.plane_probe_seq[ev] > p.seq):
            self.plane_probe_seq[ev] = self.snd.tx_seq + 1  # at most the probe's seq
            self.plane_probe_open[ev] = True
            self.plane_probe_sent[ev] = now
            self.plane_probe_due.append(ev)

    def _plane_lost(self, p: SentPacket, now: float) -> bool:
        """Whether the RTO of ``p``, something sent after it having been acknowledged, is
        a loss on its path: with one plane, or on its own plane's evidence, yes; on
        another plane's only, when its plane has been silent for the RTO (no ACK of its
        data) and a plane probe sent after it has gone unanswered as long (a dead path,
        not a queue)."""
        ev = p.ev
        n = self.nic_of[ev]
        if not self.multi_nic or self.nic_hi_seq[n] > p.seq:
            return True
        rto = self.rto(ev)
        return (self.plane_probe_open[ev] and self.plane_probe_seq[ev] > p.seq
                and now - self.plane_probe_sent[ev] >= rto
                and now - self.nic_progress[n] >= rto)

    def send_plane_probes(self, now: float, out: list[Tx]) -> None:
        """The plane probes due: each a transmission (its own ``seq`` and unique ``ts``)
        on its EV, queued as data behind that EV's packets, answered at once by a full
        ACK echoing its ``ts``."""
        snd, probes = self.snd, self.plane_probes
        for ev in self.plane_probe_due:
            seq, ts = snd.stamp(now)
            self.plane_probe_seq[ev] = seq
            buf = bytearray(HEADER_LEN)
            pack_header(buf, PROBE, FLAG_ACK_REQ | FLAG_TAIL, self.conn, 0, 0, 0, 0, ev, 0, ts)
            out.append((ev, buf))
            probes[ts] = (seq, now, ev)
            self.stats["tx_plane_probe"] += 1
        self.plane_probe_due.clear()
        while len(probes) > MAX_TAIL_PROBES:  # unanswered ones (lost, or the path died)
            del probes[next(iter(probes))]

    def plane_probe_answered(self, probe: tuple[int, float, int], now: float) -> None:
        """The full ACK answering a plane probe has been processed: the probe, sent after
        every packet out on its EV, got through, so A condemns those still missing (as
        would a later first transmission acknowledged on that EV)."""
        seq, sent, ev = probe
        self.stats["plane_probe_answered"] += 1
        if seq == self.plane_probe_seq[ev]:
            self.plane_probe_open[ev] = False
        if seq > self.hi_acked_seq[ev]:
            self.hi_acked_seq[ev], self.hi_acked_sent[ev] = seq, sent
        self._got_through(seq, sent, now, ev)
        self._same_ev(ev, now)

    def _got_through(self, seq: int, sent: float, now: float, ev: int | None) -> None:
        """Transmission ``seq`` (sent at ``sent``) is known delivered, on EV ``ev`` (None:
        a path unknown): evidence for rule B, of all planes and of its own. (A first
        copy's, the common case, is taken inline in ``first_copy_acked``.)"""
        if seq > self.hi_seq:
            self.hi_seq, self.hi_rtt = seq, now - sent
        if ev is not None:
            n = self.nic_of[ev]
            if seq > self.nic_hi_seq[n]:
                self.nic_hi_seq[n], self.nic_hi_rtt[n] = seq, now - sent

    def _reorder_expired(self, now: float) -> None:
        """The reorder timer: the oldest packets out that it condemns are lost (rule B),
        or, on another plane's evidence only, suspected."""
        while True:
            due, n = self._reorder_next()
            if due > now + 1e-9:  # (rounding of the deadline)
                return
            if n >= 0:  # the live head the deadline was taken from
                _, psn = self.nic_order[n].popleft()
                self.lose(self.inflight[psn], now, NACK, "loss_reorder")
            else:
                _, psn = self.order.popleft()
                self._suspect(self.inflight[psn], now)

    def reorder_deadline(self) -> float:
        """When rule B's timing will condemn (or suspect) the oldest packet out, fewer
        than ``dupthresh`` later transmissions having been acknowledged (RACK's reorder
        timer, RFC 8985): without it a packet that only a short tail followed, say the
        first of a two-packet message, would wait for a probe timeout and its probe's
        round trip, or for its RTO (INF: nothing to wait for). A packet is judged only on
        a path whose RTT is known: before that, a longer path would read as a loss."""
        return self._reorder_next()[0]

    def _reorder_next(self) -> tuple[float, int]:
        """The reorder timer's next deadline and whose it is: a NIC's (its oldest packet
        out, on that plane's evidence), or -1 (the oldest of all, on any plane's)."""
        if not self.cfg.reorder_timer:
            return INF, 0
        best, which = INF, 0
        for n, q in enumerate(self.nic_order):
            p = self.live_head(q)
            if p is not None and p.seq < self.nic_hi_seq[n] and self.rtt[p.ev].srtt:
                due = self._reorder_due(p, self.nic_hi_rtt[n])
                if due < best:
                    best, which = due, n
        if self.multi_nic:
            p = self.live_head(self.order)
            if p is not None and p.seq < self.hi_seq and self.rtt[p.ev].srtt:
                due = self._reorder_due(p, self.hi_rtt)
                if due < best:
                    best, which = due, -1
        return best, which

    def _reo_wnd(self, ev: int) -> float:
        cfg = self.cfg
        return max(cfg.reorder_min, cfg.reorder_frac * self.rtt[ev].srtt)

    def _condemned(self, p: SentPacket, now: float, hi_seq: int, hi_rtt: float) -> bool:
        """Rule B's timing: sent before the latest-sent transmission acknowledged (seq
        ``hi_seq``, of its plane or of all), ``p`` has been out longer than its EV's loss
        bound and than that transmission's RTT (``hi_rtt``) plus the EV's ``reo_wnd``
        (RACK: under a queue every EV shares, the RTT it just took)."""
        age = now - p.sent
        return (p.seq < hi_seq and age > self._loss_bound(p.ev)
                and age > hi_rtt + self._reo_wnd(p.ev))

    def _reorder_due(self, p: SentPacket, hi_rtt: float) -> float:
        """When the reorder timer condemns ``p``: rule B's timing, with the reorder window
        at least the same fraction of the RTT the later transmission took (a queue that
        grew meanwhile is not reordering) plus the receiver's ACK delay, since a single
        later transmission is weaker evidence than ``dupthresh`` of them."""
        cfg, ev = self.cfg, p.ev
        behind = hi_rtt + max(self._reo_wnd(ev), cfg.reorder_frac * hi_rtt) + cfg.ack_delay
        return p.sent + max(self._loss_bound(ev), behind)

    def on_tail_answer(self, probe: tuple[int, float, int, bool], now: float) -> None:
        """The full ACK answering a tail probe (sent after the silent packet ``psn``) has
        been processed: the peer is there (strikes end). A probe sent on the packet's own
        EV got through behind it, so it is evidence like any later transmission
        acknowledged and the packet, if still unacknowledged, is lost. One sent on
        another EV may have overtaken the packet: while the packet is outstanding, that
        answer becomes evidence only when the packet's RTO next expires."""
        seq, sent, psn, ordered = probe
        self.stats["tail_answered"] += 1
        self.strikes = 0  # the peer answers: the retry budget is for one that does not
        self.strike_at = INF
        self.strike_until = -INF
        p = self.inflight.get(psn)
        if not ordered and p is not None and not p.lost and p.seq < seq:
            self.around[psn] = (p.seq, seq, now - sent)
            self.stats["tail_answered_around"] += 1
            while len(self.around) > MAX_TAIL_PROBES:
                del self.around[next(iter(self.around))]
            return
        # behind it on its path, so on its plane
        self._got_through(seq, sent, now, p.ev if p is not None and ordered else None)
        if p is not None and not p.lost and p.seq < seq:
            self.lose(p, now, NACK, "loss_tail_probe")

    def live_head(self, q: deque) -> SentPacket | None:
        """The oldest packet of a (seq, psn) queue still in flight; stale entries are dropped."""
        inflight = self.inflight
        while q:
            seq, psn = q[0]
            p = inflight.get(psn)
            if p is not None and p.seq == seq and not p.lost:
                return p
            q.popleft()
        return None

    def lose(self, p: SentPacket, now: float, kind: int, reason: str,
             due: float = INF) -> None:
        """``p`` is lost: resend it; blame its EV only if a later transmission got through.
        ``due``: when its RTO came due (a blamed RTO)."""
        blamed = self.hi_seq > p.seq
        self.snd.requeue(p, reason, avoid=blamed)
        self.stats[reason] += 1
        ev = p.ev
        if not blamed:  # no evidence against the path (every EV was silent)
            self.stats["loss_unblamed"] += 1
            return
        self.sel.feedback(ev, kind)
        retired = self.paths.retire(ev, now, self.rto(ev))
        if kind == TIMEOUT:  # silent for an RTO while later packets got through: all lost
            self._flush(ev, now, since=due)
        elif retired and reason in ("loss_cross_ev", "loss_reorder"):
            self._flush(ev, now)
        self._blame(p.psn, ev, now)

    def _blame(self, psn: int, ev: int, now: float) -> None:
        blame = self.blame
        blame.pop(psn, None)  # re-inserted last: the dict stays in declaration order
        blame[psn] = (ev, now, None)
        # Undo needs an entry only while a copy of that packet may still be acknowledged
        # (RTOs are capped at rto_max): older ones go, so a link that flaps for the life
        # of a connection does not keep MAX_BLAME entries; MAX_BLAME caps a burst.
        horizon = now - 2 * self.cfg.rto_max
        while True:  # ends at the latest entry at the latest (its time is now)
            oldest = next(iter(blame))
            if len(blame) <= MAX_BLAME and blame[oldest][1] >= horizon:
                break
            del blame[oldest]

    def _flush(self, ev: int, now: float, since: float | None = None) -> None:
        """The path went silent: every packet out on it sent before ``since`` (after a
        blamed RTO, ``since`` when it came due: a retransmission that left while the timer
        waited to run was judged by no silence of the path), or, without ``since``, every
        one that rule B's timing condemns (without its ``dupthresh``: after B), is lost
        too, so a dead path does not hold the window until each times out."""
        inflight = self.inflight
        q = self.ev_q[ev]
        n = self.nic_of[ev]
        hi, hi_rtt = self.nic_hi_seq[n], self.nic_hi_rtt[n]
        keep: deque[tuple[int, int]] = deque()
        while q:
            seq, psn = q.popleft()
            p = inflight.get(psn)
            if p is None or p.seq != seq or p.lost:
                continue
            if (not self._condemned(p, now, hi, hi_rtt) if since is None else p.sent >= since):
                keep.append((seq, psn))
                continue
            self.snd.requeue(p, "loss_ev_flush")
            self.stats["loss_ev_flush"] += 1
            self._blame(psn, ev, now)
        self.ev_q[ev] = keep

    def _loss_bound(self, ev: int) -> float:
        """How long a packet on ``ev`` may be out before rule B calls it lost: the EV's
        ``srtt + 4 rttvar`` up to ``3 srtt``, at least ``srtt * (1 + reorder_frac) +
        reorder_min`` (before the EV's first RTT sample: the overall estimator's, uncapped)."""
        cfg = self.cfg
        est = self.rtt[ev]
        if est.srtt:
            bound = min(est.bound(), 3.0 * est.srtt)
        else:  # the other EVs' RTTs, of other packet sizes: their whole spread
            # (a message's small last packet on one plane, its full ones on the other)
            est = self.srtt
            bound = est.bound()
        return max(est.srtt * (1 + cfg.reorder_frac) + cfg.reorder_min, bound)

    def undo(self, psn: int, now: float, via: int) -> None:
        """An ACK came back on EV ``via`` for a copy of ``psn`` sent on it: if the loss of
        ``psn`` was blamed on ``via``, it was not one (the path answers both ways): re-admit
        the EV that loss retired and restore the window it cut, if nothing changed them
        since."""
        b = self.blame.get(psn)
        if b is None or b[0] != via:
            return
        del self.blame[psn]
        ev, at, cwnd = b
        if self.paths.state[ev] == EV_ASSUMED_BAD and self.paths.failed_at[ev] == at:
            self.paths.readmit(ev, now)  # its own ACK proved the path both ways
            self.stats["ev_undo"] += 1
        if cwnd is not None and self.cc.undo(cwnd, at):
            self.stats["cwnd_undo"] += 1

