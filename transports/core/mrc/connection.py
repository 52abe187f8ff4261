"""MRC: a multipath reliable connection core (sans-I/O), sender and receiver in one object.

The core is made of parts with one job each, every one an object with its own state,
reached only through its methods (files in transports/core/mrc/ unless said):

- ``Flight`` (flight.py): the packets the sender owns, the retransmission queue, the
  numbering of transmissions;
- ``Sender`` (sender.py): messages, PSNs, transmissions, acknowledgements, the window;
- ``Spray`` (spray.py): the EV of each transmission (a path selector, pathsel.py);
- ``EvTable`` (evtable.py): per-EV states as one explicit transition table, probes;
- ``Timeouts`` (timeouts.py): RTT estimators, the RTO floor, back-off and strikes;
- ``LossDetector`` (lossdetect.py): rules A/B/C, blame, undo, the retry budget, with
  its own parts (evidence.py, probes.py, blame.py);
- ``Receiver`` (transports/core/receiver.py, shared with RC): PSN state, SACK, ACK
  coalescing; ``Reassembly`` (transports/core/message.py): placement;
- ``Nscc`` (transports/core/cc.py): the window; ``RetxLedger``
  (transports/core/spurious.py): spurious retransmissions.

``MrcCore`` builds them and routes datagrams and timers to them. A ``CorePolicy``
(DBLP's bounded loss, transports/core/dblp/) may be plugged in: it sees DATA before
placement, STOP/STOP_OK control ACKs, timers and deadlines, and its send half decides
what is retransmitted.

``MrcCore(conn, evs, config, rng_seed)`` is one end of a connection whose peer
is reached over ``evs`` paths (EVs ``0..evs-1``). Both ends use the same ``conn``
id; packets carrying another id are counted (``wrong_conn``) and dropped.

Sending. Messages are cut into packets (``mtu_payload`` bytes) that each get a
PSN and are sprayed over the EVs chosen by a path selector (transports/core/mrc/pathsel.py,
default ``oblivious``). Bytes in flight over all EVs are bounded by one NSCC-like
delay-based window (transports/core/cc.py) and by ``window_pkts`` PSNs past the
oldest unacknowledged one. The window compares each ACK's RTT with the base RTT of
the EV it was measured on (per-EV, windowed); an EV re-admitted after a failure
learns its base again (the route behind it may have changed).

Receiving (transports/core/receiver.py). DATA is placed straight into the message's buffer
at its offset; ACKs carry the cumulative ack, SACK blocks, ``ts_echo`` (the
triggering packet's ``ts`` plus the time the ACK was held) and that packet's EV;
they are coalesced, but sent at once for FLAG_ACK_REQ, a gap and a duplicate.
**An ACK, PROBE_ACK or any reply goes back on the EV the triggering packet came in
on**: the driver must map EV i to the same path (plane, spines) in both
directions, so that a probe answered proves the path round trip.

Loss detection, blame and timeouts (lossdetect.py): A (a later packet on
the same EV acknowledged), B (``dupthresh`` later transmissions on the same plane
acknowledged, with RACK timing; or any later one, on a reorder timer; on another
plane's evidence only, a plane probe behind the packet on its EV), C (per-packet RTO,
with a floor in RTTs). A loss is blamed on its EV (which is retired) only when a transmission
sent after it got through; an RTO without that evidence is *silent*: nothing is
resent yet, a tail probe (a PROBE with FLAG_TAIL, queued as data) goes after the
packet on its own EV (so through the
same FIFOs; a second copy on another EV: probes.py), and its answer,
a full ACK, tells whether the packet got through (then nothing is resent) or not
(then it is lost: the probe is the transmission after it that got through).
The same probes go out two smoothed RTTs after the last activity, before any RTO
(a probe timeout, RFC 8985's PTO; ``pto``), striking nothing.
Spurious retransmissions are counted and a wrong blame is undone (Eifel-style).

Per-EV states (evtable.py): GOOD (carries data), ASSUMED_BAD (retired
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

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

from transports.core import wire
from transports.core.api import Tx
from transports.core.cc import Nscc
from transports.core.message import Completions, MessageCore, OutMsg, Reassembly
from transports.core.mrc.config import MrcConfig
from transports.core.mrc.evtable import EV_ASSUMED_BAD, EV_DENIED, EV_GOOD, EvTable
from transports.core.mrc.flight import Flight, SentPacket
from transports.core.mrc.lossdetect import LossDetector
from transports.core.mrc.pathsel import TRIM, make_selector
from transports.core.mrc.sender import Sender
from transports.core.mrc.spray import Spray
from transports.core.mrc.timeouts import Timeouts
from transports.core.receiver import Receiver
from transports.core.spurious import RetxLedger
from transports.core.wire import (
    ACK,
    DATA,
    FLAG_ACK_REQ,
    FLAG_ECE,
    FLAG_SACK,
    FLAG_STOP,
    FLAG_STOP_OK,
    FLAG_TRIMMED,
    HEADER_LEN,
    PROBE,
    PROBE_ACK,
    SACK_BLOCK,
    pack_header,
)

__all__ = ["EV_ASSUMED_BAD", "EV_DENIED", "EV_GOOD", "INF", "CorePolicy", "MrcConfig", "MrcCore"]

INF = float("inf")


class CorePolicy(Protocol):
    """What a bounded-loss mode adds to the core besides its send half (core/dblp/)."""

    def on_data(self, h: wire.Header, data: bytes | memoryview, now: float,
                out: list[Tx]) -> None:
        """A DATA packet (instead of the receiver's ``on_data``, which it calls)."""

    def on_control(self, h: wire.Header, data: bytes | memoryview, now: float,
                   out: list[Tx]) -> None:
        """An ACK with FLAG_STOP or FLAG_STOP_OK."""

    def on_timer(self, now: float, out: list[Tx]) -> str | None:
        """Its timers due; the error if the connection must fail."""

    def next_deadline(self) -> float:
        """Its earliest timer (INF: none)."""

    def fail(self) -> None:
        """The connection failed: drop all state."""


class MrcCore(MessageCore):
    """One end of an MRC connection over ``evs`` paths."""

    def __init__(self, conn: int, evs: int, config: MrcConfig | None = None,
                 rng_seed: int = 0, nics: Sequence[int] | None = None) -> None:
        if evs < 1 or evs > 0xFFFF:
            raise ValueError("evs must be in 1..65535")
        if nics is not None and len(nics) != evs:
            raise ValueError(f"nics has {len(nics)} entries for {evs} EVs: one NIC per EV")
        cfg = config or MrcConfig()
        self.conn = conn
        self.evs = evs
        self.cfg: MrcConfig = cfg
        self.rng = random.Random(rng_seed)  # the selector's shuffles and the RTOs' jitter
        self.stats: Counter[str] = Counter()
        self._done = Completions()
        self.failed: str | None = None
        self.policy: CorePolicy | None = None
        self.reasm = Reassembly(cfg.unposted_limit, self.stats, self._done)
        self.cc = Nscc(cfg.nscc, cfg.mtu_payload + HEADER_LEN)
        sel = make_selector(cfg.selector, evs, self.rng, nics,
                            shares=cfg.nic_shares == "congestion")
        self.paths = EvTable(evs, cfg.ev_min_active, cfg.probe_min, cfg.probe_max,
                             self.stats, sel.set_active)
        self.spray = Spray(sel, self.paths, nics)
        # spurious retransmissions and the decisions they undo (Eifel-style)
        self.ledger = RetxLedger(max(1.0, 2 * cfg.rto_max))
        self.flight = Flight()
        self.timeouts = Timeouts(cfg, evs, self.rng)
        self.loss = LossDetector(conn, cfg, self.stats, self.flight, self.spray, self.paths,
                                 self.cc, self.ledger, nics, self.timeouts)
        self.snd = Sender(conn, cfg, self.stats, self._done, self.cc, self.spray, self.paths,
                          self.flight, self.ledger, self.loss)
        self.rcv = Receiver(conn, cfg, self.reasm, self.stats)
        self.max_sack_len = cfg.max_sack_blocks * SACK_BLOCK.size
        # next_deadline as last computed: the I/O loop asks for it several times a wake-up
        # and it only moves through the entry points below, each of which drops it
        self._deadline: float | None = None
        self._deadline_ok = False

    def __repr__(self) -> str:
        return (f"MrcCore(conn={self.conn}, evs={self.evs}, active={len(self.paths.active)}, "
                f"inflight={len(self.flight)}, cwnd={self.cc.cwnd:.0f})")

    # ---- the Core interface -------------------------------------------------------------

    def on_packet(self, data: bytes | memoryview, now: float,
                  rx_t: float | None = None) -> list[Tx]:
        self._deadline_ok = False
        h = self._admit(data)
        if h is None:
            return []
        if h.ev >= self.evs:
            self.stats["bad_ev"] += 1
            return []
        out: list[Tx] = []
        kind = h.kind
        if kind == DATA:
            self.rcv.arrival = rx_t
            if h.flags & FLAG_TRIMMED:  # a switch cut it: NACK at once, nothing to place
                self.rcv.on_trimmed(h, now, out)
            elif self.policy is not None:
                self.policy.on_data(h, data, now, out)
            else:
                self.rcv.on_data(h, data, now, out)
        elif kind == ACK:
            if h.flags & (FLAG_STOP | FLAG_STOP_OK):
                if self.policy is None:  # DBLP's control: never an acknowledgement here
                    self.stats["stop_unexpected"] += 1
                    return out
                self.policy.on_control(h, data, now, out)
                self._pump(now, out)
            else:
                self._on_ack(h, data, now, out, now if rx_t is None else rx_t)
        elif kind == PROBE:
            self.rcv.arrival = rx_t
            self.rcv.on_probe(h, now, out)
        elif kind == PROBE_ACK:
            self._on_probe_ack(h, now, out, now if rx_t is None else rx_t)
        else:
            self._on_nack(h, now, out)
        return out

    def on_timer(self, now: float) -> list[Tx]:
        self._deadline_ok = False
        out: list[Tx] = []
        if self.rcv.ack_at <= now:
            out.append(self.rcv.make_ack(now))
        if self.failed:
            return out
        error = self.loss.expire(now)
        if error is None and self.policy is not None:
            error = self.policy.on_timer(now, out)
        if error is not None:
            self._fail(now, f"{error} ({self._state()})")
            return out
        self.loss.send_probes(now, out)
        self._send_probes(now, out)
        self._pump(now, out)
        return out

    def flush(self, now: float) -> list[Tx]:
        """The coalesced ACK of this wake-up (transports/core/api.py ``Core.flush``)."""
        self._deadline_ok = False
        ack = self.rcv.flush(now)
        return [] if ack is None else [ack]

    def next_deadline(self) -> float | None:
        if self._deadline_ok:
            return self._deadline
        d = min(self.rcv.ack_at, self.loss.next_rto(), self.paths.next_probe())
        if self.policy is not None:
            d = min(d, self.policy.next_deadline())
        self._deadline = None if d == INF else d
        self._deadline_ok = True
        return self._deadline

    def post_send(self, msg: int, data: bytes | memoryview, now: float) -> list[Tx]:
        self._deadline_ok = False
        return super().post_send(msg, data, now)

    def post_recv(self, msg: int, buf: bytearray | memoryview, now: float) -> list[Tx]:
        self._deadline_ok = False
        return super().post_recv(msg, buf, now)

    def rto_floor(self) -> float:
        """The RTO floor: ``max(rto_min, rto_min_rtts * base RTT) + host delay``
        (transports/core/rto.py), the base RTT being NSCC's (the smallest EV's windowed
        minimum)."""
        return self.timeouts.floor

    def set_host_delay(self, delay: float) -> None:
        """The I/O loop's measured scheduling delay (transports/core/rto.py ``HostDelay``)."""
        self._deadline_ok = False
        self.loss.set_host_delay(delay)

    def state_sizes(self) -> dict[str, int]:
        """How many entries each container a soak watches holds (transports/io/footprint.py):
        each is bounded by the core, or emptied as messages complete."""
        sizes = self.loss.state_sizes()
        sizes.update(ev_log=len(self.paths), inflight=len(self.flight), out_msgs=len(self.snd),
                     recv_msgs=len(self.reasm), retx_ledger=len(self.ledger))
        return sizes

    # ---- controller API -----------------------------------------------------------------

    def deny(self, ev: int, now: float = 0.0) -> None:
        """A controller forbids ``ev``: it carries nothing until ``allow`` and a probe."""
        self._deadline_ok = False
        self.paths.deny(ev, now)

    def allow(self, ev: int, now: float = 0.0) -> None:
        """Undo ``deny``: the EV is probed at once and carries data once a probe returns."""
        self._deadline_ok = False
        self.paths.allow(ev, now, self.timeouts.rto(ev))

    def ev_state(self, ev: int) -> str:
        return self.paths.state_of(ev)

    @property
    def state(self) -> list[str]:
        """Every EV's state, EV order (a snapshot)."""
        return [self.paths.state_of(ev) for ev in range(self.evs)]

    def ev_changes(self) -> list[tuple[float, int, str, str]]:
        """(t, ev, old, new) state changes since the last call (drained)."""
        return self.paths.changes()

    # ---- read-only views of the parts --------------------------------------------------------

    @property
    def rcv_nxt(self) -> int:
        return self.rcv.rcv_nxt

    @property
    def snd_nxt(self) -> int:
        return self.snd.snd_nxt

    @property
    def inflight(self) -> Mapping[int, SentPacket]:
        """The packets the sender owns, by PSN (a read-only view)."""
        return self.flight.packets

    @property
    def bytes_in_flight(self) -> int:
        return self.flight.bytes_in_flight

    @property
    def ev_tx(self) -> list[int]:
        """Data packets sent per EV."""
        return self.snd.ev_tx

    # ---- messages (MessageCore) ---------------------------------------------------------------

    def _sending(self, msg: int) -> bool:
        return self.snd.sending(msg)

    def _queue(self, om: OutMsg) -> None:
        self.snd.post(om)

    # ---- acknowledgements -----------------------------------------------------------------

    def _on_ack(self, h: wire.Header, data: bytes | memoryview, now: float,
                out: list[Tx], rx: float) -> None:
        snd, loss = self.snd, self.loss
        cum = h.psn
        if cum > snd.snd_nxt:
            self.stats["ack_beyond_sent"] += 1
            return
        blocks = []
        if h.flags & FLAG_SACK and h.length:
            if h.length > self.max_sack_len:  # more than a peer sends: refuse before unpacking
                self.stats["sack_too_many"] += 1
                return
            blocks = wire.sack_blocks(memoryview(data)[HEADER_LEN:HEADER_LEN + h.length])
            snd_nxt = snd.snd_nxt
            for a, b in blocks:
                if not cum < a < b <= snd_nxt:
                    self.stats["sack_out_of_window"] += 1
                    return
        if self.failed:
            return
        self.stats["rx_ack"] += 1
        self.timeouts.peer_hold.sample(h.msg_len * 1e-9, now)  # the peer's ACK delay (wire.py)
        ev, ts_echo = h.ev, h.ts_echo
        ecn = bool(h.flags & FLAG_ECE)
        if ecn:
            self.stats["rx_ecn_echo"] += 1
        self.spray.set_marked(ev, ecn)
        get = self.flight.get
        # the transmissions of retransmitted packets this ACK may name (core/spurious.py)
        psns = self.ledger.get(ts_echo, ev) if ts_echo else ()
        named = [(psn, get(psn)) for psn in psns] if psns else None
        # an ACK back on a retired EV may prove a loss that retired it wrong (undo)
        proof: list[int] | None = [] if self.paths.state_of(ev) == EV_ASSUMED_BAD else None
        newly, touched, acked = snd.ack(cum, blocks, now, proof)
        for psn in acked:  # when the receiver first acknowledged them (its clock)
            self.ledger.acked(psn, h.ts)
        if newly:
            loss.progress(now)
        else:
            self.stats["dup_ack"] += 1
        if named:
            loss.check_spurious(ts_echo, ev, h.ts, named, now)
        if proof:
            for psn in proof:
                loss.undo(psn, now, ev)
        rtt = None
        if ts_echo:
            r = rx - ts_echo * 1e-9  # from the ACK's arrival, however late the loop woke
            if 0 < r < 60.0:
                rtt = r
                if not loss.answers_probe(ts_echo):  # a header's RTT is not a packet's
                    loss.sample(ev, r)
            else:
                self.stats["bad_ts_echo"] += 1
        self.cc.on_ack(newly, rtt, now, ev, ecn)
        if rtt is not None:
            loss.new_floor()
        tail = loss.tail_answered(ts_echo, now)
        if rtt is not None:
            # the selector's congestion signal: above the EV's base plus the delay target
            # *and* worse than the EVs on average (a uniformly loaded fabric should not
            # penalise anyone)
            srtt = self.timeouts.srtt
            self.spray.set_congested(ev, rtt > max(self.cc.rtt_ref(ev), srtt.srtt + srtt.rttvar))
        if touched or tail:
            loss.detect(now, touched, out)
        self._pump(now, out)

    def _on_nack(self, h: wire.Header, now: float, out: list[Tx]) -> None:
        """A trimmed packet (the receiver's NACK names its PSN and echoes the trimmed
        transmission's ``ts``): resend it at once, wherever the selector says, without
        blaming its path (its EV stays GOOD: a full queue is congestion, not a failure).
        The selector and the NIC shares hear of it as congestion on that EV; NSCC quick-
        adapts (transports/core/cc.py ``on_trim``)."""
        p = self.flight.get(h.psn)
        if p is None or p.lost or p.ev != h.ev:
            self.stats["nack_unknown"] += 1
            return
        if h.ts_echo and h.ts_echo != p.ts:  # a NACK of an older transmission of it
            self.stats["nack_stale"] += 1
            return
        self.stats["rx_trim_nack"] += 1
        self.flight.requeue(p, "rx_trim_nack", avoid=False)
        self.spray.feedback(p.ev, TRIM)
        self.cc.on_trim(now)
        self._pump(now, out)

    # ---- per-EV probes (transports/core/mrc/evtable.py) -----------------------------------

    def _send_probes(self, now: float, out: list[Tx]) -> None:
        for ev, seq in self.paths.due(now):
            buf = bytearray(HEADER_LEN)
            pack_header(buf, PROBE, FLAG_ACK_REQ, self.conn, seq, 0, 0, 0, ev, 0, _ns(now))
            out.append((ev, buf))
            self.stats["tx_probe"] += 1

    def _on_probe_ack(self, h: wire.Header, now: float, out: list[Tx], rx: float) -> None:
        ev = h.ev
        if not self.paths.answers(ev, h.psn):
            self.stats["stale_probe_ack"] += 1
            return
        r = rx - h.ts_echo * 1e-9
        if 0 < r < 60.0:
            self.timeouts.sample_ev(ev, r)
        self.paths.readmit(ev, now)
        self.cc.forget(ev)  # it may be another route now (longer or shorter): learn it again
        self.loss.new_floor()
        self.stats["ev_readmitted"] += 1
        self._pump(now, out)

    # ---- sending ----------------------------------------------------------------------------

    def _pump(self, now: float, out: list[Tx]) -> None:
        if not self.failed:
            self.snd.pump(now, out)

    def _state(self) -> str:
        """The connection's state in a few words, for the error that ends it."""
        st = self.stats
        keys = ("tx_data_pkts", "tx_retx", "rto_silent", "loss_rto", "tx_tail_probe",
                "tail_answered", "tail_answered_around", "rx_ack", "ev_retired", "tx_probe")
        counts = ", ".join(f"{k}={st[k]}" for k in keys if st.get(k))
        return f"{self.snd!r}, {self.loss!r}, {self.paths!r}, {counts}"

    def _fail(self, now: float, error: str) -> None:
        self.failed = error
        self.stats["conn_failed"] += 1
        self.snd.fail(now, error)
        self.loss.clear()
        self.paths.clear()
        self.ledger.clear()
        if self.policy is not None:
            self.policy.fail()
        self.reasm.fail_all(error, now)


def _ns(now: float) -> int:
    return int(now * 1e9) & 0xFFFFFFFFFFFFFFFF
