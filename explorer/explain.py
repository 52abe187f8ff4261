"""``emu explore FILE --explain``: every calibrated input of one configuration, as the
projection uses it: what the emulator measured and in which regime, the transfer law
(explorer/laws.py), the full-scale value, and whether the point lies beyond 2x what was
measured (the ``extrapolated`` flags)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from explorer.calibration import Calibration
from explorer.columns import config_columns
from explorer.failures import convergence_s, first_retry
from explorer.model import calibration_arrays, step
from explorer.model_network import network
from explorer.model_structure import derive
from explorer.regime import EXTRAPOLATION_FLAGS
from explorer.spec import Config

__all__ = ["Explained", "explain", "render"]


@dataclass(frozen=True)
class Explained:
    """One calibrated input: name, measured value and regime, law, full-scale value,
    and the extrapolation flag that concerns it ("" if within the measured range)."""

    name: str
    measured: str
    regime: str
    law: str
    full_scale: str
    extrapolated: str

    def as_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


def _f(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}g}" if math.isfinite(x) else "n/a"


def _v(c: dict[str, Any], key: str) -> float:
    return float(np.asarray(c[key]).ravel()[0])


def explain(cfg: Config, cal: Calibration) -> list[Explained]:
    """The calibrated inputs of ``cfg``'s projection (module docstring)."""
    arrays = calibration_arrays(cal)
    c = config_columns([cfg], scalar=True)
    out = step(c, arrays)
    d = derive(c)
    net = network(c, d, arrays)
    name = cfg.network.transport
    tc = cal.get(name)
    ecmp, tail = arrays.laws[name]
    flags = int(np.asarray(out["extrapolated"]).ravel()[0])

    def flag(bit: int) -> str:
        return EXTRAPOLATION_FLAGS[bit] if flags & bit else ""

    fab = cfg.fabric
    rows = []
    mbdp = tc.message_bdp
    rows.append(Explained(
        f"{name} bandwidth efficiency eta", f"{_f(tc.eta.value)} [{_f(tc.eta.lo)}, "
        f"{_f(tc.eta.hi)}]", f"messages of {_f(mbdp.lo) if mbdp else '?'}-"
        f"{_f(mbdp.hi) if mbdp else '?'} BDP, fit t = a + S / (eta B)"
        + (f"; {tc.switches}" if tc.switches else ""),
        "a fraction of the binding rate: the same fraction of the full-scale NIC",
        f"{_f(fab.nic_gbit * _v(net, 'lanes') * tc.eta.value)} Gbit/s of a "
        f"{_f(fab.nic_gbit)} Gbit/s NIC", flag(1)))
    ov_us = _v(net, "overhead") * 1e6
    rows.append(Explained(
        f"{name} per-message overhead", f"{_f(tc.overhead_rtts.value)} RTTs"
        + (f" = 0.5 RTT + {_f(tc.overhead_frames.value)} frames" if tc.overhead_frames
           else ""), "intercept of the same fit",
        "half an RTT plus the excess in frame times of the full-scale links",
        f"{_f(ov_us)} us (RTT {_f(fab.rtt_us)} us)", ""))
    if cfg.cluster.dcs > 1:
        rows.append(Explained(
            f"{name} efficiency over the DCI", _f(tc.eta_dci.value) if tc.eta_dci
            else "not measured", "2-DC fabric whose DCI binds" if tc.eta_dci else "-",
            "a fraction of the DCI pair's capacity (eta stands in when not measured)",
            f"{_f(_v(net, 'pair_tbps'))} Tbit/s per DC pair x "
            f"{_f((tc.eta_dci or tc.eta).value)}", flag(8)))
    pts = "; ".join(f"{p.flows_per_uplink:g} flows x {p.qps} QP: {_f(p.efficiency.value)}"
                    f" (s {_f(p.structure)}, c {_f(p.correction('mid'))})"
                    for p in ecmp.points) or "not measured"
    s_full = _v(out, "ecmp_structure")
    c_full = _v(out, "ecmp_correction")
    if ecmp.hashed:
        law = ("efficiency = s x c: s = L / E[max(L, most loaded of n uplinks over G "
               "leaf groups)] for m hashed flows (exact), c = measured / s at the "
               "measured points, interpolated in log2 hashed flows per uplink")
        p0 = ecmp.points[0] if ecmp.points else None
        regime = (f"{p0.bins} uplinks, {p0.groups} groups, 1-16 hashed flows per uplink "
                  f"(one hash draw per repetition)" if p0 else "-")
    else:
        law = "spraying: no hashing (s = 1); the measured efficiency against flows per uplink"
        regime = "1-4 connections per uplink"
    rows.append(Explained(
        f"{name} load balance (ECMP law)", f"over eta: {pts}", regime, law,
        f"{_f(s_full * c_full)} = s {_f(s_full)} x c {_f(c_full)} at "
        f"{_f(_v(out, 'ecmp_x'))} hashed flows per uplink "
        f"({cfg.network.qps_per_connection} QPs, radix {fab.switch_radix})", flag(2)))
    tpts = "; ".join(f"{L:g} RTTs x {x:.3g} buffers: D {_f(iv.value)} RTTs"
                     for L, x, iv in tail.points) or "not measured"
    if tail.queueing:
        tlaw = ("lossless: D = (L + E) x c(L): the burst's length plus the drain of its "
                "excess, c = measured / (L + E) from the deep-FIFO record")
    else:
        a, b = tail.coefficients("mid")
        tlaw = (f"lossy: D = RTT (a + b L), a = {_f(a)} RTTs (timer-driven recovery), "
                f"b = {_f(b)} (congested time), fitted on the measured points")
    rows.append(Explained(
        f"{name} microburst delay (burst law)", tpts,
        "2 sources at line rate into the receiver's port", tlaw,
        f"D = {_f(_v(out, 'burst_delay_s') * 1e6)} us per burst met, at "
        f"{_f(fab.burst_hz)} bursts/s per port (L {_f(fab.burst_us / fab.rtt_us)} RTTs, "
        f"excess {_f(fab.burst_excess_kib / fab.buffer_kib)} buffers)", flag(4) or flag(32)))
    rec = tc.recovery_rtts
    if name == "mrc":
        rlaw, full = "RTT-based timers: the same RTTs at full scale", \
            f"{_f((rec.value if rec else 0) * fab.rtt_us)} us per failure"
    else:
        net_cfg = cfg.network
        conv = convergence_s(net_cfg.bfd_interval_ms, net_cfg.bfd_multiplier,
                             net_cfg.bgp_update_ms, net_cfg.fib_update_ms)
        rto = (net_cfg.tcp_rto_ms if name == "tcp" else net_cfg.rc_rto_ms) / 1000
        timer = ("doubling from the minimum RTO: retries at 1, 3, 7 RTOs" if name == "tcp"
                 else "every local ACK timeout")
        rlaw = ("the first retry at or after control-plane convergence on the full-scale "
                f"timer ({timer}) + the measured restart in RTTs")
        retry = first_retry(conv, rto, name == "tcp")
        full = f"{_f(retry)} s + {_f((rec.value if rec else 0) * fab.rtt_us)} us"
    rows.append(Explained(
        f"{name} recovery from a link cut", f"{_f(rec.value)} RTTs" if rec else "not measured",
        "one leaf-spine link cut under a transfer (convergence and the wait for the retry "
        "that got through excluded)", rlaw, full, ""))
    if cfg.schedule.dblp_tolerance > 0 and name == "mrc" and cal.dblp is not None:
        dc = cal.dblp
        rows.append(Explained(
            "DBLP", f"delivered {_f(dc.delivered.value)} at tolerance {dc.tolerance:g}; steps "
            f"ratio {_f(dc.steps_ratio.value) if dc.steps_ratio else 'not measured'}",
            "bounded rounds under microbursts; training to a target",
            "steps and tail interpolated from reliable (0) to the measured tolerance",
            f"tolerance {cfg.schedule.dblp_tolerance:g}", flag(16)))
    return rows


def render(rows: list[Explained]) -> str:
    """The rows as indented text, one block per input."""
    lines = []
    for r in rows:
        lines.append(r.name + (f"   [extrapolated: {r.extrapolated}]" if r.extrapolated
                               else ""))
        lines += [f"  measured:   {r.measured}", f"  regime:     {r.regime}",
                  f"  law:        {r.law}", f"  full scale: {r.full_scale}"]
    return "\n".join(lines)
