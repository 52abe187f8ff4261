"""DBLP's gradient blocks against its tolerance, checked before anything is built.

DBLP bounds each transpose all-reduce round per block: a round of ``n`` chunks may lose
``floor(tolerance x n)`` of them. A model whose blocks are too few chunks for the
largest tolerance the policy can give (``DblpConfig.largest_tolerance``) lets none go,
and DBLP would run as reliable MRC while the run claims to measure bounded loss; such an
experiment is refused with workloads/experiment/dblp.py ``check_block``'s reason, naming the
``[transport.dblp]`` key. The model's size is counted on the model itself (torch is only
loaded for an experiment that needs the check: DBLP, data parallel, no deadline).
"""

from __future__ import annotations

from functools import cache

from workloads.experiment.config import WorkloadConfig
from workloads.experiment.dblp import CHUNK_BYTES, BlockTooSmall, DblpConfig, check_block
from workloads.experiment.reader import Table

__all__ = ["check_dblp_blocks", "model_values"]


@cache
def model_values(model: str) -> int:
    """Gradient entries (parameters) of ``model`` (a name of workloads.models), as the
    workers build it."""
    import torch

    from workloads.models import build, count_parameters

    # building seeds torch's global RNG: keep the caller's state as it was
    with torch.random.fork_rng(devices=[]):
        return count_parameters(build(model, 0, deterministic=False)[0])


def check_dblp_blocks(t: Table, dblp: DblpConfig, workload: WorkloadConfig,
                      chunk_bytes: int = CHUNK_BYTES) -> None:
    """EmuError naming ``t``'s key (``transport.dblp.<key>``) when ``dblp``'s largest
    tolerance lets none of the workload's blocks' chunks (``chunk_bytes`` each: the
    transport's ``mtu_payload``) go (module docstring). Pipelines exchange activations,
    not transpose blocks: not checked."""
    if workload.kind != "data_parallel":
        return
    largest = dblp.largest_tolerance(lr_decays=workload.lr_schedule != "constant")
    if largest is None:
        return
    key, tolerance = largest
    try:
        check_block(tolerance, model_values(workload.model), workload.workers, chunk_bytes,
                    what=f"the {workload.model} model")
    except BlockTooSmall as e:
        t.fail(key, str(e), tolerance)
