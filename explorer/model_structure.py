"""A configuration's derived sizes and whether its structure can run, before any timing
(explorer/model.py times the configurations that can)."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.spec import Config


@dataclass(frozen=True)
class Derived:
    """Sizes derived from a configuration (before any timing)."""

    gpus: int  # all DCs used
    dcs: int
    replica: int  # TP x CP x PP
    dp: int  # data-parallel degree
    microbatches: int
    dcs_per_pipeline: int  # g
    dp_dcs: int  # k: DCs one data-parallel group spans
    v: int  # model chunks per stage in use
    params: float
    layer_params: float
    layer_matmul_params: float



def derive(cfg: Config) -> Derived:
    """Derived sizes; raises nothing (structure_reason says what is wrong)."""
    m, pl = cfg.model, cfg.placement
    h, a, kv = m.hidden, m.heads, m.kv
    attn = 2 * h * h + 2 * h * (kv * h // a)
    mlp = (3 if m.mlp == "swiglu" else 2) * h * m.ffn_dim
    layer = attn + mlp + 4 * h  # + two layer norms' weights and biases
    params = m.layers * layer + m.vocab * h * (1 if m.tied_embeddings else 2)
    gpus = sum(cfg.cluster.gpus)
    dcs = cfg.cluster.dcs
    replica = pl.tp * pl.cp * pl.pp
    dp = gpus // replica
    g = 1 if dcs == 1 else {"dp": 1, "pp": dcs, "pp_dp": pl.dc_group}[pl.cross]
    k = dcs // g if g <= dcs else 1
    mb = m.batch_seqs // (dp * pl.microbatch) if dp * pl.microbatch else 0
    interleaved = cfg.schedule.pipeline == "interleaved" and pl.pp > 1
    v = cfg.schedule.virtual_stages if interleaved else 1
    return Derived(gpus, dcs, replica, dp, mb, g, k, v, float(params), float(layer),
                   float(attn + mlp))


def structure_reason(cfg: Config, d: Derived) -> str:
    """Why a configuration cannot run ("" if it can), before timing: divisibility, TP
    outside the NVLink domain, a group split across DCs."""
    m, pl, gpu = cfg.model, cfg.placement, cfg.gpu
    t, c, p = pl.tp, pl.cp, pl.pp
    if t > gpu.nvlink_domain or gpu.nvlink_domain % t:
        return "nvlink"
    kv_ok = m.kv % t == 0 if t <= m.kv else t % m.kv == 0
    if (m.heads % t or not kv_ok or m.ffn_dim % t or m.layers < p * d.v or m.seq % c
            or d.gpus % d.replica or d.microbatches < 1
            or m.batch_seqs % (d.dp * pl.microbatch)):
        return "divisibility"
    if cfg.schedule.pipeline == "interleaved" and p > 1 and (d.microbatches % p or d.v < 2):
        return "divisibility"
    sizes = cfg.cluster.gpus
    if d.dcs_per_pipeline == 1:
        if any(n % d.replica for n in sizes):
            return "dc_split"
    else:
        g = d.dcs_per_pipeline
        if (len(set(sizes)) > 1 or p % g or d.dcs % g or d.dp % (d.dcs // g)
                or (pl.cross == "pp_dp" and g >= d.dcs)):
            return "dc_split"
    return ""
