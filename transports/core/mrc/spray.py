"""Which EV each MRC transmission takes.

``Spray`` answers three questions for the sender's parts, from the per-EV states
(evtable.py ``EvTable``), a path selector (pathsel.py) and each EV's NIC (plane):

- ``pick(psn, avoid)``: the EV of a data packet (first transmission or a resend after a
  blamed loss): the selector's choice among GOOD EVs; if that one is out of service,
  another EV of its NIC (every NIC keeps its share), and not ``avoid`` (the EV that lost
  it) while another is active;
- ``next_silent(avoid, nic, other)``: the EV of a silent RTO's retransmission or tail
  probe, with no evidence against any path: each active EV in turn after the previous
  one's, so the sender and the loss detector take turns on one rotation;
- ``nic(ev)``: the NIC an EV leaves by.

It also carries the selector's feedback (``feedback``, ``acked``: an acknowledged EV is
GOOD, or DELAY when ``set_congested`` flagged its RTT as queued).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from transports.core.mrc.evtable import EvTable
from transports.core.mrc.pathsel import DELAY, ECN, GOOD, PathSelector


class Spray:
    """EV choice over ``paths``' GOOD EVs with selector ``sel`` (``nic_of``: each EV's NIC,
    None without a connection plan: every EV on NIC 0)."""

    def __init__(self, sel: PathSelector, paths: EvTable, nic_of: Sequence[int] | None) -> None:
        self.sel = sel
        self.paths = paths
        self.nic_of = list(nic_of) if nic_of is not None else None
        self.silent_ev = -1  # the EV the last silent retransmission or probe went on
        self.congested = [False] * paths.evs  # the selector's delay signal per EV
        self.marked = [False] * paths.evs  # ... and its ECN signal (the last ACK's echo)

    def __repr__(self) -> str:
        return f"Spray(sel={self.sel!r}, nic_of={self.nic_of}, silent_ev={self.silent_ev})"

    @property
    def has_nics(self) -> bool:
        """Whether the EVs' NICs are known (a connection plan gave them)."""
        return self.nic_of is not None

    def nic(self, ev: int) -> int:
        """The NIC (plane) EV ``ev`` leaves by (0 for every EV without a connection plan)."""
        return self.nic_of[ev] if self.nic_of is not None else 0

    def pick(self, psn: int, avoid: int) -> int:
        """The EV of packet ``psn``: the selector's choice among GOOD EVs (its NIC's others
        first if that one is out of service), not ``avoid`` if another is active."""
        paths = self.paths
        active = paths.active
        ev = self.sel.next_ev(psn)
        if not paths.is_good(ev):
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
                if ev != avoid and paths.is_good(ev):
                    return ev
            ev = next(e for e in active if e != avoid)
        return ev

    def next_silent(self, avoid: int, nic: int = -1, other: bool = False) -> int:
        """The EV of a silent RTO's retransmission or tail probe: with no evidence against
        any path, each active EV in turn after the previous one's, skipping ``avoid`` (the
        packet's last). With ``nic`` (>= 0), only that NIC's active EVs (``other``: only
        the other NICs'), as long as it has (they have) any (a tail probe's second copy:
        transports/core/mrc/probes.py)."""
        active = self.paths.active
        nic_of = self.nic_of
        if nic >= 0 and nic_of is not None:
            some = [e for e in active if (nic_of[e] == nic) != other]
            if some:
                active = some
        i = bisect_right(active, self.silent_ev) % len(active)
        if active[i] == avoid and len(active) > 1:
            i = (i + 1) % len(active)
        self.silent_ev = active[i]
        return self.silent_ev

    def feedback(self, ev: int, kind: int) -> None:
        """Tell the selector what ``ev`` did (pathsel.py's GOOD, DELAY, NACK, TIMEOUT)."""
        self.sel.feedback(ev, kind)

    def acked(self, ev: int) -> None:
        """A packet last sent on ``ev`` was acknowledged: GOOD, or ECN if marked, or DELAY
        if congested."""
        self.sel.feedback(ev, ECN if self.marked[ev] else DELAY if self.congested[ev]
                          else GOOD)

    def set_marked(self, ev: int, marked: bool) -> None:
        """An ACK came back on ``ev`` echoing a CE mark (or not): the selector's ECN
        signal, and its plane's (the NIC shares')."""
        self.marked[ev] = marked
        self.sel.congestion(ev, marked)

    def set_congested(self, ev: int, congested: bool) -> None:
        """Whether ``ev``'s latest RTT reads as queued (the selector's delay signal)."""
        self.congested[ev] = congested
