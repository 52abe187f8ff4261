"""Training pieces that need no root: pipeline stages over the fake network, the job-step
aggregation and the run summary."""

from __future__ import annotations

import pytest
import torch

from workloads.collectives.fakecomm import FakeCluster
from workloads.models import build, split_stages
from workloads.records import StepRecord
from workloads.training.jobstep import StepAggregator
from workloads.training.pipeline import PipelineStage
from workloads.training.rank_configs import worker_configs
from workloads.training.summary import summarize


def _grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.parameters()]


@pytest.mark.parametrize("model_name,stages,transport", [
    ("digits_cnn", 2, "mrc"), ("digits_cnn", 3, "rc"), ("tiny_lm", 2, "mrc")])
def test_pipeline_step_equals_single_process_backward(model_name, stages, transport):
    """GPipe over the fake network: the loss and every parameter's gradient equal one
    process's forward/backward of the same batch (microbatch losses / microbatches)."""
    torch.set_num_threads(1)
    ref_model, task = build(model_name, seed=3)
    x, y = task.shards(0, 1, 8).batch(0)
    ref_loss = task.loss_fn(ref_model(x), y)
    ref_loss.backward()
    ref = _grads(ref_model)

    parts = []  # every rank builds the whole model (same seed) and keeps its stage
    for _ in range(stages):
        m, _ = build(model_name, seed=3)
        parts.append(split_stages(model_name, m, stages))
    cluster = FakeCluster(transport, stages)
    pipes = [PipelineStage(parts[r], r, cluster.comms[r], task.loss_fn) for r in range(stages)]
    results = cluster.run(lambda c: pipes[c.rank].train_step(x, y, microbatches=4))
    assert results[-1].loss == pytest.approx(ref_loss.item(), rel=1e-5)
    assert all(r.loss is None for r in results[:-1])
    got = [g for r in range(stages) for g in _grads(parts[r][r])]
    assert len(got) == len(ref)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert all(r.bytes > 0 for r in results)


def test_pipeline_evaluate_gathers_every_stage():
    model, task = build("digits_cnn", seed=1)
    want = task.evaluate(model)
    parts = [split_stages("digits_cnn", build("digits_cnn", seed=s)[0], 2) for s in (1, 9)]
    # rank 1 starts from other weights: evaluate() must bring rank 0's stage over
    with torch.no_grad():
        for p, q in zip(parts[1][1].parameters(), parts[0][1].parameters(), strict=True):
            p.copy_(q)
    cluster = FakeCluster("mrc", 2)
    pipes = [PipelineStage(parts[r], r, cluster.comms[r], task.loss_fn) for r in range(2)]
    out = cluster.run(lambda c: pipes[c.rank].evaluate(task.evaluate))
    assert out[0] is None
    assert out[1] == pytest.approx(want)


def test_pipeline_refuses_bad_microbatches():
    model, task = build("digits_cnn", seed=1)
    cluster = FakeCluster("mrc", 2)
    st = PipelineStage(split_stages("digits_cnn", model, 2), 0, cluster.comms[0], task.loss_fn)
    x, y = task.shards(0, 1, 8).batch(0)
    with pytest.raises(ValueError, match="microbatches=9"):
        next(st.train_step(x, y, microbatches=9))


def _rec(rank, step, start, end, t_enter, t_exit, compute, loss=1.0, **kw):
    return StepRecord(rank=rank, step=step, start=start, end=end, t_enter=t_enter,
                      t_exit=t_exit, compute_s=compute, loss=loss, t_s=end,
                      comm_s=t_exit - t_enter, step_s=end - start, lr=0.1, epoch=0, bytes=0,
                      **kw)


def test_step_aggregator_charges_the_network_from_the_last_entry():
    agg = StepAggregator(2)
    assert agg.add(_rec(0, 0, 0.0, 1.0, 0.2, 1.0, 0.2, loss=2.0)) is None
    # rank 1 computed until 0.6: the 0.4 s rank 0 waited is not network time
    job = agg.add(_rec(1, 0, 0.0, 1.0, 0.6, 1.0, 0.6, loss=4.0))
    assert job.exposed_comm_s == pytest.approx(0.4)
    assert job.loss == pytest.approx(3.0)
    assert job.step_s == pytest.approx(1.0)
    agg.evaluated(0, 0.5)  # rank 0 evaluated for 0.5 s after step 0
    agg.add(_rec(0, 1, 1.5, 2.0, 1.7, 2.0, 0.2))
    job = agg.add(_rec(1, 1, 1.0, 2.1, 1.8, 2.1, 0.2))
    assert job.step_s == pytest.approx(0.6)  # 2.1 - 1.0 - 0.5 of evaluation
    assert job.train_s == pytest.approx(1.6)


def test_summary_time_to_target_uses_training_time_and_windows():
    recs = [{"type": "job_step", "label": "a", "rep": 0, "step": i, "t_s": 0.1 * (i + 1),
             "step_s": 0.3 if 5 <= i < 7 else 0.1, "compute_s": 0.05,
             "exposed_comm_s": 0.05} for i in range(10)]
    recs += [{"type": "eval", "label": "a", "rep": 0, "step": 3, "accuracy": 0.5},
             {"type": "eval", "label": "a", "rep": 0, "step": 7, "accuracy": 0.96}]
    recs += [{"type": "event", "label": "a", "rep": 0, "action": "apply", "kind": "link_down",
              "link": "x", "fired": 0.55},
             {"type": "event", "label": "a", "rep": 0, "action": "restore",
              "kind": "link_down", "link": "x", "fired": 0.7}]
    s = summarize(recs, "a", 0, "accuracy", 0.95)
    assert s["time_to_target_s"] == pytest.approx(0.1 * 6 + 0.3 * 2)
    assert s["steps_to_target"] == 8
    assert s["healthy_step_ms"] == pytest.approx(100.0)
    assert s["failure_step_ms_max"] == pytest.approx(300.0)
    assert s["failure_lost_s"] == pytest.approx(0.4)
    assert s["final_accuracy"] == 0.96


def test_worker_configs_plan_connections_per_transport():
    from workloads import experiment

    exp = experiment.load("experiments/training/digits_mrc_linkcut.toml")
    spec = exp.fabric_spec()
    cfgs = worker_configs(exp, seed=1, compute_ms=None)
    assert [c.host for c in cfgs] == list(exp.hosts())
    assert [c.rank for c in cfgs] == [0, 1, 2, 3] and {c.size for c in cfgs} == {4}
    assert all(c.compute_ms is None and c.first_gate is None for c in cfgs)
    # MRC: every SRv6 path of each pair is an EV of one connection per pair
    c01 = cfgs[0].conns[1]
    assert len(c01) == 1 and len(c01[0].paths) == len(spec.paths(cfgs[0].host,
                                                                 cfgs[1].host))
    assert c01[0].conn == cfgs[1].conns[0][0].conn
    rc = worker_configs(experiment.with_overrides(exp, {"transport.name": "rc"}), 1, None)
    lanes = rc[0].conns[1]
    assert len(lanes) == spec.planes and len({c.conn for c in lanes}) == spec.planes
    gloo = worker_configs(experiment.with_overrides(exp, {"transport.name": "gloo"}), 1, None)
    assert gloo[0].conns == {} and gloo[0].master_addr == str(spec.address(cfgs[0].host))
    # the compute model only reaches workers whose compute is modelled
    assert worker_configs(exp, 1, 3.0)[0].compute_ms is None
    modelled = experiment.with_overrides(exp, {"workload.compute": "modelled"})
    assert {c.compute_ms for c in worker_configs(modelled, 1, 3.0, first_gate=7)} == {3.0}
    assert {c.first_gate for c in worker_configs(modelled, 1, 3.0, first_gate=7)} == {7}


def test_gradsync_bound_needs_a_norm_and_ignores_a_steady_one():
    """Round 0 has no gradient-norm signal: reliable. A steady norm afterwards never
    looks like a critical regime (no spurious lossless window)."""
    from workloads.collectives.phase import PhaseAwareConfig
    from workloads.experiment.dblp import DblpConfig
    from workloads.training.gradsync import GradSync

    sync = GradSync("transport", 4, comm=None, dblp=DblpConfig(
        policy="phase_aware", phase=PhaseAwareConfig(base=0.1, cap=0.1, critical_epochs=0,
                                                     window=5, eta=0.5)))
    whys = []
    for step in range(30):
        sync.set_signals(step, 0, 0.1)
        whys.append(sync._bound_rec["why"])
        assert sync._bound.tolerance == (0.0 if step == 0 else 0.1)
        sync._norm_sq += 4.0  # what exchange() adds: this step's averaged-gradient norm^2
        sync.rounds.append({})
    assert whys[0] == "no_signal_yet" and "critical_regime" not in whys
    assert sync.last_norm == pytest.approx(2.0)
    # a jump of the norm by more than eta: the next window is lossless
    for step in range(30, 45):
        sync.set_signals(step, 0, 0.1)
        whys.append(sync._bound_rec["why"])
        sync._norm_sq += 100.0
        sync.rounds.append({})
    assert "critical_regime" in whys[30:]
