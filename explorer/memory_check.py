"""The memory model against published memory figures (``emu bench explorer``'s table).

Three kinds of check:

* **ZeRO's figure**: Rajbhandari et al. (SC'20), Figure 1: the model states of a 7.5B
  model on 64 GPUs with mixed-precision Adam: 120 GB per GPU replicated, 31.4 GB with
  the optimizer state sharded, 16.6 with gradients too, 1.9 with parameters too; the
  model's ZeRO stages (explorer/model_memory.py) against each, in GB.
* **Recipes that ran**: every row of the published throughput tables
  (explorer/data/published) trained on its GPUs, so the model must fit it in their HBM;
  the predicted GiB against the HBM.
* **Recipes that did not**: Narayanan et al. (SC'21, Table 2): the 530B model under
  ZeRO-3 with microbatch 4 did not fit on 560 A100s of 80 GB (the paper ran 640); the
  model must refuse it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.calibration import Calibration
from explorer.model import evaluate
from explorer.model_memory import state_bytes
from explorer.validate import load_table

__all__ = ["MemoryCheck", "memory_checks"]

ZERO_FIGURE = (("replicated", 0, 120.0), ("zero1 (P_os)", 1, 31.4), ("zero2 (P_os+g)", 2, 16.6),
               ("zero3 (P_os+g+p)", 3, 1.9))


@dataclass(frozen=True)
class MemoryCheck:
    """One check: what, the published figure (GB, or "ran" / "did not fit"), the
    model's (GB or GiB as ``unit`` says) and whether it agrees."""

    what: str
    source: str
    published: str
    predicted: float
    unit: str
    met: bool

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _zero() -> list[MemoryCheck]:
    out = []
    for label, stage, want in ZERO_FIGURE:
        cols = {"schedule.grad_bytes": 2, "schedule.optimizer": stage, "placement.tp": 1}
        got = float(state_bytes(cols, 7.5e9, 64, 0.0)) / 1e9
        out.append(MemoryCheck(f"7.5B model states on 64 GPUs, {label}",
                               "Rajbhandari et al. SC'20, Fig. 1", f"{want:g} GB", got, "GB",
                               abs(got - want) <= 0.05 * want + 0.05))
    return out


def memory_checks(tables: Sequence[str | Path], cal: Calibration) -> list[MemoryCheck]:
    """Every check of the module docstring, for the published ``tables``."""
    out = _zero()
    for path in tables:
        t = load_table(path)
        for r in t.rows:
            b = evaluate(r.config, cal)
            gib = b.memory_gib if b.reason in ("", "memory", "failures") else math.nan
            hbm = r.config.gpu.hbm_gib
            out.append(MemoryCheck(f"{t.name}: {r.label}", t.source.split(",")[0],
                                   f"ran on {hbm:g} GiB", gib, "GiB",
                                   math.isfinite(gib) and gib <= hbm))
            if t.name == "megatron-sc21-zero3-vs-ptdp" and r.label == "ZeRO-3 530B, 640 GPUs":
                # the paper's starred row: the same at microbatch 4 on 560 GPUs did not fit
                cfg = r.config.replace({"cluster.gpus_per_dc": 560,
                                        "model.global_batch_seqs": 2240})
                b2 = evaluate(cfg, cal)
                out.append(MemoryCheck(
                    f"{t.name}: ZeRO-3 530B, 560 GPUs, microbatch 4", t.source.split(",")[0],
                    f"did not fit {hbm:g} GiB", b2.memory_gib, "GiB", not b2.feasible
                    and b2.reason == "memory"))
    return out
