"""Closed forms for the pipeline part of a training step, checked against explorer/pipesim.

Uniform stages (``t_f`` / ``t_b`` per microbatch and stage, a chunk costing ``1/v`` of it);
the ``p`` stages form ``g`` equal groups (one per DC), so ``g - 1`` physical boundaries
are DCI boundaries (latency ``x_lat``, serialisation ``x_ser``) and the rest intra-DC
(``c_lat``, ``c_ser``); the interleaved wrap from stage ``p-1`` to stage 0 is DCI when
``g > 1``. A transfer costs ``d = lat + ser``; ``D(a, b)`` sums ``d`` over the boundaries
between stages ``a < b``; ``T = t_f + t_b``; ``s`` is the largest serialisation.

Extra warm-up ``e``. Stage ``s`` runs ``w_s`` warm-up forwards. A boundary's round trip is
hidden by the *difference* of warm-up between the stages around it (see 1F1B below), so
adding ``e`` to every stage hides nothing. Here 1F1B gives stage ``s`` ``e`` extra
forwards per DCI boundary downstream of it (``e * (g - 1 - s // (p/g))``): stage 0 holds
``p + e (g - 1)`` microbatches. Interleaved keeps the uniform rule (``W_s + e`` chunk
forwards on every stage, as Megatron-LM's warm-up formula plus ``e``): uneven extras
across its ring deadlock, and its ring cannot be hidden by warm-up anyway.

Derivation (the makespan is the longest path through the operations' dependency graph):

* GPipe is two tandem queues (forwards, then backwards) of ``m`` jobs through ``p``
  stages and ``p - 1`` links; the last job leaves after the sum of all service times and
  latencies plus ``(m - 1)`` times the slowest server:
  ``p T + 2 D(0, p-1) + (m - 1)(max(t_f, s) + max(t_b, s))`` -- exact for the simulator.
* 1F1B base path: microbatch 0's forward down to the last stage, the last stage's steady
  state at one microbatch per ``u = max(T, s)``, microbatch m-1's backward back up:
  ``p T + 2 D(0, p-1) + (m - 1) u`` -- (a) the fill and drain cost of the boundaries and
  (b) a link busier than a stage's step setting the pace. (c) Stall loops: stage ``s``
  runs ``F(j + w_r)`` before ``B(j)`` of a stage ``r > s``, then ``B(j)`` comes back, then
  ``s`` starts ``F(j + w_s + 1)``: a traversal moves ``n = w_s - w_r + 1`` microbatches
  and needs ``C = (r-s+1) T + 2 D(s, r)``, so it stalls the steady state by ``C - n u``
  when positive. Adjacent stages differ by one warm-up forward, so any boundary with
  ``d > 0`` already stalls. A path enters the loop after microbatch 0's round trip to
  ``s'`` (``s`` or ``s + 1``), repeats it ``k = floor((m - 2 - w_s') / n)`` times and
  leaves with microbatch m-1's round trip: ``2 D(s', p-1) - e_s' u + k (C - n u)`` on top
  of the base. The maximum over a few loop spans (1, 2, around a group size, p-1) and
  anchors (the ends, group starts and ends) is taken.
* Interleaved works in slots (one chunk forward + one chunk backward, ``u = T / v``). Zero
  communication gives ``(m v + p - 1) u``. Stage 0 runs chunk ``c + 1`` of a microbatch
  only after chunk ``c`` came round the ring (``D_ring = D(0, p-1) + d_wrap``), and the
  last stage's first backward waits for its forward ``W_{p-1}``, ``k`` laps in; the last
  microbatch's backward then crosses all ``p v - 1`` virtual boundaries back. Loops are as
  in 1F1B with ``W`` and ``u``. A backward chain wrapping from stage 0 to ``p-1`` gains
  ``D_ring - p t_f / v`` per lap of ``p`` slots (a forward wrap ``D_ring - p t_b / v``),
  but a microbatch wraps only ``v - 1`` times, so per ``p v`` slots at most ``v - 1``
  laps mix with ``p`` slots of the best loop (excess ``eps`` per slot):
  ``sigma = ((v - 1) max(0, lap) + p eps) / (p v)`` per remaining slot. Serialisation
  also queues: it paces the warm-up at ``max(t_f / v, s)``, and the ``p`` transfers of a
  chunk group leave a link ``(p - 1) max(0, s - u)`` late (added once).

Accuracy against the simulator on the grid of tests/unit/explorer/test_pipeline_closed.py (p in
2..16, m in p/4..8p, v in 1..4, e in 0..4, g in 1..4, latency up to 10 t_f,
serialisation up to 1.5 t_f, t_b = 2 t_f): GPipe exact; 1F1B within 4.7 %; interleaved
within 5 % on 98 % of the grid, worst 18 %, at short runs (m <= 2p) and extra warm-up,
where the alignment of chunk groups on the ring decides which cycles a path can chain.
Beyond the grid, links slower than a whole stage step (s > T) with long warm-ups are
underestimated by up to about 25 % (1F1B) and 27 % (interleaved).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from explorer.pipesim import SCHEDULES, PipelineCase, simulate

__all__ = [
    "GPIPE",
    "INTERLEAVED",
    "ONE_F_ONE_B",
    "SCHEDULE_CODES",
    "inflight",
    "inflight_np",
    "pipeline_time",
    "pipeline_time_np",
    "simulated_time",
    "uniform_case",
    "warmup_extras",
]

GPIPE, ONE_F_ONE_B, INTERLEAVED = 0, 1, 2
SCHEDULE_CODES = {"gpipe": GPIPE, "1f1b": ONE_F_ONE_B, "interleaved": INTERLEAVED}


def _check_shape(schedule: str, p: int, m: int, v: int, e: int, g: int) -> None:
    """Raise ValueError naming the first invalid structural argument."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r} is invalid: must be one of {SCHEDULES}")
    for name, value, lo in (("p", p, 1), ("m", m, 1), ("v", v, 1), ("e", e, 0), ("g", g, 1)):
        if type(value) is not int or value < lo:
            raise ValueError(f"{name}={value!r} is invalid: must be an integer >= {lo}")
    if p % g:
        raise ValueError(f"g={g} is invalid for p={p}: g must divide p (equal DC groups)")
    if schedule != "interleaved" and v != 1:
        raise ValueError(f"v={v} is invalid for {schedule!r}: only 'interleaved' takes v > 1")
    if schedule == "interleaved" and m % p:
        raise ValueError(f"m={m} is invalid for 'interleaved' with p={p}: m must be a "
                         "multiple of p")


def _check_times(**times: float) -> None:
    for name, x in times.items():
        ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
        if not ok or x < 0:
            raise ValueError(f"{name}={x!r} is invalid: must be a finite number >= 0")


def warmup_extras(schedule: str, p: int, e: int, g: int) -> tuple[int, ...]:
    """Per-stage extra warm-up forwards this module's ``e`` stands for (module docstring):
    1F1B ``e`` per DCI boundary downstream, interleaved ``e`` on every stage, GPipe none."""
    _check_shape(schedule, p, p, 1, e, g)
    if schedule == "1f1b":
        return tuple(e * (g - 1 - s // (p // g)) for s in range(p))
    return (e if schedule == "interleaved" else 0,) * p


def uniform_case(schedule: str, p: int, m: int, v: int, e: int, t_f: float, t_b: float,
                 c_lat: float, c_ser: float, x_lat: float, x_ser: float,
                 g: int) -> PipelineCase:
    """The simulator case the closed forms describe (same arguments as pipeline_time)."""
    _check_shape(schedule, p, m, v, e, g)
    q = p // g
    lat, ser = [], []
    for k in range(p * v - 1):
        a, b = k % p, (k + 1) % p  # b == 0: the interleaved wrap-around
        dci = g > 1 and a // q != b // q
        lat.append(x_lat if dci else c_lat)
        ser.append(x_ser if dci else c_ser)
    n = p * v
    return PipelineCase(schedule, p, m, (t_f / v,) * n, (t_b / v,) * n, tuple(lat),
                        tuple(ser), tuple(lat), tuple(ser), v=v,
                        warmup_extra=warmup_extras(schedule, p, e, g))


def simulated_time(schedule: str, p: int, m: int, v: int, e: int, t_f: float, t_b: float,
                   c_lat: float, c_ser: float, x_lat: float, x_ser: float, g: int) -> float:
    """pipeline_time's question answered by the exact simulator (O(p m v))."""
    return simulate(uniform_case(schedule, p, m, v, e, t_f, t_b, c_lat, c_ser, x_lat,
                                 x_ser, g)).makespan


def inflight(schedule: str, p: int, m: int, v: int, e: int, g: int) -> float:
    """Microbatch-equivalents of activations stage 0 (the busiest) holds at its peak.

    GPipe ``m``; 1F1B ``min(p + e (g - 1), m)``; interleaved ``min(p + (p - 1 + e) / v, m)``
    (Korthikanti et al. 2022's ``p (1 + (p - 1) / (p v))`` plus the extra warm-up). One
    point of :func:`inflight_np`.
    """
    _check_shape(schedule, p, m, v, e, g)
    return float(inflight_np(SCHEDULE_CODES[schedule], p, m, v, e, g))


def pipeline_time(schedule: str, p: int, m: int, v: int, e: int, t_f: float, t_b: float,
                  c_lat: float, c_ser: float, x_lat: float, x_ser: float, g: int) -> float:
    """Makespan of one step's pipeline part (first forward start to last backward end).

    ``v`` must be 1 unless ``schedule`` is "interleaved" (which needs ``m % p == 0``);
    ``g`` (DCs along the pipeline) must divide ``p``; ``e`` is the extra warm-up of the
    module docstring. Times in any one unit. One point of :func:`pipeline_time_np`
    (the closed forms are written once, there).
    """
    _check_shape(schedule, p, m, v, e, g)
    _check_times(t_f=t_f, t_b=t_b, c_lat=c_lat, c_ser=c_ser, x_lat=x_lat, x_ser=x_ser)
    return float(pipeline_time_np(SCHEDULE_CODES[schedule], p, m, v, e, t_f, t_b, c_lat,
                                  c_ser, x_lat, x_ser, g))


# -- numpy-vectorised versions ------------------------------------------------------------

_INT_ARGS = ("schedule", "p", "m", "v", "e", "g")
_TIME_ARGS = ("t_f", "t_b", "c_lat", "c_ser", "x_lat", "x_ser")


def _np_inputs(invalid: str, **args: object) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Broadcast and check every argument; return the arrays and a mask of bad elements.

    Bad elements raise (``invalid="raise"``, naming the first) or are replaced by a safe
    case and reported in the mask (``invalid="nan"``).
    """
    if invalid not in ("raise", "nan"):
        raise ValueError(f"invalid={invalid!r} is invalid: must be 'raise' or 'nan'")
    arrs = np.broadcast_arrays(*(np.asarray(args[k], dtype=float) for k in args))
    a = dict(zip(args, arrs, strict=True))
    checks = []
    for name in _INT_ARGS:
        x = a[name]
        lo = 0 if name in ("schedule", "e") else 1
        hi = INTERLEAVED if name == "schedule" else np.inf
        checks.append((name, ~(np.isfinite(x) & (x == np.floor(x)) & (x >= lo) & (x <= hi)),
                       f"an integer in [{lo}, {hi}]" if name == "schedule"
                       else f"an integer >= {lo}"))
    ints = {k: np.where(checks[i][1], 1, a[k]).astype(np.int64)
            for i, k in enumerate(_INT_ARGS)}
    il = ints["schedule"] == INTERLEAVED
    checks += [
        ("g", ints["p"] % ints["g"] != 0, "a divisor of p"),
        ("v", ~il & (ints["v"] != 1), "1 unless schedule is INTERLEAVED"),
        ("m", il & (ints["m"] % ints["p"] != 0), "a multiple of p for INTERLEAVED"),
    ]
    for name in _TIME_ARGS:
        checks.append((name, ~(np.isfinite(a[name]) & (a[name] >= 0)), "finite and >= 0"))
    bad = np.zeros(arrs[0].shape, dtype=bool)
    for name, mask, valid in checks:
        if invalid == "raise" and mask.any():
            i = np.argwhere(mask)[0]
            where = f" at index {tuple(int(x) for x in i)}" if mask.ndim else ""
            raise ValueError(f"{name}={float(a[name][tuple(i)])!r}{where} is invalid: must be "
                             f"{valid} (pass invalid='nan' to get NaN there instead)")
        bad |= mask
    safe = {"schedule": GPIPE, "p": 1, "m": 1, "v": 1, "e": 0, "g": 1}
    out = {k: np.where(bad, safe[k], ints[k]) for k in _INT_ARGS}
    out.update({k: np.where(bad, 0.0, a[k]) for k in _TIME_ARGS})
    return out, bad


def inflight_np(schedule: ArrayLike, p: ArrayLike, m: ArrayLike, v: ArrayLike,
                e: ArrayLike, g: ArrayLike, invalid: str = "raise",
                stage: ArrayLike = 0) -> np.ndarray:
    """inflight over broadcast arrays; ``schedule`` holds GPIPE / ONE_F_ONE_B / INTERLEAVED.
    Integral floats are accepted; ``invalid="nan"`` returns NaN for invalid elements.
    ``stage`` s (0 <= s < p) asks another stage: its warm-up forwards plus one, the
    1F1B stage p - s + e per DCI boundary downstream of it, the interleaved one
    (2 (p - s - 1) + (v - 1) p + e + 1) chunks / v, at most m."""
    zero = 0.0
    a, bad = _np_inputs(invalid, schedule=schedule, p=p, m=m, v=v, e=e, g=g, t_f=zero,
                        t_b=zero, c_lat=zero, c_ser=zero, x_lat=zero, x_ser=zero)
    sch, p_, m_, v_, e_, g_ = (a[k] for k in _INT_ARGS)
    st = np.broadcast_to(np.asarray(stage), np.shape(p_))
    st = np.where(bad, 0, np.clip(st, 0, p_ - 1)).astype(np.int64)
    q = p_ // g_
    one = p_ - st + e_ * (g_ - 1 - st // q)
    inter = (2 * (p_ - st - 1) + (v_ - 1) * p_ + e_ + 1) / v_
    res = np.where(sch == GPIPE, m_.astype(float),
                   np.where(sch == ONE_F_ONE_B, np.minimum(one, m_), np.minimum(inter, m_)))
    return np.where(bad, np.nan, res)


def pipeline_time_np(schedule: ArrayLike, p: ArrayLike, m: ArrayLike, v: ArrayLike,
                     e: ArrayLike, t_f: ArrayLike, t_b: ArrayLike, c_lat: ArrayLike,
                     c_ser: ArrayLike, x_lat: ArrayLike, x_ser: ArrayLike, g: ArrayLike,
                     *, invalid: str = "raise") -> np.ndarray:
    """pipeline_time over broadcast arrays of any shape, with no loop per element (loops
    run over candidate loop shapes only, bounded by the largest ``g``). ``schedule`` holds
    GPIPE / ONE_F_ONE_B / INTERLEAVED; integral floats are accepted for the integer
    arguments; ``invalid="nan"`` returns NaN for invalid elements instead of raising."""
    a, bad = _np_inputs(invalid, schedule=schedule, p=p, m=m, v=v, e=e, g=g, t_f=t_f,
                        t_b=t_b, c_lat=c_lat, c_ser=c_ser, x_lat=x_lat, x_ser=x_ser)
    shape = bad.shape
    flat = {k: x.ravel() for k, x in a.items()}
    # Rows of one (p, g) at a time: the loops' candidate spans and anchors are then
    # numbers, so the ones that cannot exist there (span >= p, an anchor outside the
    # pipeline) are skipped instead of masked, and repeats are evaluated once.
    key = flat["p"] * (int(flat["g"].max(initial=1)) + 1) + flat["g"]
    pairs = np.unique(key)
    if 0 < len(pairs) <= _MAX_GROUPS:
        res = np.empty(key.shape)
        for k in pairs:
            ix = np.flatnonzero(key == k)
            sub: dict[str, Any] = {n: x[ix] for n, x in flat.items()}
            sub["p"], sub["g"] = int(flat["p"][ix[0]]), int(flat["g"][ix[0]])
            res[ix] = _closed(**sub)
    else:
        res = _closed(**flat)
    return np.where(bad, np.nan, res.reshape(shape))


_MAX_GROUPS = 256  # distinct (p, g) pairs taken one at a time (a search has a few dozen)


def _closed(schedule: np.ndarray, p: Any, m: np.ndarray, v: np.ndarray, e: np.ndarray,
            g: Any, t_f: np.ndarray, t_b: np.ndarray, c_lat: np.ndarray, c_ser: np.ndarray,
            x_lat: np.ndarray, x_ser: np.ndarray) -> np.ndarray:
    """The closed forms on checked 1-D columns; ``p`` and ``g`` are columns or, for rows
    of one (p, g), numbers (then impossible loop candidates are skipped)."""
    sch = schedule
    fixed = isinstance(p, int) and isinstance(g, int)
    q = p // g
    dc, dx = c_lat + c_ser, x_lat + x_ser
    big_t = t_f + t_b
    il = sch == INTERLEAVED
    zero = 0 * m  # an integer column of the rows' shape
    # Rows of one kind at a time (the caller's grouping) take the short forms below: one
    # DC along every pipeline (no DCI boundary: q = p), or one schedule family.
    g_max = g if fixed else (int(g.max()) if g.size else 1)
    one_dc = g_max == 1
    all_il, no_il = bool(il.all()), not il.any()

    def dseg(lo: Any, hi: Any) -> Any:
        if one_dc:
            return (hi - lo) * dc
        h = hi // q - lo // q
        return h * dx + (hi - lo - h) * dc

    def warm(s: Any) -> Any:
        w_il = np.minimum(2 * (p - s - 1) + (v - 1) * p + e, m * v) if not no_il else 0
        w_1 = (np.minimum(p - s - 1, m) if one_dc else
               np.minimum(p - s - 1 + e * (g - 1 - s // q), m)) if not all_il else 0
        return w_il if all_il else w_1 if no_il else np.where(il, w_il, w_1)

    d_phys = dseg(0, p - 1)
    s_max = np.maximum(np.where(p > g, c_ser, 0.0), np.where(g > 1, x_ser, 0.0))
    gpipe = p * big_t + 2 * d_phys + (m - 1) * (np.maximum(t_f, s_max)
                                                + np.maximum(t_b, s_max))
    # 1F1B and interleaved share the loop machinery, in slots of u.
    work = np.where(il, big_t / v, big_t)
    u = np.where(il, work, np.maximum(big_t, s_max))
    slots = np.where(il, m * v, m)

    base_1f1b = p * big_t + 2 * d_phys + (m - 1) * u
    d_wrap = np.where(g > 1, dx, dc)
    s_max_il = np.where(v > 1, np.maximum(s_max, np.where(g > 1, x_ser, c_ser)), s_max)
    d_ring = d_phys + d_wrap
    d_virtual = v * d_phys + (v - 1) * d_wrap
    w_last = warm(p - 1)
    grp, rest = np.divmod(w_last, p * v)
    chunk, pos = np.divmod(rest, p)
    laps = grp * (v - 1) + chunk
    pace = np.maximum(t_f / v, s_max_il)
    start = np.maximum(laps * (p * t_f / v + d_ring) + (grp * p + pos) * pace, w_last * pace)
    ring_wait = start - w_last * t_f / v
    base_il = ((m * v + p - 1) * u + d_phys + d_virtual + ring_wait
               + (p - 1) * np.maximum(0.0, s_max_il - u))

    def round_trip(s2: Any, w2: Any) -> Any:
        # extra of a detour from the last stage to s2 (w2: s2's warm-up)
        return 2 * dseg(s2, p - 1) - (w2 - w_last - (p - 1 - s2)) * u

    stall = np.zeros_like(u)
    eps = np.zeros_like(u)
    loop_ok = sch != GPIPE
    if not loop_ok.any():
        spans: tuple = ()  # GPipe alone has no stall loops
    elif one_dc:  # q = p: spans q and q + 1 cannot fit, q - 1 is p - 1
        spans = (1, 2, p - 1)
    else:
        spans = (1, 2, q - 1, q, q + 1, p - 1)
    if fixed:  # only spans a pipeline of p stages has, each once
        spans = tuple(sorted({sp for sp in spans if 1 <= sp < p}))
    for span in spans:
        starts = [(zero, loop_ok), (p - 1 - span, loop_ok)]
        if one_dc:  # group 0's anchors: 0, p-1-span and -span repeat or cannot start
            starts.append((p - 1, loop_ok))
        else:
            for k in range(g_max):
                kq = k * q
                ok = loop_ok & (k < g)
                starts += [(kq, ok), (kq + q - 1 - span, ok), (kq + q - 1, ok),
                           (kq - span, ok)]
        if fixed:  # anchors inside the pipeline, each once
            starts = [(s0, loop_ok) for s0 in sorted({int(np.max(s0)) for s0, _ in starts})
                      if s0 >= 0 and s0 + span < p]
        for s, ok in starts:
            r = s + span
            ok = ok & (span >= 1) & (span < p) & (s >= 0) & (r < p)
            s, r = np.where(ok, s, 0), np.where(ok, r, 0)
            w_s = warm(s)
            ok &= w_s < slots
            n = np.where(ok, w_s - warm(r) + 1, 1)
            excess = (r - s + 1) * work + 2 * dseg(s, r) - n * u
            eps = np.where(ok, np.maximum(eps, excess / n), eps)
            for s2, w2 in ((s, w_s), (s + 1, warm(s + 1))):
                left = slots - 2 - w2
                val = round_trip(s2, w2) + (left // n) * np.maximum(0.0, excess)
                stall = np.where(ok & (left >= 0), np.maximum(stall, val), stall)
    lap = np.maximum(0.0, np.maximum(d_ring - p * t_f / v, d_ring - p * t_b / v))
    sigma = ((v - 1) * lap + p * eps) / (p * v)
    mix_ok = il & (v > 1)
    mix = [(zero, mix_ok), (p - 1 + zero, mix_ok)]
    if not one_dc:
        for k in range(g_max):
            mix += [(k * q + zero, mix_ok & (k < g)), (k * q + q - 1 + zero, mix_ok & (k < g))]
    for s2, ok in (mix if mix_ok.any() else ()):
        s2 = np.where(ok, s2, 0)
        w2 = warm(s2)
        left = slots - 2 - w2
        val = round_trip(s2, w2) + left * sigma
        stall = np.where(ok & (left >= 0), np.maximum(stall, val), stall)
    return np.where(sch == GPIPE, gpipe, np.where(il, base_il, base_1f1b) + stall)
