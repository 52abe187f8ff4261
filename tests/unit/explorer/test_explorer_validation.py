"""The model against measurements: published tables (Megatron-LM SC'21, Korthikanti et al.
2022) and the emulator's own runs (explorer/data/emulator), predicted from the calibration
of a different run. Targets are the issue's; where one is not met the test pins the
measured level so it cannot silently get worse (BENCHMARKS.md says which)."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.calibration import load_calibration
from explorer.emulator_check import FIXTURES, check_emulator_runs, load_runs
from explorer.memory_check import memory_checks
from explorer.model import evaluate
from explorer.predict import MODEL_FACTS
from explorer.presets import A100_GEMM_EFFICIENCY
from explorer.validate import fit_efficiency, load_table, predict_metric, score, scores
from explorer.validate_groups import NETWORK_BOUND, group_scores

PUBLISHED = Path(__file__).resolve().parents[3] / "explorer" / "data" / "published"


@pytest.fixture(scope="module")
def cal():
    return load_calibration()


@pytest.fixture(scope="module")
def published(cal):
    return {s.table.name: s for s in scores(sorted(PUBLISHED.glob("*.toml")), cal)}


def test_fit_reproduces_its_row_and_is_the_preset(cal):
    t = load_table(PUBLISHED / "megatron_sc21.toml")
    row = next(r for r in t.rows if r.fit)
    eff = fit_efficiency(t, row, cal)
    cfg = row.config.replace({"gpu.gemm_efficiency": eff})
    assert predict_metric(t, evaluate(cfg, cal), cfg) == pytest.approx(row.measured, rel=1e-6)
    # The A100 preset carries the fitted value (to two decimals).
    assert A100_GEMM_EFFICIENCY == pytest.approx(eff, abs=0.005)


def test_megatron_weak_scaling_errors(published):
    s = published["megatron-sc21-weak-scaling"]
    assert s.fit_row == "145.6B"
    assert s.mean_abs_error <= 0.10 and s.max_abs_error <= 0.20
    # Target 0.9: not met (the per-GPU throughputs span 135..163 TFLOP/s, and three
    # rows swap places within 5 %); pinned at the level reached.
    assert s.spearman >= 0.85


def test_korthikanti_errors_with_the_carried_fit(published):
    s = published["korthikanti-2022-selective-recompute"]
    assert s.fit_row is None  # the efficiency comes from the Megatron table (same GPU)
    assert s.mean_abs_error <= 0.10 and s.max_abs_error <= 0.20
    assert s.spearman >= 0.8


def test_one_fitted_parameter_per_gpu_type(published):
    a100 = {s.efficiency for s in published.values()
            if s.table.rows[0].config.gpu.peak_tflops == 312.0}
    assert len(a100) == 1  # every A100 table carries the one fit
    h100 = published["llama3-405b-table4"]
    assert h100.fit_row is not None and h100.efficiency not in a100


def test_network_bound_rows_are_scored_apart(published):
    groups = group_scores(list(published.values()))
    net, comp = groups["network-bound"], groups["compute-bound"]
    assert len(net.rows) >= 4 and len(comp.rows) >= 10
    assert all(share >= NETWORK_BOUND for _, _, _, share in net.rows)
    # ZeRO-3 at a fixed batch on more GPUs: the rows where the network decides
    labels = {label for _, label, _, _ in net.rows}
    assert {"ZeRO-3 175B, 1536 GPUs", "ZeRO-3 530B, 2240 GPUs"} <= labels
    # Targets (10 % mean, 20 % max, Spearman 0.9): pinned at the level reached, so that
    # they cannot silently get worse (BENCHMARKS.md says which are not met and why).
    assert net.max_abs_error <= 0.20 and net.mean_abs_error <= 0.15


def test_scored_rows_exclude_the_fit_row(cal):
    t = load_table(PUBLISHED / "megatron_sc21.toml")
    s = score(t, cal)
    assert [r.label for r in s.rows if not r.scored] == ["145.6B"]


def test_a_row_the_memory_model_refuses_is_scored_on_its_time_and_flagged(published, cal):
    s = published["llama3-405b-table4"]
    row = next(r for r in s.rows if r.label.startswith("8192 GPUs"))
    t = load_table(PUBLISHED / "llama3_405b.toml")
    cfg = next(r for r in t.rows if r.label == row.label).config.replace(
        {"gpu.gemm_efficiency": s.efficiency})
    refused = evaluate(cfg, cal)
    assert not refused.feasible and refused.reason == "memory"
    lifted = cfg.replace({"gpu.hbm_gib": 1000.0})
    assert row.memory_refused and row.scored
    assert row.predicted == pytest.approx(predict_metric(t, evaluate(lifted, cal), lifted))
    assert not any(r.memory_refused for r in published["megatron-sc21-weak-scaling"].rows)


def test_memory_model_admits_what_ran(cal):
    checks = memory_checks(sorted(PUBLISHED.glob("*.toml")), cal)
    zero = [c for c in checks if c.what.startswith("7.5B")]
    assert len(zero) == 4 and all(c.met for c in zero)
    llama = {c.what: c for c in checks if c.what.startswith("llama3")}
    # the published 16K-GPU recipe fits its 80 GiB (it trained the model)
    assert llama["llama3-405b-table4: 16384 GPUs, TP8 CP1 PP16 DP128"].met
    ran = [c for c in checks if c.published.startswith("ran")]
    assert sum(c.met for c in ran) >= len(ran) - 1


def test_emulator_runs_are_predicted_within_15_percent(cal):
    res = check_emulator_runs(cal, FIXTURES)
    kinds = {c["kind"] for c in res["checks"]}
    assert kinds >= {"healthy step", "ratio", "cut / healthy step"}
    assert res["runs"] == 14
    bad = [c for c in res["checks"] if not c["met"]]
    assert not bad, bad


def test_emulator_fixtures_were_measured_with_modelled_compute():
    for run in load_runs():
        meta = next(r for r in run.records if r.get("type") == "meta")
        assert meta["compute"]["mode"] == "modelled", run.name
        assert len(run.job_steps()) >= 30, run.name


def test_model_facts_match_the_torch_models():
    torch = pytest.importorskip("torch")
    from workloads.models import DigitsCNN, TinyLM, count_parameters

    assert count_parameters(DigitsCNN()) == MODEL_FACTS["digits_cnn"]["params"](0)
    for vocab in (50, 92):
        assert count_parameters(TinyLM(vocab_size=vocab)) == \
            MODEL_FACTS["tiny_lm"]["params"](vocab)
    lm = TinyLM(vocab_size=50)
    x = torch.zeros((3, 64), dtype=torch.long)
    h = lm.layers[0](lm.embed(x))
    assert h.shape[1] * h.shape[2] == MODEL_FACTS["tiny_lm"]["boundary_floats"]


def test_regime_rtt_moves_the_frame_serialisation_to_the_experiment_rate(cal):
    from explorer.predict import MTU_PAYLOAD, WIRE_HEADERS, regime_rtt

    tc = cal.get("mrc")
    frame_bits = ((tc.payload_bytes or MTU_PAYLOAD) + WIRE_HEADERS) * 8
    base = tc.rtt_s - frame_bits / (tc.line_rate_mbit * 1e6)
    assert base > 0
    assert regime_rtt(tc, tc.line_rate_mbit) == pytest.approx(tc.rtt_s)
    assert regime_rtt(tc, 100.0) == pytest.approx(base + frame_bits / 100e6)


def test_bench_explorer_quick_reports_every_part():
    from explorer.bench import bench_explorer

    res = bench_explorer(say=lambda _: None, quick=True)
    ref = res["reference"]
    assert ref["counts"]["feasible"] > 0 and ref["best"] is not None
    assert set(ref["targets"]) == {"search_cpu_s", "raw_points_per_s", "peak_rss_mb"}
    assert ref["search"]["cpu_s"] > 0 and ref["rescore_error_max"] is not None
    grid = res["grid"]
    assert grid["scenarios"] >= 8 and grid["speedups"]["production"]["scenarios"] > 0
    assert all("label" in s for s in grid["per_scenario"] if s["production"])
    val = res["validation"]
    assert len(val["published"]) == 4 and val["emulator"]["all_met"]
    assert set(val["groups"]) == {"compute-bound", "network-bound"}
    assert len(val["memory"]) >= 30
