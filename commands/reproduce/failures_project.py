"""Claim 1's full-scale projection: a failure's cost carried to the real network through
the Explorer's per-failure stall model (explorer/failures.py, ``failure_fraction``).

The emulator measures a failure's cost in RTTs of its own fabric; the Explorer says what
one failure costs a job at full scale:

* MRC rides out a failure in its own recovery, which scales with the RTT (its timers
  are RTT-based): ``lost_rtts x`` the full-scale RTT;
* an ECMP transport (RC, TCP) must wait for the control plane to withdraw the route
  (BFD detection + BGP propagation + FIB update) and for its retransmission timer: its
  first retry at or after convergence (explorer/failures.py ``first_retry``: TCP's RTO
  doubles, RC's QP retries every local ACK timeout) at the Explorer's defaults for
  failures that remote switches must route around (a cut, a flap); neither timer scales
  with the link rate, so the emulator's figure is not divided down;
* for failures every switch sees locally (a dead spine, a gray link) an ECMP transport
  loses what its timers cost: a whole RTO at full scale when it stalled for at least one
  emulated RTO floor (``RTO_FLOOR_S``), else its loss in RTTs;
* RC's queue pairs are bound to a plane: a plane down is an interruption of the job (a
  restart and half a checkpoint interval, at the Explorer's defaults: the Young/Daly
  interval of the reference job, Llama 3 405B on 16,384 GPUs).

What a plane down costs MRC beyond its stall, the bandwidth of the lost plane until the
repair, the Explorer counts apart (its degradation term: a synchronous job at
(planes - 1) / planes of its bandwidth while the failure is open); the projection here is
the stall only, so MRC's plane-down figure at full scale is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.failures import checkpoint, convergence_s, first_retry
from explorer.spec import Cluster, FabricSection, Network

REFERENCE_PARAMS = 405e9  # the reference job of a restart: Llama 3 405B ...
REFERENCE_GPUS = 16384  # ... on 16,384 GPUs
REROUTED = ("link_cut", "flap")  # remote switches must withdraw a route (ECMP)
RTO_FLOOR_S = 0.2  # the emulated ECMP transports' smallest retransmission timeout (TCP's)


@dataclass(frozen=True)
class FullScale:
    """The Explorer's defaults a projection uses (seconds)."""

    rtt_s: float
    convergence_s: float
    rto_s: dict[str, float]
    interruption_s: float

    @classmethod
    def explorer_defaults(cls) -> FullScale:
        """From explorer/spec.py's default fabric, network and cluster; the checkpoint
        interval the Explorer's Young/Daly choice for the reference job
        (``REFERENCE_PARAMS`` on ``REFERENCE_GPUS``)."""
        fab, net, cl = FabricSection(), Network(), Cluster()
        conv = convergence_s(net.bfd_interval_ms, net.bfd_multiplier, net.bgp_update_ms,
                             net.fib_update_ms)
        mtbi = 3600.0 / (cl.interrupt_per_gpu_hour * REFERENCE_GPUS)
        _, tau = checkpoint({"cluster.checkpoint_gbyte_s": cl.checkpoint_gbyte_s,
                             "cluster.checkpoint_minutes": float("nan")}, REFERENCE_PARAMS,
                            mtbi)
        return cls(rtt_s=fab.rtt_us * 1e-6, convergence_s=conv,
                   rto_s={"rc": net.rc_rto_ms / 1000.0, "tcp": net.tcp_rto_ms / 1000.0},
                   interruption_s=round(cl.restart_minutes * 60 + float(tau) / 2, 1))

    def record(self) -> dict:
        """JSON-able form."""
        return {"rtt_us": round(self.rtt_s * 1e6, 3), "convergence_s": self.convergence_s,
                "rto_s": self.rto_s, "interruption_s": self.interruption_s}


def project(system: str, kind: str, lost_s: float, rtt_s: float, fs: FullScale) -> float:
    """The full-scale seconds one failure of ``kind`` costs ``system``, from the emulated
    ``lost_s`` on a fabric of RTT ``rtt_s`` (module docstring)."""
    if rtt_s <= 0:
        raise ValueError(f"rtt_s={rtt_s!r} must be > 0")
    in_rtts = lost_s / rtt_s * fs.rtt_s
    if system == "mrc":
        return in_rtts
    if system == "rc" and kind == "plane_down":
        return fs.interruption_s
    rto = fs.rto_s.get(system)
    if rto is None:
        raise ValueError(f"system={system!r} is invalid: must be mrc, rc or tcp")
    if kind in REROUTED:
        return first_retry(fs.convergence_s, rto, system == "tcp")
    return rto if lost_s >= RTO_FLOOR_S else in_rtts
