"""Where a projection leaves what the calibration measured: the ``extrapolated`` bit mask
(a regime quantity beyond 2x the measured range), on columns."""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.calarrays import CalArrays, by_transport
from explorer.spec import TRANSPORTS

__all__ = ["EXTRAPOLATION_FLAGS", "extrapolation"]

_TCP = TRANSPORTS.index("tcp")

EXTRAPOLATION_FLAGS = {1: "message size vs BDP", 2: "flows per uplink", 4: "burst geometry",
                       8: "DCI efficiency not measured",
                       16: "DBLP tolerance or its steps ratio",
                       32: "buffer vs BDP"}


def _outside(rng: np.ndarray, tr: Any, x: Any) -> Any:
    lo = by_transport(rng[:, 0], tr)
    hi = by_transport(rng[:, 1], tr)
    return ~np.isnan(lo) & ((x < lo / 2) | (x > hi * 2))


def extrapolation(c: dict[str, Any], d: dict[str, Any], cal: CalArrays, ecmp_x: Any,
                  dp_chunk: Any, pp_msg: Any, dblp: Any) -> Any:
    """Bit mask (EXTRAPOLATION_FLAGS) of the regime dimensions beyond 2x the calibration.

    Message sizes are compared in BDPs of what one connection uses (every plane; one
    plane for TCP); flows per uplink at the ECMP law's abscissa ``ecmp_x`` (hashed flows
    per uplink, or connections where a transport sprays); the burst geometry and the
    buffer only for a transport whose burst law was measured (lossless RC's queueing law
    has no measured parameter)."""
    tr = c["network.transport"]
    bdp = c["fabric.nic_gbit"] * 1e9 / 8 * c["fabric.rtt_us"] * 1e-6
    planes = c["fabric.planes"]
    conn_bdp = np.where(tr == _TCP, bdp / planes, bdp)
    r = cal.ranges
    msg = ((dp_chunk > 0) & _outside(r["message_bdp"], tr, dp_chunk / conn_bdp)) | (
        (pp_msg > 0) & _outside(r["message_bdp"], tr, pp_msg / conn_bdp))
    flows = _outside(r["flows_per_uplink"], tr, ecmp_x)
    measured = ~by_transport(cal.queueing, tr)
    burst_rtts = c["fabric.burst_us"] / c["fabric.rtt_us"]
    excess = c["fabric.burst_excess_kib"] / c["fabric.buffer_kib"]
    burst = (c["fabric.burst_hz"] > 0) & measured & (
        _outside(r["burst_rtts"], tr, burst_rtts)
        | _outside(r["burst_excess_buffers"], tr, excess))
    dci = (d["dcs"] > 1) & ~by_transport(cal.eta_dci_known, tr)
    tol = c["schedule.dblp_tolerance"]
    if np.isfinite(cal.dblp_tol):
        dblp_far = dblp & ((tol > 2 * cal.dblp_tol) | (not cal.dblp_ratio_measured))
    else:
        dblp_far = dblp
    buf = by_transport(cal.buffer_bdp, tr)
    full = c["fabric.buffer_kib"] * 1024 / (bdp / planes)
    buffer = measured & ~np.isnan(buf) & (buf > 0) & ((full < buf / 2) | (full > buf * 2))
    return (np.where(msg, 1, 0) | np.where(flows, 2, 0) | np.where(burst, 4, 0)
            | np.where(dci, 8, 0) | np.where(dblp_far, 16, 0) | np.where(buffer, 32, 0))
