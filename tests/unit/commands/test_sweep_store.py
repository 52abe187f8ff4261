"""A sweep's output directory (no root, no Ray): resume skips exactly the points done,
the aggregation's figures over repetitions, the merged calibration the explorer reads,
and retries on a stand-in cluster."""

from __future__ import annotations

import contextlib
import csv
import json
import shutil
import sys
import types

import pytest

from commands.sweep import grid, run, scheduler, sweepfile
from commands.sweep.cluster import ClusterInfo
from commands.sweep.store import Attempt, SweepStore
from commands.sweep.task import PointOutcome
from emu.errors import EmuError
from explorer.calibration import load_calibration

BASE = ('name = "tiny"\n[fabric]\nplanes = 2\nspines = 2\nleaves = 2\nhosts_per_leaf = 1\n'
        '[workload]\nmodel = "digits_cnn"\nworkers = 2\nsteps = 10\nbatch_size = 32\n'
        'target_accuracy = 0.5\n')
SWEEP = ('name = "s"\nbase = "tiny.toml"\nretries = 1\n[axes]\n'
         '"transport.name" = ["mrc", "rc"]\n"fabric.queue_packets" = [32, 64]\n')


@pytest.fixture
def sweep(tmp_path):
    (tmp_path / "tiny.toml").write_text(BASE)
    (tmp_path / "s.toml").write_text(SWEEP)
    return tmp_path / "s.toml"


def _attempt(p: grid.Point, status: str, n: int = 1, error: str | None = None) -> Attempt:
    return Attempt(id=p.id, index=p.index, attempt=n, session=0, status=status, node="n1",
                   start=10.0 * p.index, end=10.0 * p.index + 5, submitted=0.0, finished=1.0,
                   error=error)


def _results(transport: str, train_s: list[float]) -> bytes:
    recs = [{"type": "meta", "label": transport, "time_scale": {"factor": 1000.0}}]
    recs += [{"type": "summary", "label": transport, "rep": k, "steps": 10, "train_s": t,
              "step_time": "wall clock", "time_to_target_s": t / 2, "final_accuracy": 0.9}
             for k, t in enumerate(train_s)]
    return "".join(json.dumps(r) + "\n" for r in recs).encode()


def _calibration(transport: str, fraction: float) -> bytes:
    return json.dumps({"format": "scaleacross-emu/calibration/1", "experiment": "tiny",
                       "generated": 0, "variants": {transport: {
                           "transport": transport, "rtt_s": 1e-4,
                           "line_rate": {"fraction": fraction}, "tail_inflation": {},
                           "failures": [], "lost_rtts_per_failure": None}}}).encode()


def _done(store: SweepStore, p: grid.Point, train_s: list[float]) -> None:
    files = {"results.jsonl": _results(p.transport, train_s),
             "calibration.json": _calibration(p.transport, 0.5 + p.index / 10),
             "sub/plot.png": b"png"}
    out = PointOutcome(id=p.id, ok=True, files=files, node="n1", start=0.0, end=1.0)
    store.record(_attempt(p, "done"), out)


def test_resume_runs_only_the_points_not_done(sweep, tmp_path, monkeypatch):
    points = grid.expand(sweepfile.load(sweep))
    store = SweepStore.create(tmp_path / "out", sweep)
    _done(store, points[0], [1.0])
    _done(store, points[2], [1.0])
    store.record(_attempt(points[1], "error", error="boom"), None)
    store.failed(points[1], 2, "boom")
    _done(store, points[3], [1.0])
    shutil.rmtree(store.point_dir(points[3].id))  # recorded done, but its results are gone
    assert store.done_ids() == {points[0].id, points[2].id}
    assert (store.point_dir(points[0].id) / "sub" / "plot.png").read_bytes() == b"png"

    ran: list[list[str]] = []

    @contextlib.contextmanager
    def fake_connect(cluster, say, checked=False):
        yield ClusterInfo(kind=cluster, nodes=1, slots=1, started_s=0.0)

    def fake_run_points(points, todo, store, base, session, **kw):
        ran.append([p.id for p in todo])
        assert session == 0 and kw["retries"] == 1 and kw["max_parallel"] == 1
        return scheduler.SweepCounts(total=len(points), done=2, failed=0, retried=0,
                                     cancelled=0)

    monkeypatch.setattr(run, "connect", fake_connect)
    monkeypatch.setattr(run, "run_points", fake_run_points)
    monkeypatch.setattr(run, "require_root", lambda what: None)
    res = run.run_sweep(sweep, resume=tmp_path / "out", say=lambda m: None)
    assert ran == [[points[1].id, points[3].id]]  # the failed one gets another chance
    assert [r["status"] for r in res.grid["rows"]] == ["done", "failed", "done", "missing"]

    # everything done: nothing is started at all (no cluster either)
    _done(store, points[1], [1.0])
    _done(store, points[3], [1.0])
    monkeypatch.setattr(run, "connect", None)  # would fail if called
    res = run.run_sweep(sweep, resume=tmp_path / "out", say=lambda m: None)
    assert ran == [[points[1].id, points[3].id]] and res.counts is None
    assert res.grid["counts"] == {"done": 4, "failed": 0, "missing": 0}


def test_a_new_sweep_refuses_a_directory_that_holds_one(sweep, tmp_path, monkeypatch):
    monkeypatch.setattr(run, "connect", None)  # nothing may start
    SweepStore.create(tmp_path / "out", sweep)
    with pytest.raises(EmuError, match="already holds a sweep.*--resume"):
        run.run_sweep(sweep, out=tmp_path / "out", say=lambda m: None)
    with pytest.raises(EmuError, match="no sweep there"):
        run.run_sweep(sweep, resume=tmp_path / "elsewhere", say=lambda m: None)


def test_a_new_sweep_never_replaces_files_it_did_not_write(sweep, tmp_path):
    """--out into a directory holding someone's grid.csv and calibration.json: refused,
    the files untouched, unless --force (then written beside them, nothing else lost)."""
    out = tmp_path / "precious"
    out.mkdir()
    (out / "grid.csv").write_text("hand-written")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(EmuError, match=r"already holds 2 entries \(grid.csv, notes.txt\)"
                       r".*--force"):
        SweepStore.create(out, sweep)
    assert (out / "grid.csv").read_text() == "hand-written"
    assert sorted(p.name for p in out.iterdir()) == ["grid.csv", "notes.txt"]
    SweepStore.create(out, sweep, force=True)
    assert (out / "notes.txt").read_text() == "mine" and (out / "sweep.toml").exists()


def test_aggregation_gives_median_and_spread_over_repetitions(sweep, tmp_path):
    points = grid.expand(sweepfile.load(sweep))
    store = SweepStore.create(tmp_path / "out", sweep)
    _done(store, points[0], [3.0, 1.0, 2.0])
    _done(store, points[2], [5.0, 7.0])
    store.record(_attempt(points[1], "error", 1, "Exc: one"), None)
    store.record(_attempt(points[1], "error", 2, "Exc: two"), None)
    store.failed(points[1], 2, "Exc: two")
    from commands.sweep.aggregate import aggregate

    doc = aggregate(store, points, "s", ["transport.name", "fabric.queue_packets"])
    rows = doc["rows"]
    assert doc["counts"] == {"done": 2, "failed": 1, "missing": 1}
    assert rows[0]["figures"]["train_s"] == {"median": 2.0, "lo": 1.0, "hi": 3.0, "n": 3}
    assert rows[0]["reps"] == 3 and rows[0]["time_scale_factor"] == 1000.0
    assert rows[0]["step_time"] == "wall clock"
    assert rows[2]["figures"]["time_to_target_s"] == {"median": 3.0, "lo": 2.5, "hi": 3.5,
                                                      "n": 2}
    assert rows[1]["status"] == "failed" and rows[1]["attempts"] == 2
    assert rows[1]["error"] == "Exc: two"
    with (store.root / "grid.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [r["status"] for r in table] == ["done", "failed", "done", "missing"]
    assert [r["transport.name"] for r in table] == ["mrc", "mrc", "rc", "rc"]
    assert [r["fabric.queue_packets"] for r in table] == ["32", "64", "32", "64"]
    assert (table[0]["train_s"], table[0]["train_s_lo"], table[0]["train_s_hi"]) == \
        ("2.0", "1.0", "3.0")
    assert json.loads((store.root / "grid.json").read_text())["rows"][2]["id"] == points[2].id
    for axis in ("transport.name", "fabric.queue_packets"):
        assert (store.root / "plots" / f"vs-{axis}.png").stat().st_size > 1000
    # the merged calibration: every done point's variants, which the explorer reads
    cal = json.loads((store.root / "calibration.json").read_text())
    assert sorted(cal["variants"]) == sorted([f"{points[0].id}/mrc", f"{points[2].id}/rc"])
    assert cal["variants"][f"{points[2].id}/rc"]["point"]["values"] == {
        "transport.name": "rc", "fabric.queue_packets": 32}
    loaded = load_calibration([store.root / "calibration.json"])
    assert loaded.get("mrc").eta.value == pytest.approx(0.5)
    assert loaded.get("rc_lossy").eta.value == pytest.approx(0.7)  # the emulated, lossy RC


class _Ref:
    """An object reference: hashed by identity."""

    def __init__(self, task):
        self.task = task


class _FakeRay(types.ModuleType):
    """Enough of Ray for the scheduler: tasks run at once, in order, on one 'node'."""

    def __init__(self, outcomes):
        super().__init__("ray")
        self.outcomes, self.calls = outcomes, []

    def remote(self, **opts):
        assert opts["resources"] == {"fabric_slot": 1} and opts["max_retries"] == 0
        ray = self

        class Remote:
            def __init__(self, fn):
                pass

            def remote(self, task):
                ray.calls.append(task)
                return _Ref(task)

        return Remote

    def wait(self, refs, num_returns=1, timeout=None):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref, timeout=None):
        task = ref.task
        result = self.outcomes[task.index].pop(0)
        if isinstance(result, Exception):
            raise result
        return PointOutcome(id=task.id, ok=result is None, files={"x": b"1"}, node="n",
                            start=0.0, end=1.0, error=result)


def test_a_failing_point_is_retried_then_recorded_failed(sweep, tmp_path, monkeypatch):
    exceptions = types.ModuleType("ray.exceptions")

    class RayError(Exception):
        pass

    class TaskCancelledError(RayError):
        pass

    exceptions.RayError, exceptions.TaskCancelledError = RayError, TaskCancelledError
    points = grid.expand(sweepfile.load(sweep))
    fake = _FakeRay({0: [None], 1: ["Exc: first", RayError("node died")], 2: ["Exc: x", None],
                     3: [None]})
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setitem(sys.modules, "ray.exceptions", exceptions)
    store = SweepStore.create(tmp_path / "out", sweep)
    counts = scheduler.run_points(points, points, store, "base", 0, max_parallel=2, retries=1,
                                  say=lambda m: None)
    assert (counts.done, counts.failed, counts.retried) == (3, 1, 2)
    assert [t.index for t in fake.calls] == [0, 1, 2, 3, 1, 2]  # retries go to the back
    atts = [(r["index"], r["attempt"], r["status"]) for r in store.attempts()]
    assert sorted(atts) == [(0, 1, "done"), (1, 1, "error"), (1, 2, "error"), (2, 1, "error"),
                            (2, 2, "done"), (3, 1, "done")]
    failed = [r for r in store.records() if r["type"] == "failed"]
    assert failed == [{"type": "failed", "id": points[1].id, "index": 1, "attempts": 2,
                       "error": "RayError: node died"}]
    assert store.done_ids() == {points[0].id, points[2].id, points[3].id}
    assert (tmp_path / "out" / "failed" / f"{points[1].id}-1" / "x").exists()
