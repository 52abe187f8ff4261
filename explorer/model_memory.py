"""HBM a configuration needs on its busiest GPU, on columns.

**Model states** (ZeRO, Rajbhandari et al. SC'20, with mixed-precision Adam: 2-byte
weights, ``grad_bytes`` gradients, 12 bytes of fp32 master weights and moments per
parameter), over the N ranks that shard them (data parallel x CP; inside a DC when the
reduction is hierarchical, like HSDP): replicated (DDP) 2 + g + 12 bytes per parameter;
zero1 2 + g + 12 / N; zero2 2 + (g + 12) / N; zero3 (2 + g + 12) / N plus the two layers
it gathers at a time.

**Activations** per layer and microbatch, after Korthikanti et al. 2022 (Table 2) with
the architecture's own tensors instead of GPT's constants (bytes, bf16; s the sequence
on a CP rank, b the microbatch, h, f the MLP size, h_kv the key/value width):

* kept whole, or sharded over TP with sequence parallelism: two norm inputs 4 s b h, the
  QKV and MLP inputs 2 s b h each, and with dropout two 1-byte masks (2 s b h);
* sharded over TP: Q and the output projection's input 2 s b h each, K and V 2 s b h_kv
  each, the MLP's intermediates (GeLU: 4 s b f; SwiGLU: gate and up 4 s b f, their
  product 2 s b f);
* the attention scores, sharded over TP: without FlashAttention (2 + 3 x dropout) a s^2 b
  (softmax output, with dropout its mask and output), none with selective recomputation;
  FlashAttention keeps only its fp32 log-sum-exp (4 a s b);
* full recomputation keeps the layer's input only, 2 s b h (/ TP with sequence
  parallelism).

GPT (GeLU, f = 4h, h_kv = h, dropout, no FlashAttention) gives Korthikanti's
s b h (34 + 5 a s / h) without parallelism and 34 s b h / t with sequence parallelism and
selective recomputation. Per pipeline stage, times the microbatches in flight there
(explorer/pipeline.py's ``inflight_np``, checked against the simulator's peak of every
stage): the first stage holds the most in flight, the last the output layer's fp32 logits
(4 s b V / t); where the layers do not fill every stage (Llama 3 405B's 126 on 16 x 8),
the first and the last stage hold one layer less, as Llama 3 did to balance memory. The
busiest stage's activations, plus the model states of the busiest stage, plus
``gpu.memory_reserve_gib``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.pipeline import inflight_np

__all__ = ["activation_bytes", "memory", "state_bytes"]


def activation_bytes(c: dict[str, Any], d: dict[str, Any]) -> Any:
    """Activation bytes one layer keeps per microbatch on one GPU (module docstring)."""
    t, cp = c["placement.tp"], c["placement.cp"]
    a, h = c["model.heads"], c["model.hidden"]
    s_loc = c["model.seq"] / cp
    b = c["placement.microbatch"]
    sbh = s_loc * b * h
    drop = c["model.dropout"]
    sp = np.where(c["schedule.sequence_parallel"] == 1, t, 1.0)
    h_kv = d["kv"] * h / a
    mlp = np.where(c["model.mlp"] == 1, 6.0, 4.0) * s_loc * b * d["ffn"]
    a_sp = sbh * (8.0 + 2.0 * drop)
    a_tp = 4.0 * sbh + 4.0 * s_loc * b * h_kv + mlp
    flash = c["model.flash_attention"] == 1
    rec = c["schedule.recompute"]
    lse = 4.0 * a * s_loc * b
    scores = np.where(flash, lse, np.where(rec == 0, (2.0 + 3.0 * drop) * a * s_loc
                                           * c["model.seq"] * b, 0.0))
    kept = a_sp / sp + (a_tp + scores) / t
    return np.where(rec == 2, 2.0 * sbh / sp, kept)


def state_bytes(c: dict[str, Any], p_gpu: Any, shard: Any, layer_params: Any) -> Any:
    """Bytes of weights, gradients and optimizer state of ``p_gpu`` parameters sharded
    over ``shard`` ranks, per ZeRO stage (module docstring)."""
    g = c["schedule.grad_bytes"]
    opt = c["schedule.optimizer"]
    return np.where(opt == 0, p_gpu * (2 + g + 12), np.where(
        opt == 1, p_gpu * (2 + g) + p_gpu * 12 / shard, np.where(
            opt == 2, p_gpu * 2 + p_gpu * (g + 12) / shard,
            p_gpu * (2 + g + 12) / shard + 2 * layer_params / c["placement.tp"] * 2)))


def memory(c: dict[str, Any], d: dict[str, Any], layers: Any, p_gpu: Any, shard: Any
           ) -> dict[str, Any]:
    """GiB on the busiest GPU (``memory_gib``), of which model states (``states_gib``),
    and the microbatches in flight at stage 0 (``in_flight``). ``layers``: a full
    stage's."""
    p = c["placement.pp"]
    sched, e = c["schedule.pipeline"], c["schedule.warmup_extra"]
    mb, v, g = d["mb"], d["v"], d["g"]

    def flight(stage: Any) -> Any:
        return inflight_np(sched, p, mb, v, e, g, invalid="nan", stage=stage)

    multi = p > 1
    states = state_bytes(c, p_gpu, shard, d["layer"])
    tokens = c["placement.microbatch"] * c["model.seq"]
    logits = 4.0 * tokens * c["model.vocab"] / (c["placement.tp"] * c["placement.cp"])
    deficit = p * layers - c["model.layers"]
    first = layers - np.where(deficit >= 2, 1.0, 0.0)
    last = layers - np.where(deficit >= 1, 1.0, 0.0)
    in0 = np.where(multi, flight(0), 1.0)
    per_layer = activation_bytes(c, d)
    busiest = np.where(multi, np.maximum.reduce([
        first * in0, np.where(p > 2, layers * flight(1), 0.0)]) * per_layer,
        layers * per_layer + logits)
    final = np.where(multi, last * flight(p - 1) * per_layer + logits, 0.0)
    act = np.maximum(busiest, final)
    total = states + act + c["gpu.memory_reserve_gib"] * 2**30
    return dict(memory_gib=total / 2**30, states_gib=states / 2**30, in_flight=in0)
