"""What failures cost a training job, as a fraction phi of its time, on columns.

**Interruptions** (a restart from the last checkpoint): every GPU, host or software
failure (``cluster.interrupt_per_gpu_hour`` x GPUs); for RC, a lost NIC port or leaf
too (its queue pairs are bound to the dead plane); for any transport on a single
plane, the same. The job checkpoints every tau, each checkpoint blocking it for
delta = its bytes (2 + 12 per parameter) / the store's write bandwidth; tau is the
Young/Daly optimum for the job's mean time between interruptions M (Daly 2006:
tau = sqrt(2 delta M) (1 + sqrt(delta / (2M)) / 3 + delta / (18 M)) - delta, for
delta < 2M; else tau = M), unless ``cluster.checkpoint_minutes`` fixes it. With exponentially
distributed interruptions, each costing the restart R and what ran since the last
checkpoint, a segment of tau seconds of work takes M e^(R/M) (e^((tau + delta)/M) - 1)
on the wall clock (Daly 2006, eq. 13): the fraction lost is 1 - tau / that.

**Stalls**: every failure the transport rides out costs its recovery once: MRC its
calibrated recovery in RTTs x the full-scale RTT; RC and TCP their first retry at or
after control-plane convergence (BFD detection + BGP withdrawal + FIB update) on their
retransmission timer (``first_retry``: TCP's RTO doubles from its minimum, RFC 6298; a
RoCE QP retries every local ACK timeout, ``rc_rto_ms``, adaptive retransmission's shorter
first retries left out), plus the calibrated restart after that retry in RTTs.
**Degradation**: until repair, a host that lost a plane (NIC port or leaf down) has
(planes - 1)/planes of its bandwidth, a leaf that lost an uplink (half - 1)/half, a
plane that lost a spine (spines - 1)/spines; a synchronous job runs at its slowest host,
so while at least one such failure is open (a fraction 1 - exp(-failures per hour x
repair hours) of the time) its scale-out communication takes ways / (ways - 1) as long
(``slowed(scale)``: the seconds a step gains then, overlap applied again); overlapping
failures on different hosts do not add up. Components are counted on a two-tier Clos per
plane and DC of ``switch_radix`` ports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from explorer.calarrays import CalArrays, by_transport
from explorer.model_terms import CHECKPOINT_BYTES_PER_PARAM
from explorer.spec import TRANSPORTS

__all__ = ["checkpoint", "convergence_s", "failure_fraction", "first_retry"]

_MRC, _RC, _TCP = (TRANSPORTS.index(t) for t in ("mrc", "rc", "tcp"))
_RC_LOSSY = TRANSPORTS.index("rc_lossy")

Slowed = Callable[[Any], Any]  # (scale of the communication) -> seconds a step gains


def convergence_s(bfd_interval_ms: Any, bfd_multiplier: Any, bgp_update_ms: Any,
                  fib_update_ms: Any) -> Any:
    """Seconds the control plane takes to route around a failure: BFD detection, BGP's
    withdrawal, the FIB's update."""
    return (bfd_interval_ms * bfd_multiplier + bgp_update_ms + fib_update_ms) / 1000


def first_retry(convergence: Any, rto: Any, doubling: Any) -> Any:
    """Seconds from a failure to the first retransmission at or after ``convergence``
    (the first one that can get through): retries fire at rto, 2 rto, 3 rto, ... on a
    fixed timer, at rto, 3 rto, 7 rto, ... (rto (2^k - 1)) on one that doubles
    (``doubling``); never sooner than the first, rto. Without a timer (rto <= 0) the
    convergence. Arrays broadcast."""
    c = np.asarray(convergence, dtype=float)
    r = np.asarray(rto, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(r > 0, c / np.where(r > 0, r, 1.0), 0.0)
        k_fixed = np.maximum(1.0, np.ceil(q - 1e-12))
        k_doubling = np.maximum(1.0, np.ceil(np.log2(q + 1.0) - 1e-12))
    out = np.where(r > 0, np.where(doubling, r * (2.0 ** k_doubling - 1.0), r * k_fixed), c)
    return out if out.ndim else float(out)


def checkpoint(c: dict[str, Any], params: Any, mtbi_s: Any) -> tuple[Any, Any]:
    """(delta, tau): seconds a checkpoint blocks the job, and the interval between two."""
    delta = params * CHECKPOINT_BYTES_PER_PARAM / (c["cluster.checkpoint_gbyte_s"] * 1e9)
    m = mtbi_s
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.sqrt(delta / (2 * m))
        daly = np.sqrt(2 * delta * m) * (1 + r / 3 + delta / (18 * m)) - delta
    tau = np.where(delta < 2 * m, daly, m)
    fixed = c["cluster.checkpoint_minutes"]
    return delta, np.where(np.isnan(fixed), tau, fixed * 60.0)


def failure_fraction(c: dict[str, Any], d: dict[str, Any], cal: CalArrays,
                     slowed: Slowed) -> dict[str, Any]:
    """What failures cost (module docstring): the fractions of time lost to
    interruptions (``interrupts``) and to network stalls (``stalls``), the seconds an
    average step gains while network failures are open (``degrade_s``), and the
    checkpoint interval (``tau_s``). The expected step is then (nominal + degrade_s) /
    ((1 - interrupts) (1 - stalls))."""
    tr = c["network.transport"]
    rtt = c["fabric.rtt_us"] * 1e-6
    convergence = convergence_s(c["network.bfd_interval_ms"], c["network.bfd_multiplier"],
                                c["network.bgp_update_ms"], c["network.fib_update_ms"])
    rec = np.maximum(0.0, np.nan_to_num(by_transport(cal.rec_rtts, tr))) * rtt
    rto = np.where(tr == _TCP, c["network.tcp_rto_ms"], c["network.rc_rto_ms"]) / 1000
    reroute = np.where(tr == _MRC, rec, first_retry(convergence, rto, tr == _TCP) + rec)
    radix = c["fabric.switch_radix"]
    half = np.floor(radix / 2)
    planes = c["fabric.planes"]
    host_links = leaf_links = leaves = spines = 0.0
    for i in range(c["cluster.max_dcs"]):
        n_dc = c[f"cluster.n{i}"]
        lv = np.ceil(n_dc / half)
        host_links = host_links + n_dc * planes
        leaf_links = leaf_links + lv * half * planes
        leaves = leaves + lv * planes
        spines = spines + np.ceil(lv * half / radix) * planes
    scale = c["fabric.failure_scale"]
    link_rate = c["fabric.link_fail_per_hour"] * scale
    switch_rate = c["fabric.switch_fail_per_hour"] * scale
    port_down = link_rate * host_links + switch_rate * leaves
    uplink_down = link_rate * leaf_links
    spine_down = switch_rate * spines
    plane_loss = (planes > 1) & (tr != _RC) & (tr != _RC_LOSSY)
    stalls = (uplink_down + spine_down) * reroute + np.where(plane_loss, port_down * reroute,
                                                             0.0)
    per_hour = c["cluster.interrupt_per_gpu_hour"] * scale * d["gpus"] \
        + np.where(plane_loss, 0.0, port_down)
    with np.errstate(divide="ignore"):
        mtbi = np.where(per_hour > 0, 3600.0 / per_hour, np.inf)
    delta, tau = checkpoint(c, d["params"], mtbi)
    restart = c["cluster.restart_minutes"] * 60
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        finite = np.isfinite(mtbi)
        m = np.where(finite, mtbi, 1.0)
        wall = m * np.exp(restart / m) * np.expm1((tau + delta) / m)
        interrupts = np.where(finite, 1.0 - tau / wall, delta / (tau + delta))
    repair = c["fabric.repair_hours"]

    def open_(rate: Any, ways: Any) -> Any:
        safe = np.where(ways > 1, ways, 2.0)
        return np.where((rate > 0) & (ways > 1),
                        (1.0 - np.exp(-rate * repair)) * slowed(safe / (safe - 1)), 0.0)

    degrade = open_(uplink_down, half) + open_(spine_down, spines / planes) \
        + np.where(plane_loss, open_(port_down, planes), 0.0)
    return dict(interrupts=interrupts, stalls=np.minimum(stalls / 3600, 1.0),
                degrade_s=degrade, tau_s=tau)
