"""A whole sweep: file -> validated grid -> points on the cluster -> aggregation.

``run_sweep(path, cluster="local")`` is what `emu sweep` does: every point validated
before anything starts (grid.py), the output directory created or resumed (store.py, the
points already done there skipped), the cluster started or joined (cluster.py), the
points run (scheduler.py), and the results aggregated (aggregate.py), also after Ctrl-C
(for what is done by then).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commands.sweep import aggregate, grid, sweepfile
from commands.sweep.cluster import ClusterInfo, check_cluster, connect, preflight
from commands.sweep.scheduler import SweepCounts, run_points
from commands.sweep.store import SweepStore
from emu.errors import EmuError, require_root

__all__ = ["SweepResult", "default_out", "run_sweep"]


@dataclass(frozen=True)
class SweepResult:
    """How a sweep ended: its directory, the grid, this session's counts (None when
    nothing was left to run), the cluster (None likewise) and the grid.json document."""

    out: Path
    points: tuple[grid.Point, ...]
    counts: SweepCounts | None
    cluster: ClusterInfo | None
    grid: dict[str, Any]
    seconds: float

    @property
    def failed(self) -> int:
        return int(self.grid["counts"]["failed"])


def default_out(name: str) -> Path:
    return Path("results") / time.strftime(f"sweep-{name}-%Y%m%d-%H%M%S")


def run_sweep(path: str | Path, *, cluster: str = "local", out: Path | None = None,
              resume: Path | None = None, max_parallel: int | None = None,
              quick: bool = False, say: Callable[[str], None] = print,
              cancel_grace_s: float = 120.0, force: bool = False) -> SweepResult:
    """Run the sweep file ``path`` (see the module docstring). ``resume``: an output
    directory to continue (its done points are skipped); else ``out`` (default
    results/sweep-NAME-TIME) must not hold a sweep yet, nor other files unless ``force``.

    Everything that can refuse the sweep (the file, every point, the cluster's form and,
    for one to join, its address and this machine's token, root for a local cluster) is
    checked before the output directory is created."""
    t0 = time.monotonic()
    if max_parallel is not None and max_parallel < 1:
        raise EmuError(f"--max-parallel {max_parallel} is invalid: must be >= 1")
    if resume is not None and out is not None and Path(out) != Path(resume):
        raise EmuError("--out and --resume name different directories: --resume DIR "
                       "continues the sweep in DIR (give one of them)")
    check_cluster(cluster)
    sweep = sweepfile.load(path)
    points = grid.expand(sweep, quick)  # every point validated before anything runs
    if resume is not None:
        store = SweepStore.open(Path(resume))
        done = store.done_ids()
    else:
        done = set()
    todo = [p for p in points if p.id not in done]
    if todo:
        if cluster == "local":
            require_root("emu sweep --cluster local (its points build fabrics here)")
        preflight(cluster)  # a cluster to join: its address, token and authentication
    if resume is None:
        store = SweepStore.create(Path(out) if out else default_out(sweep.name), Path(path),
                                  force=force)
    say(f"sweep {sweep.name}: {len(points)} points, {len(points) - len(todo)} already done, "
        f"results in {store.root}/")
    axes = [k for k, _ in sweep.axes]
    counts = info = None
    try:
        if todo:
            with connect(cluster, say, checked=True) as info:
                # At most one point per fabric slot in flight: a submitted point is then
                # a running one (the progress line's count), never one queued in Ray.
                parallel = min(max_parallel or info.slots, info.slots, len(todo))
                say(f"cluster: {info.nodes} node(s), {info.slots} fabric slot(s), ready in "
                    f"{info.started_s:.1f} s; up to {parallel} point(s) at a time")
                session = store.start_session(points, len(todo), cluster)
                counts = run_points(points, todo, store, sweep.base, session,
                                    max_parallel=parallel, retries=sweep.retries, say=say,
                                    cancel_grace_s=cancel_grace_s)
    except KeyboardInterrupt:
        doc = aggregate.aggregate(store, points, sweep.name, axes)
        say(f"interrupted: {doc['counts']['done']}/{len(points)} points done and kept; "
            f"continue with: emu sweep {path} --resume {store.root}")
        raise
    doc = aggregate.aggregate(store, points, sweep.name, axes)
    c = doc["counts"]
    say(f"sweep {sweep.name}: {c['done']} done, {c['failed']} failed, {c['missing']} missing "
        f"of {len(points)}; table {store.root}/grid.csv, plots {store.root}/plots/, merged "
        f"calibration {store.root}/calibration.json")
    return SweepResult(out=store.root, points=points, counts=counts, cluster=info, grid=doc,
                       seconds=time.monotonic() - t0)
