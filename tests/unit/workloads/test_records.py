"""Process records (no root): they serialise and parse back, the job-step aggregator is
exact and thread-safe, gates hold every rank, overruns are counted and refused."""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from emu.errors import EmuError
from transports.core.cc import NsccConfig
from transports.core.dblp.config import DblpCoreConfig
from transports.core.mrc import MrcConfig
from transports.core.rc import RcConfig
from transports.kernel import GlooConfig
from transports.planrecord import ConnPlan
from workloads import experiment
from workloads.collectives.phase import PhaseAwareConfig
from workloads.experiment.dblp import DblpConfig
from workloads.recordcodec import decode, encode
from workloads.records import (
    Done,
    EvalRecord,
    GateReached,
    Ready,
    Release,
    Start,
    StepRecord,
    WorkerConfig,
    WorkerError,
)
from workloads.training import worker as wk
from workloads.training.jobstep import OverrunStats, StepAggregator
from workloads.training.overruns import overrun_stats, refuse_overruns
from workloads.training.run import RunOutcome
from workloads.training.variants import Variant, schedule
from workloads.training.worker_job import WorkerJob

ROOT = Path(__file__).resolve().parents[3]


def _step(rank: int, step: int, start: float, end: float, **kw) -> StepRecord:
    fields = {"t_enter": start, "t_exit": end, "compute_s": 0.0, "loss": 1.0, "t_s": end,
              "comm_s": end - start, "step_s": end - start, "lr": 0.1, "epoch": 0, "bytes": 8,
              **kw}
    return StepRecord(rank=rank, step=step, start=start, end=end, **fields)


def _config(**kw) -> WorkerConfig:
    base = dict(rank=1, size=3, host="h4", addr="fd5a::1", master_addr="fd5a::2",
                master_port=29500, transport="dblp",
                transport_config=DblpCoreConfig(rto_max=2.0, nscc=NsccConfig(eta=0.2)),
                conns={0: (ConnPlan(conn=2, peer="h0", peer_addr="fd5a::0",
                                    paths=(("fd5a:5::",),), nics=(0,)),),
                       2: (ConnPlan(conn=5, peer="h8", peer_addr="fd5a::8"),
                           ConnPlan(conn=9, peer="h8", peer_addr="fd5a::8", sport=49161,
                                    src_addr="fd5a:1::4"))},
                collective="transpose", groups=((0, 1), (2,)),
                dblp=DblpConfig(policy="phase_aware", fill="zeros", deadline_ms=40.0,
                                phase=PhaseAwareConfig(base=0.1, cap=0.3, window=4)),
                kind="data_parallel", model="digits_cnn", steps=20, batch_size=30, lr=0.05,
                lr_schedule="cosine", eval_every=5, compute="modelled", compute_ms=3.5,
                seed=7, first_gate=4)
    return WorkerConfig(**{**base, **kw})


# --- serialisation -----------------------------------------------------------------------


@pytest.mark.parametrize("rec", [
    _config(),
    _config(transport="mrc", transport_config=MrcConfig(selector="bitmap"), dblp=None),
    _config(transport="rc", transport_config=RcConfig(aimd=True), dblp=None),
    _config(transport="gloo", transport_config=GlooConfig(), conns={}, groups=None, dblp=None,
            compute="measured",
            compute_ms=None, first_gate=None, kind="pipeline", microbatches=4),
    Start(12345.678), Release(7, 99.5, None), Release(3, 1.25, 9),
    Ready(0, 4242),
    _step(2, 5, 1.0, 1.5, why="critical_regime", tolerance=0.1, overrun=True,
          model_compute_s=0.003, real_compute_s=0.004, delivered=0.9, lost_entries=3),
    _step(0, 1, 1.0, 2.0, loss=None, pipeline=True),
    EvalRecord(rank=0, step=9, t_s=3.5, eval_s=0.02, metrics={"accuracy": 0.5, "loss": 1.2}),
    GateReached(1, 40),
    Done(rank=3, steps=20, overruns=2, comm={"bytes_sent": 10, "cores": {"rtx": 4}}),
    WorkerError(rank=1, error="RuntimeError('x')", traceback="Traceback ..."),
])
def test_records_round_trip(rec):
    line = encode(rec)
    assert line.endswith("\n") and line.count("\n") == 1
    back = decode(line)
    assert back == rec and type(back) is type(rec)
    assert json.loads(line)["type"] in {"config", "start", "release", "ready", "step",
                                        "eval", "gate", "done", "error"}


def test_decoded_config_has_typed_fields():
    cfg = decode(encode(_config()))
    assert type(cfg.transport_config) is DblpCoreConfig and cfg.transport_config.rto_max == 2.0
    assert cfg.transport_config.nscc == NsccConfig(eta=0.2)
    assert list(cfg.conns) == [0, 2]  # JSON object keys come back as peer ranks
    assert type(cfg.conns[0][0]) is ConnPlan and cfg.conns[0][0].paths == (("fd5a:5::",),)
    assert cfg.groups == ((0, 1), (2,))
    assert isinstance(cfg.dblp.phase, PhaseAwareConfig) and cfg.dblp.phase.window == 4
    assert cfg.dblp.deadline_s == pytest.approx(0.04)
    assert decode(encode(Start(3))).t0 == 3.0 and isinstance(decode(encode(Start(3))).t0, float)


@pytest.mark.parametrize("line, needle", [
    ("not json\n", "not a JSON record"),
    ('{"type": "nope"}\n', "type must be one of"),
    ('{"type": "start"}\n', "Start: required keys ['t0'] missing"),
    ('{"type": "start", "t0": 1, "extra": 2}\n', "Start: unknown keys ['extra']"),
    ('{"type": "start", "t0": "soon"}\n', "Start.t0 = 'soon': must be float"),
    ('{"type": "gate", "rank": 1, "step": 2.5}\n', "GateReached.step = 2.5: must be int"),
    ('{"type": "gate", "rank": true, "step": 2}\n', "GateReached.rank = True"),
    ('{"type": "release", "step": 1, "t_resume": null}\n',
     "Release.t_resume = None: must be float"),
    ('{"type": "config", "rank": 0}\n', "WorkerConfig: required keys ['size',"),
    ('{"type": "done", "rank": 0, "steps": 1, "overruns": 0, "comm": []}\n',
     "Done.comm = []: must be an object"),
])
def test_decode_errors_name_the_field(line, needle):
    with pytest.raises(ValueError) as info:
        decode(line)
    assert needle in str(info.value)


def test_a_config_carries_the_settings_of_its_own_transport():
    with pytest.raises(ValueError, match="transport 'rc' takes a RcConfig"):
        _config(transport="rc", transport_config=MrcConfig(), dblp=None)
    line = json.loads(encode(_config(transport="rc", transport_config=RcConfig(), dblp=None)))
    line["transport"] = "mrc"  # a record whose two ends disagree fails on its first line
    with pytest.raises(ValueError, match="transport 'mrc' takes a MrcConfig"):
        decode(json.dumps(line))


def test_encode_refuses_other_objects():
    with pytest.raises(TypeError, match="not a process record"):
        encode(OverrunStats(1, 0, (1,), (0,)))


def test_step_result_fields_write_why_as_mode():
    f = _step(0, 0, 0.0, 1.0, why="no_signal_yet").result_fields()
    assert f["mode"] == "no_signal_yet" and "why" not in f
    assert _step(0, 0, 0.0, 1.0).result_fields()["mode"] == "reliable"
    ev = EvalRecord(rank=0, step=3, t_s=1.0, eval_s=0.1, metrics={"loss": 2.0})
    assert ev.result_fields() == {"rank": 0, "step": 3, "t_s": 1.0, "eval_s": 0.1, "loss": 2.0}


def test_dblp_config_checks_its_policy():
    with pytest.raises(ValueError, match="policy='bounded'"):
        DblpConfig(policy="bounded")
    with pytest.raises(ValueError, match="needs a tolerance"):
        DblpConfig(policy="fixed")
    assert DblpConfig(policy="optireduce").optireduce_config().margin_s == pytest.approx(1e-3)


# --- the job's step ----------------------------------------------------------------------


def test_job_step_keeps_the_round_reason_with_several_ranks():
    """The reason of a bounded round survives aggregation (it was popped from the stored
    record before, so a job step of >= 2 ranks always said None)."""
    agg = StepAggregator(3)
    assert agg.add(_step(2, 0, 0.0, 1.0, why="critical_regime", tolerance=0.0)) is None
    assert agg.add(_step(0, 0, 0.0, 1.0, why="critical_regime", tolerance=0.0)) is None
    job = agg.add(_step(1, 0, 0.0, 1.0, why="critical_regime", tolerance=0.0))
    assert job.why == "critical_regime" and job.tolerance == 0.0
    assert job.result_fields()["why"] == "critical_regime"


def test_job_step_modelled_time_and_overruns():
    agg = StepAggregator(2)
    agg.add(_step(0, 0, 0.0, 1.0, t_enter=0.5, model_compute_s=0.25, overrun=True))
    job = agg.add(_step(1, 0, 0.0, 1.0, t_enter=0.7, model_compute_s=0.25))
    assert job.model_step_s == pytest.approx(0.25 + 0.3) and job.overrun_ranks == 1
    agg.add(_step(0, 1, 1.0, 1.4, t_enter=1.3, model_compute_s=0.25))
    job = agg.add(_step(1, 1, 1.0, 1.5, t_enter=1.2, model_compute_s=0.25))
    assert job.model_step_s == pytest.approx(0.25 + 0.2) and job.overrun_ranks == 0
    assert agg.training_s == pytest.approx(0.55 + 0.45)  # modelled: sum of model_step_s
    st = agg.overruns()
    assert (st.steps, st.job_overruns, st.rank_steps, st.rank_overruns) == (2, 1, (2, 2), (1, 0))
    assert st.job_fraction == 0.5 and st.rank_fractions == (0.5, 0.0)
    assert st.as_record() == {"overrun_fraction": 0.5, "overrun_fraction_ranks": [0.5, 0.0],
                              "overrun_steps": 1}
    # without a modelled compute, the record has no model_step_s (readers test presence)
    plain = StepAggregator(1).add(_step(0, 0, 0.0, 1.0))
    assert "model_step_s" not in plain.result_fields()


def test_gate_time_is_not_in_step_times():
    agg = StepAggregator(2)
    agg.add(_step(0, 0, 0.0, 1.0))
    agg.add(_step(1, 0, 0.0, 1.1))
    agg.evaluated(0, 0.2)  # evaluation, then a gate of ~5 s after step 0
    agg.resumed(0)
    agg.add(_step(0, 1, 6.30, 6.9))
    job = agg.add(_step(1, 1, 6.35, 7.0))  # timed from the last rank's start
    assert job.step_s == pytest.approx(7.0 - 6.35)
    assert job.train_s == pytest.approx(1.1 + 0.65) and agg.training_s == pytest.approx(1.75)
    agg.add(_step(0, 2, 7.0, 7.5))
    job = agg.add(_step(1, 2, 7.0, 7.6))  # no gate after step 1: from its end, as before
    assert job.step_s == pytest.approx(0.6)


def test_aggregator_under_concurrent_adds():
    """One thread per rank, as the runner reads them: every step joined exactly once,
    with exact sums, whatever the interleaving."""
    ranks, steps = 8, 300
    agg = StepAggregator(ranks)
    jobs = []
    barrier = threading.Barrier(ranks)

    def rank(r: int) -> None:
        barrier.wait()
        for s in range(steps):
            out = agg.add(_step(r, s, float(s), s + 0.5 + r / 100, bytes=r + 1,
                                overrun=(r + s) % 7 == 0))
            if out is not None:
                jobs.append(out)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(j.step for j in jobs) == list(range(steps))
    assert all(j.bytes == sum(range(1, ranks + 1)) and j.rank_bytes == ranks for j in jobs)
    st = agg.overruns()
    assert st.rank_steps == (steps,) * ranks
    assert sum(st.rank_overruns) == sum((r + s) % 7 == 0 for r in range(ranks)
                                        for s in range(steps))
    assert st.job_overruns == sum(1 for j in jobs if j.overrun_ranks) == st.steps


def test_aggregator_refuses_a_rank_out_of_range():
    with pytest.raises(ValueError, match=r"rank=2: must be in \[0, 1\]"):
        StepAggregator(2).add(_step(2, 0, 0.0, 1.0))


# --- overruns, schedules -------------------------------------------------------------------


def _exp(**workload) -> experiment.Experiment:
    return experiment.parse({"name": "t", "repetitions": 3,
                             "fabric": {"planes": 2, "spines": 2, "leaves": 2,
                                        "hosts_per_leaf": 2},
                             "workload": {"model": "digits_cnn", "workers": 2, "steps": 10,
                                          "compute": "modelled", **workload}})


def test_refuse_overruns_names_the_runs_above_five_percent():
    ok = RunOutcome("mrc", 0, True, overruns=OverrunStats(100, 5, (100, 100), (3, 2)))
    bad = RunOutcome("rc", 1, True, overruns=OverrunStats(100, 6, (100, 100), (6, 0)))
    allowed = RunOutcome("gloo", 0, True, overruns=OverrunStats(10, 9, (10,), (9,)),
                            allow_overruns=True)
    measured = RunOutcome("x", 0, True)
    refuse_overruns([ok, allowed, measured])  # 5 % exactly is within the limit
    with pytest.raises(EmuError) as info:
        refuse_overruns([ok, bad, allowed])
    msg = str(info.value)
    assert "rc rep 1: 6 of 100 steps (6%; per rank 6%, 0%)" in msg
    assert "mrc" not in msg and "allow_overruns = true" in msg


def test_schedule_interleaves_repetitions():
    a, b = _exp(), experiment.with_overrides(_exp(), {"repetitions": 2})
    vs = [Variant("a", a), Variant("b", b)]
    order = [(v.label, rep) for v, rep in schedule(vs, interleave=True)]
    assert order == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2)]
    order = [(v.label, rep) for v, rep in schedule(vs, interleave=False)]
    assert order == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]


def test_overrun_stats_from_results_records():
    recs = [{"type": "meta", "label": "a", "compute": {"mode": "modelled", "ms": 3.0}},
            {"type": "meta", "label": "m", "compute": {"mode": "measured", "ms": None}}]
    for s in range(4):
        recs.append({"type": "job_step", "label": "a", "rep": 1, "step": s,
                     "overrun_ranks": int(s == 2)})
        for r in range(2):
            recs.append({"type": "step", "label": "a", "rep": 1, "rank": r, "step": s,
                         "overrun": s == 2 and r == 1})
    st = overrun_stats(recs, "a", 1)
    assert st == OverrunStats(4, 1, (4, 4), (0, 1))
    assert overrun_stats(recs, "m", 0) is None


# --- the worker's gate and the runner's gate loop (fake workers, no namespaces) -----------


def test_worker_gate_waits_for_its_release(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stdin", io.StringIO(encode(Release(3, time.monotonic(), 8))))
    gates = wk.Gates(rank=2, first=3)
    gates.after(2)  # not a gate: nothing said, nothing read
    assert out.getvalue() == ""
    gates.after(3)
    assert decode(out.getvalue()) == GateReached(2, 3) and gates.next == 8
    monkeypatch.setattr(sys, "stdin", io.StringIO(encode(Release(4, 0.0, None))))
    with pytest.raises(RuntimeError, match="after step 4, waiting at the gate after step 8"):
        gates.after(8)


def test_pacer_counts_overrun_steps(monkeypatch):
    p = wk.Pacer(_config(compute_ms=5.0))
    slept = []
    monkeypatch.setattr(wk.time, "sleep", slept.append)
    now = time.monotonic()
    p.begin_step()
    p.pad(now - 0.001)  # 1 ms of real compute: padded to 5
    assert not p.end_step() and slept and 0.003 < slept[0] <= 0.004
    p.begin_step()
    p.pad(now - 1.0, 1 / 3)  # a forward over its third of the model
    p.pad(now - 0.0001, 2 / 3)
    assert p.end_step() and p.overruns == 1


FAKE_WORKER = """
import sys, time
from workloads.recordcodec import decode, encode
from workloads.records import *
cfg = decode(sys.stdin.readline())
print(encode(Ready(cfg.rank, 0)), end="", flush=True)
t0 = decode(sys.stdin.readline()).t0
gate = cfg.first_gate
for step in range(cfg.steps):
    t = time.monotonic()
    print(encode(StepRecord(rank=cfg.rank, step=step, t_s=t - t0, start=t, end=t, t_enter=t,
                            t_exit=t, compute_s=0.0, comm_s=0.0, step_s=0.0, loss=1.0, lr=0.1,
                            epoch=0, bytes=1)), end="", flush=True)
    if step == gate:
        print(encode(GateReached(cfg.rank, step)), end="", flush=True)
        gate = decode(sys.stdin.readline()).next_gate
print(encode(Done(rank=cfg.rank, steps=cfg.steps, overruns=0)), end="", flush=True)
"""


def test_job_holds_every_rank_at_its_gates():
    """The runner's side of the gate protocol with fake workers: ``on_gate`` runs once per
    gate, after every rank's record of that step and before any rank's next step."""
    fab = SimpleNamespace(in_netns=lambda host, *argv: [
        "env", f"PYTHONPATH={ROOT}", sys.executable, "-c", FAKE_WORKER])
    cfgs = [_config(rank=r, steps=6, first_gate=1) for r in range(3)]
    log, lock = [], threading.Lock()

    def on_record(rec):
        with lock:
            if isinstance(rec, StepRecord):
                log.append(("step", rec.rank, rec.step))

    def on_gate(step):
        with lock:
            log.append(("gate", step))
        return {1: 3, 3: None}[step]

    job = WorkerJob(fab, cfgs, on_record)
    try:
        job.wait_ready(30)
        job.start(time.monotonic())
        job.wait(30, on_gate)
    finally:
        job.kill()
    assert [e for e in log if e[0] == "gate"] == [("gate", 1), ("gate", 3)]
    for k in (1, 3):
        at = log.index(("gate", k))
        assert {e[1] for e in log[:at] if e[0] == "step" and e[2] == k} == {0, 1, 2}
        assert not [e for e in log[:at] if e[0] == "step" and e[2] > k]
    assert len([e for e in log if e[0] == "step"]) == 18


def test_worker_config_defaults_cannot_drift_from_the_experiments():
    """A field the worker takes from the experiment has no default of its own, or the
    experiment's (once lr_schedule defaulted to "constant" here and "cosine" there)."""
    import dataclasses

    from workloads.experiment.config import WorkloadConfig

    worker = {f.name: f for f in dataclasses.fields(WorkerConfig)}
    for f in dataclasses.fields(WorkloadConfig):
        if f.name in worker and worker[f.name].default is not dataclasses.MISSING:
            assert worker[f.name].default == f.default, f.name
