"""What failures cost a training job, as a fraction of its time: the scalar form (the
reference, for model.py) and its numpy twin (for vecmodel.py), side by side so they
change together. See ``failure_fraction``'s docstring for the model."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from explorer.calarrays import CalArrays, by_transport
from explorer.calibration import TransportCal
from explorer.spec import TRANSPORTS, Config

__all__ = ["failure_fraction", "failure_fraction_np"]

_MRC, _RC = TRANSPORTS.index("mrc"), TRANSPORTS.index("rc")


Slowed = Callable[[Any], Any]  # (scale of the communication) -> seconds a step gains


def failure_fraction(cfg: Config, tc: TransportCal, band: str, step_s: float,
                     slowed: Slowed) -> float:
    """Expected fraction of training time lost to failures (phi).

    Three kinds of loss. *Stalls*: every failure the transport rides out costs its
    recovery (and, for ECMP, control-plane convergence) once. *Interruptions*: a failure
    the job cannot ride out (any host failure; for RC a NIC port or leaf, whose plane
    its queue pairs are bound to; any transport with a single plane) costs a restart
    and half a checkpoint interval. *Degradation*: until repair, a host that lost a
    plane (NIC port or leaf down) has (planes - 1)/planes of its bandwidth, a leaf
    that lost an uplink (half - 1)/half, a plane that lost a spine (spines - 1)/spines;
    a synchronous job runs at its slowest host, so while at least one such failure is
    open (a fraction 1 - exp(-failures per hour x repair hours) of the time) its
    scale-out communication takes ways / (ways - 1) as long (``slowed(scale)``: the
    seconds a step of ``step_s`` gains then, overlap applied again); overlapping failures
    on different hosts do not add up."""
    fab, net, cl = cfg.fabric, cfg.network, cfg.cluster
    rtt = fab.rtt_us * 1e-6
    interrupt = cl.restart_minutes * 60 + cl.checkpoint_minutes * 60 / 2
    convergence = (net.bfd_interval_ms * net.bfd_multiplier + net.bgp_update_ms
                   + net.fib_update_ms) / 1000
    rec = max(0.0, tc.recovery_rtts.pick(band, True)) * rtt if tc.recovery_rtts else 0.0
    if net.transport == "mrc":
        reroute = rec
    else:
        # An ECMP transport's retransmission succeeds only once the route is fixed and its
        # timer has fired; what it loses beyond that is the calibrated residue in RTTs.
        rto = (net.rc_rto_ms if net.transport == "rc" else net.tcp_rto_ms) / 1000
        reroute = max(convergence, rto) + rec
    half = fab.switch_radix // 2
    planes = fab.planes
    host_links = leaf_links = leaves = spines = 0
    for n_dc in cl.gpus:
        lv = math.ceil(n_dc / half)
        host_links += n_dc * planes
        leaf_links += lv * half * planes
        leaves += lv * planes
        spines += math.ceil(lv * half / fab.switch_radix) * planes
    link_rate = fab.link_fail_per_hour * fab.failure_scale
    switch_rate = fab.switch_fail_per_hour * fab.failure_scale
    port_down = link_rate * host_links + switch_rate * leaves
    uplink_down = link_rate * leaf_links
    spine_down = switch_rate * spines
    hosts = sum(cl.gpus) / cl.gpus_per_host
    interrupts = fab.host_fail_per_hour * fab.failure_scale * hosts
    stalls = (uplink_down + spine_down) * reroute
    plane_loss = planes > 1 and net.transport != "rc"
    if plane_loss:
        stalls += port_down * reroute
    else:
        interrupts += port_down
    lost = (stalls + interrupts * interrupt) / 3600
    open_ = [(uplink_down, half), (spine_down, spines / planes)]
    if plane_loss:
        open_.append((port_down, planes))
    degrade = 0.0
    for rate, ways in open_:
        if rate > 0 and ways > 1:
            degrade += (1.0 - math.exp(-rate * fab.repair_hours)) * slowed(ways / (ways - 1))
    return lost + (degrade / step_s if step_s > 0 else 0.0)


def failure_fraction_np(c: dict[str, Any], cal: CalArrays, tr: Any, step_s: Any,
                        slowed: Slowed) -> Any:
    """failure_fraction on columns (explorer/vecmodel.py)."""
    rtt = c["fabric.rtt_us"] * 1e-6
    interrupt = c["cluster.restart_minutes"] * 60 + c["cluster.checkpoint_minutes"] * 60 / 2
    convergence = (c["network.bfd_interval_ms"] * c["network.bfd_multiplier"]
                   + c["network.bgp_update_ms"] + c["network.fib_update_ms"]) / 1000
    rec = np.maximum(0.0, np.nan_to_num(by_transport(cal.rec_rtts, tr))) * rtt
    rto = np.where(tr == _RC, c["network.rc_rto_ms"], c["network.tcp_rto_ms"]) / 1000
    reroute = np.where(tr == _MRC, rec, np.maximum(convergence, rto) + rec)
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
    hosts = sum(c[f"cluster.n{i}"] for i in range(c["cluster.max_dcs"])) \
        / c["cluster.gpus_per_host"]
    plane_loss = (planes > 1) & (tr != _RC)
    stalls = (uplink_down + spine_down) * reroute + np.where(plane_loss, port_down * reroute,
                                                             0.0)
    interrupts = c["fabric.host_fail_per_hour"] * scale * hosts \
        + np.where(plane_loss, 0.0, port_down)
    lost = (stalls + interrupts * interrupt) / 3600
    repair = c["fabric.repair_hours"]

    def open_(rate: Any, ways: Any) -> Any:
        safe = np.where(ways > 1, ways, 2.0)
        return np.where((rate > 0) & (ways > 1),
                        (1.0 - np.exp(-rate * repair)) * slowed(safe / (safe - 1)), 0.0)

    degrade = open_(uplink_down, half) + open_(spine_down, spines / planes) \
        + np.where(plane_loss, open_(port_down, planes), 0.0)
    return lost + np.where(step_s > 0, degrade / np.where(step_s > 0, step_s, 1.0), 0.0)
