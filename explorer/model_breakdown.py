"""The cost model's answer for one configuration (explorer/model.py's ``evaluate``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from explorer.regime import EXTRAPOLATION_FLAGS

__all__ = ["BREAKDOWN_FIELDS", "PARTS", "Breakdown"]

# The parts of an expected step, in the order they are reported.
PARTS = ("compute_s", "tp_s", "cp_s", "bubble_s", "pp_s", "dp_s", "optimizer_s", "tail_s",
         "failure_s")


@dataclass(frozen=True)
class Breakdown:
    """One configuration's projection. Times in seconds, memory in GiB, energy in kWh;
    ``failure_fraction`` is failures' share of the expected step, ``checkpoint_s`` the
    checkpoint interval the projection assumes (Young/Daly unless fixed)."""

    feasible: bool
    reason: str
    compute_s: float = 0.0
    tp_s: float = 0.0
    cp_s: float = 0.0
    bubble_s: float = 0.0
    pp_s: float = 0.0
    dp_s: float = 0.0
    optimizer_s: float = 0.0
    tail_s: float = 0.0
    failure_s: float = 0.0
    step_s: float = 0.0
    steps: float = 0.0
    time_to_train_s: float = 0.0
    mfu: float = 0.0
    memory_gib: float = 0.0
    failure_fraction: float = 0.0
    checkpoint_s: float = 0.0
    energy_kwh: float = 0.0
    cost_gpu: float = 0.0
    cost_dci: float = 0.0
    cost_energy: float = 0.0
    cost: float = 0.0
    extrapolated: int = 0

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def extrapolated_what(self) -> list[str]:
        """Names of the regime dimensions projected beyond 2x the calibration's range."""
        return [name for bit, name in EXTRAPOLATION_FLAGS.items() if self.extrapolated & bit]


BREAKDOWN_FIELDS = tuple(f for f in Breakdown.__dataclass_fields__
                         if f not in ("feasible", "reason"))
