"""DCQCN's reaction point: the sending rate of a RoCE QP, cut on congestion notifications.

What RoCE NICs run over ECN-marking switches (Zhu et al., SIGCOMM 2015): the receiver (the
notification point) answers CE-marked packets with congestion notifications (here: ACKs
carrying FLAG_ECE, transports/core/receiver.py); the sender (this reaction point) keeps a
current rate ``rc``, a target rate ``rt`` and a congestion estimate ``alpha``:

- a notification (at most one per ``cut_rtts`` minimum RTTs, the NP's CNP spacing):
  ``rt = rc``,
  ``rc *= 1 - alpha / 2``, ``alpha = (1 - g) alpha + g``;
- every ``period_rtts`` minimum RTTs: ``alpha *= 1 - g``, and a rate increase event: the first
  ``fast_steps`` are fast recovery (``rc = (rt + rc) / 2``), then additive increase
  (``rt += ai``), then hyper increase (``rt += i * hai``), each followed by
  ``rc = (rt + rc) / 2``; ``rc`` never above ``max_rate``.

The line rate is not given to the core: it starts unpaced and, at the first notification,
takes the rate it delivered over the last ``period`` as ``rc`` (and 1.25 times the most it
ever delivered as ``max_rate``). Times are the emulation's (links ~1000x slower than the
ones they stand for: the periods are scaled as the RTOs are). Sans-I/O: ``now`` comes in;
``send_at`` says when the next packet may leave (pacing with a burst of ``burst`` packets).
"""

from __future__ import annotations

from dataclasses import dataclass

from transports.core.knobs import check_knobs, knob

INF = float("inf")


@dataclass(frozen=True)
class DcqcnConfig:
    """DCQCN knobs (times in seconds, rates as fractions of the learnt line rate)."""

    g: float = knob(1 / 16, lo=0.0, hi=1.0, lo_open=True)  # alpha's gain
    # alpha and rate-increase timer: period_rtts minimum RTTs, at least period
    period: float = knob(1e-3, lo=0.0, lo_open=True)
    period_rtts: float = knob(2.0, lo=0.0)
    # at most one cut per cut_rtts minimum RTTs, at least cut_interval (the CNP spacing)
    cut_interval: float = knob(0.0, lo=0.0)
    cut_rtts: float = knob(1.0, lo=0.0)
    fast_steps: int = knob(5, lo=0)  # fast-recovery increase events
    ai: float = knob(0.02, lo=0.0)  # additive increase, of the line rate per event
    hai: float = knob(0.1, lo=0.0)  # hyper increase, of the line rate per event
    hyper_after: int = knob(10, lo=0)  # additive events before hyper increase
    min_rate: float = knob(0.01, lo=0.0, hi=1.0, lo_open=True)  # of the line rate
    burst: int = knob(2, lo=1)  # packets that may leave back to back

    def __post_init__(self) -> None:
        check_knobs(self)


class Dcqcn:
    """One QP's rate (see the module docstring)."""

    __slots__ = ("cfg", "rc", "rt", "alpha", "max_rate", "last_cut", "last_tick", "steps",
                 "next_at", "acked", "acked_at", "n_cut", "n_cnp", "period", "cut_gap")

    def __init__(self, cfg: DcqcnConfig) -> None:
        self.cfg = cfg
        self.period = cfg.period  # the timers, in time (set_rtt scales them)
        self.cut_gap = cfg.cut_interval
        self.rc = INF  # bytes/s; INF until the first notification: unpaced
        self.rt = INF
        self.alpha = 1.0
        self.max_rate = 0.0  # 1.25 x the most delivered over a period
        self.last_cut = -INF
        self.last_tick = 0.0
        self.steps = 0  # rate increase events since the last cut
        self.next_at = 0.0  # when the next packet may leave
        self.acked = 0  # bytes acknowledged in the current period
        self.acked_at = 0.0
        self.n_cut = self.n_cnp = 0

    def __repr__(self) -> str:
        return f"Dcqcn(rc={self.rc:.0f} B/s, rt={self.rt:.0f}, alpha={self.alpha:.3f})"

    def set_rtt(self, rtt: float | None) -> None:
        """The QP's minimum RTT: the timers are counted in it (DCQCN's 55 us are a few RTTs
        of the fabrics it was made for; the emulated fabric's RTT is ~100x longer)."""
        if rtt:
            cfg = self.cfg
            self.period = max(cfg.period, cfg.period_rtts * rtt)
            self.cut_gap = max(cfg.cut_interval, cfg.cut_rtts * rtt)

    def on_acked(self, nbytes: int, now: float) -> None:
        """``nbytes`` newly acknowledged: the delivery rate the line rate is learnt from."""
        self._tick(now)
        self.acked += nbytes
        span = now - self.acked_at
        if span >= self.period:
            self.max_rate = max(self.max_rate, 1.25 * self.acked / span)
            self.acked, self.acked_at = 0, now

    def on_cnp(self, now: float) -> bool:
        """A congestion notification; True if it cut the rate."""
        self.n_cnp += 1
        self._tick(now)
        cfg = self.cfg
        if now - self.last_cut < self.cut_gap:
            return False
        if self.rc == INF:  # the first: start from what was delivered
            span = max(now - self.acked_at, self.period)
            self.max_rate = max(self.max_rate, 1.25 * self.acked / span, 1.0)
            self.rc = self.max_rate / 1.25
        self.rt = self.rc
        self.rc = max(self.rc * (1 - self.alpha / 2), cfg.min_rate * self.max_rate)
        self.alpha = (1 - cfg.g) * self.alpha + cfg.g
        self.last_cut = self.last_tick = now
        self.steps = 0
        self.n_cut += 1
        return True

    def _tick(self, now: float) -> None:
        """The periods elapsed since the last one: alpha decays, the rate increases."""
        if self.rc == INF:
            self.last_tick = now
            return
        cfg = self.cfg
        period = self.period
        while now - self.last_tick >= period:
            self.last_tick += period
            self.alpha *= 1 - cfg.g
            self.steps += 1
            if self.steps > cfg.fast_steps:
                extra = self.steps - cfg.fast_steps
                step = cfg.ai if extra <= cfg.hyper_after else \
                    cfg.hai * (extra - cfg.hyper_after)
                self.rt = min(self.max_rate, self.rt + step * self.max_rate)
            self.rc = min(self.max_rate, (self.rt + self.rc) / 2)

    def send_at(self, now: float) -> float:
        """When the next packet may leave (``now`` or earlier: at once)."""
        return self.next_at if self.rc != INF else now

    def sent(self, nbytes: int, now: float) -> None:
        """A packet of ``nbytes`` left at ``now``: the next one waits its time at ``rc``."""
        if self.rc == INF:
            return
        self._tick(now)
        gap = nbytes / self.rc
        # up to ``burst`` packets' worth of credit carried over an idle time
        self.next_at = max(self.next_at, now - (self.cfg.burst - 1) * gap) + gap
