"""Full-scale projection and search: what the emulator's measurements mean for training
across data centres with hundreds of thousands of GPUs.

An analytic cost model (explorer/model.py: each formula once, on numpy columns of any
shape, one point or a whole space) whose network terms come from the emulator's
dimensionless calibration (explorer/calibration.py) through stated transfer laws
(explorer/laws.py), an exhaustive vectorised search over placement x schedule x
network technology (explorer/search.py) with baselines and ablations
(explorer/baselines.py), and validation against the emulator (explorer/predict.py) and
against published measurements (explorer/validate.py). Needs neither root nor torch.

Python API::

    import explorer
    space = explorer.load("experiments/explore/reference_405b_4dc.toml")
    ex = explorer.explore(space)            # the shipped calibration, or pass paths
    ex.scenarios[0].best.breakdown          # the fastest configuration's step, by part
    explorer.evaluate(space, {"placement.tp": 8})   # one point's breakdown
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["evaluate", "explore", "load", "load_calibration"]

if TYPE_CHECKING:  # pragma: no cover
    from explorer.calibration import load_calibration
    from explorer.exploration import evaluate, explore
    from explorer.specfile import load

_WHERE = {"explore": "explorer.exploration", "evaluate": "explorer.exploration",
          "load": "explorer.specfile", "load_calibration": "explorer.calibration"}


def __getattr__(name: str) -> Any:
    # Imported on first use, so `import explorer` (e.g. by the emu command line to
    # declare its arguments) costs nothing.
    if name not in _WHERE:
        raise AttributeError(f"module 'explorer' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
