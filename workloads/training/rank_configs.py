"""Every rank's worker configuration for one run of an experiment.

Its one job: turn an ``Experiment`` (and a run's seed, modelled compute and first gate)
into the :class:`~workloads.records.WorkerConfig` each rank's worker reads first. The
ranks' connections are planned here (MRC/DBLP: every SRv6 path of each pair; RC: one
QP per plane; gloo: none, torch's TCP crosses the fabric on its own), each rank gets the
transport's settings the experiment resolved (its ``[transport.<name>]`` table), and a
hierarchical collective gets its groups (the ranks of each DC).
"""

from __future__ import annotations

from transports import registry
from workloads.collectives.transportcomm import plan_conns
from workloads.experiment import Experiment
from workloads.records import WorkerConfig

MASTER_PORT = 29500  # torch.distributed's rendezvous on rank 0's fabric address


def worker_configs(exp: Experiment, seed: int, compute_ms: float | None,
                   first_gate: int | None = None) -> list[WorkerConfig]:
    """Every rank's worker configuration (what workloads/training/worker.py reads first)."""
    spec = exp.fabric_spec()
    hosts = list(exp.hosts())
    w, t = exp.workload, exp.transport
    # a transport with a core of ours gets its connections; the kernel's (gloo) none: torch's
    # TCP crosses the fabric on its own
    ours = registry.get(t.name).core is not None
    conns = plan_conns(spec, t.name, hosts) if ours else [{} for _ in hosts]
    groups = None
    if t.collective == "hierarchical":
        by_dc: dict[int, list[int]] = {}
        for r, h in enumerate(hosts):
            by_dc.setdefault(spec.node(h).dc, []).append(r)
        groups = tuple(tuple(g) for g in by_dc.values())
    return [WorkerConfig(
        rank=r, size=len(hosts), host=h, addr=str(spec.address(h)),
        master_addr=str(spec.address(hosts[0])), master_port=MASTER_PORT,
        transport=t.name, transport_config=t.settings,
        conns={p: tuple(cs) for p, cs in conns[r].items()},
        collective=t.collective or "ring", groups=groups, dblp=t.dblp, kind=w.kind,
        model=w.model, steps=w.steps, batch_size=w.batch_size, microbatches=w.microbatches,
        lr=w.lr, lr_schedule=w.lr_schedule, eval_every=w.eval_every, compute=w.compute,
        compute_ms=compute_ms if w.compute == "modelled" else None, seed=seed,
        first_gate=first_gate) for r, h in enumerate(hosts)]
