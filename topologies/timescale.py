"""The emulator's time scale: how much slower its links run than the links they stand for.

An emulated link of ``rate_mbit`` stands for one of ``nominal_gbit`` (``LinkSpec``), so
the fabric runs ``factor = nominal_gbit * 1000 / rate_mbit`` times slower in bandwidth:
a transfer that takes 1 s here takes 1/factor s at full scale. What carries over is
what keeps the dimensionless groups of the full-scale case (design notes: message size
/ BDP, buffer / BDP, burst length / RTT, timer floor / RTT, compute / communication,
DCI delay / intra-DC RTT); so every result states its clock:

* **emulated**: seconds on this machine's monotonic clock (what was measured);
* **modelled**: emulated, with each step's compute replaced by its modelled duration
  (``compute = "modelled"``), the clock of step times and time to target;
* **full-scale equivalent**: emulated / factor. Valid for what scales with bandwidth
  (serialisation, queueing, transport timers whose floors are in RTTs); not for what
  does not: a veth hop's and a Python transport's fixed ~0.1 ms, compute unless it was
  modelled in proportion, BFD/BGP timers (the control plane runs on real time here).

``TimeScale`` converts and describes; ``time_scale(spec)`` reads it off a topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from topologies.validate import check_number

if TYPE_CHECKING:
    from topologies.clos import MultiPlaneClos
    from topologies.scaleacross import ScaleAcross

__all__ = ["CLOCKS", "TimeScale", "time_scale"]

CLOCKS = {
    "emulated": "seconds on this machine's monotonic clock",
    "modelled": "emulated, each step's compute replaced by its modelled duration",
    "full_scale": "emulated / factor: valid for bandwidth-bound times only (not the fixed "
                  "per-hop cost of the emulator, unscaled compute, BFD/BGP timers)",
}


@dataclass(frozen=True)
class TimeScale:
    """``nominal_gbit`` links emulated at ``emulated_mbit``."""

    emulated_mbit: float
    nominal_gbit: float

    def __post_init__(self) -> None:
        check_number("emulated_mbit", self.emulated_mbit, 0.0, lo_open=True)
        check_number("nominal_gbit", self.nominal_gbit, 0.0, lo_open=True)

    @property
    def factor(self) -> float:
        """Emulated seconds per full-scale second (for bandwidth-bound times)."""
        return self.nominal_gbit * 1000.0 / self.emulated_mbit

    def full_scale(self, emulated_s: float) -> float:
        """The full-scale equivalent of an emulated duration."""
        return emulated_s / self.factor

    def emulated(self, full_scale_s: float) -> float:
        """The emulated duration that stands for a full-scale one."""
        return full_scale_s * self.factor

    def as_record(self) -> dict[str, Any]:
        """What results carry: the factor, both rates and what each clock means."""
        return {"factor": self.factor, "emulated_mbit": self.emulated_mbit,
                "nominal_gbit": self.nominal_gbit, "clocks": dict(CLOCKS)}

    def describe(self) -> str:
        """One line for tables."""
        return (f"time scale: {self.emulated_mbit:g} Mbit/s links stand for "
                f"{self.nominal_gbit:g} Gbit/s, 1 emulated s = "
                f"{self.full_scale(1.0) * 1e3:.3g} ms at full scale (bandwidth-bound "
                f"times only)")


def time_scale(spec: MultiPlaneClos | ScaleAcross) -> TimeScale:
    """The time scale of a fabric, from its host links (every DC's are the same rate
    in the fabrics this project builds; the first DC's stand for all)."""
    fab = spec.dcs[0] if hasattr(spec, "dcs") else spec
    link = fab.host_link
    return TimeScale(link.rate_mbit, link.nominal_gbit)
