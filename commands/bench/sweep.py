"""`emu bench sweep`: what the Ray path costs per point, and what a large sweep would take.

The same points (experiments/sweeps/digits_transports_smoke.toml; ``quick``: its
``--quick`` form) run both ways on this machine, in one run, alternating which goes first
(ABBA over repetitions, so a drift of the machine spreads over both):

* **one by one**: ``emu run BASE --set KEY=VALUE ...`` per point in a subprocess, as a
  user without the sweep would (interpreter start and imports included);
* **the Ray path**: ``run_sweep`` on a local one-node cluster (one fabric slot), from the
  cluster's start to its stop and the aggregation.

Figures (wall clock of this machine, seconds): per point, the sweep's wall time less the
one-off cluster start, divided by the points, against the mean ``emu run``; their
difference is the overhead per point (target: <= 5 % or <= 2 s). Ray's own share (the
head's time from submitting a point to holding its files, less the task's time on the
node) is given apart. The projection of a 1,000-point sweep on N nodes like this one
(one fabric each) is the cluster start plus ceil(1000 / N) points in a row at the measured
per-point time, or the head's serial handling of 1,000 results if that is longer.
"""

from __future__ import annotations

import json
import math
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from commands.sweep import grid, sweepfile
from commands.sweep.run import run_sweep
from commands.sweep.store import read_records
from emu.launch import child_env

__all__ = ["SWEEP_FILE", "bench_sweep", "toml_value"]

SWEEP_FILE = Path(__file__).resolve().parents[2] / "experiments" / "sweeps" / \
    "digits_transports_smoke.toml"
PROJECTED_POINTS = 1000
PROJECTED_NODES = (1, 4, 16, 64)
TARGET_PCT, TARGET_S = 5.0, 2.0


def toml_value(v: Any) -> str:
    """``v`` as a TOML value (what ``emu run --set KEY=VALUE`` reads)."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(v)  # strings, numbers and booleans read the same in TOML


def _spread(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 3), "lo": round(min(xs), 3),
            "hi": round(max(xs), 3), "n": len(xs)}


def _one_by_one(points: tuple[grid.Point, ...], base: str, tmp: Path,
                say: Callable[[str], None]) -> list[float]:
    times = []
    for p in points:
        # -P and child_env: nothing imported from the working directory (see emu.launch).
        cmd = [sys.executable, "-P", "-m", "commands.cli", "run", base, "--out",
               str(tmp / f"run-{p.id}-{time.monotonic_ns()}")]
        for k, v in p.overrides.items():
            cmd += ["--set", f"{k}={toml_value(v)}"]
        t0 = time.monotonic()
        r = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=child_env(), start_new_session=True)
        try:
            _, err = r.communicate(timeout=1800)
        except BaseException:
            # Interrupted (or too slow): the run tears its fabric down on SIGTERM; a
            # SIGKILL, as subprocess.run would send, would leave it behind.
            r.send_signal(signal.SIGTERM)
            r.communicate(timeout=120)
            raise
        times.append(time.monotonic() - t0)
        if r.returncode != 0:
            raise RuntimeError(f"emu run of point {p.index} failed: {err[-2000:]}")
        say(f"  emu run point {p.index} ({p.label}): {times[-1]:.1f} s")
    return times


def _ray_path(tmp: Path, quick: bool, say: Callable[[str], None]) -> dict[str, Any]:
    out = tmp / f"sweep-{time.monotonic_ns()}"
    t0 = time.monotonic()
    res = run_sweep(SWEEP_FILE, cluster="local", out=out, quick=quick,
                    say=lambda m: say(f"  {m}"))
    wall = time.monotonic() - t0
    assert res.cluster is not None and res.counts is not None
    if res.counts.done != len(res.points):
        raise RuntimeError(f"the sweep did not finish every point: {res.grid['counts']}")
    atts = [r for r in read_records(out / "sweep.jsonl") if r.get("type") == "attempt"]
    return {"wall_s": wall, "cluster_start_s": res.cluster.started_s,
            "head_s": [a["finished"] - a["submitted"] for a in atts],
            "node_s": [a["end"] - a["start"] for a in atts],
            "after_node_s": [a["finished"] - a["end"] for a in atts]}


def bench_sweep(say: Callable[[str], None] = print, quick: bool = False) -> dict[str, Any]:
    """Run the comparison (see the module docstring); returns its figures. Root: the
    points build fabrics (hold the fabric lock)."""
    points = grid.expand(sweepfile.load(SWEEP_FILE), quick)
    base = sweepfile.load(SWEEP_FILE).base
    reps = 1 if quick else 2
    run_pp: list[float] = []
    ray_pp: list[float] = []
    overhead: list[float] = []
    starts: list[float] = []
    head: list[float] = []
    node: list[float] = []
    after: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sae-bench-sweep-") as d:
        tmp = Path(d)
        for rep in range(reps):
            order = ("emu run", "ray") if rep % 2 == 0 else ("ray", "emu run")
            for way in order:
                say(f"rep {rep}: {len(points)} points, {way}")
                if way == "emu run":
                    one = _one_by_one(points, base, tmp, say)
                    run_pp.append(sum(one) / len(one))
                else:
                    r = _ray_path(tmp, quick, say)
                    starts.append(r["cluster_start_s"])
                    ray_pp.append((r["wall_s"] - r["cluster_start_s"]) / len(points))
                    head += r["head_s"]
                    node += r["node_s"]
                    after += r["after_node_s"]
            overhead.append(ray_pp[-1] - run_pp[-1])
    per_point = statistics.median(ray_pp)
    handling = statistics.median(after)
    start = statistics.median(starts)
    projection = {}
    for n in PROJECTED_NODES:
        rows = math.ceil(PROJECTED_POINTS / n) * per_point
        projection[str(n)] = round((start + max(rows, PROJECTED_POINTS * handling)) / 3600, 3)
    pct = [100 * o / r for o, r in zip(overhead, run_pp, strict=True)]
    met = statistics.median(pct) <= TARGET_PCT or statistics.median(overhead) <= TARGET_S
    res = {
        "clock": "wall clock of this machine, seconds (the points' own figures are emulated)",
        "sweep_file": str(SWEEP_FILE.relative_to(SWEEP_FILE.parents[2])), "quick": quick,
        "points": len(points), "reps": reps,
        "emu_run_s_per_point": _spread(run_pp),
        "ray_s_per_point": _spread(ray_pp),
        "overhead_s_per_point": _spread(overhead),
        "overhead_pct": _spread(pct),
        "target": f"<= {TARGET_PCT:g} % or <= {TARGET_S:g} s per point",
        "target_met": met,
        "cluster_start_s": _spread(starts),
        "task_on_node_s": _spread(node),
        "ray_share_s_per_point": _spread([h - n for h, n in zip(head, node, strict=True)]),
        "head_handling_s_per_point": _spread(after),
        "projection_1000_points_h": projection,
        "projection_assumes": "nodes like this one (2 cores, one fabric each) running points "
                              "like these; the cluster start once; the head writing results "
                              "one at a time",
    }
    say(f"per point: emu run {statistics.median(run_pp):.2f} s, Ray path "
        f"{per_point:.2f} s: overhead {statistics.median(overhead):+.2f} s "
        f"({statistics.median(pct):+.1f} %), target {res['target']}: "
        f"{'met' if met else 'NOT met'}")
    say("1,000 points: " + ", ".join(f"{n} node(s) {h:.2f} h" for n, h in projection.items()))
    return res
