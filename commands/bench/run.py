"""Which function runs each `emu bench NAME` (the command line's dispatch, kept beside
the benches so that adding one is one module and one line here)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["NAMES", "run_bench"]

NAMES = ("fabric", "dblp", "training", "transport", "acks", "bursts", "robustness",
         "explorer", "sweep", "failover")


def run_bench(name: str, quick: bool, say: Callable[[str], None],
              out_dir: Callable[[], Path], bfd: Callable[[], Any]) -> dict:
    """Run bench ``name``; ``out_dir`` makes the results directory of a bench that writes
    one (after its root check), ``bfd`` the failover bench's BFD timers."""
    if name == "fabric":
        from commands.bench.fabric import bench_fabric

        return bench_fabric(say=say, large=not quick)
    if name == "dblp":
        from commands.bench.dblp import bench_dblp

        return bench_dblp(say=say, quick=quick)
    if name == "training":
        from commands.bench.training import bench_training

        return bench_training(say=say, quick=quick, out_dir=out_dir())
    if name == "transport":
        from commands.bench.allreduce import bench_allreduce_fabric
        from commands.bench.transport import bench_transport

        res = bench_transport(say=say, quick=quick)
        res["allreduce"] = bench_allreduce_fabric(say=say, quick=quick)
        return res
    if name == "acks":
        from commands.bench.acks import bench_acks

        return bench_acks(say=say, quick=quick)
    if name == "bursts":
        from commands.bench.bursts import bench_bursts

        return bench_bursts(say=say, quick=quick)
    if name == "robustness":
        from commands.bench.robustness import bench_robustness

        return bench_robustness(say=say, quick=quick)
    if name == "explorer":
        from explorer.bench import bench_explorer

        return bench_explorer(say=say, quick=quick)
    if name == "sweep":
        from commands.bench.sweep import bench_sweep

        return bench_sweep(say=say, quick=quick)
    if name == "failover":
        from commands.bench.failover import bench_failover

        return bench_failover(say=say, bfd=bfd())
    raise ValueError(f"no bench named {name!r}")
