"""A configuration's derived sizes and whether its structure can run, before any timing,
on columns (explorer/columns.py: one value or a numpy array of any broadcastable shape
per field)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["REASONS", "derive", "structure"]

REASONS = ("", "nvlink", "divisibility", "dc_split", "memory", "failures", "inapplicable")
_R = {name: i for i, name in enumerate(REASONS)}


def derive(c: dict[str, Any]) -> dict[str, Any]:
    """Sizes a configuration implies: key/value heads ``kv``, MLP size ``ffn``, parameters
    of a layer (``layer``, ``matmul`` without norms) and in all (``params``), sequences
    per step ``seqs``, GPUs in all / of the largest / of the smallest DC and their gcd,
    ``replica`` (TP x CP x PP), data-parallel degree ``dp``, DCs along a pipeline ``g``,
    DCs a data-parallel group spans ``k``, microbatches ``mb``, chunks per stage ``v``."""
    h, a = c["model.hidden"], c["model.heads"]
    kv = np.where(np.isnan(c["model.kv_heads"]), a, c["model.kv_heads"])
    ffn = np.where(np.isnan(c["model.ffn"]),
                   np.where(c["model.mlp"] == 0, 4 * h, np.ceil(8 * h / 768) * 256),
                   c["model.ffn"])
    attn = 2 * h * h + 2 * h * (kv * (h / a))
    mlp = np.where(c["model.mlp"] == 1, 3.0, 2.0) * h * ffn
    layer = attn + mlp + 4 * h  # + two layer norms' weights and biases
    params = c["model.layers"] * layer + c["model.vocab"] * h * np.where(
        c["model.tied_embeddings"] == 1, 1.0, 2.0)
    seqs = np.where(np.isnan(c["model.global_batch_seqs"]),
                    c["model.global_batch_tokens"] / c["model.seq"], c["model.global_batch_seqs"])
    sizes = [c[f"cluster.n{i}"] for i in range(c["cluster.max_dcs"])]
    gpus = sum(sizes)
    gpus_max = np.maximum.reduce([np.asarray(s, float) for s in sizes])
    gpus_min = np.minimum.reduce([np.where(np.asarray(s) > 0, s, np.inf) for s in sizes])
    gcd = np.gcd.reduce([np.asarray(s, np.int64) for s in sizes])
    dcs = c["cluster.dcs"]
    t, cp, p = c["placement.tp"], c["placement.cp"], c["placement.pp"]
    replica = t * cp * p
    dp = np.floor(gpus / replica)
    cross = c["placement.cross"]
    g = np.where(dcs == 1, 1.0, np.where(cross == 0, 1.0, np.where(cross == 1, dcs,
                                                                   c["placement.dc_group"])))
    k = np.where(g <= dcs, np.floor(dcs / g), 1.0)
    dpb = dp * c["placement.microbatch"]
    with np.errstate(divide="ignore", invalid="ignore"):
        mb = np.where(dpb > 0, np.floor(seqs / np.where(dpb > 0, dpb, 1.0)), 0.0)
    v = np.where((c["schedule.pipeline"] == 2) & (p > 1), c["schedule.virtual_stages"], 1.0)
    return dict(kv=kv, ffn=ffn, layer=layer, matmul=attn + mlp, params=params, seqs=seqs,
                gpus=gpus, gpus_max=gpus_max, gpus_min=gpus_min, gcd=gcd, dcs=dcs,
                replica=replica, dp=dp, g=g, k=k, mb=mb, v=v)


def structure(c: dict[str, Any], d: dict[str, Any]) -> Any:
    """Reason code (REASONS) of every point whose structure cannot run, 0 where it can:
    TP outside the NVLink domain, a degree that does not divide what it splits (every
    model chunk of the pipeline needs a layer, but the first and the last stage may hold
    one less, as Llama 3 405B's 126 layers on 16 stages did), a group split across DCs."""
    t, cp, p = c["placement.tp"], c["placement.cp"], c["placement.pp"]
    dom = c["gpu.nvlink_domain"]
    kv = d["kv"]
    nvlink = (t > dom) | (np.fmod(dom, t) != 0)
    kv_ok = np.where(t <= kv, np.fmod(kv, t) == 0, np.fmod(t, kv) == 0)
    dpb = d["dp"] * c["placement.microbatch"]
    div = ((np.fmod(c["model.heads"], t) != 0) | ~kv_ok | (np.fmod(d["ffn"], t) != 0)
           | (c["model.layers"] + np.where(p > 1, 2, 0) < p * d["v"])
           | (np.fmod(c["model.seq"], cp) != 0)
           | (np.fmod(d["gpus"], d["replica"]) != 0) | (d["mb"] < 1)
           | (np.fmod(d["seqs"], np.where(dpb > 0, dpb, 1.0)) != 0) | (dpb <= 0))
    inter = (c["schedule.pipeline"] == 2) & (p > 1) & (
        (np.fmod(d["mb"], p) != 0) | (d["v"] < 2))
    div = div | inter
    g, dcs = d["g"], d["dcs"]
    split1 = np.fmod(d["gcd"], d["replica"]) != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        groups = np.floor(dcs / g)
        splitg = ((d["gpus_max"] != d["gpus_min"]) | (np.fmod(p, g) != 0)
                  | (np.fmod(dcs, g) != 0) | (np.fmod(d["dp"], np.maximum(groups, 1)) != 0)
                  | ((c["placement.cross"] == 2) & (g >= dcs)))
    split = np.where(g == 1, split1, splitg)
    return np.where(nvlink, _R["nvlink"], np.where(div, _R["divisibility"],
                                                   np.where(split, _R["dc_split"], 0)))
