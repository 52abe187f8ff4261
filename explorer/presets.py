"""Named models and GPUs, so an explore file can say ``preset = "llama3-405b"``.

A preset fills the keys of its section that the file leaves out; keys the file gives
win. Architectures are the published ones (layers, hidden, heads, key/value heads, MLP,
vocabulary, sequence length); batch and token counts are the published training runs'
where known. GPU figures are vendor datasheet values (dense bf16 peak, HBM, NVLink per
GPU and direction, board power). ``nvlink_efficiency`` is NCCL's all-reduce bus
bandwidth on large messages over the NVLink rate as nccl-tests reports it on DGX
systems (about 230 of 300 GB/s on A100, 360 of 450 GB/s on H100; B200 assumed like
H100): a published figure, not fitted here. ``gemm_efficiency`` is the model's one fitted parameter
per GPU type: for the A100 it is fitted on one row of the Megatron-LM table
(explorer/data/published, see ``emu explore --validate``); no public table for the H100
or B200 is in the fixtures, so they carry the same value, which is an assumption.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GPUS", "MODELS", "preset"]

# Fitted on the 145.6B row of Narayanan et al. SC'21 Table 1 (emu explore --validate
# explorer/data/published/megatron_sc21.toml prints the fit; tests check this value is it).
A100_GEMM_EFFICIENCY = 0.68

MODELS: dict[str, dict[str, Any]] = {
    "gpt3-175b": dict(layers=96, hidden=12288, heads=96, mlp="gelu", vocab=51200, seq=2048,
                      global_batch_seqs=1536, train_tokens=300e9),
    "mt-nlg-530b": dict(layers=105, hidden=20480, heads=128, mlp="gelu", vocab=51200,
                        seq=2048, global_batch_seqs=1920, train_tokens=270e9),
    "megatron-1t": dict(layers=128, hidden=25600, heads=160, mlp="gelu", vocab=51200,
                        seq=2048, global_batch_seqs=3072, train_tokens=450e9),
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, mlp="swiglu",
                      vocab=128256, seq=8192, global_batch_tokens=4 * 2**20,
                      train_tokens=15e12),
    "llama3-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, mlp="swiglu",
                       vocab=128256, seq=8192, global_batch_tokens=8 * 2**20,
                       train_tokens=15e12),
    "llama3-405b": dict(layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248,
                        mlp="swiglu", vocab=128256, seq=8192,
                        global_batch_tokens=16 * 2**20, train_tokens=15.6e12),
}

GPUS: dict[str, dict[str, Any]] = {
    "a100-80gb": dict(peak_tflops=312.0, hbm_gib=80.0, hbm_tbps=2.039, nvlink_domain=8,
                      nvlink_gbyte_s=300.0, nvlink_efficiency=0.77,
                      gemm_efficiency=A100_GEMM_EFFICIENCY, power_w=400.0,
                      idle_power_w=60.0),
    "h100-sxm": dict(peak_tflops=989.0, hbm_gib=80.0, hbm_tbps=3.35, nvlink_domain=8,
                     nvlink_gbyte_s=450.0, nvlink_efficiency=0.8,
                     gemm_efficiency=A100_GEMM_EFFICIENCY, power_w=700.0, idle_power_w=100.0),
    "b200": dict(peak_tflops=2250.0, hbm_gib=180.0, hbm_tbps=8.0, nvlink_domain=8,
                 nvlink_gbyte_s=900.0, nvlink_efficiency=0.8,
                 gemm_efficiency=A100_GEMM_EFFICIENCY, power_w=1000.0, idle_power_w=150.0),
    "gb200-nvl72": dict(peak_tflops=2500.0, hbm_gib=186.0, hbm_tbps=8.0, nvlink_domain=72,
                        nvlink_gbyte_s=900.0, nvlink_efficiency=0.8,
                        gemm_efficiency=A100_GEMM_EFFICIENCY, power_w=1200.0,
                        idle_power_w=150.0),
}

_TABLES = {"model": MODELS, "gpu": GPUS}


def preset(section: str, name: str) -> dict[str, Any]:
    """The values preset ``name`` gives section ``section`` ("model" or "gpu")."""
    table = _TABLES.get(section)
    if table is None:
        raise ValueError(f"[{section}] has no presets")
    if name not in table:
        raise ValueError(f"{section}.preset = {name!r} is unknown: valid presets are "
                         + ", ".join(repr(n) for n in table))
    return dict(table[name])
