"""Congestion control: a delay-based window in the spirit of UEC NSCC, and per-path RTTs.

``Nscc`` keeps one window (bytes, all EVs together). Each ACK brings an RTT
sample and the EV it was taken on; ``delay = rtt - base(ev)``, the queueing
delay on that EV's path, and ``target(ev) = target_frac * base(ev)`` (or the
configured ``target_delay``).

Base RTT (``BaseRtt``), per EV unless ``base_rtt`` is configured: the minimum of
the EV's samples over the last ``base_rtt_window`` seconds (a windowed-min
filter, as BBR's min_rtt and Linux's win_minmax), so

- a path that got longer (a reroute) is learnt within one window instead of
  reading as queueing delay for ever, and an EV on a longer path is not
  compared with the shortest EV's base (which would cut the window on every
  one of its ACKs);
- a sample that is too small (not a property of the path: a host that stamped
  its clock before a batch of ACKs arrived and was then descheduled while
  reading them reports every RTT of that batch too short) cannot drag the base
  down for good: a sample more than ``base_rtt_drop`` below the base counts
  only once a sample from another instant confirms it, so one low sample, or one
  batch of samples sharing a clock stamp, lowers the base by ``base_rtt_drop`` at
  most (with ``target_frac`` 1 an empty path then still reads as below the
  target), and whatever gets through ages out within the window. A base that is
  much too small makes every real RTT look like queueing: the window would be cut
  on every RTT and never grow again.
- ``forget(ev)``: the path behind an EV may have changed (it came back after a
  failure): its base is learnt again from the next samples.

Window updates:

- delay < target: the window grows by ``fi * mtu`` per window acked (fair increase,
  Reno-like) plus ``eta * (target - delay) / target`` of the bytes acked
  (proportional increase: fast when the path is empty).
- delay > target: multiplicative decrease by ``gamma * (avg - target) / avg``, never
  more than ``max_md_jump`` at once, at most once per RTT, and only once ``avg``, the
  filtered delay, is above the target too (as the UEC simulator's NSCC decreases on its
  slow moving average, not on one sample). ``avg`` moves toward each sample by
  ``1 - exp(-acked / (delay_memory * cwnd))``: its memory is about ``delay_memory``
  windows of bytes acknowledged, whatever an ACK covers (an engine's coalesced ACK
  answers a wake-up's packets at once) and however few packets a window holds (an
  emulated BDP is a few packets). So the spread of single samples (on the emulator, up
  to a tick at each end on an idle path) does not cut the window; a queue that stands
  for about half a window of ACKs does. ``delay_memory = 0``: the sample alone.
- Quick adapt: when delay exceeds ``qa_threshold * target`` or a retransmission
  timeout fires, the window drops at once to what was acknowledged over the last
  RTT (the rate the network really delivered), at most once per ``qa_gate`` RTTs.
- Always within [min_cwnd, max_cwnd]; ``min_cwnd`` is two packets unless configured
  (RFC 5681's floor for ssthresh): with one, a sender limited by its application
  sends a two-packet message's second packet only once the first is acknowledged, so
  under a queue that every EV crosses (a burst onto the receiver's ports) the message
  crosses it twice, the second time often into a port full again.
- ``undo(cwnd, at)``: a cut that proved spurious (the loss it answered was not one:
  transports/core/mrc/connection.py, Eifel-style) is taken back, if no other cut came since.

ECN (``ecn``, on by default; the switches mark: topologies/signals.py): an ACK echoing a
CE mark (FLAG_ECE) and its delay place it in one of NSCC's four quadrants, once the
connection has seen a mark (before that, or with ``ecn`` off, the window is delay-only as
above, so a fabric that never marks loses nothing):

- no mark, delay <= target: proportional and fair increase (as above);
- no mark, delay > target: fair increase only (the queue that delayed it is draining:
  ECN leads, delay trails);
- mark, delay > target: multiplicative decrease (as above);
- mark, delay <= target: no change (one path's queue: the path selector moves load off it).

A trimmed packet's NACK (``on_trim``) quick-adapts (gated, ``trim_qa``).

Per-path RTT estimation and RTOs live in transports/core/rto.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from transports.core.knobs import check_knobs, knob


@dataclass(frozen=True)
class NsccConfig:
    """NSCC knobs (times in seconds, sizes in bytes); each field's rule is its ``knob``
    (transports/core/knobs.py)."""

    # None: learnt per EV (windowed minimum, see BaseRtt)
    base_rtt: float | None = knob(None, lo=0.0, lo_open=True)
    # how long a learnt base RTT lasts without confirmation
    base_rtt_window: float = knob(1.0, lo=0.0, lo_open=True)
    # a sample this far below the base needs a second to confirm
    base_rtt_drop: float = knob(0.25, lo=0.0, hi=1.0, hi_open=True)
    # queueing delay aimed at; None: target_frac * base
    target_delay: float | None = knob(None, lo=0.0)
    target_frac: float = knob(1.0, lo=0.0)
    target_min: float = knob(5e-6, lo=0.0)
    eta: float = knob(0.1, lo=0.0)  # proportional increase gain
    fi: float = knob(1.0, lo=0.0)  # fair increase, in MTUs per window acked
    gamma: float = knob(0.8, lo=0.0)  # multiplicative decrease gain
    # memory of the filtered delay that gates and sizes a decrease, in windows of bytes
    # acknowledged (NSCC's 1/80 per packet at a 150-packet BDP is about half a window);
    # 0: the sample alone decides
    delay_memory: float = knob(0.5, lo=0.0)
    # largest single decrease (fraction of cwnd)
    max_md_jump: float = knob(0.5, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    qa_threshold: float = knob(4.0, lo=0.0)  # quick adapt when delay > qa_threshold * target
    qa_gate: float = knob(2.0, lo=0.0)  # at most one quick adapt per qa_gate RTTs
    # react to ECN echoes as NSCC's quadrants (once the path showed it marks: see on_ack)
    ecn: bool = knob(True)
    # a trimmed packet's NACK is a quick-adapt trigger (as an RTO is)
    trim_qa: bool = knob(True)
    init_cwnd: int | None = knob(None, lo=1)  # bytes; None: 16 packets
    min_cwnd: int | None = knob(None, lo=1)  # bytes; None: two packets
    max_cwnd: int = knob(16 << 20, lo=1)  # bytes

    def __post_init__(self) -> None:
        check_knobs(self)


class BaseRtt:
    """One path's base RTT: a windowed minimum of its (guarded) RTT samples.

    Guard: a sample more than ``drop`` below the base as it stood before the
    current instant (``now``) enters the filter as ``max(sample, p)``, ``p`` the
    last sample taken at an earlier instant. So a large drop needs samples from two
    instants (a shorter path gives them; a single outlier, or a batch of samples
    read with one stale clock stamp, does not), and one instant moves the base
    down by at most ``drop``. The filter is Kathleen Nichols' running minimum as in
    Linux's lib/win_minmax.c: the best of the last ``window`` seconds plus the best
    of its later quarter and half, so an old minimum expires and the next takes over.
    """

    __slots__ = ("window", "drop", "s", "_t", "_prev", "_last", "_ref")

    def __init__(self, window: float, drop: float = 0.25) -> None:
        self.window = window
        self.drop = drop
        self.s: list[tuple[float, float]] = []  # (t, v): best, 2nd best, 3rd best
        self._t = -1.0  # the current instant
        self._prev: float | None = None  # the last sample before it
        self._last: float | None = None
        self._ref: float | None = None  # the base before it

    @property
    def value(self) -> float | None:
        return self.s[0][1] if self.s else None

    def forget(self) -> None:
        """Learn the base again (the sample history that guards it is kept)."""
        self.s = []

    def sample(self, rtt: float, now: float) -> float:
        """Take an RTT sample measured at ``now``; return the base."""
        if now != self._t:
            self._t, self._prev, self._ref = now, self._last, self.value
        self._last = rtt
        v = rtt
        if (self._prev is not None and self._ref is not None
                and rtt < (1.0 - self.drop) * self._ref):
            v = max(rtt, self._prev)
        s = self.s
        win = self.window
        if not s or v <= s[0][1] or now - s[2][0] > win:
            self.s = [(now, v)] * 3
            return v
        x = (now, v)
        if v <= s[1][1]:
            s[1] = s[2] = x
        elif v <= s[2][1]:
            s[2] = x
        dt = now - s[0][0]
        if dt > win:  # the best expired: the next ones move up
            s[0], s[1], s[2] = s[1], s[2], x
            if now - s[0][0] > win:
                s[0], s[1], s[2] = s[1], s[2], x
        elif s[1][0] == s[0][0] and dt > win / 4:
            s[1] = s[2] = x
        elif s[2][0] == s[1][0] and dt > win / 2:
            s[2] = x
        return s[0][1]


class Nscc:
    """One delay-based congestion window (bytes) over paths (EVs) with their own base RTTs."""

    def __init__(self, cfg: NsccConfig, mtu: int) -> None:
        self.cfg = cfg
        self.mtu = mtu
        self.min_cwnd = cfg.min_cwnd or 2 * mtu
        self.max_cwnd = max(cfg.max_cwnd, self.min_cwnd)
        self.cwnd = float(min(self.max_cwnd, max(self.min_cwnd, cfg.init_cwnd or 16 * mtu)))
        # the largest window before a cut (the run's record): kept where the window falls,
        # at most once per RTT, not on every ACK that grows it
        self.cwnd_peak = self.cwnd
        self.bases: dict[int, BaseRtt] = {}  # per EV (learnt base RTTs)
        self.last_rtt = 0.0
        self.avg_delay = 0.0  # the filtered queueing delay (``delay_memory``)
        self.last_md = -1.0
        self.last_qa = -1.0
        self.acked_window: list[tuple[float, int]] = []  # (t, bytes) over ~the last RTT
        self.acked_recent = 0
        self.n_md = self.n_qa = self.n_undo = 0
        self.n_ecn = self.n_noop = self.n_trim = 0  # marked ACKs, no-op quadrants, trims
        self.marks_seen = False  # an ECN echo came back: the fabric marks (quadrants on)
        self.n_rto = 0  # quick adapts on a retransmission timeout (among n_qa)

    def __repr__(self) -> str:
        return f"Nscc(cwnd={self.cwnd:.0f}, base_rtt={self.base_rtt})"

    @property
    def base_rtt(self) -> float | None:
        """The configured base RTT, else the smallest EV's (None before any sample)."""
        if self.cfg.base_rtt is not None:
            return self.cfg.base_rtt
        vals = [v for b in self.bases.values() if (v := b.value) is not None]
        return min(vals) if vals else None

    def base(self, ev: int) -> float | None:
        """EV ``ev``'s base RTT (configured, or learnt; else the smallest EV's)."""
        if self.cfg.base_rtt is not None:
            return self.cfg.base_rtt
        b = self.bases.get(ev)
        v = b.value if b is not None else None
        return v if v is not None else self.base_rtt

    def forget(self, ev: int) -> None:
        """The path behind ``ev`` may have changed: learn its base RTT again."""
        b = self.bases.get(ev)
        if b is not None:
            b.forget()

    def target(self, ev: int = 0) -> float:
        cfg = self.cfg
        if cfg.target_delay is not None:
            return cfg.target_delay
        return max(cfg.target_min, cfg.target_frac * (self.base(ev) or 0.0))

    def rtt_ref(self, ev: int = 0) -> float:
        """The RTT above which ``ev`` is congested: its base plus the delay target."""
        return (self.base(ev) or 0.0) + self.target(ev)

    def on_ack(self, acked: int, rtt: float | None, now: float, ev: int = 0,
               ecn: bool = False) -> None:
        """``acked`` bytes newly acknowledged; ``rtt`` the sample this ACK brought (or None),
        measured on EV ``ev``; ``ecn``: the packet it answers arrived marked CE."""
        if ecn and self.cfg.ecn:
            self.marks_seen = True
            self.n_ecn += 1
        if acked:
            self.acked_window.append((now, acked))
            self.acked_recent += acked
        if rtt is None or rtt <= 0:
            return
        cfg = self.cfg
        if cfg.base_rtt is None:
            b = self.bases.get(ev)
            if b is None:
                b = self.bases[ev] = BaseRtt(cfg.base_rtt_window, cfg.base_rtt_drop)
            base = b.sample(rtt, now)
        else:
            base = cfg.base_rtt
        self.last_rtt = rtt
        horizon = now - max(rtt, base)
        aw = self.acked_window
        k = 0
        while k < len(aw) and aw[k][0] < horizon:
            self.acked_recent -= aw[k][1]
            k += 1
        if k:
            del aw[:k]
        delay = max(0.0, rtt - base)
        target = self.target(ev)
        if cfg.delay_memory > 0.0:  # an ACK weighs by the bytes it covers (coalesced ACKs)
            w = 1.0 - math.exp(-max(acked, self.mtu) / (cfg.delay_memory * self.cwnd))
            avg = self.avg_delay = self.avg_delay + w * (delay - self.avg_delay)
        else:
            avg = self.avg_delay = delay
        if delay > cfg.qa_threshold * target and now - self.last_qa >= cfg.qa_gate * base:
            self.quick_adapt(now)
            return
        if self.marks_seen:  # NSCC's quadrants: ECN leads, delay trails
            ecn = ecn and cfg.ecn
            if delay <= target:
                if ecn:  # one path is congested, not the connection: the selector moves
                    self.n_noop += 1
                    return
            elif not ecn:  # the queues are draining: increase gently
                if acked:
                    self.cwnd = min(self.max_cwnd,
                                    self.cwnd + acked * cfg.fi * self.mtu / self.cwnd)
                return
        if delay <= target:
            if acked:
                inc = acked * (cfg.fi * self.mtu / self.cwnd
                               + cfg.eta * (target - delay) / max(target, 1e-12))
                self.cwnd = min(self.max_cwnd, self.cwnd + inc)
        elif avg > target and now - self.last_md >= max(rtt, base):
            md = min(cfg.max_md_jump, cfg.gamma * (avg - target) / avg)
            self.cwnd_peak = max(self.cwnd_peak, self.cwnd)
            self.cwnd = max(self.min_cwnd, self.cwnd * (1.0 - md))
            self.last_md = now
            self.n_md += 1

    def report(self) -> dict[str, float | int | None]:
        """The window's state and what moved it, for a run's record (why a flow went at
        the rate it did): bytes, the base RTT in seconds, and counts of each reaction."""
        return {"cwnd": round(self.cwnd), "cwnd_peak": round(max(self.cwnd_peak, self.cwnd)),
                "base_rtt": self.base_rtt, "decreases": self.n_md,
                "quick_adapts": self.n_qa, "on_timeout": self.n_rto, "undone": self.n_undo,
                "ecn_echoes": self.n_ecn, "ecn_noop": self.n_noop, "trims": self.n_trim}

    def quick_adapt(self, now: float) -> None:
        """Cut the window to what the network delivered over the last RTT."""
        achieved = max(self.acked_recent, self.min_cwnd)
        self.cwnd_peak = max(self.cwnd_peak, self.cwnd)
        if achieved < self.cwnd:
            self.cwnd = float(achieved)
        self.last_qa = self.last_md = now
        self.n_qa += 1

    def on_trim(self, now: float) -> None:
        """A trimmed packet's NACK: a queue overflowed on its path. Quick adapt (gated), as
        NSCC does on a trim; the packet is resent at once, its path not blamed."""
        self.n_trim += 1
        if self.cfg.trim_qa and now - self.last_qa >= self.cfg.qa_gate * (self.base_rtt or 0.0):
            self.quick_adapt(now)

    def on_timeout(self, now: float) -> float | None:
        """A retransmission timeout: quick adapt (gated). Returns the window before the cut,
        or None when the gate kept it."""
        base = self.base_rtt or 0.0
        if now - self.last_qa >= self.cfg.qa_gate * base:
            before = self.cwnd
            self.quick_adapt(now)
            self.n_rto += 1
            return before
        return None

    def undo(self, cwnd: float, at: float) -> bool:
        """Take back the cut made at ``at`` (the window was ``cwnd`` before it), unless a
        decrease came after it; True if the window was restored."""
        if self.last_md != at or cwnd <= self.cwnd:
            return False
        self.cwnd = min(self.max_cwnd, cwnd)
        self.n_undo += 1
        return True

