"""Repetitions: medians and spreads, differences beyond the spread, losses never negative."""

from __future__ import annotations

from workloads.training.summary import (
    aggregate,
    beyond_spread,
    paired_beyond_spread,
    ratios_by_rep,
    spread_cell,
    summarize,
    verdict,
)


def test_aggregate_median_and_spread_per_label():
    runs = [{"label": "mrc", "rep": r, "healthy_step_ms": v, "note": "x", "ok": True}
            for r, v in enumerate((10.0, 12.0, 11.0))]
    runs += [{"label": "rc", "rep": 0, "healthy_step_ms": 20.0}]
    agg = aggregate(runs)
    assert agg["mrc"]["reps"] == 3
    assert agg["mrc"]["healthy_step_ms"] == {"median": 11.0, "lo": 10.0, "hi": 12.0, "n": 3}
    assert "note" not in agg["mrc"] and "ok" not in agg["mrc"]  # not numbers
    assert spread_cell(agg["mrc"]["healthy_step_ms"]) == "11.0 [10.0-12.0]"
    assert spread_cell(agg["rc"]["healthy_step_ms"]) == "20.0"


def test_a_difference_counts_only_beyond_the_spread():
    a = {"median": 10.0, "lo": 9.0, "hi": 11.0, "n": 3}
    assert beyond_spread(a, {"median": 13.0, "lo": 12.0, "hi": 14.0, "n": 3})
    assert not beyond_spread(a, {"median": 11.5, "lo": 10.5, "hi": 12.5, "n": 3})
    assert not beyond_spread(a, None)


def test_paired_ratios_take_each_repetition_with_its_own():
    runs = [{"label": "mrc", "rep": 0, "tt": 2.0}, {"label": "rc", "rep": 0, "tt": 2.5},
            {"label": "mrc", "rep": 1, "tt": 3.0}, {"label": "rc", "rep": 1, "tt": None},
            {"label": "rc", "rep": 2, "tt": 4.0}, {"label": "mrc", "rep": 2, "tt": 3.6}]
    assert ratios_by_rep(runs, "mrc", "rc", "tt") == [0.8, 0.9]  # rep 1: rc never got it
    assert ratios_by_rep(runs, "mrc", "gloo", "tt") == []


def test_paired_ratios_call_a_difference_when_every_one_is_on_one_side():
    assert paired_beyond_spread([0.92, 0.95, 0.91])
    assert paired_beyond_spread([1.1, 1.02, 1.3])
    assert not paired_beyond_spread([0.92, 1.01, 0.91])  # one repetition the other way
    assert not paired_beyond_spread([0.9, 0.9])  # too few pairs
    assert not paired_beyond_spread([0.9, 1.0, 0.9])  # a tie is not an order


def test_the_verdict_names_which_spread_a_difference_exceeds():
    # time to target, the seeds' steps to it spread both labels alike
    a = {"median": 2.60, "lo": 2.52, "hi": 3.48, "n": 3}
    b = {"median": 2.88, "lo": 2.75, "hi": 3.65, "n": 3}
    assert verdict(a, b, [0.92, 0.95, 0.91]).startswith("differ beyond the paired spread")
    assert verdict(a, b, [0.92, 1.05, 0.91]) == "within the spread: not a difference"
    far = {"median": 5.0, "lo": 4.9, "hi": 5.1, "n": 3}
    assert verdict(a, far, [0.5, 1.5]) == "differ beyond the spread"


def test_time_lost_is_never_negative():
    # Steps of 10 ms, a failure window over steps that happen to be faster: no loss, not
    # a negative one.
    steps = [{"type": "job_step", "label": "x", "rep": 0, "step": i, "t_s": 0.01 * (i + 1),
              "step_s": 0.010 if i < 5 else 0.008, "compute_s": 0.005,
              "exposed_comm_s": 0.003} for i in range(10)]
    event = [{"type": "event", "label": "x", "rep": 0, "action": "apply", "kind": "fail_link",
              "link": "a-b", "t_s": 0.061, "fired": 0.061},
             {"type": "event", "label": "x", "rep": 0, "action": "restore",
              "kind": "fail_link", "link": "a-b", "t_s": 0.095, "fired": 0.095}]
    s = summarize(steps + event, "x", 0)
    assert s["failure_lost_s"] == 0.0


def test_what_a_failure_cost_before_the_target_is_counted_up_to_the_target():
    # 10 ms steps; a failure over steps 3-7 makes them 30 ms; the target is met at step 5
    steps = [{"type": "job_step", "label": "x", "rep": 0, "step": i,
              "t_s": 0.01 * (i + 1) + 0.02 * max(0, min(i, 7) - 2),
              "step_s": 0.030 if 3 <= i <= 7 else 0.010, "compute_s": 0.005,
              "exposed_comm_s": 0.003} for i in range(12)]
    events = [{"type": "event", "label": "x", "rep": 0, "action": "apply", "kind": "fail_link",
               "link": "a-b", "t_s": 0.0305, "fired": 0.0305},
              {"type": "event", "label": "x", "rep": 0, "action": "restore",
               "kind": "fail_link", "link": "a-b", "t_s": 0.17, "fired": 0.17}]
    evals = [{"type": "eval", "label": "x", "rep": 0, "step": i, "accuracy": 0.1 * i}
             for i in range(12)]
    s = summarize(steps + events + evals, "x", 0, target=0.5)
    assert s["failure_lost_s"] == 0.1  # steps 3-7, 20 ms each
    assert s["steps_to_target"] == 6 and s["time_to_target_s"] == 0.12
    assert s["failure_lost_to_target_s"] == 0.06  # steps 3-5 only
    assert "failure_lost_to_target_s" not in summarize(steps + evals, "x", 0, target=0.5)


def test_paired_time_to_target_ratios_per_repetition():
    from commands.bench.training import paired_targets

    def rec(label, rep, tt, lost=None):
        return {"label": label, "rep": rep, "time_to_target_s": tt,
                "failure_lost_to_target_s": lost}

    per_rep = [rec("mrc/healthy", 0, 2.0), rec("mrc/link_cut", 0, 2.1, 0.1),
               rec("mrc/healthy", 1, 3.0), rec("mrc/link_cut", 1, 3.0, 0.5),
               rec("mrc/healthy", 2, 2.5), rec("mrc/link_cut", 2, None),  # never reached
               rec("rc/healthy", 0, 2.0), rec("rc/bursts", 0, 3.0)]
    out = paired_targets(per_rep)
    # repetition by repetition (same seed), not median over median
    assert out["mrc_link_cut_time_to_target_vs_healthy_paired"] == {
        "median": 1.025, "min": 1.0, "max": 1.05}
    assert out["rc_bursts_time_to_target_vs_healthy_paired"]["median"] == 1.5
    assert "gloo_link_cut_time_to_target_vs_healthy_paired" not in out
    # against the run's own time without the failure's cost: 2.1 / 2.0, 3.0 / 2.5
    assert out["mrc_link_cut_time_to_target_vs_own_healthy"] == {
        "median": 1.125, "min": 1.05, "max": 1.2}
    assert "rc_bursts_time_to_target_vs_own_healthy" not in out  # no cost recorded


def test_transports_time_to_target_paired_repetition_by_repetition():
    from commands.bench.training import paired_targets

    def rec(label, rep, tt):
        return {"label": label, "rep": rep, "time_to_target_s": tt}

    # the seeds set 142 to 190 steps to the target: the ranges overlap, the pairs do not
    per_rep = [rec("mrc/link_cut", 0, 2.53), rec("rc/link_cut", 0, 2.75),
               rec("mrc/link_cut", 1, 3.48), rec("rc/link_cut", 1, 3.65),
               rec("mrc/link_cut", 2, 2.60), rec("rc/link_cut", 2, 2.88),
               rec("gloo/link_cut", 0, 2.4), rec("gloo/link_cut", 1, 3.7),
               rec("gloo/link_cut", 2, 3.0)]
    out = paired_targets(per_rep)
    assert out["cut_time_to_target_mrc_vs_rc_paired"] == {
        "median": 0.92, "min": 0.903, "max": 0.953}
    assert out["cut_time_to_target_mrc_vs_rc_paired_beyond_spread"] is True
    assert out["cut_time_to_target_mrc_vs_gloo_paired_beyond_spread"] is False  # 1.05 once
    assert "dblp_vs_mrc_time_to_target_paired" not in out  # no LM runs


def test_the_repetitions_table_compares_each_figure_and_pairs_the_repetitions():
    from workloads.training.report import repetitions_table

    def run(label, rep, worst, tt):
        return {"label": label, "rep": rep, "microburst_worst_ms": worst, "time_to_target_s": tt}

    runs = [run("mrc", 0, 100.0, 5.0), run("rc", 0, 200.0, 5.0),
            run("mrc", 1, 110.0, None), run("rc", 1, 100.0, 5.5),  # mrc never reached it
            run("mrc", 2, 120.0, 5.2), run("rc", 2, 240.0, 5.2)]
    text = repetitions_table(runs, ["label", "rep", "microburst_worst_ms"],
                             ["time_to_target_s", "microburst_worst_ms"])
    lines = text.splitlines()
    assert ("microburst_worst_ms: mrc 110.000 vs rc 200.000: within the spread: not a "
            "difference (paired 0.50, 1.10, 0.50)") in lines
    assert ("time_to_target_s: mrc 5.100 vs rc 5.200: within the spread: not a difference "
            "(paired 1.00, 1.00)") in lines


def test_the_repetitions_table_calls_a_paired_difference_by_its_name():
    from workloads.training.report import repetitions_table

    runs = [{"label": t, "rep": r, "time_to_target_s": tt * (0.9 if t == "mrc" else 1.0)}
            for r, tt in enumerate((4.5, 6.4, 4.7)) for t in ("mrc", "rc")]
    text = repetitions_table(runs, ["label", "rep", "time_to_target_s"], ["time_to_target_s"])
    assert ("time_to_target_s: mrc 4.230 vs rc 4.700: differ beyond the paired spread (the "
            "ranges overlap; every repetition orders them the same way) (paired 0.90, 0.90, "
            "0.90)") in text.splitlines()


def test_a_failure_the_fabric_bounds_is_set_against_the_healthy_step_stretched() -> None:
    # 10 ms steps of which 4 ms exposed communication; through the cut the steps take
    # 15 ms; the fabric leaves the transfers 1.5x: the step at the bound is 10 + 4 * 0.5
    steps = [{"type": "job_step", "label": "x", "rep": 0, "step": i, "t_s": 0.01 * (i + 1),
              "step_s": 0.015 if 4 <= i <= 6 else 0.010, "compute_s": 0.006,
              "exposed_comm_s": 0.009 if 4 <= i <= 6 else 0.004} for i in range(12)]
    events = [{"type": "event", "label": "x", "rep": 0, "action": a, "kind": "link_down",
               "link": "a-b", "t_s": t, "fired": t} for a, t in (("apply", 0.041),
                                                                 ("restore", 0.069))]
    s = summarize(steps + events, "x", 0, bounds={"link_down": 1.5, "plane_down": 2.0})
    assert s["healthy_step_ms"] == 10.0 and s["healthy_exposed_comm_ms"] == 4.0
    assert s["link_down_median_ms"] == 15.0 and s["link_down_comm_bound"] == 1.5
    assert s["link_down_step_at_bound_ms"] == 12.0
    assert "plane_down_comm_bound" not in s  # no such failure ran
    assert "link_down_comm_bound" not in summarize(steps + events, "x", 0)
    cut = summarize(steps + events, "x", 0, bounds={"link_down": float("inf")})
    assert cut["link_down_step_at_bound_ms"] is None  # no path left: no step to set against
    late = [{**e, "t_s": e["t_s"] + 1, "fired": e["fired"] + 1} for e in events]
    after = summarize(steps + late, "x", 0, bounds={"link_down": 1.5})
    assert after["link_down_median_ms"] is None and "link_down_comm_bound" not in after
