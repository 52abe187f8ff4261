"""The cost model: every formula written once, evaluated for one configuration or for
millions at once.

``step(cols, cal)`` takes columns (explorer/columns.py: per spec field one value or a
numpy array; arrays of any shapes that broadcast, so a search can give each axis its
own dimension and every term is computed only over the axes it depends on) and returns
the breakdown of every point (``BREAKDOWN_FIELDS``) with a ``reason`` code
(model_structure.REASONS) where a point cannot run. ``evaluate(config, calibration)``
is the same for one :class:`~explorer.spec.Config`, as a ``Breakdown``.

Expected step time = compute + TP/CP communication + pipeline bubble + pipeline
(point-to-point) communication + exposed data-parallel communication + optimizer step
+ tail + expected failure cost; time to train = steps x expected step.

**Compute**, **TP**, **CP**: explorer/model_compute.py. GEMM FLOPs at peak x one fitted
GEMM efficiency, attention 4 s h per token and layer, the output layer on the last
stage, element-wise traffic at HBM bandwidth; backward 2 x forward plus recomputation.
TP: 4 collectives of the microbatch's activations per layer over NVLink; CP: ring
attention over NVLink or the NIC, only its excess over the attention compute exposed.

**Pipeline**: stages of ceil(layers / (PP x v)) x v layers; explorer/pipeline.py's closed
forms (checked against the max-plus simulator in explorer/pipesim.py) with per-boundary
latency and serialisation of the activations (b s h x 2 / (TP x CP) bytes per GPU);
boundaries inside a DC at NIC rate, across DCs at the DCI pair's share of the GPUs
sending across it, plus the DCI delay, plus expected loss recovery on a lossy DCI.

**Network** (explorer/model_network.py): every calibrated figure through its transfer
law (explorer/laws.py): eta, the ECMP law's efficiency at the full-scale fabric, the
per-message overhead, the DCI pair capacity, the burst law.

**Data parallelism** (explorer/model_dp.py): the ZeRO stage's reductions and gathers,
flat or hierarchical across DCs, overlapped with the computation they can hide behind.

**Tails**: a microburst that meets a round delays it by the burst law's D; a round of t
seconds over P NIC ports meets one with probability 1 - exp(-burst_hz x P x t). A
data-parallel collective of R rounds grows by R x P(hit) x D (its overlap applied
again), a ring-attention pass likewise, and the pipeline by the transfers on its
critical path (2 (p v - 1) to fill and drain, 2 (m - 1) in the steady state) x P(hit)
x D.

**Failures** (explorer/failures.py): interruptions with a Young/Daly checkpoint interval,
stalls and degradation of the failures the transport rides out: expected step =
(nominal + degradation) / ((1 - interruptions' share) (1 - stalls' share));
``failure_s`` is what that adds, ``failure_fraction`` its share of the step.

**Memory** (explorer/model_memory.py): ZeRO model states and activations after
Korthikanti et al. 2022 with the architecture's own tensors; must fit in HBM.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from explorer.calarrays import CalArrays
from explorer.calibration import Calibration
from explorer.failures import failure_fraction
from explorer.model_breakdown import BREAKDOWN_FIELDS, Breakdown
from explorer.model_compute import compute, tp_cp
from explorer.model_dp import data_parallel, dci_loss_delay
from explorer.model_memory import memory
from explorer.model_network import MRC, burst_delay, network
from explorer.model_structure import REASONS, derive, structure
from explorer.model_terms import LOSS_RECOVERY_RTTS, OPT_BYTES_PER_PARAM
from explorer.pipeline import pipeline_time_np
from explorer.regime import extrapolation
from explorer.spec import Config

__all__ = ["BREAKDOWN_FIELDS", "REASONS", "PipelineTime", "calibration_arrays", "evaluate",
           "step"]

# (schedule, p, m, v, warmup_extra, t_f, t_b, c_lat, c_ser, x_lat, x_ser, g) -> seconds
PipelineTime = Callable[..., Any]
FAILURES_INFEASIBLE = 0.99  # a job that spends more of its time recovering never finishes
_R = {name: i for i, name in enumerate(REASONS)}


def _closed_forms(*args: Any) -> Any:
    return pipeline_time_np(*args, invalid="nan")


def step(c: dict[str, Any], cal: CalArrays, pipeline: PipelineTime = _closed_forms
         ) -> dict[str, Any]:
    """The breakdown of every point of ``c`` (module docstring), plus ``reason`` and the
    law values behind it (``ecmp_structure``, ``ecmp_correction``, ``ecmp_x``,
    ``burst_delay_s``, ``pair_tbps``, ``states_gib``, ``in_flight``)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _step(c, cal, pipeline)


def _step(c: dict[str, Any], cal: CalArrays, pipeline: PipelineTime) -> dict[str, Any]:
    d = derive(c)
    code = structure(c, d)
    tr = c["network.transport"]
    t, cp, p = c["placement.tp"], c["placement.cp"], c["placement.pp"]
    tcp = t * cp
    mb, v, g, kk = d["mb"], d["v"], d["g"], d["k"]
    gpus_small = d["gpus_min"]  # the smallest DC binds a DCI share
    n = d["dp"] * cp  # ranks holding the same parameters (data parallelism x CP)
    # With one such rank there is nothing to reduce: no DBLP, no optimizer sharding.
    dblp = (c["schedule.dblp_tolerance"] > 0) & (tr == MRC) & (n > 1)
    opt = np.where(n > 1, c["schedule.optimizer"], 0.0)
    net = network(c, d, cal)
    k = compute(c, d)
    tc = tp_cp(c, d, k, net["bw_nic"], net["overhead"])
    fwd, bwd, layers = k["fwd"], k["bwd"], k["layers"]
    t_f = fwd + tc["tp_f"] + tc["cp_f"]
    t_b = bwd + tc["tp_b"] + tc["cp_b"]

    # memory
    vocab, h = c["model.vocab"], c["model.hidden"]
    emb = vocab * h * np.where(p == 1, np.where(c["model.tied_embeddings"] == 1, 1.0, 2.0),
                               1.0)
    p_gpu = (layers * d["layer"] + emb) / t  # parameters one GPU holds (busiest stage)
    # Ranks of a data-parallel group inside one DC (the smallest DC when they differ).
    n_in = np.where(g == 1, np.floor(gpus_small / (t * p)), np.floor(n / kk))
    hier = (c["schedule.allreduce"] == 1) & (kk > 1)
    shard = np.where(n == 1, 1.0, np.where(opt == 0, 1.0, np.where(hier, n_in, n)))
    mem = memory(c, d, layers, p_gpu, shard)
    mem_bad = mem["memory_gib"] > c["gpu.hbm_gib"]

    # pipeline
    multi = p > 1
    msg = np.where(multi, k["act"] / t, 0.0)  # what one GPU sends across a stage boundary
    overhead, bw_nic = net["overhead"], net["bw_nic"]
    c_lat, c_ser = overhead, msg / bw_nic
    senders = np.floor(d["dp"] / kk) * tcp  # GPUs of one DC sending across one boundary
    x_bw = np.minimum(bw_nic, net["dci_gpu"] * gpus_small / senders)
    lat_x = c["dci.delay_ms"] * 1e-3
    rtt_x = 2 * lat_x + net["rtt"]
    loss = c["dci.loss"]
    loss_k = np.asarray(LOSS_RECOVERY_RTTS)[np.asarray(tr, np.intp)]
    x_lat = lat_x + overhead + dci_loss_delay(loss, msg, loss_k, rtt_x, False)
    x_ser = msg / (x_bw * (1.0 - loss))
    sched, e = c["schedule.pipeline"], c["schedule.warmup_extra"]
    big_t = t_f + t_b
    flat = mb * big_t
    args = (sched, p, mb, v, e, t_f, t_b, c_lat, c_ser, x_lat, x_ser, g)
    pipe = np.where(multi, _pipeline(pipeline, multi & ~mem_bad, args), flat)
    # With free boundaries the closed forms reduce to (m + p - 1) T, and to
    # (m v + p - 1) T / v interleaved (explorer/pipeline.py; its tests hold it).
    pipe0 = np.where(multi, np.where(sched == 2, (mb * v + p - 1) * big_t / v,
                                     (mb + p - 1) * big_t), flat)
    compute_s = mb * (fwd + bwd)
    tp_s = mb * (tc["tp_f"] + tc["tp_b"])
    cp_s = mb * (tc["cp_f"] + tc["cp_b"])
    cp_net = np.where(tc["cp_net"], cp_s, 0.0)  # CP over the scale-out NIC
    bubble = pipe0 - flat
    pp_s = pipe - pipe0

    # data parallelism
    red, ag, exposed = data_parallel(c, d, net, p_gpu, n, n_in, hier, opt, dblp, loss_k,
                                     fwd, bwd)
    dp_s = exposed(1.0)
    optimizer_s = p_gpu / shard * OPT_BYTES_PER_PARAM / k["hbm"]

    def slowed(scale: Any, scale_dp: Any = None, scale_cp: Any = None) -> Any:
        """Seconds a step gains when its scale-out communication takes ``scale`` x as
        long (the pipeline's exposed part; CP's and the data-parallel collectives' own
        scales if given; the collectives whole, with their overlap applied again)."""
        sdp = scale if scale_dp is None else scale_dp
        scp = scale if scale_cp is None else scale_cp
        return (scale - 1.0) * pp_s + (scp - 1.0) * cp_net + exposed(sdp) - dp_s

    # tails
    rate = c["fabric.burst_hz"]
    delay = burst_delay(c, cal, net["rtt"], tr)
    if np.any(rate > 0):
        ratio = np.minimum(1.0, c["schedule.dblp_tolerance"] / cal.dblp_tol) \
            if np.isfinite(cal.dblp_tol) else 0.0
        delay_dp = burst_delay(c, cal, net["rtt"], tr, np.where(dblp, ratio, 0.0))
        ports_gpu = c["fabric.planes"] * net["lanes"]
        ring = np.where(hier, n_in + kk, n)
        rounds_dp = 2 * np.maximum(ring - 1, 1) * np.where(opt >= 2, mb, 1.0)
        t_dp = red + ag
        p_dp = -np.expm1(-rate * ring * ports_gpu * t_dp / rounds_dp)
        s_dp = 1.0 + np.where(t_dp > 0, rounds_dp * p_dp * delay_dp / t_dp, 0.0)
        rounds_cp = mb * layers * 3 * (cp - 1)
        p_cp = -np.expm1(-rate * cp * ports_gpu * tc["cp_round"])
        s_cp = 1.0 + np.where(cp_net > 0, rounds_cp * p_cp * delay / cp_net, 0.0)
        crit = 2 * (p * v - 1) + 2 * (mb - 1)
        p_pp = -np.expm1(-rate * 2 * ports_gpu * (c_lat + c_ser))
        extra_pp = np.where(multi, crit * p_pp * delay, 0.0)
        tail_s = np.where(rate > 0, np.maximum(0.0, slowed(1.0, s_dp, s_cp)) + extra_pp, 0.0)
    else:
        tail_s = np.zeros(())
    step_nominal = compute_s + tp_s + cp_s + bubble + pp_s + dp_s + optimizer_s + tail_s

    # failures
    fail = failure_fraction(c, d, cal, slowed)
    step_s = (step_nominal + fail["degrade_s"]) / ((1.0 - fail["interrupts"])
                                                  * (1.0 - fail["stalls"]))
    failure_s = step_s - step_nominal
    phi = failure_s / step_s
    fail_bad = ~(phi < FAILURES_INFEASIBLE)

    # totals
    s_len = c["model.seq"]
    batch_tokens = d["seqs"] * s_len
    steps = np.ceil(c["model.train_tokens"] / batch_tokens)
    if np.isfinite(cal.dblp_ratio):
        scale = 1.0 + (cal.dblp_ratio - 1.0) * np.minimum(1.0, c["schedule.dblp_tolerance"]
                                                           / cal.dblp_tol)
        steps = np.where(dblp, steps * scale, steps)
    time_s = steps * step_s
    model_flops = 3 * batch_tokens * (c["model.layers"] * (2 * d["matmul"] + 4 * s_len * h)
                                      + 2 * h * vocab)
    gpus = d["gpus"]
    mfu = model_flops / (gpus * c["gpu.peak_tflops"] * 1e12 * step_s)
    hours = time_s / 3600
    idle = c["gpu.idle_power_w"]
    energy = gpus * (idle + (c["gpu.power_w"] - idle) * compute_s / step_s) * hours / 1000 \
        * c["cost.pue"]
    dcs = d["dcs"]
    dci_gbit = dcs * (dcs - 1) / 2 * net["pair_tbps"] * 1e3  # a full mesh of DC pairs
    cost_gpu = gpus * c["cost.gpu_hour"] * hours
    cost_dci = dci_gbit * c["cost.dci_gbit_month"] * hours / (24 * 30)
    cost_energy = energy * c["cost.energy_kwh"]
    grad = p_gpu * c["schedule.grad_bytes"]
    flags = extrapolation(c, d, cal, net["lb"]["x"], grad / np.maximum(n, 1), msg, dblp)
    reason = np.where(code != 0, code, np.where(mem_bad, _R["memory"],
                                                np.where(fail_bad, _R["failures"], 0)))
    return dict(
        compute_s=compute_s, tp_s=tp_s, cp_s=cp_s, bubble_s=bubble, pp_s=pp_s, dp_s=dp_s,
        optimizer_s=optimizer_s, tail_s=tail_s, failure_s=failure_s, step_s=step_s,
        steps=steps, time_to_train_s=time_s, mfu=mfu, memory_gib=mem["memory_gib"],
        failure_fraction=phi, checkpoint_s=fail["tau_s"], energy_kwh=energy,
        cost_gpu=cost_gpu, cost_dci=cost_dci, cost_energy=cost_energy,
        cost=cost_gpu + cost_dci + cost_energy, extrapolated=flags, reason=reason,
        ecmp_structure=net["lb"]["structure"], ecmp_correction=net["lb"]["correction"],
        ecmp_x=net["lb"]["x"], burst_delay_s=delay, pair_tbps=net["pair_tbps"],
        states_gib=mem["states_gib"], in_flight=mem["in_flight"],
        failure_interrupts=fail["interrupts"], failure_stalls=fail["stalls"],
        failure_degrade_s=fail["degrade_s"])


_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53,
                 0x2545F4914F6CDD1D, 0x9FB21C651E98DF25, 0x8CB92BA72F3D8DD7,
                 0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3],
                dtype=np.uint64)


def _reduce_to(mask: Any, shape: tuple[int, ...]) -> Any:
    """``mask`` with every dimension ``shape`` does not have folded by ``any``: where
    ``shape``'s value is needed by at least one point of ``mask``."""
    m: Any = np.asarray(mask)
    nd = max(m.ndim, len(shape))
    m = m.reshape((1,) * (nd - m.ndim) + m.shape)
    full = (1,) * (nd - len(shape)) + tuple(shape)
    axes = tuple(i for i in range(nd) if full[i] == 1 and m.shape[i] > 1)
    m = m.any(axis=axes, keepdims=True) if axes else m
    return m.reshape(m.shape[nd - len(shape):]) if nd > len(shape) else m


def _pipeline(pipeline: PipelineTime, need: Any, args: tuple[Any, ...]) -> Any:
    """The pipeline term where ``need`` says (a pipeline that fits in memory), over the
    pipeline's own inputs only, each distinct input once: the closed forms' loop
    candidates are the costliest part of the model, and many points share their inputs
    (they differ in axes the pipeline does not see)."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    if not shape:
        return pipeline(*args) if bool(need) else np.nan
    sel = np.broadcast_to(_reduce_to(need, shape), shape)
    cols = np.stack([np.broadcast_to(np.asarray(a, float), shape)[sel] for a in args], axis=1)
    out = np.full(shape, np.nan)
    if not len(cols):
        return out
    # Rows keyed by a 64-bit mix of their bits; a collision would show as a row that
    # differs from its representative, and then the exact (slower) unique is used.
    bits = np.ascontiguousarray(cols).view(np.uint64)
    keys = (bits * _MIX[: bits.shape[1]]).sum(axis=1, dtype=np.uint64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if not np.array_equal(cols[first][inverse.ravel()], cols):
        rows = np.ascontiguousarray(cols).view(
            np.dtype((np.void, cols.dtype.itemsize * cols.shape[1]))).ravel()
        _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    uniq = cols[first]
    # By schedule and DCs along the pipeline: the closed forms' loops run over the
    # largest of these in their input, so rows of one kind at a time run fewest.
    times = np.empty(len(uniq))
    kind = uniq[:, 0] * 1024 + uniq[:, -1]
    for kd in np.unique(kind):
        rows = kind == kd
        times[rows] = pipeline(*(uniq[rows, i] for i in range(uniq.shape[1])))
    out[sel] = times[inverse.ravel()]
    return out


_ARRAYS: dict[tuple[int, str], tuple[Calibration, CalArrays]] = {}


def calibration_arrays(cal: Calibration, band: str = "mid") -> CalArrays:
    """``CalArrays.build(cal, band)``, kept for the calibrations last asked for."""
    key = (id(cal), band)
    hit = _ARRAYS.get(key)
    if hit is not None and hit[0] is cal:
        return hit[1]
    if len(_ARRAYS) > 16:
        _ARRAYS.clear()
    arrays = CalArrays.build(cal, band)
    _ARRAYS[key] = (cal, arrays)
    return arrays


def evaluate(cfg: Config, cal: Calibration, band: str = "mid",
             pipeline: PipelineTime = _closed_forms) -> Breakdown:
    """Project one configuration. ``band``: "mid" (measured values), "opt" / "pess" (the
    favourable / unfavourable end of every calibrated interval). ``pipeline`` computes
    the pipeline part of a step (default: the closed forms; explorer/rescore.py passes
    the schedule simulator)."""
    from explorer.columns import config_columns

    out = step(config_columns([cfg], scalar=True), calibration_arrays(cal, band), pipeline)
    code = int(np.asarray(out["reason"]).ravel()[0])
    values: dict[str, Any] = {f: float(np.asarray(out[f]).ravel()[0])
                              for f in BREAKDOWN_FIELDS}
    values["extrapolated"] = int(values["extrapolated"])
    if code == 0:
        return Breakdown(True, "", **values)
    if REASONS[code] in ("memory", "failures"):
        mem = values["memory_gib"]
        return Breakdown(False, REASONS[code], memory_gib=mem if math.isfinite(mem) else 0.0)
    return Breakdown(False, REASONS[code])
