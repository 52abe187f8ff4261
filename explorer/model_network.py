"""The network at full scale, on columns: what the calibration's figures become through
their transfer laws (explorer/laws.py) on the scenario's fabric and DCI.

* NIC bandwidth a GPU's collectives get: NIC rate x lanes (TCP: the planes its
  connections use) x eta x the ECMP law's efficiency;
* the ECMP law at full scale: a GPU port sends one connection of Q flows (RC's queue
  pairs; TCP's connections hash onto planes too) over a non-blocking leaf of radix / 2
  ports; the collectives of one pipeline stage load the leaves of its GPUs in a DC
  (GPUs of the smallest DC / PP, radix / 2 per leaf, each plane its own leaf for RC) at
  once, so their most loaded uplink ends them;
* a message's overhead beyond serialisation: half an RTT plus the calibrated excess in
  frame times (else its intercept in RTTs);
* the DCI: ``dci.pair_tbps`` between two DCs, or a DC's scale-out capacity over
  ``dci.bag_oversubscription`` shared by its peers; a ring or a pipeline across DCs uses
  one DC pair per hop;
* the delay a microburst adds to a round it meets (the burst law).

Both laws' corrections are interpolated with ``np.interp`` (constant beyond the measured
points; the regime flags say where).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.calarrays import CalArrays, by_transport
from explorer.laws import structure
from explorer.model_terms import FRAME_BYTES, ONE_WAY_RTTS
from explorer.spec import TRANSPORTS

__all__ = ["MRC", "RC", "RC_LOSSY", "TCP", "burst_delay", "ecmp_efficiency", "network"]

MRC, RC, RC_LOSSY, TCP = (TRANSPORTS.index(t) for t in ("mrc", "rc", "rc_lossy", "tcp"))


def _per_unique(fn: Any, *arrays: Any) -> Any:
    """``fn`` of scalars applied to every distinct combination of ``arrays``' values
    (broadcast together; the result has their broadcast shape)."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
    cols = np.stack([np.broadcast_to(np.asarray(a, float), shape).ravel() for a in arrays],
                    axis=1)
    uniq, inverse = np.unique(cols, axis=0, return_inverse=True)
    vals = np.array([fn(*row) for row in uniq])
    return vals[np.ravel(inverse)].reshape(shape)


def ecmp_efficiency(c: dict[str, Any], d: dict[str, Any], cal: CalArrays) -> dict[str, Any]:
    """The ECMP law at full scale: ``structure`` s, the hashed flows per uplink ``x`` (its
    abscissa), the ``correction`` read there and the efficiency s x correction."""
    tr = c["network.transport"]
    qps, planes = c["network.qps_per_connection"], c["fabric.planes"]
    half = np.floor(c["fabric.switch_radix"] / 2)
    leaves = np.maximum(1.0, np.ceil(d["gpus_min"] / (c["placement.pp"] * half)))
    hashed = by_transport(cal.hashed, tr)
    tcp = tr == TCP
    balls = half * qps
    bins = np.where(tcp, half * planes, half)
    groups = np.where(tcp, leaves, leaves * planes)
    floor = np.where(tcp, qps / np.minimum(qps, planes), qps)

    def one(h: float, m: float, n: float, g: float, f: float) -> float:
        return structure(m, n, g, f) if h else 1.0

    s = _per_unique(one, hashed, balls, bins, groups, floor)
    # Spraying's abscissa is connections per uplink: one per GPU port.
    x = np.where(hashed, balls / bins, 1.0)
    lx = np.log2(x)
    corr_all = [np.interp(lx, xs, ys) for xs, ys in cal.ecmp]
    corr = np.choose(np.asarray(tr, np.intp), [np.broadcast_to(v, np.broadcast_shapes(
        np.shape(tr), np.shape(lx))) for v in corr_all])
    return dict(structure=s, x=x, correction=corr, efficiency=s * corr)


def network(c: dict[str, Any], d: dict[str, Any], cal: CalArrays) -> dict[str, Any]:
    """Full-scale network figures of every point (module docstring)."""
    tr = c["network.transport"]
    rtt = c["fabric.rtt_us"] * 1e-6
    planes, qps = c["fabric.planes"], c["network.qps_per_connection"]
    lanes = np.where(tr == TCP, np.minimum(qps, planes) / planes, 1.0)
    kf = by_transport(cal.overhead_frames, tr)
    frame = FRAME_BYTES * 8 / (c["fabric.nic_gbit"] / planes * 1e9)
    overhead = np.where(np.isnan(kf),
                        np.maximum(by_transport(cal.overhead, tr), ONE_WAY_RTTS) * rtt,
                        ONE_WAY_RTTS * rtt + kf * frame)
    eta, eta_x = by_transport(cal.eta, tr), by_transport(cal.eta_x, tr)
    lb = ecmp_efficiency(c, d, cal)
    nic_bps = c["fabric.nic_gbit"] * 1e9 / 8
    bw_nic = nic_bps * lanes * eta * lb["efficiency"]
    gpus_small, dcs = d["gpus_min"], d["dcs"]
    pair = c["dci.pair_tbps"]
    derived = gpus_small * c["fabric.nic_gbit"] / c["dci.bag_oversubscription"] \
        / np.maximum(dcs - 1, 1) / 1e3
    pair_tbps = np.where(np.isnan(pair), derived, pair)
    # The DCI share of one GPU of the smallest DC when all of them send across at once.
    dci_gpu = pair_tbps * 1e12 / 8 / gpus_small * eta_x * lb["efficiency"]
    return dict(rtt=rtt, lanes=lanes, overhead=overhead, nic_bps=nic_bps, bw_nic=bw_nic,
                dci_gpu=dci_gpu, pair_tbps=pair_tbps, lb=lb)


def burst_delay(c: dict[str, Any], cal: CalArrays, rtt: Any, tr: Any,
                dblp_w: Any = 0.0) -> Any:
    """Seconds a microburst adds to a round it meets (the burst law): lossless RC the
    queue it builds, RTT (L + E) x the deep-FIFO correction at L (L the burst's length
    and E the time its excess takes at the plane's port, in RTTs); a lossy transport
    RTT (a + b L), moved toward DBLP's own law by ``dblp_w``."""
    length = c["fabric.burst_us"] / c["fabric.rtt_us"]
    drain = c["fabric.burst_excess_kib"] * 1024 * 8 / (c["fabric.nic_gbit"]
                                                        / c["fabric.planes"] * 1e9)
    lx = np.log(np.maximum(length, 1e-9))
    corr_all = [np.interp(lx, xs, ys) for xs, ys in cal.tail_corr]
    corr = np.choose(np.asarray(tr, np.intp), [np.broadcast_to(v, np.broadcast_shapes(
        np.shape(tr), np.shape(lx))) for v in corr_all])
    queue = (rtt * length + drain) * corr
    measured = rtt * (by_transport(cal.tail_a, tr) + by_transport(cal.tail_b, tr) * length)
    if cal.dblp_tail is not None:
        a, b = cal.dblp_tail
        measured = measured + dblp_w * (rtt * (a + b * length) - measured)
    return np.where(by_transport(cal.queueing, tr), queue, measured)
