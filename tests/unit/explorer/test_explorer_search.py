"""The search: pruning never loses the optimum, counts add up, Pareto fronts are
non-dominated, baselines and ablations are what they say."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from explorer_fixtures import calibration

from explorer.baselines import PRODUCTION, ablation, production, production_chunks
from explorer.columns import config_columns
from explorer.exploration import explore
from explorer.model import calibration_arrays, evaluate, step
from explorer.search import pareto_front, search_scenario, with_axes
from explorer.specfile import load, parse

ROOT = Path(__file__).resolve().parents[3]

SMALL = {
    "name": "small",
    "model": {"preset": "llama3-8b", "global_batch_seqs": 256, "train_tokens": 1e11},
    "gpu": {"preset": "h100-sxm"},
    "cluster": {"dcs": 2, "gpus_per_dc": 256},
    "fabric": {"burst_hz": 0.1},
    "dci": {"delay_ms": 5.0},
    # the production recipe's values are in the space (TP 8, CP 1, interleaved with 2
    # chunks, no recomputation, zero2, hierarchical, RC with 16 QPs)
    "placement": {"tp": [2, 8], "cp": [1, 2], "pp": [1, 2, 4], "microbatch": [1, 2],
                  "cross": ["dp", "pp"]},
    "schedule": {"pipeline": ["gpipe", "1f1b", "interleaved"], "virtual_stages": [2, 4],
                 "warmup_extra": [0, 2], "recompute": ["none", "full"],
                 "optimizer": ["replicated", "zero2"], "allreduce": ["ring",
                                                                     "hierarchical"],
                 "dblp_tolerance": [0.0, 0.05]},
    "network": {"transport": ["mrc", "rc", "tcp"], "qps_per_connection": [1, 16]},
}


def _brute_force(space, cal):
    """Every point of the raw space through the model, as explicit configurations (the
    search's own grid and deduplication left out)."""
    points = list(space.points())
    best, feasible = None, 0
    for lo in range(0, len(points), 4096):
        batch = points[lo:lo + 4096]
        out = step(config_columns(batch), calibration_arrays(cal))
        reason = np.broadcast_to(out["reason"], (len(batch),))
        times = np.broadcast_to(out["time_to_train_s"], (len(batch),))
        ok = np.flatnonzero(reason == 0)
        feasible += len(ok)
        if len(ok):
            i = ok[np.argmin(times[ok])]
            if best is None or times[i] < best[0]:
                best = (float(times[i]), batch[i])
    return best, feasible


def test_pruning_never_removes_the_optimum():
    space = parse(SMALL)
    cal = calibration()
    res = search_scenario(space, {}, cal, top_k=5)
    (t_best, cfg_best), feasible_raw = _brute_force(space, cal)
    assert res.best is not None
    found = evaluate(res.config(res.best), cal)
    assert found.time_to_train_s == pytest.approx(t_best, rel=1e-12)
    # Every feasible raw point is either evaluated or a duplicate of an evaluated one.
    assert 0 < res.feasible <= feasible_raw
    assert res.raw == space.size


DEDUP_CASES = {
    # A DBLP tolerance matters neither with one data-parallel rank nor on RC: the point
    # must be evaluated once (not dropped), whichever value the axis lists first.
    "one_rank_tolerance_first": {
        "cluster": {"gpus_per_dc": 8}, "model": {"preset": "llama3-8b",
                                                 "global_batch_seqs": 8, "train_tokens": 1e9},
        "placement": {"tp": 8, "pp": 1},
        "schedule": {"dblp_tolerance": [0.05, 0.0], "optimizer": ["zero3", "replicated"]},
        "network": {"transport": ["mrc", "rc"]}},
    "tolerance_fixed_with_rc": {
        "cluster": {"gpus_per_dc": 64}, "model": {"preset": "llama3-8b",
                                                  "global_batch_seqs": 64,
                                                  "train_tokens": 1e9},
        "placement": {"tp": [4, 8], "pp": 1},
        "schedule": {"dblp_tolerance": 0.05}, "network": {"transport": ["rc", "mrc"]}},
    # With one rank ZeRO-3 is replicated (no sharding, no gathered buffer): listed first,
    # it must not hide a structure that fits only barely.
    "zero3_first_tight_memory": {
        "cluster": {"gpus_per_dc": 8}, "model": {"preset": "llama3-8b",
                                                 "global_batch_seqs": 8, "train_tokens": 1e9},
        "gpu": {"preset": "h100-sxm", "hbm_gib": [24.0, 26.0, 30.0, 40.0]},
        "placement": {"tp": [4, 8], "pp": [1, 2]},
        "schedule": {"optimizer": ["zero3", "zero1", "replicated"],
                     "recompute": ["full", "selective"]}},
}


@pytest.mark.parametrize("case", sorted(DEDUP_CASES))
def test_deduplication_keeps_the_optimum_of_every_scenario(case):
    doc = {"name": case, **DEDUP_CASES[case]}
    space = parse(doc)
    cal = calibration()
    ex = explore(space, cal, top_k=1, baselines=False)
    for o in ex.scenarios:
        found = _brute_force(o.search.space, cal)[0]
        if found is None:
            assert o.best is None
            continue
        assert o.best is not None, o.search.scenario
        assert o.best.breakdown.time_to_train_s == pytest.approx(found[0], rel=1e-12)
    # RC is evaluated although the tolerance axis never offers 0 (it does not apply).
    if case == "tolerance_fixed_with_rc":
        res = search_scenario(space, {}, cal)
        assert res.feasible == 4 and res.pruned["inapplicable"] == 0


def test_counts_add_up():
    space = parse(SMALL)
    res = search_scenario(space, {}, calibration())
    structural_pruned = sum(res.pruned[r] for r in ("nvlink", "divisibility", "dc_split"))
    assert res.structural == res.raw - structural_pruned
    assert res.evaluated == res.structural - res.pruned["inapplicable"]
    assert res.feasible == res.evaluated - res.pruned["memory"] - res.pruned["failures"]
    assert res.pruned["divisibility"] > 0 and res.pruned["inapplicable"] > 0


def test_top_k_matches_scalar_model_and_is_sorted():
    space = parse(SMALL)
    cal = calibration()
    res = search_scenario(space, {}, cal, top_k=8)
    times = res.top.values["time_to_train_s"]
    assert list(times) == sorted(times)
    for flat, t in zip(res.top.index, times, strict=True):
        assert evaluate(res.config(int(flat)), cal).time_to_train_s == pytest.approx(t,
                                                                                      rel=1e-9)


def test_pareto_front_is_non_dominated_and_complete():
    rng = np.random.default_rng(1)
    x, y = rng.random(2000), rng.random(2000)
    front = pareto_front(x, y)
    on = set(front.tolist())
    for i in range(2000):
        dominated = np.any((x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i])))
        assert (i in on) == (not dominated)
    assert np.all(np.diff(x[front]) >= 0) and np.all(np.diff(y[front]) <= 0)


def test_search_fronts_are_non_dominated_among_all_feasible_points():
    space = parse(SMALL)
    res = search_scenario(space, {}, calibration())
    t, c = res.pareto_cost.values["time_to_train_s"], res.pareto_cost.values["cost"]
    assert len(t) >= 1
    for i in range(len(t)):
        assert not np.any((t < t[i]) & (c < c[i]))


def test_scenario_axes_are_searched_separately():
    doc = dict(SMALL) | {"dci": {"delay_ms": [0.1, 20.0]}}
    ex = explore(parse(doc), calibration(), top_k=3)
    assert [o.search.scenario for o in ex.scenarios] == [{"dci.delay_ms": 0.1},
                                                         {"dci.delay_ms": 20.0}]
    fast, slow = (o.best.breakdown.time_to_train_s for o in ex.scenarios)
    assert fast <= slow
    for o in ex.scenarios:
        assert o.best.config.dci.delay_ms == o.search.scenario["dci.delay_ms"]


def _recipe_schedule(cfg, pp):
    """The recipe's schedule at pp: interleaved with its chunks rule, or 1F1B where the
    microbatches are not a multiple of pp (or one stage)."""
    m = cfg.model.batch_seqs // (sum(cfg.cluster.gpus) // (8 * pp))
    if pp == 1 or m % pp:
        return {"schedule.pipeline": "1f1b", "schedule.virtual_stages": 1}
    return {"schedule.pipeline": "interleaved",
            "schedule.virtual_stages": production_chunks(pp, m, cfg.model.layers)}


def test_production_baseline_follows_its_recipe():
    space = parse(SMALL)
    cal = calibration()
    prod = production(with_axes(space, {}), cal)
    cfg = prod.config
    assert cfg is not None and prod.breakdown.feasible
    flat = cfg.flat()
    for k, v in PRODUCTION.items():
        if k in ("schedule.pipeline", "schedule.recompute"):
            continue  # the schedule's rule below; none, or what memory leaves
        assert flat[k] == v, k
    assert cfg.placement.tp == 8  # the NVLink domain (llama3-8b's 32 heads allow it)
    assert cfg.network.transport == "rc" and cfg.network.qps_per_connection == 16
    assert cfg.placement.cp == 1  # 8K tokens
    # the interleaving rule: the smallest v with a bubble near 10 %, one layer per chunk
    rule = _recipe_schedule(cfg, cfg.placement.pp)
    assert (cfg.schedule.pipeline, cfg.schedule.virtual_stages) == tuple(rule.values())
    # the fastest PP of the space that fits
    for pp in space.axis("placement.pp").values:
        if pp == cfg.placement.pp:
            continue
        other = cfg.replace({"placement.pp": pp} | _recipe_schedule(cfg, pp))
        b = evaluate(other, cal)
        assert not b.feasible or b.time_to_train_s >= prod.breakdown.time_to_train_s


def test_production_runs_1f1b_where_the_batch_cannot_interleave():
    # 2 DCs of 8,192 GPUs and too few sequences for any PP's microbatches to be a
    # multiple of it: Llama 3's schedule still runs; the model's nearest is 1F1B.
    space = load(ROOT / "experiments" / "explore" / "small_2dc.toml")
    prod = production(with_axes(space, {}), calibration())
    cfg = prod.config
    assert cfg is not None and prod.breakdown.feasible
    m = cfg.model.batch_seqs // (sum(cfg.cluster.gpus) // (8 * cfg.placement.pp))
    assert cfg.placement.pp > 1 and m % cfg.placement.pp != 0
    assert cfg.schedule.pipeline == "1f1b" and cfg.schedule.virtual_stages == 1


def test_production_chunks_keep_the_bubble_near_ten_percent():
    assert production_chunks(16, 16, 126) == 8  # Llama 3 405B: 15 / (8 x 16) = 11.7 %
    assert production_chunks(4, 64, 80) == 2  # 3 / (2 x 64) already below 10 %
    assert production_chunks(8, 8, 80) == 10  # 7 / (9 x 8) would do; 9 does not split 10
    assert production_chunks(16, 16, 32) == 2  # at most one layer per chunk
    assert production_chunks(1, 8, 80) == 1


def test_explore_reports_speedups_ablation_and_rescore():
    ex = explore(parse(SMALL), calibration(), top_k=3)
    o = ex.scenarios[0]
    assert o.best is not None
    space_pp = set(parse(SMALL).axis("placement.pp").values)
    for name in ("production", "sota"):
        base = o.baselines[name]
        assert base.config is not None and base.config.placement.pp in space_pp
        assert o.speedup(name) is not None
    abl = o.ablation_speedups()
    assert set(abl) == {"placement", "schedule", "network", "joint"}
    assert abl["joint"] == pytest.approx(o.speedup("production"))
    for name in ("placement", "schedule", "network"):
        assert abl[name] is not None and abl[name] <= abl["joint"] * (1 + 1e-12)
        # searched from production, with production's own values among the candidates
        assert abl[name] >= 1 - 1e-12
    for p in o.top:
        assert math.isfinite(p.rescored_step_s)
        assert p.time_lo_s <= p.breakdown.time_to_train_s <= p.time_hi_s


def test_an_ablation_keeps_production_values_outside_the_space():
    # The space's chunk values do not include the recipe's; the schedule-only search from
    # production must still be able to stay where production is.
    doc = dict(SMALL) | {"schedule": SMALL["schedule"] | {"virtual_stages": [3]},
                         "placement": SMALL["placement"] | {"pp": [2, 4]}}
    space = with_axes(parse(doc), {})
    prod = production(space, calibration())
    assert prod.config is not None and prod.config.schedule.pipeline == "interleaved"
    assert prod.config.schedule.virtual_stages != 3
    a = ablation(space, calibration(), prod, "schedule")
    assert a.breakdown is not None
    assert a.breakdown.time_to_train_s <= prod.breakdown.time_to_train_s * (1 + 1e-12)


def test_empty_space_names_the_binding_constraint():
    from explorer.report import summary

    doc = dict(SMALL) | {"model": {"preset": "llama3-405b", "global_batch_seqs": 256},
                         "placement": {"tp": [8], "pp": [1]}}
    ex = explore(parse(doc), calibration(), top_k=3, baselines=False)
    s = ex.scenarios[0].search
    assert s.feasible == 0
    assert s.nearest is not None and s.nearest["reason"] == "memory"
    assert s.nearest["memory_gib"] > s.nearest["hbm_gib"]
    # Duplicates were set aside more often than points failed memory, but memory removed
    # what was left: that is the binding constraint.
    assert s.pruned["inapplicable"] > s.pruned["memory"] > 0
    nothing = summary(ex)["scenarios"][0]["nothing_feasible"]
    assert nothing["binding"] == "memory"
    assert nothing["nearest"]["config"]["placement.tp"] == 8
