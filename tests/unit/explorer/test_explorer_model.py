"""The cost model: hand values of its closed forms, one model evaluated for one point and
for many at once (broadcast columns), memory after Korthikanti and ZeRO, monotonicity."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from explorer_fixtures import calibration, random_config

from explorer.columns import config_columns
from explorer.model import BREAKDOWN_FIELDS, REASONS, calibration_arrays, evaluate, step
from explorer.model_memory import state_bytes
from explorer.netcost import allreduce, hierarchical_allreduce, ring_pass
from explorer.specfile import build_config


def test_ring_allreduce_bound_and_latency():
    # 2(n-1)/n S/B, plus 2(n-1)/n of the ring's latency and 2(n-1) message overheads.
    assert allreduce(8e6, 4, 1e9, 0.0, 0.0) == pytest.approx(2 * 3 / 4 * 8e-3)
    assert allreduce(8e6, 4, 1e9, 4e-6, 1e-6) == pytest.approx(2 * 3 / 4 * (8e-3 + 4e-6)
                                                              + 6e-6)
    assert ring_pass(1e6, 1, 1e9, 1e-3, 1e-3) == 0.0
    # Hierarchical over 2 DCs x 4: reduce-scatter and all-gather inside (3/4 S/B each),
    # all-reduce of S/4 across the two DCs (2 x 1/2 x S/4 / B).
    t = hierarchical_allreduce(8e6, 4, 2, 1e9, 1e9, 0.0, 0.0, 0.0)
    assert t == pytest.approx(2 * 3 / 4 * 8e-3 + 2 * 0.5 * 2e-3)


BASE = {
    "model.layers": 24, "model.hidden": 2048, "model.heads": 16, "model.vocab": 32000,
    "model.seq": 2048, "model.global_batch_seqs": 64, "model.train_tokens": 1e9,
    "gpu.preset": "h100-sxm", "cluster.gpus_per_dc": 8, "placement.tp": 1, "placement.pp": 1,
    "network.transport": "mrc",
}


def test_compute_follows_6n_rule_without_attention_and_memory_traffic():
    # With a tiny sequence (attention negligible), huge HBM bandwidth and no recompute, a
    # step's compute is 6 N tokens / (GPUs x peak x efficiency) for the matmul parameters
    # (the logits count as 2 h V per token, i.e. as parameters).
    cfg = build_config(BASE | {"model.seq": 8, "model.global_batch_seqs": 4096,
                               "gpu.hbm_tbps": 1e9, "schedule.recompute": "none",
                               "model.tied_embeddings": True})
    b = evaluate(cfg, calibration())
    m = cfg.model
    h = m.hidden
    matmul = m.layers * 12 * h * h + h * m.vocab
    attn = m.layers * 4 * m.seq * h / 2  # 4 s h per token and layer, forward; x 3 / 6
    tokens = m.batch_tokens / 8
    peak = 989e12 * cfg.gpu.gemm_efficiency
    assert b.compute_s == pytest.approx(6 * (matmul + attn) * tokens / peak, rel=1e-9)
    assert b.compute_s == pytest.approx(6 * matmul * tokens / peak, rel=2e-3)


def test_full_recompute_adds_a_forward_of_the_layers():
    # Everything but the output layer is computed again in the backward.
    kw = BASE | {"gpu.hbm_tbps": 1e9}
    none_cfg = build_config(kw | {"schedule.recompute": "none"})
    none = evaluate(none_cfg, calibration())
    full = evaluate(build_config(kw | {"schedule.recompute": "full"}), calibration())
    m = none_cfg.model
    peak = 989e12 * none_cfg.gpu.gemm_efficiency
    logits = none_cfg.model.batch_tokens / 8 * 2 * m.hidden * m.vocab / peak
    assert full.compute_s - none.compute_s == pytest.approx(none.compute_s / 3 - logits,
                                                            rel=1e-9)


def _activations(extra: dict) -> tuple[float, object]:
    """One layer's activations (bytes) of a one-layer model, and its config: the memory
    less states, logits and reserve."""
    base = BASE | {"model.layers": 1, "schedule.optimizer": "replicated",
                   "schedule.grad_bytes": 4, "gpu.memory_reserve_gib": 0.0,
                   "gpu.hbm_gib": 1e6, "model.global_batch_seqs": 8}
    cfg = build_config(base | extra)
    b = evaluate(cfg, calibration())
    m, t = cfg.model, cfg.placement.tp
    attn = 2 * m.hidden**2 + 2 * m.hidden * m.kv * m.hidden // m.heads
    mlp = (3 if m.mlp == "swiglu" else 2) * m.hidden * m.ffn_dim
    p_gpu = (m.layers * (attn + mlp + 4 * m.hidden) + 2 * m.vocab * m.hidden) / t
    logits = 4.0 * m.seq * m.vocab / t
    return b.memory_gib * 2**30 - p_gpu * 18 - logits, cfg


def test_activation_memory_is_korthikanti_for_gpt():
    # GPT (GeLU, 4h MLP, multi-head attention, dropout, no FlashAttention), microbatch 1:
    # s b h (34 + 5 a s / h) without parallelism or recomputation; 34 s b h / t with TP t,
    # sequence parallelism and selective recomputation; 2 s b h with full recomputation.
    gpt = {"model.dropout": True, "model.flash_attention": False}
    s, h, a = 2048, 2048, 16
    sbh = s * h
    got, _ = _activations(gpt | {"schedule.recompute": "none",
                                 "schedule.sequence_parallel": False})
    assert got == pytest.approx(sbh * (34 + 5 * a * s / h), rel=1e-9)
    got, _ = _activations(gpt | {"schedule.recompute": "selective", "placement.tp": 8})
    assert got == pytest.approx(sbh * 34 / 8, rel=1e-9)
    got, _ = _activations(gpt | {"schedule.recompute": "full",
                                 "schedule.sequence_parallel": False})
    assert got == pytest.approx(2 * sbh, rel=1e-9)


def test_activation_memory_follows_the_architecture():
    # SwiGLU with its own MLP size, grouped-query attention, FlashAttention, no dropout:
    # kept 8 s b h (norm, QKV and MLP inputs) / t with sequence parallelism; sharded
    # Q and attention output 4 s b h, K and V 4 s b h_kv, the MLP 6 s b f; FlashAttention's
    # log-sum-exp 4 a s b.
    arch = {"model.mlp": "swiglu", "model.ffn": 5632, "model.kv_heads": 4,
            "model.flash_attention": True, "model.dropout": False, "placement.tp": 4,
            "schedule.recompute": "none"}
    got, cfg = _activations(arch)
    s, h, a, f = 2048, 2048, 16, 5632
    h_kv = 4 * h / a
    want = (8 * s * h + 4 * s * h + 4 * s * h_kv + 6 * s * f + 4 * a * s) / 4
    assert got == pytest.approx(want, rel=1e-9)


def test_zero_stages_match_the_zero_papers_figure():
    # Rajbhandari et al. (SC'20), Figure 1: a 7.5B model on 64 GPUs with mixed-precision
    # Adam: 120 GB per GPU replicated, 31.4 with P_os, 16.6 with P_os+g, 1.9 with
    # P_os+g+p (model states; ZeRO-3's two gathered layers aside).
    psi = 7.5e9
    for stage, want in ((0, 120.0), (1, 31.4), (2, 16.6), (3, 1.875)):
        cols = {"schedule.grad_bytes": 2, "schedule.optimizer": stage, "placement.tp": 1}
        got = state_bytes(cols, psi, 64, 0.0) / 1e9
        assert got == pytest.approx(want, abs=0.06), stage


def test_one_model_for_one_point_and_for_many():
    """The same formulas for a batch of configurations as arrays and each on its own."""
    rng = random.Random(11)
    cal = calibration()
    configs = [random_config(rng) for _ in range(300)]
    out = step(config_columns(configs), calibration_arrays(cal))
    reasons = np.broadcast_to(out["reason"], (len(configs),))
    feasible = 0
    for i, cfg in enumerate(configs):
        ref = evaluate(cfg, cal)
        assert REASONS[int(reasons[i])] == ref.reason, (i, cfg)
        if not ref.feasible:
            continue
        feasible += 1
        for k in BREAKDOWN_FIELDS:
            got = float(np.broadcast_to(out[k], (len(configs),))[i])
            # no interruption ever: no checkpoint ever (an infinite interval)
            assert math.isfinite(got) or k == "checkpoint_s", (k, i)
            assert got == pytest.approx(getattr(ref, k), rel=1e-9, abs=1e-12), (k, i, cfg)
    assert feasible > 40
    assert {REASONS[int(r)] for r in reasons} >= {"", "divisibility", "memory"}


def test_broadcast_columns_compute_each_term_over_its_own_axes():
    """Axes on dimensions of their own (a 2 x 3 grid of recomputation x transport) give
    the grid of single evaluations."""
    cal = calibration()
    base = build_config(BASE | {"cluster.gpus_per_dc": 64, "model.global_batch_seqs": 64})
    cols = config_columns([base], scalar=True)
    cols["schedule.recompute"] = np.array([[0.0], [2.0]])
    cols["network.transport"] = np.array([[0.0, 1.0, 3.0]])
    out = step(cols, calibration_arrays(cal))
    assert np.shape(out["time_to_train_s"]) == (2, 3)
    assert np.shape(out["compute_s"]) == (2, 1)  # compute does not see the transport
    for i, rec in enumerate(("none", "full")):
        for j, tr in enumerate(("mrc", "rc", "tcp")):
            ref = evaluate(base.replace({"schedule.recompute": rec,
                                         "network.transport": tr}), cal)
            assert out["time_to_train_s"][i, j] == pytest.approx(ref.time_to_train_s,
                                                                 rel=1e-12)


def _feasible_pairs(rng, change, n=200):
    cal = calibration()
    pairs = []
    while len(pairs) < n:
        cfg = random_config(rng)
        a = evaluate(cfg, cal)
        if not a.feasible:
            continue
        b = evaluate(cfg.replace(change(cfg)), cal)
        pairs.append((a, b))
    return pairs


def test_more_dci_capacity_is_never_slower():
    rng = random.Random(3)
    for a, b in _feasible_pairs(rng, lambda c: {"dci.pair_tbps": 4 * (
            c.dci.pair_tbps or 1000.0)}):
        assert b.feasible and b.time_to_train_s <= a.time_to_train_s * (1 + 1e-12)


def test_more_rtt_or_failures_is_never_faster():
    rng = random.Random(4)
    # Microbursts are calibrated by their length in RTTs: a longer RTT at the same burst
    # geometry (burst_us scaled with it) must not be faster.
    for a, b in _feasible_pairs(rng, lambda c: {"fabric.rtt_us": c.fabric.rtt_us * 4,
                                                "fabric.burst_us": c.fabric.burst_us * 4,
                                                "dci.delay_ms": c.dci.delay_ms * 2}):
        assert not b.feasible or b.time_to_train_s >= a.time_to_train_s * (1 - 1e-12)
    for a, b in _feasible_pairs(rng, lambda c: {"fabric.link_fail_per_hour": 1e-3,
                                                "fabric.switch_fail_per_hour": 1e-3}):
        assert not b.feasible or b.time_to_train_s >= a.time_to_train_s * (1 - 1e-12)
    for a, b in _feasible_pairs(rng, lambda c: {
            "cluster.interrupt_per_gpu_hour": 2 * c.cluster.interrupt_per_gpu_hour + 1e-6,
            "cluster.restart_minutes": c.cluster.restart_minutes + 5}):
        assert not b.feasible or b.time_to_train_s >= a.time_to_train_s * (1 - 1e-12)


def test_mrc_rides_out_link_failures_rc_restarts():
    # A lost NIC port costs MRC a recovery and 1/(planes-1) more communication until
    # repair; it interrupts RC (its queue pair is bound to the dead plane).
    base = BASE | {"cluster.gpus_per_dc": 4096, "model.global_batch_seqs": 4096,
                   "fabric.link_fail_per_hour": 1e-4, "fabric.switch_fail_per_hour": 0.0,
                   "cluster.interrupt_per_gpu_hour": 0.0}
    mrc = evaluate(build_config(base), calibration())
    for rc in ("rc", "rc_lossy"):
        other = evaluate(build_config(base | {"network.transport": rc}), calibration())
        assert 0 < mrc.failure_fraction < other.failure_fraction


def test_checkpoint_interval_is_young_daly_per_configuration():
    # delta = params x 14 B / store bandwidth; M = 1 / (rate x GPUs); tau ~ sqrt(2 delta M)
    # (Daly's higher-order terms are small when delta << M); a fixed interval is kept.
    base = BASE | {"cluster.gpus_per_dc": 4096, "model.global_batch_seqs": 4096,
                   "fabric.link_fail_per_hour": 0.0, "fabric.switch_fail_per_hour": 0.0,
                   "cluster.interrupt_per_gpu_hour": 1e-5, "cluster.checkpoint_gbyte_s": 1.0}
    cfg = build_config(base)
    b = evaluate(cfg, calibration())
    m = cfg.model
    params = m.layers * (12 * m.hidden**2 + 4 * m.hidden) + 2 * m.vocab * m.hidden
    delta = params * 14 / 1e9
    mtbi = 3600 / (1e-5 * 4096)
    assert b.checkpoint_s == pytest.approx(math.sqrt(2 * delta * mtbi), rel=0.05)
    # the optimum: a fixed interval either side of it loses more
    for k in (0.3, 3.0):
        other = evaluate(cfg.replace({"cluster.checkpoint_minutes": b.checkpoint_s * k / 60}),
                         calibration())
        assert other.checkpoint_s == pytest.approx(b.checkpoint_s * k)
        assert other.failure_fraction > b.failure_fraction


@pytest.mark.parametrize(("conv", "rto", "doubling", "want"), [
    (0.4, 0.2, True, 0.6),      # TCP: 0.2 s goes before the routes move, 0.6 s gets through
    (0.1, 0.2, True, 0.2),      # the routes moved before the first RTO
    (0.2, 0.2, True, 0.2),      # a retry exactly at convergence gets through
    (1.5, 0.2, True, 3.0),      # 0.2, 0.6, 1.4, 3.0
    (0.4, 1.074, False, 1.074),  # a RoCE QP: one local ACK timeout
    (2.5, 1.0, False, 3.0),     # every timeout: 1, 2, 3 s
    (0.0, 0.3, False, 0.3),     # never sooner than the first timeout
    (0.4, 0.0, True, 0.4),      # no timer: the convergence
])
def test_first_retry_is_the_first_timeout_at_or_after_convergence(conv, rto, doubling, want):
    from explorer.failures import first_retry

    assert first_retry(conv, rto, doubling) == pytest.approx(want)
    got = first_retry(np.array([conv, conv]), np.array([rto, rto]), np.array([doubling, True]))
    assert got[0] == pytest.approx(want)
    assert got[1] == pytest.approx(first_retry(conv, rto, True))


def test_tcp_stalls_to_its_doubled_rto_past_convergence():
    # The control plane takes 0.19 s: TCP's first retry at 0.2 s gets through. At 0.21 s
    # it is lost and the next, at 0.6 s, gets through: the stalls triple (they were
    # 0.2 and 0.21 s under max(convergence, RTO)).
    base = BASE | {"cluster.gpus_per_dc": 4096, "model.global_batch_seqs": 4096,
                   "fabric.link_fail_per_hour": 1e-3, "fabric.switch_fail_per_hour": 0.0,
                   "cluster.interrupt_per_gpu_hour": 0.0, "network.transport": "tcp",
                   "fabric.repair_hours": 1e-6, "network.bfd_interval_ms": 50.0,
                   "network.bgp_update_ms": 20.0}
    fast = evaluate(build_config(base | {"network.fib_update_ms": 20.0}), calibration())
    slow = evaluate(build_config(base | {"network.fib_update_ms": 40.0}), calibration())
    assert slow.failure_fraction / fast.failure_fraction == pytest.approx(3.0, rel=0.05)
