"""Congestion control: a delay-based window in the spirit of UEC NSCC, and per-path RTTs.

``Nscc`` keeps one window (bytes, all EVs together). Each ACK brings an RTT
sample; ``delay = rtt - base_rtt`` (base_rtt: the smallest RTT seen, or given).

- delay < target: the window grows by ``fi * mtu`` per window acked (fair increase,
  Reno-like) plus ``eta * (target - delay) / target`` of the bytes acked
  (proportional increase: fast when the path is empty).
- delay > target: multiplicative decrease by ``gamma * (delay - target) / delay``,
  never more than ``max_md_jump`` at once, and at most once per RTT.
- Quick adapt: when delay exceeds ``qa_threshold * target`` or a retransmission
  timeout fires, the window drops at once to what was acknowledged over the last
  RTT (the rate the network really delivered), at most once per ``qa_gate`` RTTs.
- Always within [min_cwnd, max_cwnd].

``RttEstimator``: RFC 6298 srtt/rttvar for one path, and the RTO it implies.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NsccConfig:
    """NSCC knobs (times in seconds, sizes in bytes)."""

    base_rtt: float | None = None  # None: learnt (the minimum RTT observed)
    target_delay: float | None = None  # queueing delay aimed at; None: target_frac * base_rtt
    target_frac: float = 1.0
    target_min: float = 5e-6
    eta: float = 0.1  # proportional increase gain
    fi: float = 1.0  # fair increase, in MTUs per window acked
    gamma: float = 0.8  # multiplicative decrease gain
    max_md_jump: float = 0.5  # largest single decrease (fraction of cwnd)
    qa_threshold: float = 4.0  # quick adapt when delay > qa_threshold * target
    qa_gate: float = 2.0  # at most one quick adapt per qa_gate RTTs
    init_cwnd: int | None = None  # None: 16 packets
    min_cwnd: int | None = None  # None: one packet
    max_cwnd: int = 16 << 20

    def __post_init__(self) -> None:
        for name in ("eta", "fi", "gamma", "qa_threshold", "qa_gate", "target_frac"):
            if getattr(self, name) < 0:
                raise ValueError(f"NsccConfig.{name} must be >= 0")
        if not 0 < self.max_md_jump < 1:
            raise ValueError("NsccConfig.max_md_jump must be in (0, 1)")
        if self.base_rtt is not None and self.base_rtt <= 0:
            raise ValueError("NsccConfig.base_rtt must be > 0")


class Nscc:
    """One delay-based congestion window (bytes)."""

    def __init__(self, cfg: NsccConfig, mtu: int) -> None:
        self.cfg = cfg
        self.mtu = mtu
        self.min_cwnd = cfg.min_cwnd or mtu
        self.max_cwnd = max(cfg.max_cwnd, self.min_cwnd)
        self.cwnd = float(min(self.max_cwnd, max(self.min_cwnd, cfg.init_cwnd or 16 * mtu)))
        self.base_rtt = cfg.base_rtt  # None until the first sample
        self.last_rtt = 0.0
        self.last_md = -1.0
        self.last_qa = -1.0
        self.acked_window: list[tuple[float, int]] = []  # (t, bytes) over ~the last RTT
        self.acked_recent = 0
        self.n_md = self.n_qa = 0

    def __repr__(self) -> str:
        return f"Nscc(cwnd={self.cwnd:.0f}, base_rtt={self.base_rtt})"

    def target(self) -> float:
        cfg = self.cfg
        if cfg.target_delay is not None:
            return cfg.target_delay
        return max(cfg.target_min, cfg.target_frac * (self.base_rtt or 0.0))

    def rtt_ref(self) -> float:
        return (self.base_rtt or 0.0) + self.target()

    def on_ack(self, acked: int, rtt: float | None, now: float) -> None:
        """``acked`` bytes newly acknowledged; ``rtt`` the sample this ACK brought (or None)."""
        if acked:
            self.acked_window.append((now, acked))
            self.acked_recent += acked
        if rtt is None or rtt <= 0:
            return
        if self.cfg.base_rtt is None and (self.base_rtt is None or rtt < self.base_rtt):
            self.base_rtt = rtt
        self.last_rtt = rtt
        base = self.base_rtt or rtt
        horizon = now - max(rtt, base)
        aw = self.acked_window
        k = 0
        while k < len(aw) and aw[k][0] < horizon:
            self.acked_recent -= aw[k][1]
            k += 1
        if k:
            del aw[:k]
        cfg = self.cfg
        delay = rtt - base
        target = self.target()
        if delay > cfg.qa_threshold * target and now - self.last_qa >= cfg.qa_gate * base:
            self.quick_adapt(now)
            return
        if delay <= target:
            if acked:
                inc = acked * (cfg.fi * self.mtu / self.cwnd
                               + cfg.eta * (target - delay) / max(target, 1e-12))
                self.cwnd = min(self.max_cwnd, self.cwnd + inc)
        elif now - self.last_md >= max(rtt, base):
            md = min(cfg.max_md_jump, cfg.gamma * (delay - target) / delay)
            self.cwnd = max(self.min_cwnd, self.cwnd * (1.0 - md))
            self.last_md = now
            self.n_md += 1

    def quick_adapt(self, now: float) -> None:
        """Cut the window to what the network delivered over the last RTT."""
        achieved = max(self.acked_recent, self.min_cwnd)
        if achieved < self.cwnd:
            self.cwnd = float(achieved)
        self.last_qa = self.last_md = now
        self.n_qa += 1

    def on_timeout(self, now: float) -> None:
        base = self.base_rtt or 0.0
        if now - self.last_qa >= self.cfg.qa_gate * base:
            self.quick_adapt(now)


class RttEstimator:
    """Smoothed RTT and variation of one path (RFC 6298), and its RTO."""

    __slots__ = ("srtt", "rttvar", "last")

    def __init__(self) -> None:
        self.srtt = 0.0  # 0: no sample yet
        self.rttvar = 0.0
        self.last = 0.0

    def sample(self, rtt: float) -> None:
        self.last = rtt
        if self.srtt == 0.0:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar += 0.25 * (abs(self.srtt - rtt) - self.rttvar)
            self.srtt += 0.125 * (rtt - self.srtt)

    def rto(self, rto_min: float, rto_max: float, default: float) -> float:
        if self.srtt == 0.0:
            return default
        return min(rto_max, max(rto_min, self.srtt + 4 * self.rttvar))
