"""What an MRC sender is responsible for: the packets in flight, those waiting to be resent,
and the numbering of its transmissions.

``Flight`` is the state the sender's parts act on, each through its methods:

- the ``Sender`` (sender.py) adds each new packet (``add``), counts each transmission's
  bytes (``on_wire``), takes acknowledged packets out (``acked``) and resends the
  packets waiting (``next_waiting``, ``pop_waiting``);
- the ``LossDetector`` (lossdetect.py) declares packets lost (``requeue``), lets the
  first one waiting leave whatever the window (``force_first``) and numbers its probes
  (``stamp``);
- DBLP's sending half (transports/core/dblp/send.py) brings parked chunks back
  (``requeue_front``), forgets the chunks of a stopped message (``forget``) and keeps
  the bytes of those still on the wire counted until they are out of it (``hold``,
  ``release``).

A packet is *live* while the sender owns it: from its first transmission until it is
acknowledged, forgotten or the connection fails; ``get(psn)`` returns it then, None
after. Queues of ``(seq, psn)`` that other parts keep (send orders, the RTO heap) name
one transmission of a packet: ``live_head`` drops the entries whose transmission is no
longer the packet's latest, or whose packet is gone or declared lost.

Every transmission (data, tail or plane probe) takes the next ``seq`` (global send
order) and a timestamp ``ts`` in ns, at least 1 ns after the previous one's, so that an
ACK echoing a ``ts`` names one transmission (``stamp``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType

from transports.core.message import OutMsg
from transports.core.wire import HEADER_LEN


class SentPacket:
    """One data packet an MRC sender is responsible for (its latest transmission)."""

    __slots__ = ("psn", "om", "offset", "length", "flags", "crc", "ev", "sent", "ts", "seq",
                 "lost", "retx", "avoid", "why")

    def __init__(self, psn: int, om: OutMsg, offset: int, length: int, flags: int,
                 crc: int) -> None:
        self.psn, self.om, self.offset, self.length = psn, om, offset, length
        self.flags, self.crc = flags, crc
        self.ev = -1
        self.sent = 0.0
        self.ts = 0  # the header's timestamp (ns): unique per transmission
        self.seq = 0  # transmission number (global send order)
        self.lost = False  # declared lost, waiting in the retransmit queue
        self.retx = False  # sent more than once: which copy an ACK is for is unknown
        self.avoid = True  # resent on another EV than its last (False: no evidence against it)
        self.why = ""  # what declared its latest loss (a loss_* statistic's name)

    def __repr__(self) -> str:
        return (f"SentPacket(psn={self.psn}, seq={self.seq}, ev={self.ev}, "
                f"sent={self.sent:.6f}, lost={self.lost}, retx={self.retx})")


class Flight:
    """The packets one MRC sender owns, its retransmission queue and its transmission
    numbering (see the module docstring)."""

    def __init__(self) -> None:
        self._packets: dict[int, SentPacket] = {}
        # The packet of a PSN while the sender owns it (the dict's own ``get``: the hot
        # paths look packets up per ACK and per queue entry).
        self.get: Callable[[int], SentPacket | None] = self._packets.get
        self.packets: Mapping[int, SentPacket] = MappingProxyType(self._packets)  # read-only
        self.bytes_in_flight = 0  # header and payload bytes of the packets not declared lost
        self._retxq: deque[int] = deque()  # PSNs declared lost, in the order they are resent
        self._forced: set[int] = set()  # ... of which those that leave whatever the window
        self.tx_seq = 0  # the latest transmission's number (probes included)
        self._tx_ts = 0  # the latest transmission's timestamp

    def __len__(self) -> int:
        return len(self._packets)

    def __repr__(self) -> str:
        return (f"Flight(packets={len(self._packets)}, waiting={len(self._retxq)}, "
                f"bytes_in_flight={self.bytes_in_flight})")

    # ---- transmissions ----------------------------------------------------------------------

    def stamp(self, now: float) -> tuple[int, int]:
        """A new transmission's (seq, ts): packets sent at one instant are 1 ns apart, so
        each timestamp names one transmission."""
        self.tx_seq += 1
        ts = max(_ns(now), self._tx_ts + 1)
        self._tx_ts = ts
        return self.tx_seq, ts

    def add(self, p: SentPacket) -> None:
        """A new packet, about to leave for the first time."""
        self._packets[p.psn] = p

    def on_wire(self, p: SentPacket) -> None:
        """A transmission of ``p`` left: its bytes are in flight."""
        self.bytes_in_flight += HEADER_LEN + p.length

    def acked(self, psn: int) -> SentPacket | None:
        """Packet ``psn`` was acknowledged: out of flight for good (None: it was not live)."""
        p = self._packets.pop(psn, None)
        if p is not None and not p.lost:
            self.bytes_in_flight -= HEADER_LEN + p.length
        return p

    def live_head(self, q: deque[tuple[int, int]]) -> SentPacket | None:
        """The oldest packet of a ``(seq, psn)`` queue still in flight as that transmission;
        stale entries are dropped from the queue."""
        get = self.get
        while q:
            seq, psn = q[0]
            p = get(psn)
            if p is not None and p.seq == seq and not p.lost:
                return p
            q.popleft()
        return None

    # ---- losses and the retransmission queue ------------------------------------------------

    def requeue(self, p: SentPacket, why: str, avoid: bool = True) -> None:
        """``p`` is lost: out of flight, queued for retransmission (on another EV than its
        last if ``avoid``); ``why``: what declared it lost (a ``loss_*`` statistic's name,
        kept to tell which rule a spurious retransmission came from)."""
        p.lost, p.avoid, p.why = True, avoid, why
        self.bytes_in_flight -= HEADER_LEN + p.length
        self._retxq.append(p.psn)

    def requeue_front(self, psn: int) -> bool:
        """A lost packet set aside (a parked DBLP chunk) is needed after all: it goes first.
        False if ``psn`` is no longer a lost packet of this sender."""
        p = self._packets.get(psn)
        if p is not None and p.lost:
            self._retxq.appendleft(psn)
            return True
        return False

    def force_first(self) -> None:
        """The first packet waiting, if any, leaves at the next pump whatever the window
        (after an RTO: the window may be held by packets whose ACKs were lost)."""
        if self._retxq:
            self._forced.add(self._retxq[0])

    def waiting(self) -> bool:
        """Whether packets wait to be resent."""
        return bool(self._retxq)

    def n_waiting(self) -> int:
        """Entries of the retransmission queue (stale ones included until they come up)."""
        return len(self._retxq)

    def next_waiting(self) -> SentPacket | None:
        """The first packet waiting to be resent (entries no longer lost are dropped)."""
        q, get = self._retxq, self._packets.get
        while q:
            p = get(q[0])
            if p is not None and p.lost:
                return p
            self._forced.discard(q.popleft())
        return None

    def forced(self, psn: int) -> bool:
        """Whether waiting packet ``psn`` leaves whatever the window."""
        return psn in self._forced

    def pop_waiting(self) -> None:
        """The first packet waiting leaves the queue (resent now, or set aside)."""
        self._forced.discard(self._retxq.popleft())

    def forget(self, p: SentPacket) -> None:
        """``p`` will never be sent again (its message was stopped): out of flight for good."""
        if self._packets.get(p.psn) is p:
            del self._packets[p.psn]
            if not p.lost:
                self.bytes_in_flight -= HEADER_LEN + p.length

    def hold(self, nbytes: int) -> None:
        """``nbytes`` are on the wire but no packet's any more (a stopped message's chunks
        that left before the STOP came): counted in flight until ``release``d."""
        self.bytes_in_flight += nbytes

    def release(self, nbytes: int) -> None:
        """Bytes ``hold`` counted are out of the network."""
        self.bytes_in_flight = max(0, self.bytes_in_flight - nbytes)

    def clear(self) -> None:
        """The connection failed: nothing is in flight or waiting any more."""
        self._packets.clear()
        self._retxq.clear()
        self._forced.clear()
        self.bytes_in_flight = 0


def _ns(now: float) -> int:
    return int(now * 1e9) & 0xFFFFFFFFFFFFFFFF
