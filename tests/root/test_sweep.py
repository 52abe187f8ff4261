"""`emu sweep` on a local one-node Ray cluster (root): every point once, never two fabrics
at once on the node, results gathered and aggregated; a point that fails at run time is
retried then reported failed while the others complete; Ctrl-C keeps what is done and
--resume runs only the rest; so do SIGTERM and SIGHUP, however they are sent."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commands.sweep.cluster import connect
from commands.sweep.run import run_sweep
from commands.sweep.store import read_records
from emu import registry
from explorer.calibration import load_calibration
from workloads.training.results import read_jsonl

from .procs import process_tree, small_run

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]

# The smallest run: 2 workers on a 2 x 2 x 2 x 1 fabric, 8 steps (about 6 s a point).
BASE = small_run("sweeptest", steps=8, extra='eval_every = 4\ntarget_accuracy = 0.5\n')


def _sweep(d: Path, body: str, base: str = BASE) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "base.toml").write_text(base)
    (d / "s.toml").write_text(f'name = "t"\nbase = "base.toml"\n{body}')
    return d / "s.toml"


def _attempts(out: Path) -> list[dict]:
    return [r for r in read_records(out / "sweep.jsonl") if r["type"] == "attempt"]


def _netns_left() -> list[str]:
    """The names of a point's fabric (every point's fabric is named "run")."""
    return [n for n in os.listdir("/run/netns") if n.startswith("sae-run-")] \
        if os.path.isdir("/run/netns") else []


@pytest.fixture(scope="module")
def cluster():
    with connect("local", say=lambda m: None) as info:
        yield info


@pytest.fixture(scope="module")
def grid4(cluster, tmp_path_factory):
    d = tmp_path_factory.mktemp("grid4")
    f = _sweep(d, 'seeds = [1, 2]\n[axes]\n"transport.name" = ["mrc", "rc"]\n')
    res = run_sweep(f, cluster="local", out=d / "out", say=lambda m: None)
    return res


def test_every_point_runs_once_never_two_fabrics_at_once(grid4, cluster):
    assert cluster.slots == 1 and cluster.nodes == 1
    atts = _attempts(grid4.out)
    assert sorted(a["id"] for a in atts) == sorted(p.id for p in grid4.points)
    assert all(a["status"] == "done" and a["attempt"] == 1 for a in atts)
    # one node, one fabric slot: the points' runs (fabric build to teardown, on the node's
    # clock) follow one another
    assert len({a["node"] for a in atts}) == 1
    spans = sorted((a["start"], a["end"]) for a in atts)
    assert all(s < e for s, e in spans)
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False))
    assert _netns_left() == []


def test_results_come_back_and_are_aggregated(grid4):
    out = grid4.out
    for p in grid4.points:
        d = out / "points" / p.id
        assert {"results.jsonl", "steps.csv", "calibration.json", "time_to_accuracy.png",
                "point.log"} <= {f.name for f in d.iterdir()}
        recs = read_jsonl(d / "results.jsonl")
        meta = next(r for r in recs if r["type"] == "meta")
        assert meta["experiment"]["transport"]["name"] == dict(p.values)["transport.name"]
        assert meta["experiment"]["seed"] == dict(p.values)["seed"]
        assert [r["steps"] for r in recs if r["type"] == "summary"] == [8]
    doc = json.loads((out / "grid.json").read_text())
    assert doc["counts"] == {"done": 4, "failed": 0, "missing": 0}
    assert [r["id"] for r in doc["rows"]] == [p.id for p in grid4.points]
    assert all(r["figures"]["steps"]["median"] == 8 and r["reps"] == 1 for r in doc["rows"])
    lines = (out / "grid.csv").read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("index,id,status,transport.name,seed,")
    assert {p.name for p in (out / "plots").iterdir()} == {"vs-transport.name.png",
                                                            "vs-seed.png"}
    cal = load_calibration([out / "calibration.json"])
    # RC on the emulator's FIFOs drops, so the explorer files it as rc_lossy
    assert set(cal.transports) == {"mrc", "rc_lossy"}


def test_a_point_failing_at_run_time_is_retried_then_reported_failed(cluster, tmp_path):
    # 0.001 ms of modelled compute is valid, but every step's real compute overruns it, so
    # the run is refused after it ends (workloads/training/overruns.py): a failure at run time
    base = BASE + 'compute = "modelled"\n'
    f = _sweep(tmp_path, 'retries = 1\n[axes]\n"workload.compute_ms" = [30.0, 0.001]\n', base)
    res = run_sweep(f, cluster="local", out=tmp_path / "out", say=lambda m: None)
    ok, bad = res.points
    assert res.counts is not None and (res.counts.done, res.counts.failed) == (1, 1)
    assert res.counts.retried == 1
    atts = _attempts(res.out)
    assert [(a["index"], a["attempt"], a["status"]) for a in atts if a["id"] == bad.id] == [
        (1, 1, "error"), (1, 2, "error")]
    assert [a["status"] for a in atts if a["id"] == ok.id] == ["done"]
    assert all("overr" in a["error"] for a in atts if a["id"] == bad.id)
    rows = res.grid["rows"]
    assert [r["status"] for r in rows] == ["done", "failed"]
    assert "overr" in rows[1]["error"] and rows[1]["attempts"] == 2
    # the failed attempts' results are kept for diagnosis
    assert (res.out / "failed" / f"{bad.id}-2" / "results.jsonl").exists()
    assert _netns_left() == []


def _own_fabrics(pid: int) -> list[registry.FabricState]:
    """The fabrics a process of ``pid``'s tree (a point's Ray task) owns, once every
    namespace they record is named."""
    tree = process_tree(pid)
    return [s for s in registry._states() if s.owner_pid in tree and s.namespaces
            and all((registry.NETNS_RUN_DIR / r["netns"]).exists()
                    for r in s.namespaces.values())]


def _ray_processes(tmp: str) -> list[int]:
    """The processes of the local cluster whose directory is ``tmp``: every one has its
    token's path in its environment (the head's, and all it started, tasks included)."""
    needle = f"RAY_AUTH_TOKEN_PATH={tmp}/token".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "commands.cli", "sweep", *args]


def _send(p: subprocess.Popen, how: str, signum: int) -> None:
    if how == "group":  # a terminal's foreground job: Ctrl-C, a closed terminal
        os.killpg(p.pid, signum)
    else:  # `kill`, `docker stop`, a scheduler; `timeout` passes it to its job and group
        os.kill(p.pid, signum)


# Ctrl-C, and the signals schedulers and terminals stop jobs with, as they send them:
# SIGTERM to the process (kill, docker stop, systemd), SIGTERM as `timeout` sends it (to
# the process and its whole process group), SIGHUP to the foreground job's process group
# (a closed terminal).
STOPS = [("SIGINT", "group"), ("SIGTERM", "process"), ("SIGTERM", "timeout"),
         ("SIGHUP", "group")]


@pytest.mark.parametrize(("name", "how"), STOPS, ids=[f"{n}-{h}" for n, h in STOPS])
def test_a_stop_keeps_what_is_done_and_resume_runs_only_the_rest(tmp_path, name, how):
    """Every stop leaves the points done, the running one cancelled and the rest missing,
    its fabric and cluster gone; the sweep that Ctrl-C stopped is then resumed and runs only
    what is missing (the files a stop leaves were checked alike for every signal)."""
    signum = getattr(signal, name)
    f = _sweep(tmp_path, 'seeds = [1, 2, 3]\n')
    out = tmp_path / "out"
    argv = _cli(str(f), "--out", str(out))
    if how == "timeout":
        argv = ["timeout", "3600", *argv]
    # its own process group, as a terminal's foreground job (or `timeout`'s)
    p = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    seen: list[registry.FabricState] = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # until the first point is done
            if any(a["status"] == "done" for a in _attempts(out)) if out.exists() else False:
                break
            if p.poll() is not None:
                pytest.fail(f"the sweep ended early: {p.communicate()[1][-3000:]}")
            time.sleep(0.2)
        else:
            pytest.fail("no point done within 180 s")
        # The next point is running once its fabric's namespaces are named (the first
        # point's fabric was gone before its attempt was recorded): the stop then
        # cancels it mid-run.
        deadline = time.monotonic() + 120
        while not (seen := _own_fabrics(p.pid)):
            if p.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the next point did not start within 120 s: "
                            f"{[(a['id'], a['status']) for a in _attempts(out)]}")
            time.sleep(0.05)
        _send(p, how, signum)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + signum, err[-3000:]
    assert f"interrupted ({name})" in err and f"--resume {out}" in err, err[-3000:]
    assert "cancelling 1 running point(s)" in err
    assert "Traceback" not in err and "received ***" not in err, err[-3000:]
    tmp = re.search(r"logs in (/tmp/sae-ray-\w+)", err)
    assert tmp is not None, err
    assert not Path(tmp.group(1)).exists()  # the local cluster's directory is removed...
    assert _ray_processes(tmp.group(1)) == []  # ... and its processes are gone
    for st in seen:  # the cancelled point's fabric is torn down on its node
        assert not st.path.exists(), f"state file {st.path} left"
        for rec in st.namespaces.values():
            assert not (registry.NETNS_RUN_DIR / rec["netns"]).exists(), rec["netns"]
        inodes = {r["inode"] for r in st.namespaces.values() if r.get("inode")}
        assert registry.processes_in(inodes) == []
        for d in st.tmpdirs:
            assert not Path(d).exists(), f"temp dir {d} left"
    first = _attempts(out)
    done = {a["id"] for a in first if a["status"] == "done"}
    assert 1 <= len(done) < 3
    assert all(a["status"] in ("done", "cancelled") for a in first)
    # the point running at the stop was cancelled, not recorded as done with partial
    # results
    cancelled = {a["id"] for a in first if a["status"] == "cancelled"}
    assert len(cancelled) == 1 and not cancelled & done
    assert json.loads((out / "grid.json").read_text())["counts"]["done"] == len(done)
    if (name, how) != STOPS[0]:
        return  # what a stop leaves is the same whatever the signal: resumed once, below

    r = subprocess.run(_cli(str(f), "--resume", str(out)), capture_output=True, text=True,
                       timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    atts = _attempts(out)
    second = [a for a in atts if a["session"] == 1]
    grid = json.loads((out / "grid.json").read_text())
    ids = {row["id"] for row in grid["rows"]}
    assert {a["id"] for a in second} == ids - done  # only the missing points ran
    assert cancelled <= {a["id"] for a in second}
    assert all(a["status"] == "done" for a in second)
    assert grid["counts"] == {"done": 3, "failed": 0, "missing": 0}
