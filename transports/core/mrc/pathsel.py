"""Path (EV) selectors for MRC spraying: tiny strategies in the manner of htsim's load balancers.

A selector chooses the EV of each data packet and learns from feedback:

    next_ev(psn) -> int          the EV for the packet with this PSN
    feedback(ev, kind)           GOOD (acked, low delay), DELAY (acked above the delay
                                 target), ECN (acked, echoing a CE mark), NACK (a loss
                                 detected from SACKs), TRIM (a trimmed packet's NACK),
                                 TIMEOUT (an RTO)
    set_active(evs)              the EVs that may carry data (the core's GOOD ones)
    congestion(ev, marked)       one ACK back on ``ev``, marked or not (NIC shares)

The core owns per-EV liveness (GOOD / ASSUMED_BAD / DENIED); a selector only
balances load among the EVs it was told are active, and must return one of them.

Policies:
- ``Oblivious`` (**the default**): a fresh random permutation of the active EVs,
  cycled; every active EV gets the same share (htsim "oblivious"). Given each EV's
  NIC (plane), the NICs take turns and each cycles its own active EVs: a cut spine
  link then costs its plane one path, not its NIC a share of the load (without it,
  plane 0 with 3 of its 4 paths left got 3/7 of the packets and the transfer ran at
  7/8 of the rate until the link came back). Why the
  default: failures are already handled by the core, which retires an EV on its
  first loss or timeout and re-admits it only after a probe, so the selector's
  job is balance; on a permutation that fills every leaf uplink exactly, equal
  shares finish closest to the ideal (`emu bench transport`: 0.87 of ideal vs
  0.80 for Bitmap and 0.51 for REPS), since any steering by delay unbalances
  links that are all equally loaded.
- ``Bitmap``: the same permuted round robin, but an EV with a penalty (DELAY +1,
  NACK +4, TIMEOUT +15) is skipped, its penalty dropping by one each time it is
  passed over: it moves load off a congested or lossy EV within a few packets
  (useful when paths differ, e.g. a degraded link that still delivers).
- ``Reps``: recycles EVs that came back with good ACKs (a FIFO of good EVs; an ACK
  echoing a CE mark, above the delay target or a trim's NACK is not good: with marking
  switches this is the ECN-steered choice);
  explores random EVs when that FIFO is empty; after a TIMEOUT it *freezes*
  (keeps cycling the cached good EVs without consuming them) for ``freeze_pkts``
  packets, then explores ``explore_pkts`` random EVs before recycling again.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from typing import Protocol

GOOD, DELAY, NACK, TIMEOUT, ECN, TRIM = 0, 1, 2, 3, 4, 5


class PathSelector(Protocol):
    def next_ev(self, psn: int) -> int: ...

    def feedback(self, ev: int, kind: int) -> None: ...

    def set_active(self, evs: Sequence[int]) -> None: ...

    def congestion(self, ev: int, marked: bool) -> None: ...


class NicShares:
    """Each NIC's (plane's) share of the packets, following the plane's congestion.

    Every ACK is a signal for the plane of the EV it came back on: marked (it echoes a CE
    mark, or it is a trimmed packet's NACK) or not. A mark shrinks the plane's weight by
    ``gain``, an unmarked ACK grows it by ``gain * target``; the weights are kept
    at most 1, rescaled so that the largest is 1 (a mark on every plane alike changes no
    share), and above ``floor``. A plane marked more often
    than ``target / (1 + target)`` of its ACKs loses share to the others until every
    plane is marked alike: where a plane's fabric is the bottleneck (a cut that halves
    its uplinks), the other planes take more; where the NICs themselves are (every plane
    alike), the shares stay equal, as the NICs' turns were. A fabric that never marks
    leaves every weight at 1.
    """

    __slots__ = ("w", "gain", "target", "floor")

    def __init__(self, nics: int, gain: float = 1 / 16, target: float = 1 / 8,
                 floor: float = 1 / 8) -> None:
        self.w = [1.0] * nics
        self.gain, self.target, self.floor = gain, target, floor

    def __repr__(self) -> str:
        return f"NicShares({[round(x, 3) for x in self.w]})"

    def signal(self, nic: int, marked: bool) -> None:
        w = self.w
        if not marked:
            x = w[nic]
            if x < 1.0:
                w[nic] = min(1.0, x * (1.0 + self.gain * self.target))
            return
        w[nic] *= 1.0 - self.gain
        top = max(w)
        if top < 1.0:  # every plane marked alike: the shares stay as they were
            for i in range(len(w)):
                w[i] /= top
        floor = self.floor
        if w[nic] < floor:
            w[nic] = floor


class _NicTurn:
    """One NIC's active EVs and the permutation of them being cycled."""

    __slots__ = ("members", "perm", "pos")

    def __init__(self, members: list[int]) -> None:
        self.members = members
        self.perm: list[int] = []
        self.pos = 0


class Oblivious:
    """Random permutation of the active EVs, cycled, a new permutation per round.

    With ``nics`` (the NIC, i.e. plane, of each EV) the NICs take turns and each cycles
    a permutation of its own active EVs: every NIC keeps an equal share of the packets
    when some of its EVs are out of service (a cut spine link), instead of the planes
    with more surviving EVs taking more than their NIC can carry."""

    def __init__(self, evs: int, rng: random.Random,
                 nics: Sequence[int] | None = None, shares: bool = False) -> None:
        self.rng = rng
        self.nics = list(nics) if nics is not None else None
        # with ``shares``, the NICs' turns are weighted by their planes' congestion
        self.shares = (NicShares(max(self.nics) + 1) if shares and self.nics is not None
                       else None)
        self.credit: list[float] = []  # smooth weighted round robin over the groups
        self.active: list[int] = []
        self.perm: list[int] = []
        self.pos = 0
        self.groups: list[_NicTurn] = []  # per NIC with active EVs
        self.turn = 0
        self.set_active(range(evs))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(active={self.active})"

    def set_active(self, evs: Sequence[int]) -> None:
        self.active = list(evs)
        self.perm = []
        self.pos = 0
        if self.nics is not None:
            by_nic: dict[int, list[int]] = {}
            for ev in self.active:
                by_nic.setdefault(self.nics[ev], []).append(ev)
            self.groups = [_NicTurn(members) for _, members in sorted(by_nic.items())]
            self.group_nic = sorted(by_nic)
            self.credit = [0.0] * len(self.groups)
            self.turn = 0

    def _next_in_perm(self) -> int:
        groups = self.groups
        if groups:
            shares = self.shares
            if shares is None:
                g = groups[self.turn % len(groups)]
                self.turn += 1
            else:  # smooth weighted round robin: each NIC by its plane's weight
                credit, w, nic_of_group = self.credit, shares.w, self.group_nic
                best, total = 0, 0.0
                for i in range(len(credit)):
                    wi = w[nic_of_group[i]]
                    credit[i] += wi
                    total += wi
                    if credit[i] > credit[best]:
                        best = i
                credit[best] -= total
                g = groups[best]
            if g.pos >= len(g.perm):
                g.perm = g.members[:]
                self.rng.shuffle(g.perm)
                g.pos = 0
            ev = g.perm[g.pos]
            g.pos += 1
            return ev
        if self.pos >= len(self.perm):
            self.perm = self.active[:]
            self.rng.shuffle(self.perm)
            self.pos = 0
        ev = self.perm[self.pos]
        self.pos += 1
        return ev

    def next_ev(self, psn: int) -> int:
        return self._next_in_perm()

    def feedback(self, ev: int, kind: int) -> None:
        if kind == TRIM and self.shares is not None and self.nics is not None:
            self.shares.signal(self.nics[ev], True)  # a trim: its plane's queue overflowed

    def congestion(self, ev: int, marked: bool) -> None:
        """An ACK came back on ``ev``, echoing a CE mark or not (the NIC shares' signal)."""
        if self.shares is not None and self.nics is not None:
            self.shares.signal(self.nics[ev], marked)


class Bitmap(Oblivious):
    """Oblivious, skipping EVs with a penalty (htsim's bitmap load balancer)."""

    PENALTY = {GOOD: 0, DELAY: 1, NACK: 4, TIMEOUT: 15, ECN: 1, TRIM: 4}

    def __init__(self, evs: int, rng: random.Random, nics: Sequence[int] | None = None,
                 shares: bool = False, max_penalty: int = 15) -> None:
        super().__init__(evs, rng, nics, shares)
        self.penalty = [0] * evs
        self.max_penalty = max_penalty

    def next_ev(self, psn: int) -> int:
        n = len(self.active)
        best, best_pen = -1, 1 << 30
        for _ in range(n):
            ev = self._next_in_perm()
            pen = self.penalty[ev]
            if pen == 0:
                return ev
            self.penalty[ev] = pen - 1  # passed over: the penalty decays
            if pen < best_pen:
                best, best_pen = ev, pen
        return best  # every active EV is penalised: the least penalised one

    def feedback(self, ev: int, kind: int) -> None:
        super().feedback(ev, kind)
        if 0 <= ev < len(self.penalty):
            add = self.PENALTY.get(kind, 0)
            if add:
                self.penalty[ev] = min(self.max_penalty, self.penalty[ev] + add)


class Reps:
    """Recycled entropies (REPS): reuse EVs that were just acknowledged in good shape."""

    def __init__(self, evs: int, rng: random.Random, buffer: int = 8, freeze_pkts: int = 64,
                 explore_pkts: int = 16) -> None:
        self.rng = rng
        self.active: list[int] = list(range(evs))
        self.is_active = [True] * evs
        self.cache: deque[int] = deque()
        self.capacity = buffer
        self.freeze_pkts, self.explore_pkts = freeze_pkts, explore_pkts
        self.frozen = 0  # packets left in the frozen phase
        self.exploring = 0  # random picks left before recycling again
        self.fpos = 0

    def __repr__(self) -> str:
        return f"Reps(cache={list(self.cache)}, frozen={self.frozen}, exploring={self.exploring})"

    def set_active(self, evs: Sequence[int]) -> None:
        self.active = list(evs)
        self.is_active = [False] * len(self.is_active)
        for ev in evs:
            self.is_active[ev] = True
        self.cache = deque(ev for ev in self.cache if self.is_active[ev])

    def next_ev(self, psn: int) -> int:
        if self.frozen and self.cache:
            self.frozen -= 1
            self.fpos = (self.fpos + 1) % len(self.cache)
            ev = self.cache[self.fpos]
            if not self.frozen:
                self.cache.clear()  # the freeze ends: explore afresh
                self.exploring = self.explore_pkts
            return ev
        self.frozen = 0
        if self.exploring:
            self.exploring -= 1
        elif self.cache:
            return self.cache.popleft()
        return self.active[self.rng.randrange(len(self.active))]

    def feedback(self, ev: int, kind: int) -> None:
        if kind == GOOD:
            if (not self.frozen and 0 <= ev < len(self.is_active) and self.is_active[ev]
                    and len(self.cache) < self.capacity):
                self.cache.append(ev)
        elif kind == TIMEOUT:
            if ev in self.cache:
                self.cache.remove(ev)
            if not self.frozen:
                self.frozen = self.freeze_pkts
        elif ev in self.cache:  # DELAY, NACK, ECN: not recycled
            self.cache.remove(ev)

    def congestion(self, ev: int, marked: bool) -> None:
        pass


SELECTORS: dict[str, type[Oblivious] | type[Reps]] = {
    "oblivious": Oblivious, "bitmap": Bitmap, "reps": Reps}


def make_selector(name: str, evs: int, rng: random.Random,
                  nics: Sequence[int] | None = None, shares: bool = False) -> PathSelector:
    """Selector ``name`` over ``evs`` EVs; ``nics``: each EV's NIC, for the selectors that
    balance NICs (oblivious, bitmap); ``shares``: their NICs' shares follow each plane's
    congestion (``NicShares``) instead of equal turns."""
    try:
        cls = SELECTORS[name]
    except KeyError:
        raise ValueError(f"selector={name!r}: one of {sorted(SELECTORS)}") from None
    if issubclass(cls, Oblivious):  # (and Bitmap): they balance NICs
        return cls(evs, rng, nics, shares)
    return Reps(evs, rng)
