"""The model against measurements: published tables (Megatron-LM SC'21, Korthikanti et al.
2022) and the emulator's own runs (explorer/data/emulator), predicted from the calibration
of a different run. Targets are the issue's; where one is not met the test pins the
measured level so it cannot silently get worse (BENCHMARKS.md says which)."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.calibration import load_calibration
from explorer.emulator_check import FIXTURES, check_emulator_runs, load_runs
from explorer.model import evaluate
from explorer.predict import MODEL_FACTS
from explorer.presets import A100_GEMM_EFFICIENCY
from explorer.validate import fit_efficiency, load_table, predict_metric, score, scores

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
    # Target 0.9 on per-GPU throughput: not met (the 1T rows are slower than predicted
    # relative to the 530B ones); pinned at the level reached.
    assert s.spearman >= 0.8


def test_scored_rows_exclude_the_fit_row(cal):
    t = load_table(PUBLISHED / "megatron_sc21.toml")
    s = score(t, cal)
    assert [r[0] for r in s.rows if not r[4]] == ["145.6B"]


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
    assert set(ref["targets"]) == {"search_and_rescore_s", "points_per_s", "peak_rss_mb"}
    assert ref["rescore_error_max"] is not None
    grid = res["grid"]
    assert grid["scenarios"] >= 8 and grid["speedups"]["production"]["scenarios"] > 0
    val = res["validation"]
    assert len(val["published"]) == 2 and val["emulator"]["all_met"]
