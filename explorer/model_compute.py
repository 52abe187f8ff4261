"""Compute, tensor and context parallelism of one microbatch on one pipeline stage (the
busiest), on columns. Formulas: explorer/model.py's docstring."""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.model_terms import (
    EW_LOGIT_BYTES,
    EW_SCORE_BYTES,
    EW_TOKEN_BYTES,
    EW_TOKEN_BYTES_MLP,
    NVLINK_LATENCY_S,
)

__all__ = ["compute", "tp_cp"]


def compute(c: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """Seconds of one microbatch's forward (``fwd``) and backward (``bwd``, with its
    recomputation) on the busiest stage, and the sizes the other terms share."""
    t, cp, p, b = c["placement.tp"], c["placement.cp"], c["placement.pp"], c["placement.microbatch"]
    s, h, a, vocab = c["model.seq"], c["model.hidden"], c["model.heads"], c["model.vocab"]
    tcp = t * cp
    # Layers of the busiest stage: uneven splits put the remainder on some stages (as
    # Megatron-LM's uneven first/last stages do), and the pipeline runs at the busiest.
    layers = np.ceil(c["model.layers"] / (p * d["v"])) * d["v"]
    tokens = b * s
    peak = c["gpu.peak_tflops"] * 1e12 * c["gpu.gemm_efficiency"]
    hbm = c["gpu.hbm_tbps"] * 1e12
    gemm_layer = 2 * tokens * d["matmul"] / tcp
    attn_layer = 4 * tokens * s * h / tcp
    logits = 2 * tokens * h * vocab / tcp
    sp_div = np.where(c["schedule.sequence_parallel"] == 1, t, 1.0)
    ew_layer = tokens * h * (EW_TOKEN_BYTES_MLP / t
                             + (EW_TOKEN_BYTES - EW_TOKEN_BYTES_MLP) / sp_div) / cp
    score_layer = np.where(c["model.flash_attention"] == 1, 0.0,
                           EW_SCORE_BYTES * a * b * s * s / tcp)
    ew_logits = EW_LOGIT_BYTES * tokens * vocab / tcp
    fwd = (layers * (gemm_layer + attn_layer) + logits) / peak \
        + (layers * (ew_layer + score_layer) + ew_logits) / hbm
    rec = c["schedule.recompute"]
    recompute = np.where(rec == 0, 0.0, np.where(
        rec == 1, layers * (attn_layer / peak + score_layer / hbm),
        layers * ((gemm_layer + attn_layer) / peak + (ew_layer + score_layer) / hbm)))
    return dict(fwd=fwd, bwd=2 * fwd + recompute, layers=layers, tokens=tokens,
                attn_t=attn_layer / peak, peak=peak, hbm=hbm,
                act=tokens * h * 2 / cp)  # bytes of a microbatch's activations on a CP rank


def tp_cp(c: dict[str, Any], d: dict[str, Any], k: dict[str, Any], bw_nic: Any,
          overhead: Any) -> dict[str, Any]:
    """TP (4 collectives of the activations per layer, 2 more in a fully recomputed
    backward, over NVLink) and CP (ring attention, overlapped with the attention compute,
    over NVLink when TP x CP fits the domain, else the scale-out NIC) per microbatch."""
    t, cp = c["placement.tp"], c["placement.cp"]
    tcp = t * cp
    layers, act = k["layers"], k["act"]
    nvl = c["gpu.nvlink_gbyte_s"] * 1e9 * c["gpu.nvlink_efficiency"]
    one = 2 * (t - 1) / t * act / nvl + 2 * (t - 1) * NVLINK_LATENCY_S
    full = c["schedule.recompute"] == 2
    tp_f = np.where(t > 1, layers * 2 * one, 0.0)
    tp_b = np.where(t > 1, layers * (2 + np.where(full, 2.0, 0.0)) * one, 0.0)
    in_dom = tcp <= c["gpu.nvlink_domain"]
    kv_bytes = 2 * k["tokens"] * (d["kv"] * c["model.hidden"] / c["model.heads"]) * 2 / tcp
    cp_round = kv_bytes / np.where(in_dom, nvl, bw_nic) + np.where(in_dom, NVLINK_LATENCY_S,
                                                                    overhead)
    cp_comm = (cp - 1) * cp_round
    cp_f = np.where(cp > 1, layers * np.maximum(0.0, cp_comm - k["attn_t"]), 0.0)
    cp_b = np.where(cp > 1, layers * np.maximum(0.0, 2 * cp_comm - 2 * k["attn_t"]), 0.0)
    return dict(tp_f=tp_f, tp_b=tp_b, cp_f=cp_f, cp_b=cp_b, cp_round=cp_round,
                cp_net=(cp > 1) & ~in_dom)
