"""MRC: a multipath reliable connection core (sans-I/O), sender and receiver in one object.

``MrcCore(conn, evs, config, rng_seed)`` is one end of a connection whose peer
is reached over ``evs`` paths (EVs ``0..evs-1``). Both ends use the same ``conn``
id; packets carrying another id are counted (``wrong_conn``) and dropped.

Sending. Messages are cut into packets (``mtu_payload`` bytes) that each get a
PSN and are sprayed over the EVs chosen by a path selector (transports/pathsel.py,
default ``oblivious``). Bytes in flight over all EVs are bounded by one NSCC-like
delay-based window (transports/cc.py) and by ``window_pkts`` PSNs past the
oldest unacknowledged one. The window compares each ACK's RTT with the base RTT of
the EV it was measured on (per-EV, windowed); an EV re-admitted after a failure
learns its base again (the route behind it may have changed).

Receiving. DATA is placed straight into the message's buffer at its offset
(transports/message.py). The receiver keeps the next expected PSN (``rcv_nxt``)
and the PSN ranges received beyond it, and returns ACKs carrying the cumulative
ack, SACK blocks (at most ``max_sack_blocks``: the lowest ones and the highest),
``ts_echo`` and the EV of the packet that triggered the ACK (``ts_echo`` is that
packet's ``ts`` plus the time the receiver held the ACK, so coalescing does not
inflate the sender's RTT samples). ACKs are coalesced
(every ``ack_every`` packets or after ``ack_delay``) but sent at once for
FLAG_ACK_REQ, for a packet that is out of order or fills a gap, and for a
duplicate. **An ACK, PROBE_ACK or any reply goes back on the EV the triggering
packet came in on**: the driver must map EV i to the same path (plane, spines)
in both directions, so that a probe answered proves the path round trip.

Loss detection (sprayed traffic reorders across paths, not within one):
  A. per EV (RACK-like): a packet is lost when a packet sent *later on the same
     EV* has been acknowledged and it was sent more than ``reo_wnd`` earlier than
     that one, ``reo_wnd = max(reorder_min, reorder_frac * srtt(EV))``; a path is a
     FIFO, so this holds whatever the other paths' delays are;
  B. across EVs: a packet is lost when a packet ``dupthresh`` transmissions later
     (any EV) has been acknowledged *and* it has been out longer than its own EV's
     ``max(srtt * (1 + reorder_frac) + reorder_min, srtt + 4 rttvar)`` (an RTO of
     that EV without the ``rto_min`` floor): a slow path is not blamed for being
     slower than a fast one;
  C. per packet RTO: the larger of ``srtt + 4 rttvar`` of the EV it was sent on and
     of all EVs together, within [rto_min, rto_max], doubled per consecutive RTO
     round without progress.
A lost packet is retransmitted (same PSN, FLAG_RETX) on a *different* EV than
the one that lost it, and that EV is retired (below). When B or C retires an EV
(the path went silent), every packet still outstanding on it is declared lost
too, so a dead path never holds the window until each of its packets times out. A NACK is read as a
trimmed packet (its ``psn`` field names it): retransmitted, the EV not blamed.

Per-EV states: GOOD (carries data), ASSUMED_BAD (retired after a loss or RTO;
probed with PROBE packets, ``probe_min``..``probe_max`` with doubling backoff,
re-admitted only when a PROBE_ACK answers), DENIED (``deny(ev)``, by a
controller; ``allow(ev)`` makes it ASSUMED_BAD and probes it). At least
``min(ev_min_active, EVs not denied)`` EVs stay GOOD: when too many are bad, the
least recently failed one comes back unprobed. Changes are listed by
``ev_changes()``.

Peer gone. Each RTO round without any new data acknowledged is a strike; more
than ``max_retries`` strikes fail the connection: every pending send and posted
receive completes with ok=False and an error, and later sends fail at once.
Worst case before failing: about rto * (2 ** (max_retries + 1)), capped per round
by rto_max. If every EV is DENIED, data waits for ``allow`` (no strikes).

Malformed datagrams and protocol violations are counted in ``stats`` (a
Counter, by reason) and dropped; nothing raises. PSNs are not wrapped (2^32
packets, ~34 TB at 8000 B per packet, per connection).
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, deque
from dataclasses import dataclass, field

from transports import wire
from transports.api import Completion, Tx
from transports.cc import Nscc, NsccConfig, RttEstimator
from transports.message import DROPPED, IntervalSet, MessageCore, OutMsg, Reassembly
from transports.pathsel import DELAY, GOOD, NACK, TIMEOUT, make_selector
from transports.wire import (
    ACK,
    DATA,
    FLAG_ACK_REQ,
    FLAG_LAST,
    FLAG_RETX,
    FLAG_SACK,
    HEADER_LEN,
    PROBE,
    PROBE_ACK,
    pack_header,
)

EV_GOOD, EV_ASSUMED_BAD, EV_DENIED = "GOOD", "ASSUMED_BAD", "DENIED"
INF = float("inf")


@dataclass(frozen=True)
class MrcConfig:
    """MRC knobs (times in seconds, sizes in bytes). Unknown keys are errors (dataclass)."""

    mtu_payload: int = 8000
    selector: str = "oblivious"  # "oblivious", "bitmap", "reps" (see transports/pathsel.py)
    ev_min_active: int = 2
    ack_every: int = 4
    ack_delay: float = 50e-6
    max_sack_blocks: int = 32
    rto_init: float = 10e-3  # before any RTT sample
    rto_min: float = 1e-3
    rto_max: float = 0.25
    max_retries: int = 7  # RTO rounds without progress before the connection fails
    reorder_frac: float = 0.25
    reorder_min: float = 5e-6
    dupthresh: int = 3
    probe_min: float = 1e-3
    probe_max: float = 0.1
    window_pkts: int = 4096  # PSNs outstanding (sender) and accepted beyond rcv_nxt
    unposted_limit: int = 64 << 20
    use_crc: bool = True
    nscc: NsccConfig = field(default_factory=NsccConfig)

    def __post_init__(self) -> None:
        if isinstance(self.nscc, dict):  # from JSON plans
            object.__setattr__(self, "nscc", NsccConfig(**self.nscc))
        if not 0 < self.mtu_payload <= wire.MAX_PAYLOAD:
            raise ValueError(f"mtu_payload must be in 1..{wire.MAX_PAYLOAD}")
        if self.ack_every < 1 or self.max_sack_blocks < 1 or self.window_pkts < 1:
            raise ValueError("ack_every, max_sack_blocks and window_pkts must be >= 1")
        if self.ev_min_active < 1 or self.max_retries < 0 or self.dupthresh < 1:
            raise ValueError("ev_min_active >= 1, max_retries >= 0, dupthresh >= 1")
        if not 0 < self.rto_min <= self.rto_max or not 0 < self.probe_min <= self.probe_max:
            raise ValueError("need 0 < rto_min <= rto_max and 0 < probe_min <= probe_max")


class _Pkt:
    """One data packet the sender is responsible for (its latest transmission)."""

    __slots__ = ("psn", "om", "offset", "length", "flags", "crc", "ev", "sent", "seq", "lost",
                 "retx")

    def __init__(self, psn: int, om: OutMsg, offset: int, length: int, flags: int,
                 crc: int) -> None:
        self.psn, self.om, self.offset, self.length = psn, om, offset, length
        self.flags, self.crc = flags, crc
        self.ev = -1
        self.sent = 0.0
        self.seq = 0  # transmission number (global send order)
        self.lost = False  # declared lost, waiting in the retransmit queue
        self.retx = False  # sent more than once: which copy an ACK is for is unknown


class MrcCore(MessageCore):
    """One end of an MRC connection over ``evs`` paths."""

    def __init__(self, conn: int, evs: int, config: MrcConfig | None = None,
                 rng_seed: int = 0) -> None:
        if evs < 1 or evs > 0xFFFF:
            raise ValueError("evs must be in 1..65535")
        cfg = config or MrcConfig()
        self.conn = conn
        self.evs = evs
        self.cfg = cfg
        self.rng = random.Random(rng_seed)
        self.stats: Counter[str] = Counter()
        self._done: list[Completion] = []
        self.reasm = Reassembly(cfg.unposted_limit, self.stats, self._done)
        self.cc = Nscc(cfg.nscc, cfg.mtu_payload + HEADER_LEN)
        self.sel = make_selector(cfg.selector, evs, self.rng)
        self.failed: str | None = None
        # sender
        self.snd_una = 0
        self.snd_nxt = 0
        self.inflight: dict[int, _Pkt] = {}
        self.sacked = IntervalSet()
        self.sendq: deque[OutMsg] = deque()
        self.out_msgs: dict[int, OutMsg] = {}
        self.retxq: deque[int] = deque()
        self.bytes_in_flight = 0
        self.tx_seq = 0
        self.ev_q: list[deque[tuple[int, int]]] = [deque() for _ in range(evs)]
        self.order: deque[tuple[int, int]] = deque()
        self.rto_heap: list[tuple[float, int, int]] = []
        self.hi_seq = 0
        self.strikes = 0
        self.strike_until = -INF
        # per EV
        self.state = [EV_GOOD] * evs
        self.failed_at = [-INF] * evs
        self.rtt = [RttEstimator() for _ in range(evs)]
        self.srtt = RttEstimator()  # all EVs together
        self.congested = [False] * evs
        self.hi_acked_seq = [0] * evs
        self.hi_acked_sent = [-INF] * evs
        self.probe_at = [INF] * evs
        self.probe_backoff = [cfg.probe_min] * evs
        self.probe_seq = [0] * evs
        self.probe_base = [0] * evs
        self.bad: set[int] = set()
        self.active: list[int] = list(range(evs))
        self.ev_tx = [0] * evs  # data packets sent per EV
        self._ev_events: list[tuple[float, int, str, str]] = []
        # receiver
        self.rcv_nxt = 0
        self.ooo = IntervalSet()
        self.ack_pending = 0
        self.ack_at = INF
        self.last_ts = 0
        self.last_rx = 0.0
        self.last_ev = 0

    def __repr__(self) -> str:
        return (f"MrcCore(conn={self.conn}, evs={self.evs}, active={len(self.active)}, "
                f"inflight={len(self.inflight)}, cwnd={self.cc.cwnd:.0f})")

    # ---- the Core interface -------------------------------------------------------------

    def on_packet(self, data: bytes | memoryview, now: float) -> list[Tx]:
        h = self._admit(data)
        if h is None:
            return []
        if h.ev >= self.evs:
            self.stats["bad_ev"] += 1
            return []
        out: list[Tx] = []
        kind = h.kind
        if kind == DATA:
            self._on_data(h, data, now, out)
        elif kind == ACK:
            self._on_ack(h, data, now, out)
        elif kind == PROBE:
            self._on_probe(h, now, out)
        elif kind == PROBE_ACK:
            self._on_probe_ack(h, now, out)
        else:
            self._on_nack(h, now, out)
        return out

    def on_timer(self, now: float) -> list[Tx]:
        out: list[Tx] = []
        if self.ack_at <= now:
            out.append(self._make_ack(now))
        heap = self.rto_heap
        fired = False
        while heap and heap[0][0] <= now:
            _, seq, psn = heapq.heappop(heap)
            p = self.inflight.get(psn)
            if p is None or p.seq != seq or p.lost:
                continue
            later = p.sent + min(self.cfg.rto_max, self._rto(p.ev) * (1 << self.strikes))
            if later > now:  # the RTT estimate grew since it was sent: wait with today's RTO
                heapq.heappush(heap, (later, seq, psn))
                continue
            fired = True
            self._lose(p, now, TIMEOUT, "loss_rto")
        if fired:
            self.cc.on_timeout(now)
            if now >= self.strike_until:
                self.strikes += 1
                self.strike_until = now + 0.5 * self._rto_any()
                if self.strikes > self.cfg.max_retries:
                    self._fail(now, f"peer unreachable: {self.strikes} retransmission "
                                    "timeouts without progress")
                    return out
        self._send_probes(now, out)
        self._pump(now, out)
        return out

    def next_deadline(self) -> float | None:
        d = self.ack_at
        heap, inflight = self.rto_heap, self.inflight
        while heap:
            _, seq, psn = heap[0]
            p = inflight.get(psn)
            if p is None or p.seq != seq or p.lost:
                heapq.heappop(heap)
                continue
            d = min(d, heap[0][0])
            break
        if self.bad:
            d = min(d, min(self.probe_at[e] for e in self.bad))
        return None if d == INF else d

    def completions(self) -> list[Completion]:
        done = self._done[:]
        self._done.clear()
        return done

    # ---- controller API -----------------------------------------------------------------

    def deny(self, ev: int, now: float = 0.0) -> None:
        """A controller forbids ``ev``: it carries nothing until ``allow`` and a probe."""
        self._set_state(ev, EV_DENIED, now)
        self.bad.discard(ev)
        self.probe_at[ev] = INF
        self._ensure_min_active(now)
        self._update_active()

    def allow(self, ev: int, now: float = 0.0) -> None:
        """Undo ``deny``: the EV is probed at once and carries data once a probe returns."""
        if self.state[ev] != EV_DENIED:
            return
        self._set_state(ev, EV_ASSUMED_BAD, now)
        self._start_probing(ev, now)
        self.probe_at[ev] = now

    def ev_state(self, ev: int) -> str:
        return self.state[ev]

    def ev_changes(self) -> list[tuple[float, int, str, str]]:
        """(t, ev, old, new) state changes since the last call (drained)."""
        ev = self._ev_events[:]
        self._ev_events.clear()
        return ev

    # ---- receiver -----------------------------------------------------------------------

    def _on_data(self, h: wire.Header, data: bytes | memoryview, now: float,
                 out: list[Tx]) -> None:
        payload = memoryview(data)[HEADER_LEN:HEADER_LEN + h.length]
        if h.crc:
            if wire.crc32(payload) != h.crc:
                self.stats["crc"] += 1
                return
        elif self.cfg.use_crc and h.length:
            self.stats["no_crc"] += 1
            return
        psn = h.psn
        if psn < self.rcv_nxt or psn in self.ooo:
            self.stats["dup_data"] += 1
            self.last_ts, self.last_ev, self.last_rx = h.ts, h.ev, now
            out.append(self._make_ack(now))
            return
        if psn >= self.rcv_nxt + self.cfg.window_pkts:
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
        if gap or h.flags & FLAG_ACK_REQ or self.ack_pending >= self.cfg.ack_every:
            out.append(self._make_ack(now))
        elif self.ack_at == INF:
            self.ack_at = now + self.cfg.ack_delay

    def _make_ack(self, now: float) -> Tx:
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
        # ts_echo includes the time the ACK was held here, so the sender's RTT excludes it
        echo = self.last_ts + int((now - self.last_rx) * 1e9) if self.last_ts else 0
        pack_header(buf, ACK, flags, self.conn, self.rcv_nxt, 0, 0, 0, self.last_ev,
                    len(payload), _ns(now), echo & 0xFFFFFFFFFFFFFFFF)
        buf[HEADER_LEN:] = payload
        self.stats["tx_ack"] += 1
        return (self.last_ev, buf)

    def _on_probe(self, h: wire.Header, now: float, out: list[Tx]) -> None:
        buf = bytearray(HEADER_LEN)
        pack_header(buf, PROBE_ACK, 0, self.conn, h.psn, 0, 0, 0, h.ev, 0, _ns(now), h.ts)
        out.append((h.ev, buf))
        self.stats["rx_probe"] += 1

    # ---- sender: acknowledgements ---------------------------------------------------------

    def _on_ack(self, h: wire.Header, data: bytes | memoryview, now: float,
                out: list[Tx]) -> None:
        cum = h.psn
        if cum > self.snd_nxt:
            self.stats["ack_beyond_sent"] += 1
            return
        blocks = []
        if h.flags & FLAG_SACK and h.length:
            blocks = wire.sack_blocks(memoryview(data)[HEADER_LEN:HEADER_LEN + h.length])
            snd_nxt = self.snd_nxt
            for a, b in blocks:
                if not cum < a < b <= snd_nxt:
                    self.stats["sack_out_of_window"] += 1
                    return
        if self.failed:
            return
        self.stats["rx_ack"] += 1
        inflight = self.inflight
        touched: set[int] = set()
        newly = 0
        if cum > self.snd_una:
            for psn in range(self.snd_una, cum):
                p = inflight.pop(psn, None)
                if p is not None:
                    newly += self._acked(p, now, touched)
            self.snd_una = cum
            self.sacked.discard_below(cum)
        for a, b in blocks:
            if b <= self.snd_una:
                continue
            for s, e in self.sacked.add(max(a, self.snd_una), b):
                for psn in range(s, e):
                    p = inflight.pop(psn, None)
                    if p is not None:
                        newly += self._acked(p, now, touched)
        if newly:
            self.strikes = 0
            self.strike_until = -INF
        else:
            self.stats["dup_ack"] += 1
        rtt = None
        ts_echo = h.ts_echo
        if ts_echo:
            r = now - ts_echo * 1e-9
            if 0 < r < 60.0:
                rtt = r
                ev = h.ev
                self.rtt[ev].sample(r)
                self.srtt.sample(r)
            else:
                self.stats["bad_ts_echo"] += 1
        self.cc.on_ack(newly, rtt, now, h.ev)
        if rtt is not None:
            # the selector's congestion signal: above the EV's base plus the delay target
            # *and* worse than the EVs on average (a uniformly loaded fabric should not
            # penalise anyone)
            self.congested[h.ev] = rtt > max(self.cc.rtt_ref(h.ev),
                                             self.srtt.srtt + self.srtt.rttvar)
        if touched:
            self._detect_losses(now, touched)
        self._pump(now, out)

    def _acked(self, p: _Pkt, now: float, touched: set[int]) -> int:
        size = HEADER_LEN + p.length
        if not p.lost:
            self.bytes_in_flight -= size
        ev = p.ev
        if not p.retx:  # a retransmitted packet's ACK may be for the first copy: no reference
            if p.seq > self.hi_acked_seq[ev]:
                self.hi_acked_seq[ev] = p.seq
                self.hi_acked_sent[ev] = p.sent
            if p.seq > self.hi_seq:
                self.hi_seq = p.seq
            touched.add(ev)
        self.sel.feedback(ev, DELAY if self.congested[ev] else GOOD)
        om = p.om
        om.acked += 1
        if om.acked == om.npkts and not om.done:
            om.done = True
            del self.out_msgs[om.msg]
            self._done.append(Completion(om.msg, "send", True, om.nbytes, now))
        return size

    def _detect_losses(self, now: float, touched: set[int]) -> None:
        cfg = self.cfg
        for ev in touched:  # A: a later packet on the same (FIFO) path got through
            q = self.ev_q[ev]
            hi = self.hi_acked_seq[ev]
            lim = self.hi_acked_sent[ev] - max(cfg.reorder_min,
                                               cfg.reorder_frac * self.rtt[ev].srtt)
            while (p := self._live_head(q)) is not None and p.seq < hi and p.sent <= lim:
                q.popleft()
                self._lose(p, now, NACK, "loss_same_ev")
        q = self.order  # B: dupthresh later transmissions acked and older than its path RTT
        while (p := self._live_head(q)) is not None:
            est = self.rtt[p.ev] if self.rtt[p.ev].srtt else self.srtt
            srtt = est.srtt
            if not (self.hi_seq - p.seq >= cfg.dupthresh and srtt
                    and now - p.sent > max(srtt * (1 + cfg.reorder_frac) + cfg.reorder_min,
                                           srtt + 4 * est.rttvar)):
                break
            q.popleft()
            self._lose(p, now, NACK, "loss_cross_ev")

    def _live_head(self, q: deque) -> _Pkt | None:
        """The oldest packet of a (seq, psn) queue still in flight; stale entries are dropped."""
        inflight = self.inflight
        while q:
            seq, psn = q[0]
            p = inflight.get(psn)
            if p is not None and p.seq == seq and not p.lost:
                return p
            q.popleft()
        return None

    def _on_nack(self, h: wire.Header, now: float, out: list[Tx]) -> None:
        """A trimmed packet: retransmit it without blaming its path."""
        p = self.inflight.get(h.psn)
        if p is None or p.lost or p.ev != h.ev:
            self.stats["nack_unknown"] += 1
            return
        self.stats["rx_trim_nack"] += 1
        self._requeue(p)
        self.sel.feedback(p.ev, NACK)
        self._pump(now, out)

    def _requeue(self, p: _Pkt) -> None:
        """Take ``p`` out of flight and queue it for retransmission."""
        p.lost = True
        self.bytes_in_flight -= HEADER_LEN + p.length
        self.retxq.append(p.psn)

    def _lose(self, p: _Pkt, now: float, kind: int, reason: str) -> None:
        self._requeue(p)
        self.stats[reason] += 1
        self.sel.feedback(p.ev, kind)
        ev = p.ev
        if self.state[ev] == EV_GOOD:
            self._retire(ev, now)
            if kind == TIMEOUT or reason == "loss_cross_ev":
                self._flush(ev)

    def _flush(self, ev: int) -> None:
        """The path went silent: everything still out on it is lost (resent elsewhere)."""
        inflight = self.inflight
        q = self.ev_q[ev]
        while q:
            seq, psn = q.popleft()
            p = inflight.get(psn)
            if p is None or p.seq != seq or p.lost:
                continue
            p.lost = True
            self.bytes_in_flight -= HEADER_LEN + p.length
            self.retxq.append(psn)
            self.stats["loss_ev_flush"] += 1

    # ---- per-EV state ---------------------------------------------------------------------

    def _set_state(self, ev: int, new: str, now: float) -> None:
        old = self.state[ev]
        if old != new:
            self.state[ev] = new
            self._ev_events.append((now, ev, old, new))

    def _start_probing(self, ev: int, now: float) -> None:
        self.bad.add(ev)
        self.probe_base[ev] = self.probe_seq[ev]
        self.probe_backoff[ev] = max(self.cfg.probe_min, self._rto(ev))
        self.probe_at[ev] = now

    def _retire(self, ev: int, now: float) -> None:
        if self.state[ev] != EV_GOOD:
            return
        self._set_state(ev, EV_ASSUMED_BAD, now)
        self.failed_at[ev] = now
        self.stats["ev_retired"] += 1
        self._start_probing(ev, now)
        self._ensure_min_active(now)
        self._update_active()

    def _ensure_min_active(self, now: float) -> None:
        allowed = sum(1 for s in self.state if s != EV_DENIED)
        need = min(self.cfg.ev_min_active, allowed)
        good = sum(1 for s in self.state if s == EV_GOOD)
        while good < need and self.bad:
            ev = min(self.bad, key=lambda e: (self.failed_at[e], e))
            self.bad.discard(ev)
            self.probe_at[ev] = INF
            self._set_state(ev, EV_GOOD, now)
            self.stats["ev_forced_back"] += 1
            good += 1

    def _update_active(self) -> None:
        self.active = [e for e in range(self.evs) if self.state[e] == EV_GOOD]
        if self.active:
            self.sel.set_active(self.active)

    def _send_probes(self, now: float, out: list[Tx]) -> None:
        for ev in self.bad:
            if self.probe_at[ev] <= now:
                self.probe_seq[ev] += 1
                buf = bytearray(HEADER_LEN)
                pack_header(buf, PROBE, FLAG_ACK_REQ, self.conn, self.probe_seq[ev], 0, 0, 0,
                            ev, 0, _ns(now))
                out.append((ev, buf))
                self.stats["tx_probe"] += 1
                self.probe_at[ev] = now + self.probe_backoff[ev]
                self.probe_backoff[ev] = min(self.cfg.probe_max, 2 * self.probe_backoff[ev])

    def _on_probe_ack(self, h: wire.Header, now: float, out: list[Tx]) -> None:
        ev = h.ev
        if (self.state[ev] != EV_ASSUMED_BAD
                or not self.probe_base[ev] < h.psn <= self.probe_seq[ev]):
            self.stats["stale_probe_ack"] += 1
            return
        r = now - h.ts_echo * 1e-9
        if 0 < r < 60.0:
            self.rtt[ev].sample(r)
        self.bad.discard(ev)
        self.probe_at[ev] = INF
        self._set_state(ev, EV_GOOD, now)
        self.cc.forget(ev)  # it may be another route now (longer or shorter): learn it again
        self.stats["ev_readmitted"] += 1
        self._update_active()
        self._pump(now, out)

    # ---- sender: transmission -------------------------------------------------------------

    def _rto(self, ev: int) -> float:
        cfg = self.cfg
        overall = self.srtt.rto(cfg.rto_min, cfg.rto_max, cfg.rto_init)
        return max(overall, self.rtt[ev].rto(cfg.rto_min, cfg.rto_max, overall))

    def _rto_any(self) -> float:
        cfg = self.cfg
        return min(cfg.rto_max,
                   self.srtt.rto(cfg.rto_min, cfg.rto_max, cfg.rto_init) * (1 << self.strikes))

    def _pick_ev(self, psn: int, avoid: int) -> int:
        active = self.active
        ev = self.sel.next_ev(psn)
        if self.state[ev] != EV_GOOD:
            ev = active[psn % len(active)]
        if ev == avoid and len(active) > 1:
            for _ in range(len(active)):
                ev = self.sel.next_ev(psn)
                if ev != avoid and self.state[ev] == EV_GOOD:
                    return ev
            ev = next(e for e in active if e != avoid)
        return ev

    def _may_retransmit(self, p: _Pkt) -> bool:
        """Whether lost packet ``p`` is resent now (MRC: always; DBLP parks some)."""
        return True

    def _pump(self, now: float, out: list[Tx]) -> None:
        if self.failed or not self.active:
            return
        cwnd = self.cc.cwnd
        inflight = self.inflight
        retxq = self.retxq
        last = None
        while retxq:
            p = inflight.get(retxq[0])
            if p is None or not p.lost:
                retxq.popleft()
                continue
            if not self._may_retransmit(p):  # a subclass keeps it (bounded loss)
                retxq.popleft()
                continue
            if self.bytes_in_flight and self.bytes_in_flight + HEADER_LEN + p.length > cwnd:
                break
            retxq.popleft()
            p.retx = True
            last = self._transmit(p, self._pick_ev(p.psn, p.ev), now, out, FLAG_RETX)
            self.stats["tx_retx"] += 1
        mtu = self.cfg.mtu_payload
        sendq = self.sendq
        while sendq and self.snd_nxt - self.snd_una < self.cfg.window_pkts:
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
            crc = wire.crc32(om.data[off:off + length]) if self.cfg.use_crc and length else 0
            p = _Pkt(self.snd_nxt, om, off, length, flags, crc)
            inflight[self.snd_nxt] = p
            self.snd_nxt += 1
            last = self._transmit(p, self._pick_ev(p.psn, -1), now, out, 0)
        if last is not None and (not sendq or retxq):
            last[3] |= FLAG_ACK_REQ  # the low byte of the big-endian flags field

    def _transmit(self, p: _Pkt, ev: int, now: float, out: list[Tx], flags: int) -> bytearray:
        self.tx_seq += 1
        seq = self.tx_seq
        p.ev, p.sent, p.seq, p.lost = ev, now, seq, False
        n = p.length
        om = p.om
        buf = bytearray(HEADER_LEN + n)
        pack_header(buf, DATA, p.flags | flags, self.conn, p.psn, om.msg, p.offset, om.nbytes,
                    ev, n, _ns(now), 0, p.crc)
        if n:
            buf[HEADER_LEN:] = om.data[p.offset:p.offset + n]
        self.bytes_in_flight += HEADER_LEN + n
        self.ev_q[ev].append((seq, p.psn))
        self.order.append((seq, p.psn))
        rto = min(self.cfg.rto_max, self._rto(ev) * (1 << self.strikes))
        heapq.heappush(self.rto_heap, (now + rto, seq, p.psn))
        self.ev_tx[ev] += 1
        self.stats["tx_data_pkts"] += 1
        out.append((ev, buf))
        return buf

    def _fail(self, now: float, error: str) -> None:
        self.failed = error
        self.stats["conn_failed"] += 1
        for om in list(self.out_msgs.values()):
            self._done.append(Completion(om.msg, "send", False, 0, now, error))
        self.out_msgs.clear()
        self.sendq.clear()
        self.inflight.clear()
        self.retxq.clear()
        self.rto_heap.clear()
        self.order.clear()
        for q in self.ev_q:
            q.clear()
        self.bad.clear()
        self.bytes_in_flight = 0
        self.reasm.fail_all(error, now)


def _ns(now: float) -> int:
    return int(now * 1e9) & 0xFFFFFFFFFFFFFFFF
