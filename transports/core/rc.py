"""RC: a RoCEv2 reliable-connection core (sans-I/O), the single-path baseline.

``RcCore(conn, config, rng_seed)``: one path (every packet on EV 0; ECMP picks
the route), PSNs in order. The receiver (transports/core/receiver.py, in-order mode)
accepts only the next expected PSN: anything beyond it is dropped and answered
by one NACK carrying the expected PSN per gap (a duplicate is re-acknowledged).
The sender keeps at most ``window_pkts`` packets outstanding (RDMA's
outstanding-request limit; with ``aimd`` the window moves between 1 and that: +1
per window acked, halved on a NACK or timeout, at most once per RTT) and goes back
N: on a NACK it resends everything from the NACKed PSN, on an RTO everything from
the oldest unacknowledged. ACKs are cumulative (no SACK), coalesced like MRC's. Same
message API, placement and peer-gone behaviour as MRC (transports/core/mrc/connection.py).
Retry budget as a RoCE QP's (timeout x retry_cnt): the connection fails every
pending message with ok=False only after more than ``max_retries`` RTOs without
progress *and* at least ``give_up_s`` since the first of them. A count alone is
not enough: a single-path QP must outlive the fabric's reconvergence (BFD and
BGP, on the wall clock), which a count of doubling RTOs that start from a small
floor does not; after the count is spent it keeps probing every ``rto_max``.
``rto_log``: the times of the first ``RTO_LOG_MAX`` timeouts (a timeout is rare; the
calibration reads when the retry that got through a link cut was sent).

RTO: RFC 6298 (srtt + 4 rttvar), doubled per RTO without progress, within
[floor, rto_max], the floor ``max(rto_min, rto_min_rtts * minimum RTT)`` plus the
host's measured scheduling delay (transports/core/rto.py), plus the peer's ACK delay
(the hold its ACKs state: rto.py ``PeerHold``), restarted by every ACK of new data.

DCQCN (``dcqcn``): the receiver answers a CE-marked packet at once with an ACK carrying
FLAG_ECE (the congestion notification); the sender's rate (transports/core/dcqcn.py)
is cut on it and recovers on its timers, and packets leave paced at that rate. With it,
``aimd`` is what it always was (set it off: RoCE NICs run DCQCN alone).

Spurious retransmissions: the receiver counts every packet it already had
(``dup_data``) and acknowledges it at once; an ACK's ``ts_echo`` is its packet's
``ts`` plus the time the ACK was held, so one sent at once echoes it exactly. The
sender counts an ACK that advances nothing and echoes exactly the timestamp of one
of its retransmissions as one retransmission that was not needed
(``tx_retx_spurious``: the path is a FIFO, so such an ACK can only answer a
duplicate). RC does not act on it (go-back-N as RoCE NICs do); it is reported.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from transports.core import wire
from transports.core.api import Completion, Tx
from transports.core.dcqcn import Dcqcn, DcqcnConfig
from transports.core.knobs import check_knobs, knob
from transports.core.message import Completions, MessageCore, OutMsg, Reassembly
from transports.core.receiver import Receiver
from transports.core.rto import MinRtt, PeerHold, RttEstimator, check_rto_config, rto_floor
from transports.core.spurious import RetxLedger
from transports.core.wire import (
    ACK,
    DATA,
    FLAG_LAST,
    FLAG_RETX,
    HEADER_LEN,
    NACK,
    PROBE,
    pack_header,
)

INF = float("inf")
RTO_LOG_MAX = 64  # timeouts whose times a connection keeps (``rto_log``)


@dataclass(frozen=True)
class RcConfig:
    """RC knobs (times in seconds, sizes in bytes); each field's rule is its ``knob``
    (transports/core/knobs.py)."""

    mtu_payload: int = knob(8000, lo=1, hi=wire.MAX_PAYLOAD)
    window_pkts: int = knob(64, lo=1)  # packets outstanding (with aimd: the most)
    aimd: bool = knob(False)  # the window moves (+1 per window acked, halved on a loss)
    ack_every: int = knob(4, lo=1)
    ack_delay: float = knob(50e-6, lo=0.0)
    # one ACK per wake-up of a batching I/O loop (or per ack_every): transports/core/receiver.py
    ack_wakeup: bool = knob(False)
    rto_init: float = knob(10e-3, lo=0.0, lo_open=True)
    # the RTO floor's absolute part: timer granularity, ACK delay
    rto_min: float = knob(250e-6, lo=0.0, lo_open=True)
    # ... and its part in minimum RTTs (transports/core/rto.py)
    rto_min_rtts: float = knob(4.0, lo=0.0, hi=1e6, hi_open=True)
    rto_max: float = knob(0.25, lo=0.0, lo_open=True)
    max_retries: int = knob(7, lo=0)
    # ... and the least time without progress before failing
    give_up_s: float = knob(10.0, lo=0.0)
    unposted_limit: int = knob(64 << 20, lo=0)  # bytes of messages received before posted
    use_crc: bool = knob(True)
    # DCQCN's rate control on congestion notifications (ECN echoes): as RoCE NICs run it
    dcqcn: bool = knob(False)
    rate: DcqcnConfig = field(default_factory=DcqcnConfig)

    def __post_init__(self) -> None:
        if isinstance(self.rate, dict):  # from JSON plans
            object.__setattr__(self, "rate", DcqcnConfig(**self.rate))
        if not isinstance(self.rate, DcqcnConfig):
            raise TypeError(f"RcConfig.rate={self.rate!r}: DCQCN's settings (a table)")
        check_knobs(self)
        check_rto_config("RcConfig", self.rto_init, self.rto_min, self.rto_min_rtts,
                         self.rto_max)


class RcCore(MessageCore):
    """One end of an RC connection (EV 0 only)."""

    def __init__(self, conn: int, config: RcConfig | None = None, rng_seed: int = 0) -> None:
        cfg = config or RcConfig()
        self.conn = conn
        self.cfg: RcConfig = cfg
        self.stats: Counter[str] = Counter()
        self._done = Completions()
        self.reasm = Reassembly(cfg.unposted_limit, self.stats, self._done)
        self.failed: str | None = None
        # sender
        self.snd_una = 0  # oldest unacknowledged
        self.snd_nxt = 0  # next PSN to (re)send
        self.snd_max = 0  # next new PSN
        self.pkts: dict[int, tuple[OutMsg, int, int, int, int]] = {}  # psn -> om, off, len, fl, crc
        self.sendq: deque[OutMsg] = deque()
        self.out_msgs: dict[int, OutMsg] = {}
        self.window = float(cfg.window_pkts)
        self.last_cut = -INF
        self.rtt = RttEstimator()
        self.min_rtt = MinRtt()
        self.ledger = RetxLedger(max(1.0, 2 * cfg.rto_max))  # retransmissions by timestamp
        self.rto_at = INF
        self.strikes = 0
        self.first_strike_at = INF  # the first RTO without progress
        self.rto_log: list[float] = []  # when the first RTO_LOG_MAX timeouts fired
        self.host_delay = 0.0  # the I/O loop's scheduling delay, part of the floor
        self.peer_hold = PeerHold()  # the peer's ACK delay, added to the RTO
        self.dcqcn = Dcqcn(cfg.rate) if cfg.dcqcn else None  # the QP's rate (DCQCN)
        self.pace_at = INF  # when pacing lets the next packet leave (INF: not waiting)
        # receiver: in order, one NACK per gap, cumulative ACKs (transports/core/receiver.py)
        self.rcv = Receiver(conn, cfg, self.reasm, self.stats, in_order=True)

    def __repr__(self) -> str:
        posted = sorted(m for m, r in list(self.reasm.msgs.items()) if r.posted)
        return (f"RcCore(conn={self.conn}, una={self.snd_una}, nxt={self.snd_nxt}, "
                f"max={self.snd_max}, window={self.window:.1f}, strikes={self.strikes}, "
                f"rto_at={self.rto_at:.3f}, sending={sorted(self.out_msgs)}, "
                f"rcv_nxt={self.rcv_nxt}, awaiting={posted}, failed={self.failed!r})")

    # ---- the Core interface -------------------------------------------------------------

    def on_packet(self, data: bytes | memoryview, now: float,
                  rx_t: float | None = None) -> list[Tx]:
        h = self._admit(data)
        if h is None:
            return []
        out: list[Tx] = []
        if h.kind == DATA:
            self.rcv.arrival = rx_t
            self._on_data(h, data, now, out)
        elif h.kind in (ACK, NACK):
            if h.flags & (wire.FLAG_STOP | wire.FLAG_STOP_OK):  # DBLP's, never an RC ack
                self.stats["stop_unexpected"] += 1
                return out
            self._on_ack(h, now, out, now if rx_t is None else rx_t)
        elif h.kind == PROBE:
            buf = bytearray(HEADER_LEN)
            pack_header(buf, wire.PROBE_ACK, 0, self.conn, h.psn, 0, 0, 0, 0, 0, _ns(now), h.ts)
            out.append((0, buf))
        else:
            self.stats["unexpected_kind"] += 1
        return out

    def on_timer(self, now: float) -> list[Tx]:
        out: list[Tx] = []
        if self.rcv.ack_at <= now:
            out.append(self.rcv.make_ack(now))
        if self.rto_at <= now:
            self.rto_at = INF
            if self.snd_una < self.snd_max and not self.failed:
                if self.strikes == 0:
                    self.first_strike_at = now
                self.strikes += 1
                self.stats["rto"] += 1
                if len(self.rto_log) < RTO_LOG_MAX:
                    self.rto_log.append(now)
                if (self.strikes > self.cfg.max_retries
                        and now - self.first_strike_at >= self.cfg.give_up_s):
                    self._fail(now, f"peer unreachable: {self.strikes} retransmission timeouts "
                                    f"without progress over {now - self.first_strike_at:.3g} s")
                    return out
                self._cut(now, force=True)
                self.snd_nxt = self.snd_una  # go back N
        self._pump(now, out)
        return out

    def flush(self, now: float) -> list[Tx]:
        """The coalesced ACK of this wake-up (transports/core/api.py ``Core.flush``)."""
        ack = self.rcv.flush(now)
        return [] if ack is None else [ack]

    def next_deadline(self) -> float | None:
        d = min(self.rcv.ack_at, self.rto_at, self.pace_at)
        return None if d == INF else d

    def state_sizes(self) -> dict[str, int]:
        """How many entries each container a soak watches holds (transports/io/footprint.py)."""
        return {"recv_msgs": len(self.reasm), "retx_ledger": len(self.ledger)}

    # ---- receiver (transports/core/receiver.py) ---------------------------------------------

    @property
    def rcv_nxt(self) -> int:
        """The next PSN this end expects (everything below it was placed)."""
        return self.rcv.rcv_nxt

    def _on_data(self, h: wire.Header, data: bytes | memoryview, now: float,
                 out: list[Tx]) -> None:
        if h.ev != 0:  # RC has one path: another EV is not a packet of this protocol
            self.stats["bad_ev"] += 1
            return
        self.rcv.on_data(h, data, now, out)

    # ---- sender ---------------------------------------------------------------------------

    def _sending(self, msg: int) -> bool:
        return msg in self.out_msgs

    def _queue(self, om: OutMsg) -> None:
        self.out_msgs[om.msg] = om
        self.sendq.append(om)

    def _on_ack(self, h: wire.Header, now: float, out: list[Tx], rx: float) -> None:
        cum = h.psn
        if cum > self.snd_max:
            self.stats["ack_beyond_sent"] += 1
            return
        if self.failed:
            return
        self.peer_hold.sample(h.msg_len * 1e-9, now)  # the peer's ACK delay (wire.py)
        if h.ts_echo:
            r = rx - h.ts_echo * 1e-9  # from the ACK's arrival, however late the loop woke
            if 0 < r < 60.0:
                self.rtt.sample(r)
                self.min_rtt.sample(r, now)
                if self.dcqcn is not None:
                    self.dcqcn.set_rtt(self.min_rtt.value)
            named = self.ledger.get(h.ts_echo, 0)
            if named:
                # acks a retransmission: a duplicate arrival if it advances nothing
                psn = next((x for x in named if x < cum), None)
                if psn is not None:
                    self.ledger.resolve(h.ts_echo, 0, psn)
                    if h.kind == ACK and cum <= self.snd_una:
                        self.stats["tx_retx_spurious"] += 1
        rate = self.dcqcn
        if rate is not None and h.flags & wire.FLAG_ECE:
            self.stats["rx_cnp"] += 1
            if rate.on_cnp(now):
                self.stats["dcqcn_cut"] += 1
        if cum > self.snd_una:
            if rate is not None:
                rate.on_acked((cum - self.snd_una) * (HEADER_LEN + self.cfg.mtu_payload), now)
            for psn in range(self.snd_una, cum):
                om, *_ = self.pkts.pop(psn)
                om.acked += 1
                if om.acked == om.npkts:
                    om.done = True
                    del self.out_msgs[om.msg]
                    self._done.append(Completion(om.msg, "send", True, om.nbytes, now))
            if self.cfg.aimd:
                self.window = min(self.cfg.window_pkts,
                                  self.window + (cum - self.snd_una) / self.window)
            self.snd_una = cum
            self.strikes = 0
            self.first_strike_at = INF
            self.snd_nxt = max(self.snd_nxt, cum)
            self.rto_at = now + self._rto() if self.snd_una < self.snd_max else INF
        if h.kind == NACK:
            self.stats["rx_nack"] += 1
            if self.snd_una <= cum < self.snd_nxt:  # a stale NACK (cum < snd_una) is ignored
                self._cut(now)
                self.snd_nxt = cum  # go back N from the expected PSN
        self._pump(now, out)

    def _cut(self, now: float, force: bool = False) -> None:
        if self.cfg.aimd and (force or now - self.last_cut >= (self.rtt.srtt or 0.0)):
            self.window = max(1.0, self.window / 2)
            self.last_cut = now

    def rto_floor(self) -> float:
        """``max(rto_min, rto_min_rtts * minimum RTT) + host delay`` (transports/core/rto.py)."""
        cfg = self.cfg
        return rto_floor(cfg.rto_min, cfg.rto_min_rtts, self.min_rtt.value, self.host_delay)

    def set_host_delay(self, delay: float) -> None:
        """The I/O loop's measured scheduling delay (transports/core/rto.py ``HostDelay``)."""
        self.host_delay = delay

    def _rto(self) -> float:
        cfg = self.cfg
        # plus the peer's ACK delay, which the RTT samples leave out (rto.py ``PeerHold``)
        return min(cfg.rto_max, (self.rtt.rto(self.rto_floor(), cfg.rto_max, cfg.rto_init)
                                 + self.peer_hold.value) * (1 << min(self.strikes, 30)))

    def _pump(self, now: float, out: list[Tx]) -> None:
        if self.failed:
            return
        limit = self.snd_una + max(1, int(self.window))
        last = None
        rate = self.dcqcn
        self.pace_at = INF
        while self.snd_nxt < limit:
            psn = self.snd_nxt
            if rate is not None and (psn < self.snd_max or self.sendq):
                at = rate.send_at(now)
                if at > now:  # paced: the rest leaves when the rate allows
                    self.pace_at = at
                    break
            if psn < self.snd_max:
                om, off, n, fl, crc = self.pkts[psn]
                flags = fl | FLAG_RETX
                self.stats["tx_retx"] += 1
                self.ledger.record(_ns(now), 0, psn, now)
            elif self.sendq:
                om = self.sendq[0]
                off = om.next_off
                n = min(self.cfg.mtu_payload, om.nbytes - off)
                om.next_off = off + n
                fl = 0
                if om.next_off >= om.nbytes:
                    self.sendq.popleft()
                    fl = FLAG_LAST
                crc = wire.crc32_range(om.data, off, n) if self.cfg.use_crc and n else 0
                self.pkts[psn] = (om, off, n, fl, crc)
                self.snd_max = psn + 1
                flags = fl
            else:
                break
            buf = wire.datagram(wire.WIRE_VERSION, DATA, flags, self.conn, psn, om.msg, off,
                                om.nbytes, 0, _ns(now), 0, crc, om.data, off, n)
            out.append((0, buf))
            last = buf
            if rate is not None:
                rate.sent(len(buf), now)
            self.stats["tx_data_pkts"] += 1
            self.snd_nxt = psn + 1
        if last is not None:
            if self.snd_nxt >= self.snd_max or self.snd_nxt >= limit:
                wire.request_ack(last)
            if self.rto_at == INF:
                self.rto_at = now + self._rto()

    def _fail(self, now: float, error: str) -> None:
        self.failed = error
        self.stats["conn_failed"] += 1
        for om in list(self.out_msgs.values()):
            self._done.append(Completion(om.msg, "send", False, 0, now, error))
        self.out_msgs.clear()
        self.sendq.clear()
        self.pkts.clear()
        self.ledger.clear()
        self.rto_at = INF
        self.reasm.fail_all(error, now)


def _ns(now: float) -> int:
    return int(now * 1e9) & 0xFFFFFFFFFFFFFFFF
