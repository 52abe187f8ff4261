"""Spurious retransmissions, told apart by timestamps (a sender-side DSACK).

Every DATA packet carries its sender's clock ``ts`` (ns), and a receiver that gets a
packet it already has answers at once, on the packet's EV, with an ACK whose
``ts_echo`` is exactly that ``ts`` (transports/core/mrc/, transports/core/rc.py: an ACK sent
the instant its packet arrived adds no hold time). So the sender can name the
transmission that triggered an ACK: ``(ts_echo, ev)``.

``RetxLedger`` remembers, for packets that were sent more than once, the
``(ts, ev)`` of every transmission (the first one included), for ``horizon``
seconds, and the receiver's clock (an ACK's own ``ts``) on the ACK that first
acknowledged each. When an ACK names one of those transmissions:

- the ACK newly acknowledges the packet: that copy was the first to arrive;
- the packet was acknowledged by an ACK the receiver sent *earlier* than this one:
  that copy is a **duplicate arrival**, and one transmission of the packet was not
  needed: a spurious retransmission (whichever copy arrived second, the original
  was not lost). Comparing the receiver's send times, not arrival order, keeps an
  ACK that was overtaken on the way back (ACKs return on different EVs) from
  passing for a duplicate's.

Each duplicate arrival counts once (the receiver's ``dup_data`` counts the same
events at the other end). Not seen: duplicates whose ACK is lost, and copies of an
original that the network itself duplicated (they name no ledger entry). Counted
although the sender did not cause it: a copy the network made of a retransmission.
Several packets sent at one instant on one EV share a key; the ledger keeps their
PSNs in order and resolves one per ACK.
"""

from __future__ import annotations

from collections import deque

Key = tuple[int, int]  # (ts in ns, EV)


class RetxLedger:
    """The transmissions of retransmitted packets, by ``(ts, ev)``, for ``horizon`` s."""

    __slots__ = ("horizon", "limit", "_by_key", "_fifo", "_count", "_acked", "_why")

    def __init__(self, horizon: float, limit: int = 1 << 16) -> None:
        if not horizon > 0 or limit < 1:
            raise ValueError(f"RetxLedger needs horizon > 0 s and limit >= 1, not "
                             f"horizon={horizon!r}, limit={limit!r}")
        self.horizon = horizon
        self.limit = limit
        self._by_key: dict[Key, list[int]] = {}
        self._fifo: deque[tuple[float, Key, int]] = deque()
        self._count: dict[int, int] = {}  # psn -> its transmissions still named here
        self._acked: dict[int, int] = {}  # psn -> the receiver's ts on its first ACK
        self._why: dict[int, str] = {}  # psn -> what declared its latest resent copy's loss

    def __len__(self) -> int:
        return len(self._fifo)

    def __repr__(self) -> str:
        return f"RetxLedger(entries={len(self._fifo)}, horizon={self.horizon})"

    def record(self, ts: int, ev: int, psn: int, now: float, why: str = "") -> None:
        """Packet ``psn`` was transmitted at ``ts`` (ns) on ``ev`` (``now`` in seconds);
        ``why``: for a retransmission, what declared the packet lost."""
        self._expire(now)
        if why:
            self._why[psn] = why
        key = (ts, ev)
        self._by_key.setdefault(key, []).append(psn)
        self._fifo.append((now, key, psn))
        self._count[psn] = self._count.get(psn, 0) + 1

    def acked(self, psn: int, ack_ts: int) -> None:
        """``psn`` was first acknowledged by an ACK the receiver sent at ``ack_ts`` (ns)."""
        if psn in self._count:
            self._acked.setdefault(psn, ack_ts)

    def duplicate(self, psn: int, ack_ts: int) -> bool:
        """Whether an ACK sent at ``ack_ts`` naming a copy of acknowledged ``psn`` answers a
        duplicate: the first acknowledgement was sent before it."""
        first = self._acked.get(psn)
        return first is not None and first < ack_ts

    def why(self, psn: int) -> str:
        """What declared ``psn`` lost before its latest retransmission ("" if unknown)."""
        return self._why.get(psn, "")

    def get(self, ts_echo: int, ev: int) -> list[int]:
        """PSNs transmitted at ``ts_echo`` on ``ev`` (oldest first; empty if none)."""
        return self._by_key.get((ts_echo, ev), [])

    def resolve(self, ts_echo: int, ev: int, psn: int) -> None:
        """The ACK naming ``(ts_echo, ev)`` was for ``psn``: forget that transmission."""
        key = (ts_echo, ev)
        psns = self._by_key.get(key)
        if psns is not None and psn in psns:
            psns.remove(psn)
            if not psns:
                del self._by_key[key]
            self._forget(psn)

    def clear(self) -> None:
        self._by_key.clear()
        self._fifo.clear()
        self._count.clear()
        self._acked.clear()
        self._why.clear()

    def _forget(self, psn: int) -> None:
        n = self._count[psn] - 1
        if n:
            self._count[psn] = n
        else:
            del self._count[psn]
            self._acked.pop(psn, None)
            self._why.pop(psn, None)

    def _expire(self, now: float) -> None:
        fifo, by_key = self._fifo, self._by_key
        lim = now - self.horizon
        while fifo and (fifo[0][0] < lim or len(fifo) >= self.limit):
            _, key, psn = fifo.popleft()
            psns = by_key.get(key)
            if psns is not None and psn in psns:
                psns.remove(psn)
                if not psns:
                    del by_key[key]
                self._forget(psn)
