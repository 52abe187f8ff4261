"""The losses MRC blamed on a path, kept so that a wrong blame can be undone.

A loss is blamed on its EV only on evidence that the fabric still delivers (a
transmission sent after it got through: lossdetect.py); the EV is then retired
(evtable.py) and, after an RTO, the window may be cut (transports/core/cc.py). Both
decisions may prove wrong: an ACK that comes back on the retired EV and acknowledges a
copy of the packet, or names it as a duplicate (transports/core/spurious.py), proves the
path and the packet. ``Blame`` keeps, per blamed PSN, the EV, when the loss was declared
and the window before a cut made for it, so the loss detector can re-admit that EV and
restore that window (Eifel-style undo) if nothing changed them since.

An entry is needed only while a copy of its packet may still be acknowledged (RTOs are
capped at ``rto_max``): entries older than ``keep_s`` (twice ``rto_max``) go, so a link
that flaps for the life of a connection does not keep ``MAX_BLAME`` of them, and
``MAX_BLAME`` caps a burst of losses.
"""

from __future__ import annotations

MAX_BLAME = 4096  # blamed losses kept for undo (a duplicate comes back within ~an RTO)

Entry = tuple[int, float, float | None]  # (EV, when the loss was declared, window before a cut)


class Blame:
    """Blamed losses by PSN, in the order they were declared, for ``keep_s`` seconds."""

    __slots__ = ("keep_s", "_by_psn")

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self._by_psn: dict[int, Entry] = {}

    def __len__(self) -> int:
        return len(self._by_psn)

    def __repr__(self) -> str:
        return f"Blame({len(self._by_psn)} losses, keep_s={self.keep_s})"

    def record(self, psn: int, ev: int, now: float) -> None:
        """The loss of ``psn`` was blamed on ``ev`` at ``now``."""
        blame = self._by_psn
        blame.pop(psn, None)  # re-inserted last: the dict stays in declaration order
        blame[psn] = (ev, now, None)
        horizon = now - self.keep_s
        while True:  # ends at the latest entry at the latest (its time is now)
            oldest = next(iter(blame))
            if len(blame) <= MAX_BLAME and blame[oldest][1] >= horizon:
                break
            del blame[oldest]

    def cut(self, psn: int, cwnd: float) -> None:
        """The window was ``cwnd`` before the cut made for the loss of ``psn``."""
        ev, at, _ = self._by_psn[psn]
        self._by_psn[psn] = (ev, at, cwnd)

    def take(self, psn: int, via: int) -> Entry | None:
        """An ACK came back on ``via`` for a copy of ``psn``: the entry, forgotten, if that
        loss was blamed on ``via`` (None otherwise: nothing to undo)."""
        b = self._by_psn.get(psn)
        if b is None or b[0] != via:
            return None
        del self._by_psn[psn]
        return b

    def entries(self) -> list[Entry]:
        """Every entry kept, oldest first."""
        return list(self._by_psn.values())

    def clear(self) -> None:
        """The connection failed: nothing to undo."""
        self._by_psn.clear()
