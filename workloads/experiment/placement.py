"""Worker placement: which host every rank runs on when the file does not say.

The default spreads workers over DCs as evenly as possible (ranks DC by DC, so a ring or
a pipeline crosses the DCI as rarely as possible) and, inside a DC, round-robin over
racks (rank 0 on rack 0, rank 1 on rack 1, ...): with consecutive ranks on different
racks, a ring's every hop crosses the spine tier, the part of the fabric that failures
and load balancing are about.
"""

from __future__ import annotations

from emu.errors import EmuError
from topologies import MultiPlaneClos, ScaleAcross

__all__ = ["default_placement"]


def default_placement(spec: MultiPlaneClos | ScaleAcross, workers: int) -> tuple[str, ...]:
    """``workers`` hosts, rank order, spread over DCs then racks (see the module docstring)."""
    dcs = spec.dcs if isinstance(spec, ScaleAcross) else (spec,)
    if not 1 <= workers <= sum(dc.host_count for dc in dcs):
        raise EmuError(f"workers={workers} is invalid: must be in [1, {spec.host_count}]")
    per_dc = [0] * len(dcs)
    left = workers
    while left:  # deal one worker at a time to every DC that still has room
        for d, dc in enumerate(dcs):
            if left and per_dc[d] < dc.host_count:
                per_dc[d] += 1
                left -= 1
    out: list[str] = []
    for dc, n in zip(dcs, per_dc, strict=True):
        by_rack = [[h for h in dc.hosts if h.rack == r] for r in range(dc.leaves)]
        order = [by_rack[r][i] for i in range(dc.hosts_per_leaf) for r in range(dc.leaves)]
        out.extend(h.name for h in order[:n])
    return tuple(out)
