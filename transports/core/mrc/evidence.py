"""MRC's evidence of delivery and its rules A and B: which packets a later one condemns.

``Evidence`` keeps the send orders (per EV ``ev_q``, over all EVs ``order``, per NIC)
and the latest transmissions known delivered (over all EVs ``hi_seq``/``hi_rtt``; per
EV; per NIC, with the last ACK of data sent on it). Sprayed traffic reorders across
paths, not within one, so:

  A. per EV (RACK-like, ``same_ev``): a packet is lost when a packet sent *later on the
     same EV* has been acknowledged and it was sent more than ``reo_wnd`` earlier than
     that one, ``reo_wnd = max(reorder_min, reorder_frac * srtt(EV))``; a path is a
     FIFO, so this holds whatever the other paths' delays are;
  B. across the EVs of one NIC (plane, ``plane_condemned``): a packet is lost when a
     packet ``dupthresh`` transmissions later on an EV of its NIC has been acknowledged
     *and* it has been out longer than its own EV's loss bound ``max(srtt * (1 +
     reorder_frac) + reorder_min, min(srtt + 4 rttvar, 3 srtt))`` (about an RTO of that
     EV without the floor: a slow path is not blamed for being slower than a fast one;
     capped at three smoothed RTTs because a queue that came and went leaves a variance
     of its whole depth, and ``srtt + 4 rttvar`` then outlasts the very queue the
     evidence just crossed: under the demo's host-port bursts it held rule B near the
     RTO, 45 ms after the ACKs of the packets that got through showed the loss; an EV
     without RTT samples of its own takes the overall estimator's uncapped, as it mixes
     packet sizes) and than the RTT of the latest-sent packet acknowledged plus the EV's
     ``reo_wnd`` (RACK: a queue that every EV crosses is not a loss).
     Fewer than ``dupthresh`` later transmissions (a message's short tail, say) are
     enough for the reorder timer (RACK's, RFC 8985; ``MrcConfig.reorder_timer``,
     ``reorder_deadline``), which fires when the oldest packet out has been out longer
     than its EV's loss bound and than that RTT plus the larger of ``reo_wnd`` and
     ``reorder_frac`` of that RTT, plus the ACK delay (one later transmission is weaker
     evidence, and a queue that grew meanwhile is no reordering), on an EV whose RTT is
     known. Without it such a loss waited for the probe timeout and its probe's round
     trip, or an RTO.
     Each plane is its own FIFO system (its NIC's queue, its switches, its port at the
     receiver), so order across planes says nothing about loss: a microburst at the
     receiver fills the two planes' ports out of step, tens of RTTs apart. When B's
     evidence comes only from another plane, the packet is only *suspected*
     (``cross_plane``): the loss detector sends a plane probe behind it (probes.py).

The rules are generators: each condemned packet is taken out of its send order and
handed to the caller, which declares it lost (or probes it) before the next is judged.
Packets are looked up in the sender's ``Flight`` (flight.py); entries whose transmission
is no longer live are dropped as they come up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Protocol

from transports.core.mrc.flight import Flight, SentPacket
from transports.core.mrc.timeouts import Timeouts

INF = float("inf")

SendOrder = deque[tuple[int, int]]  # (seq, psn) of transmissions, oldest first


class EvidenceConfig(Protocol):
    """The knobs ``Evidence`` reads (``MrcConfig`` has them)."""

    @property
    def reorder_frac(self) -> float: ...
    @property
    def reorder_min(self) -> float: ...
    @property
    def dupthresh(self) -> int: ...
    @property
    def ack_delay(self) -> float: ...
    @property
    def reorder_timer(self) -> bool: ...


class Evidence:
    """Send orders and delivery evidence of one MRC sender over ``evs`` EVs (``nic_of``:
    each EV's NIC, None: all on one); RTTs come from ``timeouts``, packets from
    ``flight``."""

    def __init__(self, cfg: EvidenceConfig, evs: int, nic_of: Sequence[int] | None,
                 timeouts: Timeouts, flight: Flight) -> None:
        self.cfg, self.timeouts, self.flight = cfg, timeouts, flight
        self.ev_q: list[SendOrder] = [deque() for _ in range(evs)]
        self.order: SendOrder = deque()
        self.hi_seq = 0  # the latest-sent first transmission acknowledged (any EV) ...
        self.hi_rtt = 0.0  # ... and how long it took: what the fabric takes now (RACK)
        self.hi_acked_seq = [0] * evs
        self.hi_acked_sent = [-INF] * evs
        # per NIC (plane): rule B's send order, latest-sent first transmission acknowledged
        # and its RTT, the last ACK of data sent on it (whether the plane is silent)
        self.nic_of = list(nic_of) if nic_of is not None else [0] * evs
        nics = max(self.nic_of) + 1
        self.multi_nic = nics > 1
        # one plane: its order is the global one (no suspicion across planes)
        self.nic_order: list[SendOrder] = (
            [deque() for _ in range(nics)] if self.multi_nic else [self.order])
        self.nic_hi_seq = [0] * nics
        self.nic_hi_rtt = [0.0] * nics
        self.nic_progress = [-INF] * nics

    def __repr__(self) -> str:
        return f"Evidence(hi_seq={self.hi_seq}, hi_rtt={self.hi_rtt:.6f}, out={len(self.order)})"

    # ---- events -----------------------------------------------------------------------------

    def sent(self, p: SentPacket) -> None:
        """``p`` just left on ``p.ev`` as transmission ``p.seq``."""
        entry = (p.seq, p.psn)
        self.ev_q[p.ev].append(entry)
        self.order.append(entry)
        if self.multi_nic:
            self.nic_order[self.nic_of[p.ev]].append(entry)

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

    def acked_on(self, ev: int, seq: int, sent: float) -> None:
        """Transmission ``seq`` (sent at ``sent``) on ``ev`` got through behind every packet
        out on it (a plane probe answered): rule A's reference on that EV."""
        if seq > self.hi_acked_seq[ev]:
            self.hi_acked_seq[ev], self.hi_acked_sent[ev] = seq, sent

    def got_through(self, seq: int, sent: float, now: float, ev: int | None) -> None:
        """Transmission ``seq`` (sent at ``sent``) is known delivered, on EV ``ev`` (None:
        a path unknown): evidence for rule B, of all planes and of its own. (A first
        copy's, the common case, is ``first_copy_acked``.)"""
        if seq > self.hi_seq:
            self.hi_seq, self.hi_rtt = seq, now - sent
        if ev is not None:
            n = self.nic_of[ev]
            if seq > self.nic_hi_seq[n]:
                self.nic_hi_seq[n], self.nic_hi_rtt[n] = seq, now - sent

    def raise_hi(self, seq: int, rtt: float) -> None:
        """Transmission ``seq``, ``rtt`` long, counts as delivered from now on (any plane)."""
        if seq > self.hi_seq:
            self.hi_seq, self.hi_rtt = seq, rtt

    # ---- queries ----------------------------------------------------------------------------

    def later_delivered(self, seq: int) -> bool:
        """Whether a transmission sent after ``seq`` got through (evidence for blame)."""
        return self.hi_seq > seq

    def own_plane_delivered(self, p: SentPacket) -> bool:
        """Whether a transmission sent after ``p`` got through on ``p``'s own plane."""
        return self.nic_hi_seq[self.nic_of[p.ev]] > p.seq

    def plane_progress(self, ev: int) -> float:
        """The last ACK of data sent on ``ev``'s plane (-inf: none yet)."""
        return self.nic_progress[self.nic_of[ev]]

    def oldest(self) -> SentPacket | None:
        """The oldest packet out (any EV), None if none is."""
        return self.flight.live_head(self.order)

    def outstanding(self) -> Iterator[SentPacket]:
        """The packets out, oldest first (nothing is taken out of the send order)."""
        get = self.flight.get
        for seq, psn in self.order:
            p = get(psn)
            if p is None or p.seq != seq or p.lost:
                continue
            yield p

    # ---- rules A and B ----------------------------------------------------------------------

    def same_ev(self, ev: int, now: float) -> Iterator[SentPacket]:
        """Rule A on ``ev``: the packets a later one acknowledged on the same (FIFO) path
        condemns, each taken out of the send order."""
        q = self.ev_q[ev]
        hi = self.hi_acked_seq[ev]
        lim = self.hi_acked_sent[ev] - self.reo_wnd(ev)
        live_head = self.flight.live_head
        while (p := live_head(q)) is not None and p.seq < hi and p.sent <= lim:
            q.popleft()
            yield p

    def plane_condemned(self, now: float) -> Iterator[SentPacket]:
        """Rule B on each plane's own evidence: ``dupthresh`` later transmissions on its
        plane acknowledged, and older than its path RTT."""
        for n, q in enumerate(self.nic_order):
            hi, hi_rtt = self.nic_hi_seq[n], self.nic_hi_rtt[n]
            while (p := self._pop_condemned(q, hi, hi_rtt, now)) is not None:
                yield p

    def cross_plane(self, now: float) -> Iterator[SentPacket]:
        """Rule B's timing on another plane's evidence: suspects (several planes only)."""
        if self.multi_nic:
            q, hi, hi_rtt = self.order, self.hi_seq, self.hi_rtt
            while (p := self._pop_condemned(q, hi, hi_rtt, now)) is not None:
                yield p

    def _pop_condemned(self, q: SendOrder, hi: int, hi_rtt: float,
                       now: float) -> SentPacket | None:
        """The oldest packet of send order ``q``, taken out of it, if ``dupthresh`` later
        transmissions (up to seq ``hi``, the latest of RTT ``hi_rtt``) and rule B's timing
        condemn it; None otherwise."""
        p = self.flight.live_head(q)
        if p is None or hi - p.seq < self.cfg.dupthresh:
            return None
        if not self.condemned(p, now, hi, hi_rtt):
            return None
        q.popleft()
        return p

    def reorder_deadline(self) -> float:
        """When rule B's timing will condemn (or suspect) the oldest packet out, fewer
        than ``dupthresh`` later transmissions having been acknowledged (RACK's reorder
        timer, RFC 8985): without it a packet that only a short tail followed, say the
        first of a two-packet message, would wait for a probe timeout and its probe's
        round trip, or for its RTO (INF: nothing to wait for). A packet is judged only on
        a path whose RTT is known: before that, a longer path would read as a loss."""
        return self._reorder_next()[0]

    def reorder_expired(self, now: float) -> Iterator[tuple[SentPacket, bool]]:
        """The reorder timer: the oldest packets out that it condemns, each taken out of
        its send order with True (lost, on its plane's evidence) or False (suspected, on
        another plane's only)."""
        while True:
            due, n = self._reorder_next()
            if due > now + 1e-9:  # (rounding of the deadline)
                return
            if n >= 0:  # the live head the deadline was taken from
                _, psn = self.nic_order[n].popleft()
                yield self._live(psn), True
            else:
                _, psn = self.order.popleft()
                yield self._live(psn), False

    def _live(self, psn: int) -> SentPacket:
        p = self.flight.get(psn)
        assert p is not None  # a live head, just taken out of its send order
        return p

    def _reorder_next(self) -> tuple[float, int]:
        """The reorder timer's next deadline and whose it is: a NIC's (its oldest packet
        out, on that plane's evidence), or -1 (the oldest of all, on any plane's)."""
        if not self.cfg.reorder_timer:
            return INF, 0
        best, which = INF, 0
        live_head, rtt = self.flight.live_head, self.timeouts.rtt
        for n, q in enumerate(self.nic_order):
            p = live_head(q)
            if p is not None and p.seq < self.nic_hi_seq[n] and rtt[p.ev].srtt:
                due = self._reorder_due(p, self.nic_hi_rtt[n])
                if due < best:
                    best, which = due, n
        if self.multi_nic:
            p = live_head(self.order)
            if p is not None and p.seq < self.hi_seq and rtt[p.ev].srtt:
                due = self._reorder_due(p, self.hi_rtt)
                if due < best:
                    best, which = due, -1
        return best, which

    def reo_wnd(self, ev: int) -> float:
        """Rule A's reordering window on ``ev``."""
        cfg = self.cfg
        return max(cfg.reorder_min, cfg.reorder_frac * self.timeouts.rtt[ev].srtt)

    def condemned(self, p: SentPacket, now: float, hi_seq: int, hi_rtt: float) -> bool:
        """Rule B's timing: sent before the latest-sent transmission acknowledged (seq
        ``hi_seq``, of its plane or of all), ``p`` has been out longer than its EV's loss
        bound and than that transmission's RTT (``hi_rtt``) plus the EV's ``reo_wnd``
        (RACK: under a queue every EV shares, the RTT it just took)."""
        age = now - p.sent
        return (p.seq < hi_seq and age > self.loss_bound(p.ev)
                and age > hi_rtt + self.reo_wnd(p.ev))

    def _reorder_due(self, p: SentPacket, hi_rtt: float) -> float:
        """When the reorder timer condemns ``p``: rule B's timing, with the reorder window
        at least the same fraction of the RTT the later transmission took (a queue that
        grew meanwhile is not reordering) plus the receiver's ACK delay, since a single
        later transmission is weaker evidence than ``dupthresh`` of them."""
        cfg, ev = self.cfg, p.ev
        hold = self.timeouts.peer_hold.value
        behind = (hi_rtt + max(self.reo_wnd(ev), cfg.reorder_frac * hi_rtt)
                  + (hold if hold > cfg.ack_delay else cfg.ack_delay))
        return p.sent + max(self.loss_bound(ev), behind)

    def loss_bound(self, ev: int) -> float:
        """How long a packet on ``ev`` may be out before rule B calls it lost: the EV's
        ``srtt + 4 rttvar`` up to ``3 srtt``, at least ``srtt * (1 + reorder_frac) +
        reorder_min`` (before the EV's first RTT sample: the overall estimator's, uncapped)."""
        cfg = self.cfg
        est = self.timeouts.rtt[ev]
        if est.srtt:
            bound = min(est.bound(), 3.0 * est.srtt)
        else:  # the other EVs' RTTs, of other packet sizes: their whole spread
            # (a message's small last packet on one plane, its full ones on the other)
            est = self.timeouts.srtt
            bound = est.bound()
        # plus the peer's ACK delay, which the samples leave out (rto.py ``PeerHold``)
        return (max(est.srtt * (1 + cfg.reorder_frac) + cfg.reorder_min, bound)
                + self.timeouts.peer_hold.value)

    # ---- a path gone silent -----------------------------------------------------------------

    def flush(self, ev: int, now: float, since: float | None = None) -> Iterator[SentPacket]:
        """The path went silent: every packet out on it sent before ``since`` (after a
        blamed RTO, ``since`` when it came due: a retransmission that left while the timer
        waited to run was judged by no silence of the path), or, without ``since``, every
        one that rule B's timing condemns (without its ``dupthresh``: after B), is lost
        too, so a dead path does not hold the window until each times out. Yields them
        (the rest of ``ev``'s send order is kept)."""
        get = self.flight.get
        q = self.ev_q[ev]
        n = self.nic_of[ev]
        hi, hi_rtt = self.nic_hi_seq[n], self.nic_hi_rtt[n]
        keep: SendOrder = deque()
        while q:
            seq, psn = q.popleft()
            p = get(psn)
            if p is None or p.seq != seq or p.lost:
                continue
            if (not self.condemned(p, now, hi, hi_rtt) if since is None else p.sent >= since):
                keep.append((seq, psn))
                continue
            yield p
        self.ev_q[ev] = keep

    def clear(self) -> None:
        """The connection failed: nothing is out."""
        self.order.clear()
        for q in self.ev_q:
            q.clear()
        for q in self.nic_order:
            q.clear()
