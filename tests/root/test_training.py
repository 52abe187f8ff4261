"""Collectives and training on the real fabric (root): exact results over every transport,
data-parallel training equal to one process, crashes and Ctrl-C end cleanly."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from emu.errors import EmuError
from emu.fabric import Fabric
from topologies import MultiPlaneClos
from workloads import experiment
from workloads.collectives.check import check_collectives, inputs
from workloads.training.results import ResultsWriter, read_jsonl
from workloads.training.run import run_on_fabric
from workloads.training.schedule import lr_at_step

pytestmark = pytest.mark.root

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2)
HOSTS = ["h0", "h2", "h1"]  # 3 ranks over both racks


@pytest.fixture(scope="module")
def fab():
    with Fabric(SPEC, name="trtest") as f:
        yield f


@pytest.mark.parametrize("transport", ["mrc", "rc", "dblp"])
def test_every_collective_is_exact_on_the_fabric(fab, transport):
    got, want = check_collectives(fab, transport, HOSTS)
    for r, (g, w) in enumerate(zip(got, want, strict=True)):
        for name, h in w.items():
            assert g[name] == h, f"rank {r} {name} over {transport}"


def test_hierarchical_allreduce_is_exact_on_the_fabric(fab):
    # groups stand in for DCs (racks here): rack 0 = ranks 0, 1; rack 1 = ranks 2, 3
    got, want = check_collectives(fab, "mrc", ["h0", "h1", "h2", "h3"],
                                  groups=[[0, 1], [2, 3]])
    assert [g["hierarchical"] for g in got] == [w["hierarchical"] for w in want]


def test_bounded_transpose_allreduce_differs_only_where_reported(fab):
    """A deadline shorter than the data needs: rounds close with chunks missing; every
    entry outside the reported lost ranges is the exact sum; all ranks agree."""
    n, seed = 200_000, 9
    got, _ = check_collectives(fab, "dblp", HOSTS, n=n, seed=seed,
                               bound={"tolerance": 0.5, "deadline_s": 0.002})
    total = np.sum([inputs(r, n, seed) for r in range(len(HOSTS))], axis=0, dtype=np.float32)
    values = [np.asarray(g["bounded"]["values"], dtype=np.float32) for g in got]
    for v in values[1:]:
        assert np.array_equal(v, values[0])  # the all-gather is reliable
    lost = np.zeros(n, dtype=bool)
    for g in got:
        for lo, hi in g["bounded"]["lost"]:
            lost[lo:hi] = True
    assert sum(g["bounded"]["lost_pairs"] for g in got) > 0
    assert np.array_equal(values[0][~lost], total[~lost])
    assert any(d < 1 for g in got for d in g["bounded"]["delivered"])


def _digits_exp(transport: str, workers: int, steps: int, **workload) -> experiment.Experiment:
    return experiment.parse({
        "name": "t", "seed": 4,
        "fabric": {"planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
        "transport": {"name": transport},
        "workload": {"model": "digits_cnn", "workers": workers, "steps": steps,
                     "lr": 0.05, "lr_schedule": "cosine", "eval_every": 5,
                     **{"batch_size": 32, **workload}}})


def _single_process_losses(exp: experiment.Experiment) -> list[float]:
    from workloads.models import build

    torch.set_num_threads(1)
    model, task = build("digits_cnn", exp.seed)
    shards = task.shards(0, 1, exp.workload.batch_size)
    opt = task.optimizer(model.parameters())
    out = []
    for step in range(exp.workload.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at_step(exp.workload.lr, exp.workload.lr_schedule, exp.workload.steps,
                                 step)
        x, y = shards.batch(step)
        loss = task.loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(loss.item())
    return out


@pytest.mark.parametrize("transport", ["mrc", "gloo"])
def test_two_workers_follow_the_single_process_loss_curve(fab, tmp_path, transport):
    exp = _digits_exp(transport, 2, 25)
    with ResultsWriter(tmp_path, label=transport) as w:
        out = run_on_fabric(fab, exp, 0, w, transport, say=lambda m: None)
    assert out.ok, out.error
    steps = sorted((r for r in read_jsonl(tmp_path / "results.jsonl")
                    if r["type"] == "job_step"), key=lambda r: r["step"])
    assert [r["step"] for r in steps] == list(range(25))
    ref = _single_process_losses(exp)
    # each worker's loss is its half-batch mean: their mean is the global batch's
    np.testing.assert_allclose([r["loss"] for r in steps], ref, rtol=2e-4, atol=1e-5)
    assert all(r["exposed_comm_s"] >= 0 and r["compute_s"] > 0 for r in steps)


def test_a_captured_run_has_a_pcap_per_port_that_decodes_on_its_clock(fab, tmp_path):
    from transports.core import wire
    from transports.core.scapy_layer import SaeTransport, read_pcap
    from workloads.training.variants import Variant, run_variants

    exp = _digits_exp("mrc", 2, 6)
    points = [(exp.hosts()[0], "p0"), (exp.hosts()[0], "p1")]
    with ResultsWriter(tmp_path, label="mrc/x") as w:
        (out,) = run_variants(fab, w, [Variant("mrc/x", exp)], say=lambda m: None,
                              captures=points)
    assert out.ok, out.error
    recs = read_jsonl(tmp_path / "results.jsonl")
    caps = [r for r in recs if r["type"] == "capture"]
    assert [(r["node"], r["ifname"]) for r in caps] == points
    steps = [r for r in recs if r["type"] == "step"]
    lo, hi = min(r["t_enter"] for r in steps), max(r["t_exit"] for r in steps)
    data, inside = 0, 0
    for r in caps:
        assert r["error"] is None and r["dropped"] == 0
        path = tmp_path / r["path"]
        assert path.name == f"mrc-x-rep0-{r['node']}-{r['ifname']}.pcap"
        pkts = read_pcap(path)
        assert len(pkts) == r["captured"] > 0
        for p in pkts:
            if p[SaeTransport].kind != wire.DATA:
                continue
            data += 1
            # on the step records' clock (CLOCK_MONOTONIC): the steps' data falls within
            # them (the workers' set-up exchanges come before the first step)
            mono = float(p.time) - r["realtime_minus_monotonic_s"]
            inside += lo <= mono <= hi
            assert lo - 5.0 < mono < hi + 5.0
    assert data > 0 and inside > data / 2


def test_dblp_training_reports_its_rounds(fab, tmp_path):
    exp = experiment.parse({
        "name": "t", "seed": 2,
        "fabric": {"planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
        "transport": {"name": "dblp", "dblp": {"policy": "fixed", "tolerance": 0.1,
                                               "deadline_ms": 1.0}},
        "workload": {"model": "digits_cnn", "workers": 3, "steps": 20, "batch_size": 30,
                     "eval_every": 10}})
    with ResultsWriter(tmp_path, label="dblp") as w:
        out = run_on_fabric(fab, exp, 0, w, "dblp", say=lambda m: None)
    assert out.ok, out.error
    recs = [r for r in read_jsonl(tmp_path / "results.jsonl") if r["type"] == "step"]
    assert len(recs) == 3 * 20
    # the first round has no gradient-norm signal yet: reliable; then the fixed bound
    assert all(r["tolerance"] == (0.0 if r["step"] == 0 else 0.1) for r in recs)
    assert {r["mode"] for r in recs if r["step"] == 0} == {"no_signal_yet"}
    # a 1 ms deadline on rounds of ~40 KB at 100 Mbit/s cuts rounds short: losses are
    # reported, and the loss stays finite (filled entries, error feedback)
    assert any(r["delivered"] < 1 for r in recs)
    assert any(r["lost_entries"] > 0 for r in recs)
    assert all(math.isfinite(r["loss"]) for r in recs)


def test_a_crashing_worker_ends_the_run_with_its_traceback(fab, tmp_path, monkeypatch):
    import workloads.training.run as runner  # the module run_on_fabric looks it up in

    orig = runner.worker_configs

    def crashing(exp, seed, compute_ms, first_gate=None):
        cfgs = orig(exp, seed, compute_ms, first_gate)
        cfgs[1] = dataclasses.replace(cfgs[1], inject_error_at_step=3)
        return cfgs

    monkeypatch.setattr(runner, "worker_configs", crashing)
    exp = _digits_exp("mrc", 3, 50, batch_size=30)
    with ResultsWriter(tmp_path, label="mrc") as w:
        out = run_on_fabric(fab, exp, 0, w, "mrc", say=lambda m: None, timeout_s=120)
    assert not out.ok and "worker 1" in out.error
    errors = [r for r in read_jsonl(tmp_path / "results.jsonl") if r["type"] == "error"]
    assert errors and "inject_error_at_step" in errors[0]["traceback"]
    assert errors[0]["rank"] == 1
    # every worker is gone from the fabric's namespaces
    time.sleep(0.5)
    for h in exp.hosts():
        pids = subprocess.run(["ip", "netns", "pids", fab.netns(h)], capture_output=True,
                              text=True).stdout.split()
        assert len(pids) <= 1, (h, pids)  # only the namespace's own shell


def _by_step_exp(transport: str, events: list[dict], **top) -> experiment.Experiment:
    pipeline = transport.endswith("_pipeline")
    workload = ({"kind": "pipeline", "microbatches": 2} if pipeline else {})
    return experiment.parse({
        "name": "gates", "seed": 3, **top,
        "fabric": {"planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
        "transport": {"name": transport.removesuffix("_pipeline"),
                      # the digits CNN's blocks are too small for a tolerance to bite:
                      # a deadline is what makes its rounds bounded
                      **({"dblp": {"deadline_ms": 50.0}} if transport == "dblp" else {})},
        "workload": {"model": "digits_cnn", "workers": 2, "hosts": ["h0", "h2"], "steps": 9,
                     "batch_size": 32, "eval_every": 4, **workload},
        "event": events})


DEGRADE = {"do": "degrade_link", "link": "p0l1-p0s1", "rate_mbit": 50.0}
UNDEGRADE = {"do": "restore", "what": "degrade_link", "link": "p0l1-p0s1", "rate_mbit": 50.0}


@pytest.mark.parametrize("transport", ["mrc", "rc", "dblp", "gloo", "mrc_pipeline"])
def test_a_failure_at_step_k_fires_before_step_k_plus_1_on_every_rank(fab, tmp_path,
                                                                       transport):
    """at_step = k: every rank finished step k (and its evaluation) before the failure
    was applied, and none started step k + 1 before it took effect; the wait is not in
    the step times. MRC also cuts the busiest uplink, chosen from the training's traffic."""
    cut = {"do": "fail_busiest_uplink", "leaf": "p0l0,p1l0"}
    events = [{"at_step": 2, **DEGRADE}, {"at_step": 5, **UNDEGRADE}]
    if transport == "mrc":  # the others' ECMP has no control plane here to reroute a cut
        events = [{"at_step": 2, **DEGRADE}, {"at_step": 3, **cut},
                  {"at_step": 5, **UNDEGRADE}, {"at_step": 5, "do": "restore",
                                                "what": "fail_busiest_uplink",
                                                "leaf": "p0l0,p1l0"}]
    exp = _by_step_exp(transport, events)
    with ResultsWriter(tmp_path, label=transport) as w:
        out = run_on_fabric(fab, exp, 0, w, transport, say=lambda m: None, timeout_s=300)
    assert out.ok, out.error
    recs = read_jsonl(tmp_path / "results.jsonl")
    steps = {(r["rank"], r["step"]): r for r in recs if r["type"] == "step"}
    jobs = {r["step"]: r for r in recs if r["type"] == "job_step"}
    evs = [r for r in recs if r["type"] == "event"]
    assert len(steps) == 2 * 9 and sorted(jobs) == list(range(9))
    assert [(e["action"], e["at_step"], e["step"]) for e in evs] == [
        (e.get("what") and "restore" or "apply", e["at_step"], e["at_step"]) for e in events]
    for e in evs:
        assert "error" not in e, e
        k = e["step"]
        for rank in (0, 1):
            done, nxt = steps[(rank, k)], steps[(rank, k + 1)]
            t0 = done["end"] - done["t_s"]  # the common start (t_s counts from it)
            assert done["end"] - t0 <= e["fired"] + 1e-6, (rank, e)
            assert nxt["start"] - t0 >= e["applied"] - 1e-6, (rank, e)
        # the gate is in no step time: step k + 1 counts from its last rank's start
        last_start = max(steps[(rank, k + 1)]["start"] for rank in (0, 1))
        assert jobs[k + 1]["step_s"] == pytest.approx(
            max(steps[(rank, k + 1)]["end"] for rank in (0, 1)) - last_start, abs=1e-5)
    if transport == "mrc":
        cut_rec = next(e for e in evs if e["kind"] == "busiest_uplink_down")
        assert cut_rec["chosen_rx_packets"] > 0 and cut_rec["chosen"].startswith(("p0l0",
                                                                                  "p1l0"))


STEP_BURST = {"do": "microburst", "target": "p0l1:h2", "sources": ["h1", "h3"],
              "on_ms": 20.0, "every_steps": 2, "jitter_ms": 10.0, "seed": 4}


def test_step_locked_bursts_open_their_draw_after_the_ranks_resume(fab, tmp_path):
    """every_steps = 2 from step 1: a window after the boundaries of steps 1, 3 and 5, each
    opening its seed's draw after the instant every rank resumed from that boundary, and
    every sender bursting in each one (the gates are in no step time)."""
    restore = {"do": "restore", "what": "microburst",
               **{k: v for k, v in STEP_BURST.items() if k != "do"}}
    exp = _by_step_exp("mrc", [{"at_step": 1, **STEP_BURST}, {"at_step": 7, **restore}])
    with ResultsWriter(tmp_path, label="mrc") as w:
        out = run_on_fabric(fab, exp, 0, w, "mrc", say=lambda m: None, timeout_s=300)
    assert out.ok, out.error
    recs = read_jsonl(tmp_path / "results.jsonl")
    steps = {(r["rank"], r["step"]): r for r in recs if r["type"] == "step"}
    evs = [r for r in recs if r["type"] == "event"]
    assert [e["action"] for e in evs] == ["apply", "window", "window", "window", "restore"]
    assert all("error" not in e for e in evs), evs
    spec = exp.timeline().events[0].action.burst
    windows = evs[1:4]
    assert [(e["step"], e["burst"]) for e in windows] == [(1, 0), (3, 1), (5, 2)]
    t0 = steps[(0, 0)]["end"] - steps[(0, 0)]["t_s"]  # the common start (t_s counts from it)
    for e in windows:
        assert e["opens"] - e["resumed"] == pytest.approx(spec.window_start(e["burst"]),
                                                          abs=2e-6)
        starts = [steps[(rank, e["step"] + 1)]["start"] - t0 for rank in (0, 1)]
        # every rank resumed on the instant (a woken rank may start a little late)
        assert all(e["resumed"] - 1e-6 <= s < e["resumed"] + 0.05 for s in starts), starts
    done = evs[-1]
    assert done["bursts"] == 3, done  # one burst per window, none skipped
    offsets = done["start_offsets_ms"]
    assert sorted(offsets) == ["h1", "h3"]
    assert all(v is not None and 0.0 <= v < STEP_BURST["on_ms"] for v in offsets.values())


def test_events_in_modelled_time_fire_at_a_step_boundary(fab, tmp_path):
    """clock = "modelled": an event at t fires at the first step boundary whose training
    time reached t, with every rank held there."""
    # 10 ms of modelled compute per step: the training clock passes 0.045 s in step 4
    exp = _by_step_exp("mrc", [{"at": 0.0, **DEGRADE}, {"at": 0.045, **UNDEGRADE}],
                       clock="modelled")
    exp = experiment.with_overrides(exp, {"workload.compute": "modelled",
                                          "workload.compute_ms": 10.0})
    with ResultsWriter(tmp_path, label="mrc") as w:
        out = run_on_fabric(fab, exp, 0, w, "mrc", say=lambda m: None, compute_ms=10.0,
                            timeout_s=300)
    assert out.ok, out.error
    recs = read_jsonl(tmp_path / "results.jsonl")
    jobs = {r["step"]: r for r in recs if r["type"] == "job_step"}
    first, second = [r for r in recs if r["type"] == "event"]
    assert first["step"] == -1 and first["train_s"] == 0.0  # before step 0
    k = second["step"]
    clock = [sum(jobs[i]["model_step_s"] for i in range(j + 1)) for j in range(9)]
    assert k <= 4 and clock[k] >= 0.045 and (k == 0 or clock[k - 1] < 0.045)
    assert second["train_s"] == pytest.approx(clock[k], abs=1e-5)
    assert 0 <= second["late_ms"] <= jobs[k]["model_step_s"] * 1000 + 1e-3


def test_experiment_errors_fail_before_anything_is_built(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[workload]\nmodel = "digits_cnn"\nworkers = 2\nsteps = 5\n'
                   'batch_sise = 4\n')
    before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    p = subprocess.run([sys.executable, "-m", "commands.cli", "run", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "batch_sise" in p.stderr
    after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    assert after == before


def test_ctrl_c_tears_down_and_keeps_the_results(tmp_path):
    out = tmp_path / "run"
    exp = tmp_path / "e.toml"
    exp.write_text('name = "ctrlc"\n[fabric]\nplanes = 2\nspines = 2\nleaves = 2\n'
                   'hosts_per_leaf = 1\n[workload]\nmodel = "digits_cnn"\nworkers = 2\n'
                   'steps = 100000\nbatch_size = 32\n')
    # its own process group, as a terminal's foreground job: Ctrl-C goes to the group
    p = subprocess.Popen([sys.executable, "-m", "commands.cli", "run", str(exp), "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until some steps were recorded
            path = out / "results.jsonl"
            if path.exists() and sum(r["type"] == "job_step" for r in read_jsonl(path)) >= 20:
                break
            time.sleep(0.5)
        else:
            pytest.fail("no steps recorded within 120 s")
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    recs = read_jsonl(out / "results.jsonl")
    assert sum(r["type"] == "job_step" for r in recs) >= 20
    assert not [r for r in recs if r["type"] == "error"]  # workers did not see the signal
    assert (out / "steps.csv").exists()
    left = [n for n in os.listdir("/run/netns") if n.startswith("sae-run")] \
        if os.path.isdir("/run/netns") else []
    assert left == []
    state = Path("/run/scaleacross-emu")
    assert not state.exists() or not any(state.glob("run*"))


def test_bad_transport_for_pipeline_is_refused():
    with pytest.raises(EmuError, match="gloo"):
        experiment.parse({"name": "p", "transport": {"name": "gloo"},
                          "workload": {"kind": "pipeline", "model": "digits_cnn",
                                       "workers": 2, "steps": 3}})


def test_ring_allreduce_bench_is_exact_and_near_its_bound_for_every_transport(fab):
    """The all-reduce bench on this fabric: every rank's buffer is the exact sum for MRC,
    RC and gloo, and each iteration is no faster than the ring's bandwidth bound."""
    from commands.bench.allreduce import bench_allreduce

    res = bench_allreduce(fab, ["h0", "h3"], sizes=(256 << 10,), reps=1)
    (size,) = res["sizes"].values()
    for t in ("mrc", "rc", "gloo"):
        assert size[t]["warm_x_bound"]["min"] >= 0.95  # nothing beats the wire
        assert len(size[t]["warm_s"]) == 1
