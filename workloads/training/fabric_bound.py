"""What the fabric itself allows a training run's communication through each failure.

Its one job: per failure kind of an experiment, how many times longer the ring's
transfers must take while a failure of that kind holds links down, whatever the
transport does (topologies/flow_bound.py: the cuts' bound on the rank-order ring's
flows, each neighbour sending the same volume). A run's summary sets its steps through
the failure against the healthy step stretched by it (workloads/training/summary.py).

Each failure is bounded alone, and a kind gets the largest of its failures' bounds:
failures that overlap in time are not combined (their joint slowdown is larger), and a
milder failure of a kind that also had a severe one is set against the severe one's
bound. Only what the bound describes gets one: a ring collective on one Clos, and failures
whose links are known before the run (a cut link, a dead switch or plane); none for a
pipeline, a hierarchical collective, several DCs, or a failure that picks its link at
run time.
"""

from __future__ import annotations

from emu.timeline import Restore
from topologies import MultiPlaneClos
from topologies.flow_bound import ring_flows, slowdown
from workloads.experiment import Experiment

__all__ = ["comm_bounds"]


def comm_bounds(exp: Experiment) -> dict[str, float]:
    """Per failure kind: the largest slowdown its failures in ``exp`` force on the ring's
    transfers (1.0: the fabric still carries them at the healthy rate); empty when the
    bound does not describe the experiment (see the module docstring)."""
    spec = exp.fabric_spec()
    if not isinstance(spec, MultiPlaneClos) or exp.transport.collective != "ring":
        return {}
    flows = ring_flows(exp.hosts())
    out: dict[str, float] = {}
    for ev in exp.events:
        f = ev.action
        # a restore, an impairment, or a failure that picks its links at run time: no bound
        if isinstance(f, Restore) or not getattr(f, "takes_down", False):
            continue
        kind: str = getattr(f, "kind", type(f).__name__)
        down = {lk.name for lk in f.links(spec)}
        out[kind] = max(out.get(kind, 0.0), slowdown(spec, flows, down))
    return out
