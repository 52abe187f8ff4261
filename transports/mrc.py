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

Receiving (transports/mrcrx.py). DATA is placed straight into the message's buffer
at its offset; ACKs carry the cumulative ack, SACK blocks, ``ts_echo`` (the
triggering packet's ``ts`` plus the time the ACK was held) and that packet's EV;
they are coalesced, but sent at once for FLAG_ACK_REQ, a gap and a duplicate.
**An ACK, PROBE_ACK or any reply goes back on the EV the triggering packet came in
on**: the driver must map EV i to the same path (plane, spines) in both
directions, so that a probe answered proves the path round trip.

Loss detection, blame and timeouts (transports/mrcloss.py): A (a later packet on
the same EV acknowledged), B (``dupthresh`` later transmissions acknowledged, with
RACK timing), C (per-packet RTO, with a floor in RTTs). A loss is blamed on its EV
(which is retired) only when a transmission sent after it got through; an RTO
without that evidence is *silent*: nothing is resent yet, a tail probe (a PROBE
with FLAG_TAIL, queued as data) goes after the packet on another EV, and its answer,
a full ACK, tells whether the packet got through (then nothing is resent) or not
(then it is lost: the probe is the transmission after it that got through).
Spurious retransmissions are counted and a wrong blame is undone (Eifel-style).

Per-EV states (transports/evstate.py): GOOD (carries data), ASSUMED_BAD (retired
after a loss blamed on it; probed with PROBE packets, ``probe_min``..``probe_max``
with doubling backoff, re-admitted when a PROBE_ACK answers or a loss is undone),
DENIED (``deny(ev)``, by a controller; ``allow(ev)`` makes it ASSUMED_BAD and
probes it). At least ``min(ev_min_active, EVs not denied)`` EVs stay GOOD.
Changes are listed by ``ev_changes()``.

Peer gone. Each RTO without new data acknowledged or a tail probe answered since (a
silent one, or a round of blamed ones) is a strike and doubles every RTO. More than
``max_retries`` strikes, the first at least ``give_up_s`` ago, fail the connection
(a time budget as a RoCE QP's timeout x retry_cnt: doubling RTOs from a small floor
are spent in a fraction of a second, which a receiver behind a burst, or a host
starved for a moment, can outlast): every pending send and posted receive completes
with ok=False and an error, and later sends fail at once. Worst case before failing:
about max(give_up_s, rto * (2 ** (max_retries + 1))), RTOs capped at rto_max. If every EV is
DENIED, data waits for ``allow`` (no strikes).

Malformed datagrams and protocol violations are counted in ``stats`` (a
Counter, by reason) and dropped; nothing raises. PSNs are not wrapped (2^32
packets, ~34 TB at 8000 B per packet, per connection).
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from transports import wire
from transports.api import Completion, Tx
from transports.cc import Nscc, NsccConfig
from transports.evstate import EV_ASSUMED_BAD, EV_DENIED, EV_GOOD, EvStates  # noqa: F401
from transports.message import IntervalSet, MessageCore, OutMsg, Reassembly, SentPacket
from transports.mrcloss import LossDetection
from transports.mrcrx import MrcReceiver
from transports.pathsel import DELAY, GOOD, NACK, make_selector
from transports.rto import RttEstimator, check_rto_config
from transports.spurious import RetxLedger
from transports.wire import (
    ACK,
    DATA,
    FLAG_ACK_REQ,
    FLAG_LAST,
    FLAG_RETX,
    FLAG_SACK,
    FLAG_TAIL,
    HEADER_LEN,
    PROBE,
    PROBE_ACK,
    pack_header,
)

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
    rto_min: float = 250e-6  # the RTO floor's absolute part: timer granularity, ACK delay
    rto_min_rtts: float = 4.0  # ... and its part in minimum RTTs (transports/rto.py)
    rto_max: float = 0.25
    max_retries: int = 7  # RTO rounds without progress before the connection fails ...
    give_up_s: float = 10.0  # ... and the least time since the first of them (as RC's)
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
        check_rto_config("MrcConfig", self.rto_init, self.rto_min, self.rto_min_rtts,
                         self.rto_max)
        if not self.give_up_s >= 0:
            raise ValueError(f"MrcConfig.give_up_s={self.give_up_s!r} must be >= 0 seconds")
        if not 0 < self.probe_min <= self.probe_max:
            raise ValueError("need 0 < probe_min <= probe_max")


class MrcCore(LossDetection, MessageCore):
    """One end of an MRC connection over ``evs`` paths."""

    def __init__(self, conn: int, evs: int, config: MrcConfig | None = None,
                 rng_seed: int = 0, nics: Sequence[int] | None = None) -> None:
        if evs < 1 or evs > 0xFFFF:
            raise ValueError("evs must be in 1..65535")
        if nics is not None and len(nics) != evs:
            raise ValueError(f"nics has {len(nics)} entries for {evs} EVs: one NIC per EV")
        # The NIC (plane) each EV leaves by: a packet whose EV is out of service goes to
        # another EV of the same NIC, so every NIC keeps its share of the load
        self.nic_of = list(nics) if nics is not None else None
        cfg = config or MrcConfig()
        self.conn = conn
        self.evs = evs
        self.cfg = cfg
        self.rng = random.Random(rng_seed)
        self.stats: Counter[str] = Counter()
        self._done: list[Completion] = []
        self.reasm = Reassembly(cfg.unposted_limit, self.stats, self._done)
        self.cc = Nscc(cfg.nscc, cfg.mtu_payload + HEADER_LEN)
        self.sel = make_selector(cfg.selector, evs, self.rng, nics)
        self.failed: str | None = None
        # sender
        self.snd_una = 0
        self.snd_nxt = 0
        self.inflight: dict[int, SentPacket] = {}
        self.sacked = IntervalSet()
        self.sendq: deque[OutMsg] = deque()
        self.out_msgs: dict[int, OutMsg] = {}
        self.retxq: deque[int] = deque()
        self.forced: set[int] = set()  # silent-RTO retransmissions: sent whatever the window
        self.silent_ev = -1  # the EV the last of them went on (they take turns)
        self.tail_due: list[int] = []  # PSNs of silent RTOs whose tail probe is due
        self.tail_probes: dict[int, tuple[int, float, int]] = {}  # ts -> seq, sent, PSN
        self.bytes_in_flight = 0
        self.tx_seq = 0
        self.tx_ts = 0  # the last DATA timestamp: each is unique, so an ACK names one copy
        self.ev_q: list[deque[tuple[int, int]]] = [deque() for _ in range(evs)]
        self.order: deque[tuple[int, int]] = deque()
        self.rto_heap: list[tuple[float, int, int]] = []
        self.hi_seq = 0  # the latest-sent first transmission acknowledged (any EV) ...
        self.hi_rtt = 0.0  # ... and how long it took: what the fabric takes now (RACK)
        self.strikes = 0
        self.strike_at = INF  # when the first strike without progress came
        self.strike_until = -INF
        self.progress_at = -INF  # the last ACK that acknowledged new data
        self.host_delay = 0.0  # the I/O loop's scheduling delay, part of the floor
        self.floor = cfg.rto_min  # the RTO floor (rto_floor())
        # per EV
        self.paths = EvStates(evs, cfg.ev_min_active, cfg.probe_min, cfg.probe_max,
                              self.stats, self.sel.set_active)
        self.state = self.paths.state  # (the same list)
        self.rtt = [RttEstimator() for _ in range(evs)]
        self.srtt = RttEstimator()  # all EVs together
        self.congested = [False] * evs
        self.hi_acked_seq = [0] * evs
        self.hi_acked_sent = [-INF] * evs
        self.ev_tx = [0] * evs  # data packets sent per EV
        # spurious retransmissions and the decisions they undo (Eifel-style)
        self.ledger = RetxLedger(max(1.0, 2 * cfg.rto_max))
        # psn -> (its EV, when that loss was declared, the window before a cut then)
        self.blame: dict[int, tuple[int, float, float | None]] = {}
        self.rcv = MrcReceiver(conn, cfg, self.reasm, self.stats)

    def __repr__(self) -> str:
        return (f"MrcCore(conn={self.conn}, evs={self.evs}, active={len(self.paths.active)}, "
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
            self.rcv.on_probe(h, now, out)
        elif kind == PROBE_ACK:
            self._on_probe_ack(h, now, out)
        else:
            self._on_nack(h, now, out)
        return out

    def on_timer(self, now: float) -> list[Tx]:
        out: list[Tx] = []
        if self.rcv.ack_at <= now:
            out.append(self.rcv.make_ack(now))
        if self._expire(now):  # the connection failed
            return out
        if self.tail_due:
            self._send_tail_probes(now, out)
        self._send_probes(now, out)
        self._pump(now, out)
        return out

    def next_deadline(self) -> float | None:
        d = self.rcv.ack_at
        heap, inflight = self.rto_heap, self.inflight
        while heap:
            _, seq, psn = heap[0]
            p = inflight.get(psn)
            if p is None or p.seq != seq or p.lost:
                heapq.heappop(heap)
                continue
            d = min(d, heap[0][0])
            break
        if self.paths.bad:
            d = min(d, self.paths.next_probe())
        return None if d == INF else d

    def completions(self) -> list[Completion]:
        done = self._done[:]
        self._done.clear()
        return done

    # ---- controller API -----------------------------------------------------------------

    def deny(self, ev: int, now: float = 0.0) -> None:
        """A controller forbids ``ev``: it carries nothing until ``allow`` and a probe."""
        self.paths.deny(ev, now)

    def allow(self, ev: int, now: float = 0.0) -> None:
        """Undo ``deny``: the EV is probed at once and carries data once a probe returns."""
        self.paths.allow(ev, now, self._rto(ev))

    def ev_state(self, ev: int) -> str:
        return self.state[ev]

    def ev_changes(self) -> list[tuple[float, int, str, str]]:
        """(t, ev, old, new) state changes since the last call (drained)."""
        return self.paths.changes()

    # ---- receiver (transports/mrcrx.py) -----------------------------------------------

    @property
    def rcv_nxt(self) -> int:
        return self.rcv.rcv_nxt

    def _on_data(self, h: wire.Header, data: bytes | memoryview, now: float,
                 out: list[Tx]) -> None:
        self.rcv.on_data(h, data, now, out)

    def _make_ack(self, now: float) -> Tx:
        return self.rcv.make_ack(now)

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
        # the transmissions of retransmitted packets this ACK may name (transports/spurious.py)
        named = self.ledger.get(h.ts_echo, h.ev) if h.ts_echo else ()
        if named:
            named = [(psn, inflight.get(psn)) for psn in named]
        touched: set[int] = set()
        # an ACK back on a retired EV may prove a loss that retired it wrong (_undo)
        proof: list[int] | None = [] if self.state[h.ev] == EV_ASSUMED_BAD else None
        newly = 0
        acked: list[int] = []
        if cum > self.snd_una:
            for psn in range(self.snd_una, cum):
                p = inflight.pop(psn, None)
                if p is not None:
                    newly += self._acked(p, now, touched)
                    if p.retx:
                        acked.append(psn)
                    if proof is not None:
                        proof.append(psn)
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
                        if p.retx:
                            acked.append(psn)
                        if proof is not None:
                            proof.append(psn)
        for psn in acked:  # when the receiver first acknowledged them (its clock)
            self.ledger.acked(psn, h.ts)
        if newly:
            self.strikes = 0
            self.strike_at = INF
            self.strike_until = -INF
            self.progress_at = now
        else:
            self.stats["dup_ack"] += 1
        if named:
            self._check_spurious(h.ts_echo, h.ev, h.ts, named, now)
        if proof:
            for psn in proof:
                self._undo(psn, now, h.ev)
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
            self._new_floor()
        tail = self.tail_probes.pop(ts_echo, None) if self.tail_probes and ts_echo else None
        if tail is not None:
            self._on_tail_answer(tail, now)
        if rtt is not None:
            # the selector's congestion signal: above the EV's base plus the delay target
            # *and* worse than the EVs on average (a uniformly loaded fabric should not
            # penalise anyone)
            self.congested[h.ev] = rtt > max(self.cc.rtt_ref(h.ev),
                                             self.srtt.srtt + self.srtt.rttvar)
        if touched or tail is not None:
            self._detect_losses(now, touched)
        self._pump(now, out)

    def _acked(self, p: SentPacket, now: float, touched: set[int]) -> int:
        size = HEADER_LEN + p.length
        if not p.lost:
            self.bytes_in_flight -= size
        ev = p.ev
        if not p.retx:  # a retransmitted packet's ACK may be for the first copy: no reference
            if p.seq > self.hi_acked_seq[ev]:
                self.hi_acked_seq[ev] = p.seq
                self.hi_acked_sent[ev] = p.sent
            if p.seq > self.hi_seq:
                self.hi_seq, self.hi_rtt = p.seq, now - p.sent
            touched.add(ev)
        self.sel.feedback(ev, DELAY if self.congested[ev] else GOOD)
        om = p.om
        om.acked += 1
        if om.acked == om.npkts and not om.done:
            om.done = True
            del self.out_msgs[om.msg]
            self._done.append(Completion(om.msg, "send", True, om.nbytes, now))
        return size

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

    # ---- per-EV state (transports/evstate.py) -------------------------------------------

    def _send_probes(self, now: float, out: list[Tx]) -> None:
        for ev, seq in self.paths.due(now):
            buf = bytearray(HEADER_LEN)
            pack_header(buf, PROBE, FLAG_ACK_REQ, self.conn, seq, 0, 0, 0, ev, 0, _ns(now))
            out.append((ev, buf))
            self.stats["tx_probe"] += 1

    def _send_tail_probes(self, now: float, out: list[Tx]) -> None:
        """Tail probes per silent RTO: transmissions after the packet (each its own
        ``seq`` and unique ``ts``), on the next two EVs in turn (two chances against a
        lost probe or answer, as two resends would have), queued as data, each answered
        at once by a full ACK that echoes its ``ts`` (transports/mrcrx.py)."""
        probes = self.tail_probes
        copies = min(2, len(self.paths.active))
        for psn in self.tail_due:
            p = self.inflight.get(psn)
            if p is None or p.lost:
                continue
            for _ in range(copies):
                self.tx_seq += 1
                ts = max(_ns(now), self.tx_ts + 1)
                self.tx_ts = ts
                ev = self._next_silent_ev(p.ev)
                buf = bytearray(HEADER_LEN)
                pack_header(buf, PROBE, FLAG_ACK_REQ | FLAG_TAIL, self.conn, psn, 0, 0, 0, ev,
                            0, ts)
                out.append((ev, buf))
                probes[ts] = (self.tx_seq, now, psn)
                self.stats["tx_tail_probe"] += 1
            while len(probes) > 1024:  # unanswered ones (lost, or the peer is gone)
                del probes[next(iter(probes))]
        self.tail_due.clear()

    def _on_probe_ack(self, h: wire.Header, now: float, out: list[Tx]) -> None:
        ev = h.ev
        if not self.paths.answers(ev, h.psn):
            self.stats["stale_probe_ack"] += 1
            return
        r = now - h.ts_echo * 1e-9
        if 0 < r < 60.0:
            self.rtt[ev].sample(r)
        self.paths.readmit(ev, now)
        self.cc.forget(ev)  # it may be another route now (longer or shorter): learn it again
        self._new_floor()
        self.stats["ev_readmitted"] += 1
        self._pump(now, out)

    # ---- sender: transmission -------------------------------------------------------------

    def _pick_ev(self, psn: int, avoid: int) -> int:
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

    def _next_silent_ev(self, avoid: int) -> int:
        """The EV of a silent RTO's retransmission: with no evidence against any path, each
        active EV in turn after the previous one's, skipping ``avoid`` (the packet's last)."""
        active = self.paths.active
        i = bisect_right(active, self.silent_ev) % len(active)
        if active[i] == avoid and len(active) > 1:
            i = (i + 1) % len(active)
        self.silent_ev = active[i]
        return self.silent_ev

    def _may_retransmit(self, p: SentPacket) -> bool:
        """Whether lost packet ``p`` is resent now (MRC: always; DBLP parks some)."""
        return True

    def _pump(self, now: float, out: list[Tx]) -> None:
        if self.failed or not self.paths.active:
            return
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
            if not self._may_retransmit(p):  # a subclass keeps it (bounded loss)
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
            if forced:  # an RTO probe: its ACK at once (an exact echo: transports/spurious.py)
                forced_set.discard(p.psn)
                ev = self._next_silent_ev(p.ev)
            else:
                ev = self._pick_ev(p.psn, p.ev if p.avoid else -1)
            last = self._transmit(p, ev, now, out, FLAG_RETX | (FLAG_ACK_REQ if forced else 0))
            self.ledger.record(p.ts, p.ev, p.psn, now)
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
            p = SentPacket(self.snd_nxt, om, off, length, flags, crc)
            inflight[self.snd_nxt] = p
            self.snd_nxt += 1
            last = self._transmit(p, self._pick_ev(p.psn, -1), now, out, 0)
        if last is not None and (not sendq or retxq):
            last[3] |= FLAG_ACK_REQ  # the low byte of the big-endian flags field

    def _transmit(self, p: SentPacket, ev: int, now: float, out: list[Tx], flags: int) -> bytearray:
        self.tx_seq += 1
        seq = self.tx_seq
        ts = max(_ns(now), self.tx_ts + 1)  # packets sent at one instant: 1 ns apart
        self.tx_ts = ts
        p.ev, p.sent, p.ts, p.seq, p.lost = ev, now, ts, seq, False
        n = p.length
        om = p.om
        buf = bytearray(HEADER_LEN + n)
        pack_header(buf, DATA, p.flags | flags, self.conn, p.psn, om.msg, p.offset, om.nbytes,
                    ev, n, ts, 0, p.crc)
        if n:
            buf[HEADER_LEN:] = om.data[p.offset:p.offset + n]
        self.bytes_in_flight += HEADER_LEN + n
        self.ev_q[ev].append((seq, p.psn))
        self.order.append((seq, p.psn))
        rto = min(self.cfg.rto_max, self._rto(ev) * (1 << min(self.strikes, 30)))
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
        self.forced.clear()
        self.tail_due.clear()
        self.tail_probes.clear()
        self.rto_heap.clear()
        self.order.clear()
        for q in self.ev_q:
            q.clear()
        self.paths.clear()
        self.ledger.clear()
        self.blame.clear()
        self.bytes_in_flight = 0
        self.reasm.fail_all(error, now)


def _ns(now: float) -> int:
    return int(now * 1e9) & 0xFFFFFFFFFFFFFFFF
