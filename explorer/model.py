"""The cost model, written for reading: one configuration in, the step broken down out.

``evaluate(config, calibration)`` returns a ``Breakdown`` (explorer/model_breakdown.py);
the sizes a configuration implies and why one cannot run are in
explorer/model_structure.py, the constants and small per-term formulas in
explorer/model_terms.py (shared with the vectorised twin). The vectorised twin
(explorer/vecmodel.py) computes the same numbers for millions of configurations at once
and must agree with this one to 1e-9 (tests/unit/explorer/test_explorer_model.py checks it on
random points); change both together.

Expected step time = compute + TP/CP communication + pipeline bubble + pipeline
(point-to-point) communication + exposed data-parallel communication + optimizer step
+ tail inflation + expected failure cost; time to train = steps x expected step.

**Compute** (per microbatch and stage, on one GPU of a TP x CP group): GEMM FLOPs
2 x (matmul parameters of the stage's layers) per token plus attention 4 s h per token
and layer (scores and their product with V, counted in full as Megatron-LM does), plus
the output layer's 2 h V on the last stage, divided by TP x CP, at peak x
``gemm_efficiency``; plus element-wise (memory-bound) traffic at HBM bandwidth:
``EW_TOKEN_BYTES`` x s b h per layer (layer norms, residuals, dropouts, activation
function; sharded over TP only with sequence parallelism outside the MLP) and, without
FlashAttention, ``EW_SCORE_BYTES`` x a s^2 b (softmax, mask, dropout over the score
matrix). Backward = 2 x forward. Recomputation adds the attention core (selective) or a
whole forward (full).

**TP** (inside the NVLink domain, exposed): 4 collectives of the microbatch's activations
(b s h x 2 bytes / CP) per layer (2 forward, 2 backward; 2 more in the backward with full
recomputation), each 2 (t-1)/t of it at NVLink rate x ``nvlink_efficiency``.
**CP**: ring attention passes keys and values around the CP group, overlapped with the
attention compute; only the excess is exposed. Over NVLink when TP x CP fits in the
domain, else over the scale-out NIC.

**Pipeline**: stages of ceil(layers / (PP x v)) x v layers (uneven splits run at the
busiest stage); explorer/pipeline.py's closed forms (checked against the max-plus
simulator in explorer/pipesim.py) with per-boundary latency and serialisation of the
activations (b s h x 2 / (TP x CP) bytes per GPU); boundaries inside a DC at NIC rate,
boundaries across DCs at the DCI share of the GPUs sending across it, plus the DCI
delay, plus expected loss recovery on a lossy DCI.

**Data parallelism** over the DP x CP ranks holding the same parameters: replicated
(all-reduce of gradients), distributed optimizer (reduce-scatter of gradients +
all-gather of bf16 parameters; sharded over the DP group, or inside each DC when the
reduction is hierarchical, like HSDP), FSDP (per microbatch: all-gather of parameters
forward and backward, reduce-scatter of gradients). A flat ring across DCs pays every
DCI hop's latency and the DCI share of one ring; hierarchical = intra-DC reduce-scatter,
inter-DC all-reduce of each rank's share, intra-DC all-gather. With ``overlap``, the
gradient reduction hides behind the last microbatch's backward and the parameter
all-gather behind the next step's first forward (their computation only: communication
that also waits on the network, such as CP over the NIC, hides nothing).

**Tails**: a microburst inflates the round it hits (a ring step, a pipeline transfer, a
ring-attention pass) by the calibrated P99 / P50; a round of t seconds over the NIC ports
it spans meets one with probability 1 - exp(-burst_hz x ports x t), so each term grows by
1 + P (inflation - 1), the data-parallel collectives whole with their overlap applied
again.

**Network technology** enters through the calibration: bandwidth efficiency eta (intra-DC
and over the DCI), per-message overhead in RTTs, load-balance efficiency at the flows per
uplink (ECMP collisions), tail inflation under microbursts (at the burst's length in RTTs
and its excess over the buffer), recovery from a failure in RTTs (MRC) or RTOs (RC, TCP).

**Failures**: rate x components in use x time lost, as a fraction phi of training time
(``failure_s`` = step x phi / (1 - phi)); components counted on a two-tier Clos per plane
and DC of ``switch_radix`` ports. Time lost per failure: MRC, its calibrated recovery in
RTTs x the full-scale RTT; RC and TCP, the later of control-plane convergence (BFD
detection + BGP withdrawal + FIB update, from the full-scale settings) and the
transport's full-scale RTO, plus the calibrated residue in RTTs; a lost NIC port or leaf
costs MRC and TCP a plane of that host's bandwidth until repair and interrupts RC (its
queue pairs are bound to the dead plane: restart from checkpoint); a host failure
interrupts every job.
See explorer/failures.py.

**Memory**: weights, gradients and optimizer states per sharding (2 + g + 12 bytes per
parameter with fp32 master weights and Adam moments), activations per layer and
microbatch after Korthikanti et al. 2022 times the microbatches in flight at stage 0,
plus the output logits, plus ``memory_reserve_gib``; must fit in HBM.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from explorer.calibration import Calibration, dblp_steps_ratio
from explorer.failures import failure_fraction
from explorer.model_breakdown import Breakdown
from explorer.model_structure import derive, structure_reason
from explorer.model_terms import (
    EW_LOGIT_BYTES,
    EW_SCORE_BYTES,
    EW_TOKEN_BYTES,
    EW_TOKEN_BYTES_MLP,
    LOSS_RECOVERY_RTTS,
    NVLINK_LATENCY_S,
    OPT_BYTES_PER_PARAM,
    PACKET_BYTES,
    activation_bytes,
    burst_hit,
    flows_per_uplink,
    message_overhead,
    tail_factor,
)
from explorer.netcost import allreduce, ring_pass
from explorer.pipeline import inflight, pipeline_time
from explorer.regime import extrapolation
from explorer.spec import Config

__all__ = ["PipelineTime", "evaluate"]

# (schedule, p, m, v, warmup_extra, t_f, t_b, c_lat, c_ser, x_lat, x_ser, g) -> seconds
PipelineTime = Callable[..., float]


def evaluate(cfg: Config, cal: Calibration, band: str = "mid",
             pipeline: PipelineTime = pipeline_time) -> Breakdown:
    """Project one configuration. ``band``: "mid" (measured values), "opt" / "pess" (the
    favourable / unfavourable end of every calibrated interval). ``pipeline`` computes the
    pipeline part of a step (default: the closed forms; explorer/rescore.py passes the
    schedule simulator)."""
    d = derive(cfg)
    reason = structure_reason(cfg, d)
    if reason:
        return Breakdown(False, reason)
    m, gpu, fab, dci, pl, sch, net, cst = (cfg.model, cfg.gpu, cfg.fabric, cfg.dci,
                                           cfg.placement, cfg.schedule, cfg.network, cfg.cost)
    tc = cal.get(net.transport)
    t, c, p, b, s, h, a = pl.tp, pl.cp, pl.pp, pl.microbatch, m.seq, m.hidden, m.heads
    tcp = t * c
    mb, v, g, k = d.microbatches, d.v, d.dcs_per_pipeline, d.dp_dcs
    dcs, gpus = d.dcs, d.gpus
    gpus_small = min(cfg.cluster.gpus)  # the smallest DC binds a DCI share
    n = d.dp * c  # ranks holding the same parameters (data parallelism x CP)
    # With one such rank there is nothing to reduce: no DBLP, no optimizer sharding.
    dblp = sch.dblp_tolerance > 0 and net.transport == "mrc" and n > 1
    optimizer = sch.optimizer if n > 1 else "replicated"

    # -- network parameters at full scale ------------------------------------------------
    rtt = fab.rtt_us * 1e-6
    tcp_conn = net.transport == "tcp"
    # MRC sprays over every plane, RC opens a QP per plane; a TCP connection stays on one
    # plane's NIC, so it uses min(connections, planes) of them.
    lanes = min(net.qps_per_connection, fab.planes) / fab.planes if tcp_conn else 1.0
    overhead = message_overhead(tc, band, rtt, fab.nic_gbit / fab.planes)
    eta = tc.eta.pick(band, worse_is_high=False)
    eta_x = (tc.eta_dci or tc.eta).pick(band, worse_is_high=False)
    lb = tc.load_balance_at(flows_per_uplink(net.transport, net.qps_per_connection,
                                             fab.planes), band)
    nic_bps = fab.nic_gbit * 1e9 / 8  # bytes/s, all planes
    bw_nic = nic_bps * lanes * eta * lb
    # DCI capacity per GPU of the smallest DC, as collectives and ECMP see it.
    dci_gpu = (dci.gbit * 1e9 / 8 / gpus_small if dci.gbit is not None
               else nic_bps / dci.oversubscription) * eta_x * lb
    lat_x = dci.delay_ms * 1e-3  # what a DCI hop adds to a message
    rtt_x = 2 * dci.delay_ms * 1e-3 + rtt
    loss_k = LOSS_RECOVERY_RTTS[net.transport]

    def dci_loss_delay(size: float, tolerant: bool) -> float:
        # Expected recovery a message pays on a lossy DCI (DBLP rounds do not recover).
        if dci.loss <= 0 or tolerant:
            return 0.0
        packets = max(1.0, size / PACKET_BYTES)
        return (1.0 - (1.0 - dci.loss) ** packets) * loss_k * rtt_x

    # -- compute per microbatch and stage ------------------------------------------------
    # Layers of the busiest stage: uneven splits put the remainder on some stages (as
    # Megatron-LM's uneven first/last stages do), and the pipeline runs at the busiest.
    layers = math.ceil(m.layers / (p * v)) * v
    tokens = b * s
    peak = gpu.peak_tflops * 1e12 * gpu.gemm_efficiency
    hbm = gpu.hbm_tbps * 1e12
    gemm_layer = 2 * tokens * d.layer_matmul_params / tcp
    attn_layer = 4 * tokens * s * h / tcp
    logits = 2 * tokens * h * m.vocab / tcp
    sp_div = t if sch.sequence_parallel else 1
    ew_layer = tokens * h * (EW_TOKEN_BYTES_MLP / t
                             + (EW_TOKEN_BYTES - EW_TOKEN_BYTES_MLP) / sp_div) / c
    score_layer = 0.0 if m.flash_attention else EW_SCORE_BYTES * a * b * s * s / tcp
    ew_logits = EW_LOGIT_BYTES * tokens * m.vocab / tcp
    fwd = (layers * (gemm_layer + attn_layer) + logits) / peak \
        + (layers * (ew_layer + score_layer) + ew_logits) / hbm
    recompute = {"none": 0.0,
                 "selective": layers * (attn_layer / peak + score_layer / hbm),
                 "full": layers * ((gemm_layer + attn_layer) / peak
                                   + (ew_layer + score_layer) / hbm)}[sch.recompute]
    bwd = 2 * fwd + recompute

    # -- TP and CP per microbatch and stage ------------------------------------------------
    act = tokens * h * 2 / c  # bytes of one microbatch's activations on a CP rank
    nvl = gpu.nvlink_gbyte_s * 1e9 * gpu.nvlink_efficiency
    if t > 1:
        one = 2 * (t - 1) / t * act / nvl + 2 * (t - 1) * NVLINK_LATENCY_S
        tp_f = layers * 2 * one
        tp_b = layers * (2 + (2 if sch.recompute == "full" else 0)) * one
    else:
        tp_f = tp_b = 0.0
    if c > 1:
        kv_bytes = 2 * tokens * (m.kv * h / a) * 2 / tcp  # this rank's K and V
        cp_bw = nvl if tcp <= gpu.nvlink_domain else bw_nic
        cp_lat = NVLINK_LATENCY_S if tcp <= gpu.nvlink_domain else overhead
        cp_comm = (c - 1) * (kv_bytes / cp_bw + cp_lat)
        cp_round = kv_bytes / cp_bw + cp_lat  # one ring-attention pass
        attn_t = attn_layer / peak
        cp_f = layers * max(0.0, cp_comm - attn_t)
        cp_b = layers * max(0.0, 2 * cp_comm - 2 * attn_t)
    else:
        cp_f = cp_b = cp_round = 0.0
    t_f = fwd + tp_f + cp_f
    t_b = bwd + tp_b + cp_b

    # -- pipeline --------------------------------------------------------------------------
    if p > 1:
        msg = act / t  # activations one GPU sends across a stage boundary
        c_lat, c_ser = overhead, msg / bw_nic
        senders = (d.dp // k) * tcp  # GPUs of one DC sending across one DCI boundary
        x_bw = min(bw_nic, dci_gpu * gpus_small / senders)
        x_lat = lat_x + overhead + dci_loss_delay(msg, False)
        x_ser = msg / (x_bw * (1.0 - dci.loss))
        sched = sch.pipeline
        pipe = pipeline(sched, p, mb, v, sch.warmup_extra, t_f, t_b, c_lat, c_ser, x_lat,
                        x_ser, g)
        pipe0 = pipeline(sched, p, mb, v, sch.warmup_extra, t_f, t_b, 0.0, 0.0, 0.0, 0.0, g)
        in_flight = inflight(sched, p, mb, v, sch.warmup_extra, g)
    else:
        msg = c_lat = c_ser = 0.0
        pipe = pipe0 = mb * (t_f + t_b)
        in_flight = 1.0
    compute = mb * (fwd + bwd)
    tp_s = mb * (tp_f + tp_b)
    cp_s = mb * (cp_f + cp_b)
    cp_net = 0.0 if tcp <= gpu.nvlink_domain else cp_s  # CP over the scale-out NIC
    bubble = pipe0 - mb * (t_f + t_b)
    pp_s = pipe - pipe0

    # -- data parallelism ------------------------------------------------------------------
    stage_params = layers * d.layer_params + m.vocab * h * (
        (1 if m.tied_embeddings else 2) if p == 1 else 1)
    p_gpu = stage_params / t  # parameters one GPU holds (busiest stage)
    # Ranks of a data-parallel group inside one DC (the smallest DC when they differ).
    n_in = gpus_small // (t * p) if g == 1 else n // k
    hier = sch.allreduce == "hierarchical" and k > 1
    bw_flat = min(bw_nic, n_in * dci_gpu) if k > 1 else bw_nic
    bw_hier = min(bw_nic, dci_gpu)
    ring_lat = k * lat_x if k > 1 else 0.0  # the DCI hops around the ring
    grad = p_gpu * sch.grad_bytes
    weights = p_gpu * 2.0

    def reduce(size: float, tolerant: bool) -> float:
        """Gradient reduction: all-reduce (replicated) or its reduce-scatter half."""
        full = optimizer == "replicated"
        if hier:
            rs_in = ring_pass(size, n_in, bw_nic, 0.0, overhead)
            x = allreduce(size / n_in, k, bw_hier, k * lat_x, overhead) \
                + 2 * (k - 1) * dci_loss_delay(size / n_in / k, tolerant)
            return rs_in + x + (rs_in if full else 0.0)
        once = ring_pass(size, n, bw_flat, ring_lat, overhead)
        loss = 2 * (k - 1) * dci_loss_delay(size / n, tolerant) if k > 1 else 0.0
        return once * (2 if full else 1) + loss

    def gather(size: float) -> float:
        """Parameter all-gather (distributed optimizer, FSDP). Hierarchical: parameters are
        sharded inside a DC and replicated across DCs (HSDP), so the gather stays inside."""
        if hier:
            return ring_pass(size, n_in, bw_nic, 0.0, overhead)
        loss = (k - 1) * dci_loss_delay(size / n, False) if k > 1 else 0.0
        return ring_pass(size, n, bw_flat, ring_lat, overhead) + loss

    if n == 1:
        red = ag = 0.0
        shard = 1
    elif optimizer == "fsdp":
        # Per microbatch: parameters gathered for the forward and the backward (and the
        # recomputed forward), gradients reduce-scattered.
        red = mb * reduce(grad, dblp)
        ag = mb * gather(weights) * (3 if sch.recompute == "full" else 2)
        shard = n_in if hier else n
    else:
        red = reduce(grad, dblp)
        ag = gather(weights) if optimizer == "distributed" else 0.0
        shard = (n_in if hier else n) if optimizer == "distributed" else 1

    def exposed_dp(scale: float) -> float:
        """Data-parallel time left exposed when its collectives take ``scale`` x as long:
        the reduction hides behind the backward, the gather behind the forward (FSDP:
        both behind each microbatch's computation)."""
        if not sch.overlap:
            return scale * (red + ag)
        if optimizer == "fsdp":
            return max(0.0, scale * (red + ag) - mb * (fwd + bwd))
        return max(0.0, scale * red - bwd) + max(0.0, scale * ag - fwd)

    dp_s = exposed_dp(1.0)
    optimizer_s = p_gpu / shard * OPT_BYTES_PER_PARAM / hbm

    def slowed(scale: float, scale_dp: float | None = None,
               scale_cp: float | None = None) -> float:
        """Seconds a step gains when its scale-out communication takes ``scale`` x as long
        (the pipeline's exposed part; CP's and the data-parallel collectives' own scales
        if given; the collectives whole, with their overlap applied again)."""
        sdp = scale if scale_dp is None else scale_dp
        scp = scale if scale_cp is None else scale_cp
        return (scale - 1.0) * pp_s + (scp - 1.0) * cp_net + exposed_dp(sdp) - dp_s

    # -- tails -------------------------------------------------------------------------------
    # A microburst inflates the round it hits by the calibrated P99 / P50. A communication
    # is a sequence of rounds (a ring's steps, a pipeline transfer, a ring-attention
    # pass); a round of ``t`` seconds over ``ports`` NIC ports meets a burst with
    # probability 1 - exp(-burst_hz x ports x t), so a term grows by 1 + P (inflation - 1).
    if fab.burst_hz > 0 and (pp_s + cp_net + red + ag) > 0:
        infl = tail_factor(tc.tail, cfg, band)
        if dblp and cal.dblp is not None and cal.dblp.tail:
            # DBLP's inflation was measured at one tolerance: between reliable (0) and it,
            # interpolate linearly; beyond it, keep it (flagged as extrapolated).
            w = min(1.0, sch.dblp_tolerance / cal.dblp.tolerance)
            infl_dp = infl + w * (tail_factor(cal.dblp.tail, cfg, band) - infl)
        else:
            infl_dp = infl
        ports_gpu = fab.planes * lanes
        ring = (n_in + k) if hier else n  # ranks a data-parallel round spans
        rounds_dp = 2 * max(ring - 1, 1) * (mb if optimizer == "fsdp" else 1)
        p_dp = burst_hit(fab.burst_hz, ring * ports_gpu, (red + ag) / rounds_dp)
        p_pp = burst_hit(fab.burst_hz, 2 * ports_gpu, c_lat + c_ser) if p > 1 else 0.0
        p_cp = burst_hit(fab.burst_hz, c * ports_gpu, cp_round) if cp_net > 0 else 0.0
        tail_s = max(0.0, slowed(1.0 + p_pp * (infl - 1.0), 1.0 + p_dp * (infl_dp - 1.0),
                                 1.0 + p_cp * (infl - 1.0)))
    else:
        tail_s = 0.0
    step_nominal = compute + tp_s + cp_s + bubble + pp_s + dp_s + optimizer_s + tail_s

    # -- memory --------------------------------------------------------------------------------
    gb = sch.grad_bytes
    if optimizer == "replicated":
        state = p_gpu * (2 + gb + 12)
    elif optimizer == "distributed":
        state = p_gpu * (2 + gb) + p_gpu * 12 / shard
    else:  # + two layers' parameters gathered at a time
        state = p_gpu * (2 + gb + 12) / shard + 2 * d.layer_params / t * 2
    act_layer = activation_bytes(cfg)
    act_mem = layers * act_layer * in_flight + 4.0 * tokens * m.vocab / tcp
    memory = state + act_mem + gpu.memory_reserve_gib * 2**30
    memory_gib = memory / 2**30
    if memory_gib > gpu.hbm_gib:
        return Breakdown(False, "memory", memory_gib=memory_gib)

    # -- failures -------------------------------------------------------------------------------
    phi = failure_fraction(cfg, tc, band, step_nominal, slowed)
    if phi >= 1.0:
        return Breakdown(False, "failures", memory_gib=memory_gib)
    step = step_nominal / (1.0 - phi)
    failure_s = step - step_nominal

    # -- totals ----------------------------------------------------------------------------------
    steps: float = math.ceil(m.train_tokens / m.batch_tokens)
    if dblp and cal.dblp is not None:
        ratio = dblp_steps_ratio(cal, band)
        steps = steps * (1.0 + (ratio - 1.0) * min(1.0, sch.dblp_tolerance
                                                  / cal.dblp.tolerance))
    time_s = steps * step
    model_flops = 3 * m.batch_tokens * (m.layers * (2 * d.layer_matmul_params + 4 * s * h)
                                        + 2 * h * m.vocab)
    mfu = model_flops / (gpus * gpu.peak_tflops * 1e12 * step)
    hours = time_s / 3600
    busy = compute / step
    energy = gpus * (gpu.idle_power_w + (gpu.power_w - gpu.idle_power_w) * busy) \
        * hours / 1000 * cst.pue
    if dcs == 1:
        dci_gbit = 0.0
    elif dci.gbit is not None:
        dci_gbit = dci.gbit * dcs
    else:
        dci_gbit = gpus * fab.nic_gbit / dci.oversubscription
    cost_gpu = gpus * cst.gpu_hour * hours
    cost_dci = dci_gbit * cst.dci_gbit_month * hours / (24 * 30)
    cost_energy = energy * cst.energy_kwh
    flags = extrapolation(cfg, tc, cal, grad / max(n, 1), msg, dblp)
    return Breakdown(
        True, "", compute_s=compute, tp_s=tp_s, cp_s=cp_s, bubble_s=bubble, pp_s=pp_s,
        dp_s=dp_s, optimizer_s=optimizer_s, tail_s=tail_s, failure_s=failure_s, step_s=step,
        steps=steps, time_to_train_s=time_s, mfu=mfu, memory_gib=memory_gib,
        failure_fraction=phi, energy_kwh=energy, cost_gpu=cost_gpu, cost_dci=cost_dci,
        cost_energy=cost_energy, cost=cost_gpu + cost_dci + cost_energy, extrapolated=flags)
