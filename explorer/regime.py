"""Where a projection leaves what the calibration measured: the ``extrapolated`` bit mask
(a regime quantity beyond 2x the measured range), scalar and numpy twins side by side."""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.calarrays import CalArrays, by_transport
from explorer.calibration import Calibration, Range, TransportCal
from explorer.spec import TRANSPORTS, Config

__all__ = ["EXTRAPOLATION_FLAGS", "extrapolation", "extrapolation_np"]

_TCP = TRANSPORTS.index("tcp")

EXTRAPOLATION_FLAGS = {1: "message size vs BDP", 2: "flows per uplink", 4: "burst geometry",
                       8: "DCI efficiency not measured",
                       16: "DBLP tolerance or its steps ratio",
                       32: "buffer vs BDP"}


def extrapolation(cfg: Config, tc: TransportCal, cal: Calibration, dp_chunk: float,
                  pp_msg: float, dblp: bool) -> int:
    """Bit mask (EXTRAPOLATION_FLAGS) of the regime dimensions beyond 2x the calibration.

    Message sizes are compared in BDPs of what one connection uses (every plane; one
    plane for TCP), flows per uplink as the calibration counts them."""
    fab = cfg.fabric
    tcp = cfg.network.transport == "tcp"
    flags = 0
    bdp = fab.nic_gbit * 1e9 / 8 * fab.rtt_us * 1e-6
    conn_bdp = bdp / fab.planes if tcp else bdp
    if tc.message_bdp is not None:
        sizes = [x for x in (dp_chunk, pp_msg) if x > 0]
        if any(tc.message_bdp.outside(x / conn_bdp) for x in sizes):
            flags |= 1
    qps = cfg.network.qps_per_connection
    if tc.flows_per_uplink is not None and tc.flows_per_uplink.outside(
            qps / fab.planes if tcp else qps):
        flags |= 2
    if fab.burst_hz > 0 and tc.burst_rtts is not None and tc.burst_excess_buffers is not None:
        if (tc.burst_rtts.outside(fab.burst_us / fab.rtt_us)
                or tc.burst_excess_buffers.outside(fab.burst_excess_kib / fab.buffer_kib)):
            flags |= 4
    if cfg.cluster.dcs > 1 and tc.eta_dci is None:
        flags |= 8
    if dblp and (cal.dblp is None or cal.dblp.steps_ratio is None
                 or cfg.schedule.dblp_tolerance > 2 * cal.dblp.tolerance):
        flags |= 16
    if tc.buffer_bdp is not None and tc.buffer_bdp > 0:
        full = fab.buffer_kib * 1024 / (bdp / fab.planes)
        if Range(tc.buffer_bdp, tc.buffer_bdp).outside(full):
            flags |= 32
    return flags


def _outside_np(rng: np.ndarray, tr: Any, x: Any) -> Any:
    lo = by_transport(rng[:, 0], tr)
    hi = by_transport(rng[:, 1], tr)
    return ~np.isnan(lo) & ((x < lo / 2) | (x > hi * 2))


def extrapolation_np(c: dict[str, Any], cal: CalArrays, tr: Any, d: dict[str, Any],
                     dp_chunk: Any, pp_msg: Any, dblp: Any) -> Any:
    """extrapolation on columns (explorer/vecmodel.py)."""
    bdp = c["fabric.nic_gbit"] * 1e9 / 8 * c["fabric.rtt_us"] * 1e-6
    tcp = tr == _TCP
    planes = c["fabric.planes"]
    conn_bdp = np.where(tcp, bdp / planes, bdp)
    r = cal.ranges
    msg = ((dp_chunk > 0) & _outside_np(r["message_bdp"], tr, dp_chunk / conn_bdp)) | (
        (pp_msg > 0) & _outside_np(r["message_bdp"], tr, pp_msg / conn_bdp))
    qps = c["network.qps_per_connection"]
    flows = _outside_np(r["flows_per_uplink"], tr, np.where(tcp, qps / planes, qps))
    burst_rtts = c["fabric.burst_us"] / c["fabric.rtt_us"]
    excess = c["fabric.burst_excess_kib"] / c["fabric.buffer_kib"]
    known = ~np.isnan(by_transport(r["burst_rtts"][:, 0], tr)) & ~np.isnan(
        by_transport(r["burst_excess_buffers"][:, 0], tr))
    burst = (c["fabric.burst_hz"] > 0) & known & (
        _outside_np(r["burst_rtts"], tr, burst_rtts)
        | _outside_np(r["burst_excess_buffers"], tr, excess))
    assert cal.eta_dci_known is not None  # CalArrays.build always sets it
    dci = (d["dcs"] > 1) & ~by_transport(cal.eta_dci_known, tr)
    tol = c["schedule.dblp_tolerance"]
    dblp_far = dblp & ((tol > 2 * cal.dblp_tol) | (not cal.dblp_ratio_measured)
                       if np.isfinite(cal.dblp_tol) else True)
    buf = by_transport(cal.buffer_bdp, tr)
    full = c["fabric.buffer_kib"] * 1024 / (bdp / c["fabric.planes"])
    buffer = ~np.isnan(buf) & (buf > 0) & ((full < buf / 2) | (full > buf * 2))
    return (np.where(msg, 1, 0) | np.where(flows, 2, 0) | np.where(burst, 4, 0)
            | np.where(dci, 8, 0) | np.where(dblp_far, 16, 0) | np.where(buffer, 32, 0))
