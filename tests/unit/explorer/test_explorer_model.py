"""The cost model: hand values of its closed forms, the vectorised twin against the scalar
reference on random points, and monotonicity."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from explorer_fixtures import calibration, random_config

from explorer.calarrays import CalArrays
from explorer.calibration import load_calibration
from explorer.columns import config_columns
from explorer.model import evaluate
from explorer.netcost import allreduce, hierarchical_allreduce, ring_pass
from explorer.specfile import build_config
from explorer.vecmodel import BREAKDOWN_FIELDS, REASONS
from explorer.vecmodel import evaluate as vec_evaluate


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


def test_activation_memory_korthikanti():
    # One layer, microbatch 1, no pipeline: activations = s b h (34 + 5 a s / h) bytes
    # without parallelism, recomputation or FlashAttention; s b h x 34 / t with TP t,
    # sequence parallelism and selective recomputation; 2 s b h with full recomputation.
    base = BASE | {"model.layers": 1, "model.flash_attention": False,
                   "schedule.optimizer": "replicated", "schedule.grad_bytes": 4,
                   "gpu.memory_reserve_gib": 0.0, "gpu.hbm_gib": 1e6, "cluster.gpus_per_dc": 8,
                   "model.global_batch_seqs": 8}

    def act(extra: dict) -> float:
        cfg = build_config(base | extra)
        b = evaluate(cfg, calibration())
        m, t = cfg.model, cfg.placement.tp
        p_gpu = (m.layers * (12 * m.hidden**2 + 4 * m.hidden) + 2 * m.vocab * m.hidden) / t
        logits = 4.0 * m.seq * m.vocab / t
        return b.memory_gib * 2**30 - p_gpu * 18 - logits

    s, h, a = 2048, 2048, 16
    sbh = s * h
    assert act({"schedule.recompute": "none", "schedule.sequence_parallel": False}) == \
        pytest.approx(sbh * (34 + 5 * a * s / h), rel=1e-9)
    assert act({"schedule.recompute": "selective", "placement.tp": 8}) == \
        pytest.approx(sbh * 34 / 8, rel=1e-9)
    assert act({"schedule.recompute": "full", "schedule.sequence_parallel": False}) == \
        pytest.approx(2 * sbh, rel=1e-9)


def test_optimizer_state_bytes_per_parameter():
    # Replicated: 2 (weights) + 4 (fp32 grads) + 12 (fp32 master + Adam) = 18 bytes; the
    # distributed optimizer shards the 12 over the 8 data-parallel ranks: 6 + 12 / 8.
    base = BASE | {"schedule.grad_bytes": 4, "gpu.memory_reserve_gib": 0.0,
                   "gpu.hbm_gib": 1e6, "schedule.recompute": "full"}
    rep = evaluate(build_config(base | {"schedule.optimizer": "replicated"}), calibration())
    dist = evaluate(build_config(base | {"schedule.optimizer": "distributed"}), calibration())
    m = build_config(base).model
    params = m.layers * (12 * m.hidden**2 + 4 * m.hidden) + 2 * m.vocab * m.hidden
    diff = (rep.memory_gib - dist.memory_gib) * 2**30
    assert diff == pytest.approx(params * (12 - 12 / 8), rel=1e-9)


def _vector(configs, cal, band="mid"):
    out = vec_evaluate(config_columns(configs), CalArrays.build(cal, band))
    n = len(configs)
    return {k: np.broadcast_to(v, (n,)) for k, v in out.items()}


@pytest.mark.parametrize("shipped", [False, True])
@pytest.mark.parametrize("band", ["mid", "opt", "pess"])
def test_vectorised_twin_agrees_with_scalar_reference(band, shipped):
    rng = random.Random(7 + len(band) + shipped)
    cal = load_calibration() if shipped else calibration()
    configs = [random_config(rng) for _ in range(600)]
    vec = _vector(configs, cal, band)
    feasible = 0
    for i, cfg in enumerate(configs):
        ref = evaluate(cfg, cal, band)
        assert REASONS[int(vec["reason"][i])] == ref.reason, (i, cfg)
        if not ref.feasible:
            continue
        feasible += 1
        for k in BREAKDOWN_FIELDS:
            want, got = getattr(ref, k), float(vec[k][i])
            assert math.isfinite(got), (k, i)
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12), (k, i, cfg)
    assert feasible > 60  # the comparison covered many feasible points of every kind
    assert {REASONS[int(r)] for r in vec["reason"]} >= {"", "divisibility", "memory"}


def _feasible_pairs(rng, change, n=300):
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


def test_more_dci_bandwidth_is_never_slower():
    rng = random.Random(3)
    for a, b in _feasible_pairs(rng, lambda c: {"dci.oversubscription":
                                                max(1.0, c.dci.oversubscription / 4)}):
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


def test_mrc_rides_out_link_failures_rc_restarts():
    # A lost NIC port costs MRC a recovery and 1/(planes-1) more communication until
    # repair; it interrupts RC (its queue pair is bound to the dead plane).
    base = BASE | {"cluster.gpus_per_dc": 4096, "model.global_batch_seqs": 4096,
                   "fabric.link_fail_per_hour": 1e-4, "fabric.switch_fail_per_hour": 0.0,
                   "fabric.host_fail_per_hour": 0.0}
    mrc = evaluate(build_config(base), calibration())
    rc = evaluate(build_config(base | {"network.transport": "rc"}), calibration())
    assert 0 < mrc.failure_fraction < rc.failure_fraction
