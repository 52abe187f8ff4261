"""The cost model of explorer/model.py for many configurations at once (numpy).

Same formulas, same order, on columns (explorer/columns.py) instead of one Config:
branches become ``np.where`` and per-transport calibration values become small arrays
indexed by the transport's code. tests/unit/explorer/test_explorer_model.py holds the two to
1e-9 on random points; read model.py for what each term means.

``structure(cols)`` gives the reason code of every point that cannot run before any
timing (``REASONS``); ``timing(cols, cal)`` the breakdown of points that can.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.calarrays import CalArrays, by_transport, tail_at_np
from explorer.failures import failure_fraction_np
from explorer.model_terms import (
    EW_LOGIT_BYTES,
    EW_SCORE_BYTES,
    EW_TOKEN_BYTES,
    EW_TOKEN_BYTES_MLP,
    FRAME_BYTES,
    LOSS_RECOVERY_RTTS,
    NVLINK_LATENCY_S,
    ONE_WAY_RTTS,
    OPT_BYTES_PER_PARAM,
    PACKET_BYTES,
)
from explorer.netcost import allreduce, ring_pass
from explorer.pipeline import inflight_np, pipeline_time_np
from explorer.regime import extrapolation_np
from explorer.spec import TRANSPORTS

__all__ = ["BREAKDOWN_FIELDS", "REASONS", "derive", "evaluate", "structure",
           "timing"]

REASONS = ("", "nvlink", "divisibility", "dc_split", "memory", "failures", "inapplicable")
_R = {name: i for i, name in enumerate(REASONS)}
BREAKDOWN_FIELDS = (
    "compute_s", "tp_s", "cp_s", "bubble_s", "pp_s", "dp_s", "optimizer_s", "tail_s",
    "failure_s", "step_s", "steps", "time_to_train_s", "mfu", "memory_gib",
    "failure_fraction", "energy_kwh", "cost_gpu", "cost_dci", "cost_energy", "cost",
    "extrapolated")
_MRC, _RC, _TCP = (TRANSPORTS.index(t) for t in ("mrc", "rc", "tcp"))


def derive(cols: dict[str, Any]) -> dict[str, Any]:
    """Derived sizes (model_structure.derive's fields) as arrays."""
    c = cols
    h, a = c["model.hidden"], c["model.heads"]
    kv = np.where(np.isnan(c["model.kv_heads"]), a, c["model.kv_heads"])
    ffn = np.where(np.isnan(c["model.ffn"]),
                   np.where(c["model.mlp"] == 0, 4 * h, np.ceil(8 * h / 768) * 256),
                   c["model.ffn"])
    attn = 2 * h * h + 2 * h * (kv * (h / a))
    mlp = np.where(c["model.mlp"] == 1, 3.0, 2.0) * h * ffn
    layer = attn + mlp + 4 * h
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


def structure(cols: dict[str, Any], d: dict[str, Any]) -> Any:
    """Reason code (REASONS) of every point that cannot run, 0 where it can."""
    c = cols
    t, cp, p = c["placement.tp"], c["placement.cp"], c["placement.pp"]
    dom = c["gpu.nvlink_domain"]
    kv = d["kv"]
    nvlink = (t > dom) | (np.fmod(dom, t) != 0)
    kv_ok = np.where(t <= kv, np.fmod(kv, t) == 0, np.fmod(t, kv) == 0)
    dpb = d["dp"] * c["placement.microbatch"]
    div = ((np.fmod(c["model.heads"], t) != 0) | ~kv_ok | (np.fmod(d["ffn"], t) != 0)
           | (c["model.layers"] < p * d["v"]) | (np.fmod(c["model.seq"], cp) != 0)
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


def _activation_bytes(c: dict[str, Any]) -> Any:
    t, cp = c["placement.tp"], c["placement.cp"]
    s, h = c["model.seq"], c["model.hidden"]
    sbh = s * c["placement.microbatch"] * h / cp
    rec = c["schedule.recompute"]
    scores = np.where((c["model.flash_attention"] == 1) | (rec != 0), 0.0,
                      5.0 * c["model.heads"] * s / h / t)
    sp = c["schedule.sequence_parallel"] == 1
    full = 2.0 * sbh / np.where(sp, t, 1.0)
    return np.where(rec == 2, full, np.where(sp, sbh * (34.0 / t + scores),
                                             sbh * (10.0 + 24.0 / t + scores)))


def timing(cols: dict[str, Any], d: dict[str, Any], cal: CalArrays) -> dict[str, Any]:
    """The breakdown (BREAKDOWN_FIELDS) and a ``reason`` code (memory, failures) of
    structurally valid points."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _timing(cols, d, cal)


def _timing(c: dict[str, Any], d: dict[str, Any], cal: CalArrays) -> dict[str, Any]:
    tr = c["network.transport"]
    t, cp, p, b = (c["placement.tp"], c["placement.cp"], c["placement.pp"],
                   c["placement.microbatch"])
    s, h, a, V = c["model.seq"], c["model.hidden"], c["model.heads"], c["model.vocab"]
    tcp = t * cp
    mb, v, g, k = d["mb"], d["v"], d["g"], d["k"]
    dcs, gpus, gpus_small = d["dcs"], d["gpus"], d["gpus_min"]
    n = d["dp"] * cp
    dblp = (c["schedule.dblp_tolerance"] > 0) & (tr == _MRC) & (n > 1)
    opt = np.where(n > 1, c["schedule.optimizer"], 0.0)

    # network parameters
    rtt = c["fabric.rtt_us"] * 1e-6
    planes = c["fabric.planes"]
    qps = c["network.qps_per_connection"]
    is_tcp = tr == _TCP
    lanes = np.where(is_tcp, np.minimum(qps, planes) / planes, 1.0)
    kf = by_transport(cal.overhead_frames, tr)
    frame = FRAME_BYTES * 8 / (c["fabric.nic_gbit"] / planes * 1e9)
    overhead = np.where(np.isnan(kf),
                        np.maximum(by_transport(cal.overhead, tr), ONE_WAY_RTTS) * rtt,
                        ONE_WAY_RTTS * rtt + kf * frame)
    eta = by_transport(cal.eta, tr)
    eta_x = by_transport(cal.eta_x, tr)
    q2 = np.log2(np.where(is_tcp, qps / planes, qps))
    lb_all = [np.interp(q2, xs, ys) for xs, ys in cal.lb]
    lb = np.choose(np.asarray(tr, np.intp), [np.broadcast_to(x, np.shape(q2)) for x in lb_all]) \
        if np.ndim(tr) or np.ndim(q2) else lb_all[int(tr)]
    nic_bps = c["fabric.nic_gbit"] * 1e9 / 8
    bw_nic = nic_bps * lanes * eta * lb
    gbit = c["dci.gbit"]
    dci_gpu = np.where(np.isnan(gbit), nic_bps / c["dci.oversubscription"],
                       gbit * 1e9 / 8 / gpus_small) * eta_x * lb
    delay = c["dci.delay_ms"] * 1e-3
    lat_x = delay
    rtt_x = 2 * delay + rtt
    loss = c["dci.loss"]
    loss_k = np.array([LOSS_RECOVERY_RTTS[n] for n in TRANSPORTS])[np.asarray(tr, np.intp)]

    def loss_delay(size: Any, tolerant: Any) -> Any:
        if np.ndim(loss) == 0 and loss <= 0:
            return 0.0  # a lossless DCI everywhere: nothing to compute
        packets = np.maximum(1.0, size / PACKET_BYTES)
        val = (1.0 - (1.0 - loss) ** packets) * loss_k * rtt_x
        return np.where((loss <= 0) | tolerant, 0.0, val)

    # compute per microbatch and stage
    layers = np.ceil(c["model.layers"] / (p * v)) * v
    tokens = b * s
    peak = c["gpu.peak_tflops"] * 1e12 * c["gpu.gemm_efficiency"]
    hbm = c["gpu.hbm_tbps"] * 1e12
    gemm_layer = 2 * tokens * d["matmul"] / tcp
    attn_layer = 4 * tokens * s * h / tcp
    logits = 2 * tokens * h * V / tcp
    sp_div = np.where(c["schedule.sequence_parallel"] == 1, t, 1.0)
    ew_layer = tokens * h * (EW_TOKEN_BYTES_MLP / t
                             + (EW_TOKEN_BYTES - EW_TOKEN_BYTES_MLP) / sp_div) / cp
    score_layer = np.where(c["model.flash_attention"] == 1, 0.0,
                           EW_SCORE_BYTES * a * b * s * s / tcp)
    ew_logits = EW_LOGIT_BYTES * tokens * V / tcp
    fwd = (layers * (gemm_layer + attn_layer) + logits) / peak \
        + (layers * (ew_layer + score_layer) + ew_logits) / hbm
    rec = c["schedule.recompute"]
    recompute = np.where(rec == 0, 0.0, np.where(
        rec == 1, layers * (attn_layer / peak + score_layer / hbm),
        layers * ((gemm_layer + attn_layer) / peak + (ew_layer + score_layer) / hbm)))
    bwd = 2 * fwd + recompute

    # TP and CP
    act = tokens * h * 2 / cp
    nvl = c["gpu.nvlink_gbyte_s"] * 1e9 * c["gpu.nvlink_efficiency"]
    one = 2 * (t - 1) / t * act / nvl + 2 * (t - 1) * NVLINK_LATENCY_S
    tp_f = np.where(t > 1, layers * 2 * one, 0.0)
    tp_b = np.where(t > 1, layers * (2 + np.where(rec == 2, 2.0, 0.0)) * one, 0.0)
    in_dom = tcp <= c["gpu.nvlink_domain"]
    kv_bytes = 2 * tokens * (d["kv"] * h / a) * 2 / tcp
    cp_bw = np.where(in_dom, nvl, bw_nic)
    cp_lat = np.where(in_dom, NVLINK_LATENCY_S, overhead)
    cp_round = kv_bytes / cp_bw + cp_lat
    cp_comm = (cp - 1) * cp_round
    attn_t = attn_layer / peak
    cp_f = np.where(cp > 1, layers * np.maximum(0.0, cp_comm - attn_t), 0.0)
    cp_b = np.where(cp > 1, layers * np.maximum(0.0, 2 * cp_comm - 2 * attn_t), 0.0)
    t_f = fwd + tp_f + cp_f
    t_b = bwd + tp_b + cp_b

    # memory first: the pipeline's closed forms are the costliest term, and points that
    # do not fit need none of it
    multi = p > 1
    sched, e = c["schedule.pipeline"], c["schedule.warmup_extra"]
    in_flight = np.where(multi, inflight_np(sched, p, mb, v, e, g, invalid="nan"), 1.0)
    tied = c["model.tied_embeddings"] == 1
    emb = V * h * np.where(p == 1, np.where(tied, 1.0, 2.0), 1.0)
    p_gpu = (layers * d["layer"] + emb) / t
    n_in = np.where(g == 1, np.floor(gpus_small / (t * p)), np.floor(n / k))
    hier = (c["schedule.allreduce"] == 1) & (k > 1)
    shard = np.where(n == 1, 1.0, np.where(opt == 0, 1.0, np.where(hier, n_in, n)))
    gb = c["schedule.grad_bytes"]
    state = np.where(opt == 0, p_gpu * (2 + gb + 12), np.where(
        opt == 1, p_gpu * (2 + gb) + p_gpu * 12 / shard,
        p_gpu * (2 + gb + 12) / shard + 2 * d["layer"] / t * 2))
    act_mem = layers * _activation_bytes(c) * in_flight + 4.0 * tokens * V / tcp
    memory_gib = (state + act_mem + c["gpu.memory_reserve_gib"] * 2**30) / 2**30
    mem_bad = memory_gib > c["gpu.hbm_gib"]

    # pipeline
    msg = np.where(multi, act / t, 0.0)
    c_lat, c_ser = overhead, msg / bw_nic
    senders = np.floor(d["dp"] / k) * tcp
    x_bw = np.minimum(bw_nic, dci_gpu * gpus_small / senders)
    x_lat = lat_x + overhead + loss_delay(msg, False)
    x_ser = msg / (x_bw * (1.0 - loss))
    flat = mb * (t_f + t_b)
    pipe = np.where(multi, _pipeline(multi & ~mem_bad, sched, p, mb, v, e, t_f, t_b, c_lat,
                                     c_ser, x_lat, x_ser, g), flat)
    # With free boundaries the closed forms reduce to (m + p - 1) T, and to
    # (m v + p - 1) T / v interleaved (explorer/pipeline.py; its tests hold it).
    pipe0 = np.where(multi, np.where(sched == 2, (mb * v + p - 1) * (t_f + t_b) / v,
                                     (mb + p - 1) * (t_f + t_b)), flat)
    compute = mb * (fwd + bwd)
    tp_s = mb * (tp_f + tp_b)
    cp_s = mb * (cp_f + cp_b)
    cp_net = np.where((cp > 1) & ~in_dom, cp_s, 0.0)
    bubble = pipe0 - flat
    pp_s = pipe - pipe0

    # data parallelism
    bw_flat = np.where(k > 1, np.minimum(bw_nic, n_in * dci_gpu), bw_nic)
    bw_hier = np.minimum(bw_nic, dci_gpu)
    ring_lat = np.where(k > 1, k * lat_x, 0.0)
    grad = p_gpu * c["schedule.grad_bytes"]
    weights = p_gpu * 2.0
    full = opt == 0

    def reduce(size: Any, tolerant: Any) -> Any:
        rs_in = ring_pass(size, n_in, bw_nic, 0.0, overhead)
        x = allreduce(size / n_in, k, bw_hier, k * lat_x, overhead) \
            + 2 * (k - 1) * loss_delay(size / n_in / k, tolerant)
        h_val = rs_in + x + np.where(full, rs_in, 0.0)
        once = ring_pass(size, n, bw_flat, ring_lat, overhead)
        lss = np.where(k > 1, 2 * (k - 1) * loss_delay(size / n, tolerant), 0.0)
        f_val = once * np.where(full, 2.0, 1.0) + lss
        return np.where(hier, h_val, f_val)

    def gather(size: Any) -> Any:
        h_val = ring_pass(size, n_in, bw_nic, 0.0, overhead)
        lss = np.where(k > 1, (k - 1) * loss_delay(size / n, False), 0.0)
        f_val = ring_pass(size, n, bw_flat, ring_lat, overhead) + lss
        return np.where(hier, h_val, f_val)

    overlap = c["schedule.overlap"] == 1
    fsdp = opt == 2
    one_red = reduce(grad, dblp)
    one_ag = gather(weights)
    red = np.where(n == 1, 0.0, np.where(fsdp, mb * one_red, one_red))
    ag = np.where(n == 1, 0.0, np.where(
        fsdp, mb * one_ag * np.where(rec == 2, 3.0, 2.0), np.where(opt == 1, one_ag, 0.0)))

    def exposed_dp(scale: Any) -> Any:
        hidden = np.where(fsdp, np.maximum(0.0, scale * (red + ag) - mb * (fwd + bwd)),
                          np.maximum(0.0, scale * red - bwd) + np.maximum(0.0, scale * ag - fwd))
        return np.where(overlap, hidden, scale * (red + ag))

    dp_s = exposed_dp(1.0)
    optimizer_s = p_gpu / shard * OPT_BYTES_PER_PARAM / hbm

    def slowed(scale: Any, scale_dp: Any = None, scale_cp: Any = None) -> Any:
        sdp = scale if scale_dp is None else scale_dp
        scp = scale if scale_cp is None else scale_cp
        return (scale - 1.0) * pp_s + (scp - 1.0) * cp_net + exposed_dp(sdp) - dp_s

    # tails (model.py: per round hit probability x calibrated inflation)
    network_s = pp_s + cp_net + red + ag
    burst_rtts = c["fabric.burst_us"] / c["fabric.rtt_us"]
    excess = c["fabric.burst_excess_kib"] / c["fabric.buffer_kib"]
    infl_all = [tail_at_np(tb, burst_rtts, excess) for tb in cal.tail]
    infl = np.choose(np.asarray(tr, np.intp), [np.broadcast_to(x, np.shape(network_s))
                                              for x in infl_all])
    if cal.dblp_tail is not None:
        w = np.minimum(1.0, c["schedule.dblp_tolerance"] / cal.dblp_tol)
        infl_dp = np.where(dblp, infl + w * (tail_at_np(cal.dblp_tail, burst_rtts, excess)
                                             - infl), infl)
    else:
        infl_dp = infl
    rate = c["fabric.burst_hz"]
    ports_gpu = planes * lanes
    ring = np.where(hier, n_in + k, n)
    rounds_dp = 2 * np.maximum(ring - 1, 1) * np.where(fsdp, mb, 1.0)
    p_dp = 1.0 - np.exp(-rate * ring * ports_gpu * (red + ag) / rounds_dp)
    p_pp = np.where(multi, 1.0 - np.exp(-rate * 2 * ports_gpu * (c_lat + c_ser)), 0.0)
    p_cp = np.where(cp_net > 0, 1.0 - np.exp(-rate * cp * ports_gpu * cp_round), 0.0)
    tail_v = np.maximum(0.0, slowed(1.0 + p_pp * (infl - 1.0), 1.0 + p_dp * (infl_dp - 1.0),
                                    1.0 + p_cp * (infl - 1.0)))
    tail_s = np.where((c["fabric.burst_hz"] > 0) & (network_s > 0), tail_v, 0.0)
    step_nominal = compute + tp_s + cp_s + bubble + pp_s + dp_s + optimizer_s + tail_s

    # failures
    phi = failure_fraction_np(c, cal, tr, step_nominal, slowed)
    fail_bad = phi >= 1.0
    step = step_nominal / (1.0 - phi)
    failure_s = step - step_nominal

    # totals
    steps = np.ceil(c["model.train_tokens"] / (d["seqs"] * s))
    if np.isfinite(cal.dblp_ratio):
        scale = 1.0 + (cal.dblp_ratio - 1.0) * np.minimum(1.0, c["schedule.dblp_tolerance"]
                                                           / cal.dblp_tol)
        steps = np.where(dblp, steps * scale, steps)
    time_s = steps * step
    batch_tokens = d["seqs"] * s
    model_flops = 3 * batch_tokens * (c["model.layers"] * (2 * d["matmul"] + 4 * s * h)
                                      + 2 * h * V)
    peak_all = gpus * c["gpu.peak_tflops"] * 1e12
    mfu = model_flops / (peak_all * step)
    hours = time_s / 3600
    busy = compute / step
    idle = c["gpu.idle_power_w"]
    energy = gpus * (idle + (c["gpu.power_w"] - idle) * busy) * hours / 1000 * c["cost.pue"]
    dci_gbit = np.where(dcs == 1, 0.0, np.where(
        np.isnan(gbit), gpus * c["fabric.nic_gbit"] / c["dci.oversubscription"], gbit * dcs))
    cost_gpu = gpus * c["cost.gpu_hour"] * hours
    cost_dci = dci_gbit * c["cost.dci_gbit_month"] * hours / (24 * 30)
    cost_energy = energy * c["cost.energy_kwh"]
    flags = extrapolation_np(c, cal, tr, d, grad / np.maximum(n, 1), msg, dblp)
    reason = np.where(mem_bad, _R["memory"], np.where(fail_bad, _R["failures"], 0))
    return dict(
        compute_s=compute, tp_s=tp_s, cp_s=cp_s, bubble_s=bubble, pp_s=pp_s, dp_s=dp_s,
        optimizer_s=optimizer_s, tail_s=tail_s, failure_s=failure_s, step_s=step,
        steps=steps, time_to_train_s=time_s, mfu=mfu, memory_gib=memory_gib,
        failure_fraction=phi, energy_kwh=energy, cost_gpu=cost_gpu, cost_dci=cost_dci,
        cost_energy=cost_energy, cost=cost_gpu + cost_dci + cost_energy, extrapolated=flags,
        reason=reason)


_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53,
                 0x2545F4914F6CDD1D, 0x9FB21C651E98DF25, 0x8CB92BA72F3D8DD7,
                 0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3],
                dtype=np.uint64)


def _pipeline(multi: Any, *args: Any) -> Any:
    """pipeline_time_np on the points with a pipeline, each distinct input once: many
    points of a chunk differ only in axes the pipeline does not see (optimizer, DBLP,
    reduction, ...), so the closed forms' loop candidates run on far fewer rows."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in args), np.shape(multi))
    if not shape:
        return pipeline_time_np(*args, invalid="nan")
    sel = np.broadcast_to(multi, shape)
    cols = np.stack([np.broadcast_to(a, shape)[sel] for a in args], axis=1)
    if not len(cols):
        return np.full(shape, np.nan)
    # Rows keyed by a 64-bit mix of their bits; a collision would show as a row that
    # differs from its representative, and then the exact (slower) unique is used.
    bits = np.ascontiguousarray(cols).view(np.uint64)
    keys = (bits * _MIX[: bits.shape[1]]).sum(axis=1, dtype=np.uint64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if not np.array_equal(cols[first][inverse], cols):
        rows = np.ascontiguousarray(cols).view(
            np.dtype((np.void, cols.dtype.itemsize * cols.shape[1]))).ravel()
        _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    uniq = cols[first]
    times = pipeline_time_np(*(uniq[:, i] for i in range(uniq.shape[1])), invalid="nan")
    out = np.full(shape, np.nan)
    out[sel] = times[inverse.ravel()]
    return out


def evaluate(cols: dict[str, Any], cal: CalArrays) -> dict[str, Any]:
    """Structure check and timing of every point; ``reason`` codes (REASONS) say which
    points are infeasible and why (their other fields are meaningless)."""
    d = derive(cols)
    code = structure(cols, d)
    out = timing(cols, d, cal)
    out["reason"] = np.where(code != 0, code, out["reason"])
    return out
