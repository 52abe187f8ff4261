"""DBLP fill policies and tolerance / deadline policies (pure, no network)."""

import random

import numpy as np
import pytest

from transports.core.dblp import DblpCore, LossBound
from transports.core.mrc import MrcConfig
from transports.testing.fakenet import FakeNet, PathSpec
from workloads.collectives.fill import DEFAULT_FILL, FILLS, ErrorFeedback, check_fill, fill_missing
from workloads.collectives.phase import (
    FixedTolerance,
    OptiReduceConfig,
    OptiReduceDeadline,
    PhaseAware,
    PhaseAwareConfig,
    Signals,
    bound,
)

MTU = 64


def ranges(missing, n):
    return {b for i in missing for b in range(i * MTU, min((i + 1) * MTU, n))}


@pytest.mark.parametrize("seed", [1, 2])
def test_fill_zeros_and_previous_touch_exactly_the_missing_bytes(seed):
    r = random.Random(seed)
    n = 1000  # 16 chunks, the last one short
    data, prev = r.randbytes(n), r.randbytes(n)
    missing = sorted(r.sample(range(16), 4)) + [15]
    hole = ranges(missing, n)
    for policy in FILLS:
        buf = bytearray(data)
        fill_missing(buf, missing, MTU, policy, previous=prev)
        for k in range(n):
            if k not in hole:
                want = data[k]
            else:
                want = prev[k] if policy == "previous" else 0
            assert buf[k] == want, (policy, k)
    buf = bytearray(data)  # previous with the buffer reused: its old bytes stay
    assert fill_missing(buf, missing, MTU, "previous") == 0 and buf == data
    with pytest.raises(ValueError, match="unknown fill policy 'avg'"):
        fill_missing(bytearray(8), [0], MTU, "avg")
    with pytest.raises(ValueError, match="chunk index 99"):
        fill_missing(bytearray(8), [99], MTU, "zeros")
    assert DEFAULT_FILL == "error_feedback"


@pytest.mark.parametrize("seed", [1, 2])
def test_error_feedback_residual_is_the_undelivered_values(seed):
    rng = np.random.default_rng(seed)
    n = 250  # 16 values per chunk, 16 chunks
    ef = ErrorFeedback(n, MTU)
    g1 = rng.standard_normal(n).astype(np.float32)
    sent1 = ef.next(g1)
    assert np.array_equal(sent1, g1)
    missing = [0, 5, 15]
    ef.apply(sent1.tobytes(), missing)
    idx = np.zeros(n, dtype=bool)
    for i in missing:
        idx[i * 16:(i + 1) * 16] = True
    assert np.array_equal(ef.residual[idx], g1[idx]) and not ef.residual[~idx].any()
    assert np.array_equal(ef.chunk(5), g1[80:96]) and ef.chunk(5).base is ef.residual
    g2 = rng.standard_normal(n).astype(np.float32)
    sent2 = ef.next(g2)
    assert np.array_equal(sent2, g2 + np.where(idx, g1, 0).astype(np.float32))
    assert not ef.residual.any()
    # over the two rounds nothing was lost: delivered(1) + sent(2) == g1 + g2
    delivered1 = np.where(idx, 0, sent1)
    assert np.allclose(delivered1 + sent2, g1 + g2)
    with pytest.raises(ValueError, match="multiple of 4"):
        ErrorFeedback(10, 6)


def test_error_feedback_on_the_wire():
    """The sender's completion gives exactly the chunks the receiver zero-fills."""
    cfg = MrcConfig(rto_min=200e-6, rto_init=1e-3, probe_min=200e-6)
    a, b = DblpCore(7, 4, cfg, 1), DblpCore(7, 4, cfg, 2)
    net = FakeNet(3)
    net.connect("a", a, "b", b, [PathSpec(delay=10e-6, loss=0.2)] * 4)
    grad = np.random.default_rng(3).standard_normal(200_000).astype(np.float32)
    ef = ErrorFeedback(grad.size, cfg.mtu_payload)
    send = ef.next(grad)
    buf = bytearray(send.nbytes)
    net.send("b", b.post_recv(1, buf, 0.0, LossBound(0.2)))
    net.send("a", a.post_send(1, send.tobytes(), 0.0, LossBound(0.2)))
    net.run(1.0, stop=lambda: net.done["a"] and net.done["b"])
    (cs,), (cr,) = net.done["a"], net.done["b"]
    assert cr.missing and cs.missing == cr.missing
    fill_missing(buf, cr.missing, cfg.mtu_payload)
    ef.apply(send, cs.missing)
    got = np.frombuffer(buf, dtype=np.float32)
    assert np.array_equal(got + ef.residual, grad)  # what arrived + what is carried


def sig(step, epoch=5, lr=0.1, norm=1.0, acc=None):
    return Signals(step, epoch, lr, norm, acc)


def test_fixed_tolerance():
    p = FixedTolerance(0.1)
    rec = p.update(sig(0))
    assert rec["tolerance"] == 0.1 and rec["why"] == "fixed" and rec["grad_norm"] == 1.0
    assert bound(rec, deadline_s=0.01) == LossBound(0.1, 0.01)
    with pytest.raises(ValueError, match=r"tolerance=1.5 must be in \[0, 1\)"):
        FixedTolerance(1.5)


def test_phase_aware_critical_period_regime_and_lr():
    cfg = PhaseAwareConfig(base=0.05, cap=0.2, critical_epochs=2, window=10, eta=0.5)
    p = PhaseAware(cfg)
    recs = [p.update(sig(s, epoch=s // 20, norm=1.0)) for s in range(40)]
    assert all(r["tolerance"] == 0 and r["why"] == "critical_period" for r in recs)
    recs = [p.update(sig(s, epoch=2, norm=1.0)) for s in range(40, 50)]
    assert all(r["tolerance"] == 0.05 and r["why"] == "base" for r in recs)
    # a jump of the gradient norm at a check round: 0 for that window, then back
    recs = [p.update(sig(s, epoch=2, norm=2.0 if s >= 50 else 1.0)) for s in range(50, 70)]
    assert recs[0]["norm_change"] == 1.0
    assert [r["tolerance"] for r in recs[:10]] == [0.0] * 10
    assert all(r["why"] == "critical_regime" for r in recs[:10])
    assert recs[10]["norm_change"] == 0.0 and recs[10]["tolerance"] == 0.05
    # a small change (< eta) does not trigger
    recs = [p.update(sig(s, epoch=3, norm=2.5)) for s in range(70, 80)]
    assert recs[0]["norm_change"] == pytest.approx(0.25) and recs[0]["tolerance"] == 0.05
    # LR decay raises the tolerance, within the cap
    assert p.update(sig(80, epoch=4, lr=0.05, norm=2.5))["tolerance"] == pytest.approx(0.1)
    r = p.update(sig(81, epoch=4, lr=0.001, norm=2.5))
    assert r["tolerance"] == 0.2 and r["why"] == "lr_capped"


def test_phase_aware_accuracy_begin_phase():
    p = PhaseAware(PhaseAwareConfig(critical_epochs=0, accuracy_gain=0.07))
    assert p.update(sig(0, acc=0.3))["why"] == "begin_phase"
    assert p.update(sig(1, acc=0.6))["why"] == "begin_phase"  # +30 points
    assert p.update(sig(2, acc=0.62))["tolerance"] == 0.05  # +2 points: later phase
    assert p.update(sig(3, acc=0.62))["tolerance"] == 0.05


def test_optireduce_deadline_median():
    p = OptiReduceDeadline(OptiReduceConfig(margin_s=1e-3))
    rec = p.update(0.010, 1.0)
    assert rec["deadline_s"] == pytest.approx(0.011) and rec["why"] == "own"
    rec = p.update(0.010, 0.5, peers=[0.005, 0.1, 0.03, 0.002])
    assert rec["proposal_s"] == pytest.approx(0.021)
    assert p.deadline_s == pytest.approx(0.021)  # median of 5 proposals
    assert p.update(0.0, 0.0)["deadline_s"] == pytest.approx(1e-3)
    with pytest.raises(ValueError):
        p.update(1.0, 1.5)


def test_optireduce_round_ends_at_the_deadline():
    cfg = MrcConfig(rto_min=200e-6, rto_init=1e-3, probe_min=200e-6)
    a, b = DblpCore(7, 4, cfg, 1), DblpCore(7, 4, cfg, 2)
    net = FakeNet(5)
    net.connect("a", a, "b", b, [PathSpec(delay=10e-6, rate=50e6)] * 4)
    pol = OptiReduceDeadline(OptiReduceConfig(initial_s=2e-3, margin_s=1e-3))
    ratios = []
    for rnd in range(1, 4):
        t0 = net.now
        data = bytes(1_000_000)  # 5 ms at 200 MB/s: cut by the first deadline
        buf = bytearray(len(data))
        bd = LossBound(0.0, deadline_s=pol.deadline_s)
        net.send("b", b.post_recv(rnd, buf, t0, bd))
        net.send("a", a.post_send(rnd, data, t0, bd))
        net.run(t0 + 1.0, stop=lambda: net.done["a"] and net.done["b"])
        (cr,) = net.done["b"]
        net.done["a"].clear()
        net.done["b"].clear()
        ratios.append(cr.delivered)
        if rnd == 1:
            assert cr.deadline and cr.t == pytest.approx(t0 + 2e-3) and cr.delivered < 1
        pol.update(cr.t - t0, cr.delivered)
        net.run(net.now + 2e-3)  # let the STOP exchange finish
    assert ratios[-1] == 1.0  # the deadline grew to what the round needs


def test_unknown_fill_policy_named():
    with pytest.raises(ValueError, match="unknown fill policy 'mean': valid are "):
        check_fill("mean")
    assert check_fill(DEFAULT_FILL) == DEFAULT_FILL
