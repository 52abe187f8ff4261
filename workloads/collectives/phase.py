"""Per-round loss-tolerance and deadline policies fed by training signals (DBLP's phase
awareness). Pure objects: ``update(signals)`` per round returns a record dict (the
tolerance or deadline, why, and the signals) to log; ``bound(record)`` turns it into
the ``LossBound`` passed to ``DblpCore.post_send``/``post_recv``. Every rank runs the
same policy on the same (all-reduced) signals, so both ends of a message agree.

- ``FixedTolerance(t)``: the MLT-style baseline, the same tolerance every round.
- ``PhaseAware(PhaseAwareConfig(...))``:
  1. tolerance 0 during the first ``critical_epochs`` epochs (critical learning
     period, Achille et al.: deficits there are permanent); an epoch is the training
     data's, or ``epoch_steps`` rounds when set (a language model's "epoch" over every
     window of its text is thousands of steps: a run would be one long first epoch);
  2. Accordion's critical-regime detector: every ``window`` rounds the gradient
     norm is compared with the one ``window`` rounds before; if
     ``|prev - new| / prev >= eta`` the tolerance is 0 for ``window`` rounds (this
     one included);
  3. otherwise ``base`` scaled by the learning-rate schedule,
     ``base * (lr_ref / lr)`` with ``lr_ref`` the largest LR seen (later, lower-LR
     phases take more loss), capped at ``cap``;
  4. optionally (``accuracy_gain``), the DBLP prototype's BEGIN phase: while the
     accuracy is at most ``begin_accuracy`` or rose by at least ``accuracy_gain``
     since the previous reading, tolerance 0.
- ``OptiReduceDeadline``: each rank proposes ``elapsed / completion_ratio + margin``
  for the next round; the deadline is the median of the proposals (a single pair:
  its own), clamped to [min_s, max_s].
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from transports.core.bound import LossBound


@dataclass(frozen=True)
class Signals:
    """What training knows about one round before its communication."""

    step: int
    epoch: int
    lr: float
    grad_norm: float
    accuracy: float | None = None  # the latest evaluation, in [0, 1]

    def __post_init__(self) -> None:
        if self.lr < 0 or not self.grad_norm >= 0:
            raise ValueError(f"lr={self.lr!r} and grad_norm={self.grad_norm!r} must be >= 0")


def _record(s: Signals, tolerance: float, why: str) -> dict:
    return {"step": s.step, "epoch": s.epoch, "lr": s.lr, "grad_norm": s.grad_norm,
            "accuracy": s.accuracy, "tolerance": tolerance, "why": why}


def _check_tol(name: str, t: float) -> None:
    if not 0.0 <= t < 1.0:
        raise ValueError(f"{name}={t!r} must be in [0, 1)")


def bound(record: dict, deadline_s: float | None = None) -> LossBound:
    """The LossBound of a round from its policy record (and an optional deadline)."""
    return LossBound(record.get("tolerance", 0.0), record.get("deadline_s", deadline_s))


class FixedTolerance:
    """MLT-style: the same tolerance every round."""

    def __init__(self, tolerance: float) -> None:
        _check_tol("tolerance", tolerance)
        self.tolerance = tolerance

    def update(self, s: Signals) -> dict:
        return _record(s, self.tolerance, "fixed")


@dataclass(frozen=True)
class PhaseAwareConfig:
    base: float = 0.05
    cap: float = 0.2
    critical_epochs: int = 2
    window: int = 10
    eta: float = 0.5
    lr_scaling: bool = True
    accuracy_gain: float | None = None  # e.g. 0.07 (7 points): BEGIN phase detection
    begin_accuracy: float = 0.5
    epoch_steps: int | None = None  # rounds per epoch of the critical period (None: the data's)

    def __post_init__(self) -> None:
        _check_tol("PhaseAwareConfig.base", self.base)
        _check_tol("PhaseAwareConfig.cap", self.cap)
        if self.base > self.cap:
            raise ValueError(f"PhaseAwareConfig.base={self.base} above cap={self.cap}")
        if self.critical_epochs < 0 or self.window < 1 or not self.eta > 0:
            raise ValueError("critical_epochs >= 0, window >= 1 and eta > 0 are required")
        if self.epoch_steps is not None and self.epoch_steps < 1:
            raise ValueError(f"PhaseAwareConfig.epoch_steps={self.epoch_steps!r} must be "
                             ">= 1 (or None: the data's epochs)")


class PhaseAware:
    """Tolerance by training phase: critical period, critical regime, LR schedule."""

    def __init__(self, config: PhaseAwareConfig | None = None) -> None:
        self.cfg = config or PhaseAwareConfig()
        self.lr_ref = 0.0
        self.rounds = 0
        self.ref_norm: float | None = None  # the norm at the last check
        self.ref_round = 0
        self.critical_until = -1  # rounds < this are critical
        self.last_acc: float | None = None
        self.begin = False

    def update(self, s: Signals) -> dict:
        cfg = self.cfg
        r = self.rounds
        self.rounds += 1
        self.lr_ref = max(self.lr_ref, s.lr)
        change = None
        if self.ref_norm is None:
            self.ref_norm, self.ref_round = s.grad_norm, r
        elif r - self.ref_round >= cfg.window:
            prev = self.ref_norm
            change = abs(prev - s.grad_norm) / prev if prev > 0 else float("inf")
            if change >= cfg.eta:
                self.critical_until = r + cfg.window
            self.ref_norm, self.ref_round = s.grad_norm, r
        if cfg.accuracy_gain is not None and s.accuracy is not None \
                and s.accuracy != self.last_acc:
            gain = s.accuracy - self.last_acc if self.last_acc is not None else 1.0
            self.begin = s.accuracy <= cfg.begin_accuracy or gain >= cfg.accuracy_gain
            self.last_acc = s.accuracy
        epoch = s.epoch if cfg.epoch_steps is None else s.step // cfg.epoch_steps
        if epoch < cfg.critical_epochs:
            rec = _record(s, 0.0, "critical_period")
        elif r < self.critical_until:
            rec = _record(s, 0.0, "critical_regime")
        elif self.begin:
            rec = _record(s, 0.0, "begin_phase")
        elif cfg.lr_scaling and s.lr > 0 and self.lr_ref > s.lr:
            t = min(cfg.cap, cfg.base * self.lr_ref / s.lr)
            rec = _record(s, t, "lr_capped" if t == cfg.cap else "lr_scaled")
        else:
            rec = _record(s, cfg.base, "base")
        rec["norm_change"] = change
        return rec


@dataclass(frozen=True)
class OptiReduceConfig:
    margin_s: float = 1e-3  # OptiReduce adds 1 ms
    initial_s: float | None = None  # the first round's deadline (None: none)
    min_s: float = 1e-6
    max_s: float = 10.0
    min_ratio: float = 0.01  # a round that delivered less proposes elapsed / min_ratio

    def __post_init__(self) -> None:
        if self.margin_s < 0 or not 0 < self.min_s <= self.max_s or not 0 < self.min_ratio <= 1:
            raise ValueError("need margin_s >= 0, 0 < min_s <= max_s, 0 < min_ratio <= 1")
        if self.initial_s is not None and not self.initial_s > 0:
            raise ValueError(f"OptiReduceConfig.initial_s={self.initial_s!r} must be > 0")


class OptiReduceDeadline:
    """Adaptive per-round deadline: the median of every rank's proposal."""

    def __init__(self, config: OptiReduceConfig | None = None) -> None:
        self.cfg = config or OptiReduceConfig()
        self.deadline_s = self.cfg.initial_s

    def propose(self, elapsed_s: float, completion_ratio: float) -> float:
        """This rank's proposal from its last round: elapsed / ratio + margin."""
        if elapsed_s < 0 or not 0 <= completion_ratio <= 1:
            raise ValueError(f"elapsed_s={elapsed_s!r} must be >= 0 and "
                             f"completion_ratio={completion_ratio!r} in [0, 1]")
        cfg = self.cfg
        return elapsed_s / max(completion_ratio, cfg.min_ratio) + cfg.margin_s

    def update(self, elapsed_s: float, completion_ratio: float,
               peers: Sequence[float] = ()) -> dict:
        """Agree on the next round's deadline from our proposal and the peers' ones."""
        own = self.propose(elapsed_s, completion_ratio)
        proposals = [own, *peers]
        cfg = self.cfg
        self.deadline_s = min(cfg.max_s, max(cfg.min_s, statistics.median(proposals)))
        return {"deadline_s": self.deadline_s, "proposal_s": own, "proposals": proposals,
                "elapsed_s": elapsed_s, "completion_ratio": completion_ratio,
                "why": "median" if peers else "own"}
