"""MRC's tail and plane probes: transmissions sent *after* a packet, to learn whether it
got through, and the probe timeout that sends them before an RTO.

Tail probes (``tx_tail_probe``: a PROBE with FLAG_TAIL and FLAG_ACK_REQ, no payload),
after a silent RTO (no transmission sent after the packet got through: a delay spike at
the receiver's port that every EV crosses, a lost tail, a lost ACK, or the peer gone):
one goes on the packet's own EV, in the data class, so it queues behind the packet in
every FIFO of its path (its NIC's, the switches', the receiver's port), and the
receiver answers it at once with a full ACK (cumulative and SACK) echoing its timestamp.
The probe is a transmission sent after the packet: if its answer comes and the packet is
still unacknowledged, the packet is lost (``loss_tail_probe``) and resent; if the packet
was only queued, it arrived first and that answer acknowledges it; if an ACK was lost,
the answer carries what it did. A second copy (against a lost probe or answer, or a dead
path) goes on the next active EV in turn of the packet's NIC, from the second silent RTO
of one transmission on around it (on another NIC's EV). That copy does not follow the
packet (each plane has a NIC of its own, a FIFO the host's connections share, and each
EV its own switch queues), so while the packet is outstanding its answer condemns
nothing at once (``tail_answered_around``): it is evidence against the packet's path
only when the packet's next RTO expires (``around``), so a path or plane that died under
a tail is still found while a queue shorter than that RTO costs nothing. A lost tail
costs one probe round trip more than a resend at the RTO would; a delay spike costs a
header-sized probe instead of duplicate data. At most ``MAX_SILENT_PROBED`` packets are
probed per round of RTOs (a whole window may time out at once under a delay spike: its
first ones' answers tell about the rest).

Probe timeout (RACK-TLP's PTO, RFC 8985; ``MrcConfig.pto``): two smoothed RTTs (all
EVs; at least the RTO floor) after the last data sent or ACK of new data, once per such
activity, the packets out that long get the same tail probes, without a strike or a
back-off. RTT samples taken under a queue that came and went spread the estimate, so
``srtt + 4 rttvar`` can be several times two smoothed RTTs: a lost tail would wait that
long. A probe under a mere delay costs a header and condemns nothing (it queues behind
the packet).

Plane probes (``tx_plane_probe``: a PROBE with FLAG_TAIL, no payload): when rule B's
evidence against a packet comes only from another plane (evidence.py), the packet is
*suspected* (``suspect``): a plane probe goes on its own EV, behind it in every FIFO of
its path, once per EV for all its packets out; the full ACK answering it is a later
transmission on that EV acknowledged, so rule A judges every packet the probe followed.
An RTO on another plane's evidence only blames the packet's path once its plane has been
silent and that probe unanswered for an RTO (``unanswered_for``): a dead plane, not a
queue.

Every probe is a transmission of its own (a ``seq`` and a unique ``ts`` from the
sender's ``Flight``); its answer echoes that ``ts`` (``take_plane``, ``take_tail``), and
its RTT, a header's, is kept out of the estimators that judge packets (``answers``).
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from transports.core.api import Tx
from transports.core.mrc.evtable import EvTable
from transports.core.mrc.flight import Flight, SentPacket
from transports.core.mrc.spray import Spray
from transports.core.wire import FLAG_ACK_REQ, FLAG_TAIL, HEADER_LEN, PROBE, pack_header

INF = float("inf")
MAX_TAIL_PROBES = 1024  # unanswered ones kept (lost, or the peer is gone)
# Silent packets probed in one round of RTOs (a whole window may time out at once under a
# delay spike: its first ones' answers tell about the rest)
MAX_SILENT_PROBED = 8

TailProbe = tuple[int, float, int, bool]  # (seq, sent, PSN, whether on the packet's own EV)
PlaneProbe = tuple[int, float, int]  # (seq, sent, EV)


class ProbeConfig(Protocol):
    """The knobs ``Probes`` reads (``MrcConfig`` has them)."""

    @property
    def pto(self) -> bool: ...
    @property
    def ack_delay(self) -> float: ...


class Probes:
    """The tail and plane probes of one MRC sender over ``evs`` EVs (connection ``conn``)."""

    def __init__(self, conn: int, cfg: ProbeConfig, evs: int, stats: Counter[str],
                 flight: Flight, spray: Spray, paths: EvTable) -> None:
        self.conn, self.cfg, self.stats = conn, cfg, stats
        self.flight, self.spray, self.paths = flight, spray, paths
        self.tail_due: list[int] = []  # PSNs of silent packets whose tail probes are due
        self.tail_probes: dict[int, TailProbe] = {}  # by ts, unanswered
        # PSN -> (its seq, the seq and RTT of a probe on another EV answered while it was
        # out): evidence against its path once its next RTO expires
        self.around: dict[int, tuple[int, int, float]] = {}
        self.probed: dict[int, int] = {}  # PSN -> the seq of its transmission probed already
        # plane probes: the seq of the latest per EV (packets sent before it are behind
        # it), EVs due for one, and those out: ts -> (seq, sent, EV)
        self.plane_probe_seq = [0] * evs
        self.plane_probe_open = [False] * evs  # ... unanswered
        self.plane_probe_sent = [-INF] * evs
        self.plane_probe_due: list[int] = []
        self.plane_probes: dict[int, PlaneProbe] = {}
        self.pto_for = -INF  # the activity the last probe timeout answered

    def __repr__(self) -> str:
        return (f"Probes(tail_due={len(self.tail_due)}, tail_out={len(self.tail_probes)}, "
                f"plane_out={len(self.plane_probes)})")

    # ---- tail probes --------------------------------------------------------------------------

    def add_tail(self, psn: int) -> None:
        """A silent RTO of ``psn``: its tail probes go with the next ``send_tail``."""
        self.tail_due.append(psn)

    def add_tail_once(self, psn: int) -> bool:
        """``add_tail`` unless its probes are due already; whether it was added."""
        if psn in self.tail_due:
            return False
        self.tail_due.append(psn)
        return True

    def send_tail(self, now: float, out: list[Tx]) -> None:
        """Tail probes per silent packet due (module docstring): one on the packet's own
        EV (behind it in every FIFO of its path: its answer condemns it if still
        missing), one on the next active EV in turn of the packet's NIC, or, from the
        second silent RTO of one transmission on, of another NIC (two chances against a
        lost probe or answer, or a dead path, as two resends would have)."""
        probes = self.tail_probes
        flight, spray = self.flight, self.spray
        multi = spray.has_nics
        copies = min(2, len(self.paths.active))
        for psn in self.tail_due:
            p = flight.get(psn)
            if p is None or p.lost:
                continue
            nic = spray.nic(p.ev)
            # probed before and still silent: the other copy goes around its NIC
            around = multi and self.probed.pop(psn, -1) == p.seq
            self.probed[psn] = p.seq  # re-inserted last: the dict stays in probe order
            own = p.ev in self.paths.active
            for i in range(copies):
                seq, ts = flight.stamp(now)
                if own and i == copies - 1:  # its own path: behind it in every FIFO
                    ev = p.ev
                else:
                    ev = spray.next_silent(p.ev, nic, other=around)
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

    def take_tail(self, ts_echo: int) -> TailProbe | None:
        """The tail probe an ACK echoing ``ts_echo`` answers, forgotten (None: none)."""
        if self.tail_probes and ts_echo:
            return self.tail_probes.pop(ts_echo, None)
        return None

    def note_around(self, psn: int, seq: int, probe_seq: int, rtt: float) -> None:
        """A probe sent around outstanding packet ``psn`` (transmission ``seq``) was
        answered, ``rtt`` after it left: evidence against ``psn``'s path from its next RTO
        on (``take_around``)."""
        self.around[psn] = (seq, probe_seq, rtt)
        self.stats["tail_answered_around"] += 1
        while len(self.around) > MAX_TAIL_PROBES:
            del self.around[next(iter(self.around))]

    def take_around(self, psn: int) -> tuple[int, int, float] | None:
        """The evidence ``note_around`` kept for ``psn``, forgotten (None: none)."""
        if self.around:
            return self.around.pop(psn, None)
        return None

    # ---- plane probes -------------------------------------------------------------------------

    def suspect(self, p: SentPacket, now: float) -> None:
        """Only another plane's ACKs condemn ``p``: a plane probe goes behind it on its EV
        (unless one sent after it is out already)."""
        self.stats["plane_suspect"] += 1
        ev = p.ev
        if not (self.plane_probe_open[ev] and self.plane_probe_seq[ev] > p.seq):
            self.plane_probe_seq[ev] = self.flight.tx_seq + 1  # at most the probe's seq
            self.plane_probe_open[ev] = True
            self.plane_probe_sent[ev] = now
            self.plane_probe_due.append(ev)

    def plane_due(self) -> bool:
        """Whether plane probes wait to be sent."""
        return bool(self.plane_probe_due)

    def send_plane(self, now: float, out: list[Tx]) -> None:
        """The plane probes due: each a transmission (its own ``seq`` and unique ``ts``)
        on its EV, queued as data behind that EV's packets, answered at once by a full
        ACK echoing its ``ts``."""
        flight, probes = self.flight, self.plane_probes
        for ev in self.plane_probe_due:
            seq, ts = flight.stamp(now)
            self.plane_probe_seq[ev] = seq
            buf = bytearray(HEADER_LEN)
            pack_header(buf, PROBE, FLAG_ACK_REQ | FLAG_TAIL, self.conn, 0, 0, 0, 0, ev, 0, ts)
            out.append((ev, buf))
            probes[ts] = (seq, now, ev)
            self.stats["tx_plane_probe"] += 1
        self.plane_probe_due.clear()
        while len(probes) > MAX_TAIL_PROBES:  # unanswered ones (lost, or the path died)
            del probes[next(iter(probes))]

    def take_plane(self, ts_echo: int) -> PlaneProbe | None:
        """The plane probe an ACK echoing ``ts_echo`` answers, forgotten (None: none)."""
        if self.plane_probes and ts_echo:
            return self.plane_probes.pop(ts_echo, None)
        return None

    def plane_answered(self, seq: int, ev: int) -> None:
        """The plane probe ``seq`` on ``ev`` was answered: if it is the latest, none is out."""
        if seq == self.plane_probe_seq[ev]:
            self.plane_probe_open[ev] = False

    def unanswered_for(self, p: SentPacket, now: float, rto: float) -> bool:
        """Whether a plane probe sent after ``p`` on its EV has gone unanswered ``rto``."""
        ev = p.ev
        return (self.plane_probe_open[ev] and self.plane_probe_seq[ev] > p.seq
                and now - self.plane_probe_sent[ev] >= rto)

    # ---- answers and the probe timeout --------------------------------------------------------

    def answers(self, ts_echo: int) -> bool:
        """Whether an ACK echoing ``ts_echo`` answers a tail or plane probe: its RTT is a
        header's, not a packet's (no serialization behind the packets before it on its
        NIC, none at each hop), so it is kept out of the RTT estimators that judge
        packets."""
        return ts_echo in self.tail_probes or ts_echo in self.plane_probes

    def pto_deadline(self, activity: float, srtt: float, floor: float,
                     hold: float = 0.0) -> float:
        """When the probe timeout fires: ``max(2 srtt + ACK delay, floor + hold)`` after the
        last data sent or ACK of new data (``activity``), once per such activity (INF: no
        RTT sample yet, or it fired already since). ``hold`` is the peer's measured ACK
        delay (at least ``ack_delay`` in the first term); the RTO adds it to its floor
        too, so a floored PTO and RTO still fire together and probe once."""
        if activity == self.pto_for or not srtt or not self.cfg.pto:
            return INF
        ack_delay = self.cfg.ack_delay
        pto = 2.0 * srtt + (hold if hold > ack_delay else ack_delay)
        floor += hold
        return activity + (pto if pto > floor else floor)

    def pto_fired(self, activity: float) -> None:
        """The probe timeout fired for ``activity``: not again until the next."""
        self.pto_for = activity

    def clear(self) -> None:
        """The connection failed: no probe is due or awaited."""
        self.tail_due.clear()
        self.tail_probes.clear()
        self.plane_probe_due.clear()
        self.plane_probes.clear()
        self.around.clear()
        self.probed.clear()
