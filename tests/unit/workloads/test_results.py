"""Results writer, CSVs, the calibration math on synthetic records, and plots (no root)."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from workloads.training import metrics, plots
from workloads.training import results as res

PNG = b"\x89PNG\r\n\x1a\n"


def step(rep: int, rank: int, n: int, t_s: float, step_s: float, comm_s: float,
         label: str = "mrc", **extra: object) -> dict:
    return {"type": "step", "label": label, "rep": rep, "rank": rank, "step": n, "t_s": t_s,
            "compute_s": step_s - comm_s, "comm_s": comm_s, "exposed_comm_s": comm_s,
            "step_s": step_s, "loss": 1.0, "lr": 0.1, **extra}


def event(action: str, fired: float, label: str = "mrc", rep: int = 0, **what: object) -> dict:
    what = what or {"kind": "link_down", "link": "p0l0-p0s1"}
    return {"type": "event", "label": label, "rep": rep, "t_s": fired, "at": fired,
            "fired": fired, "late_ms": 0.0, "action": action, **what}


BURST = {"kind": "microburst", "target": "p0l1:h4", "sources": ["h2"], "on_ms": 10.0,
         "every_ms": 100.0, "rate_mbit": None}


# --- writing and reading -----------------------------------------------------------------


def test_records_are_written_line_by_line_and_readable_while_open(tmp_path):
    out = tmp_path / "run"
    w = res.ResultsWriter(out, label="mrc")
    assert out.is_dir() and w.path == out / "results.jsonl"
    w.meta(experiment={"name": "x"}, transport={"name": "mrc"})
    assert len(res.read_jsonl(w.path)) == 1  # flushed at once, file still open
    w.step(rep=0, rank=1, step=3, t_s=1.5, compute_s=0.1, comm_s=0.2, exposed_comm_s=0.15,
           step_s=0.3, loss=float("nan"), lr=np.float32(0.5), tolerance=0.05,
           delivered=0.97, lost_entries=12, mode="lr_scaled")
    recs = res.read_jsonl(w.path)
    assert [r["type"] for r in recs] == ["meta", "step"]
    meta, st = recs
    assert meta["label"] == "mrc" and meta["versions"]["python"] and meta["host"]["cpus"]
    # how fast the machine ran Python when the run began: results taken on one machine
    # at different speeds are told apart
    assert meta["host"]["cpu_reference"]["python_ns_per_iter"] > 0
    assert "numpy" in meta["versions"] and "git" in meta["versions"]
    assert st["loss"] is None and st["lr"] == 0.5 and st["mode"] == "lr_scaled"
    assert st["rank"] == 1 and st["delivered"] == 0.97
    w.close()
    extra = res.ResultsWriter(out)
    assert extra.write("job_step", rep=0, step=3)["label"] == "run"  # kept in the JSONL only
    with pytest.raises(ValueError, match="record type 'Bad type'"):
        extra.write("Bad type")
    extra.close()


def test_read_jsonl_skips_a_line_being_written(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"type": "eval", "t_s": 1}\n{"type": "ev')
    assert res.read_jsonl(p) == [{"type": "eval", "t_s": 1}]
    p.write_text('{"type": "eval"}\nnot json\n{"type": "eval"}\n')
    with pytest.raises(ValueError, match="r.jsonl:2"):
        res.read_jsonl(p)


def test_error_records_keep_the_traceback(tmp_path):
    with res.ResultsWriter(tmp_path) as w:
        try:
            raise RuntimeError("rank 2 lost its peer")
        except RuntimeError as e:
            rec = w.error(rank=2, traceback=e, rep=0)
    assert "Traceback" in rec["traceback"] and "rank 2 lost its peer" in rec["traceback"]
    assert res.read_jsonl(tmp_path / "results.jsonl")[0]["rank"] == 2


def test_context_manager_finishes_even_on_interrupt(tmp_path):
    with pytest.raises(KeyboardInterrupt), res.ResultsWriter(tmp_path) as w:
        w.eval(rep=0, step=10, t_s=2.0, accuracy=0.5, loss=1.2)
        raise KeyboardInterrupt
    assert (tmp_path / "evals.csv").is_file() and (tmp_path / "calibration.json").is_file()
    assert res.read_jsonl(tmp_path / "results.jsonl")[0]["accuracy"] == 0.5


def test_csvs_match_the_records(tmp_path):
    w = res.ResultsWriter(tmp_path, label="dblp")
    steps = []
    for n in range(3):
        for rank in range(2):
            steps.append(w.step(rep=0, rank=rank, step=n, t_s=0.1 * (n + 1), compute_s=0.05,
                                comm_s=0.04, exposed_comm_s=0.03, step_s=0.1, loss=2.0 - n,
                                lr=0.1, tolerance=None if n == 0 else 0.05, bytes=1000))
    w.eval(rep=0, step=2, t_s=0.3, accuracy=0.8, loss=0.5)
    w.event({"at": 0.1, "fired": 0.11, "late_ms": 10.0, "action": "apply", "kind": "microburst",
             "target": "p0l1:h4", "sources": ["h2", "h3"]}, rep=0)
    w.finish()
    w.close()
    with open(tmp_path / "steps.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:len(res.STEP_FIELDS)] == list(res.STEP_FIELDS)
    assert "bytes" in rows[0] and "type" not in rows[0]
    assert len(rows) == len(steps)
    for row, rec in zip(rows, steps, strict=True):
        assert row["label"] == "dblp" and int(row["step"]) == rec["step"]
        assert float(row["t_s"]) == rec["t_s"] and float(row["loss"]) == rec["loss"]
        assert row["tolerance"] == ("" if rec["tolerance"] is None else str(rec["tolerance"]))
    with open(tmp_path / "evals.csv", newline="") as f:
        (ev,) = list(csv.DictReader(f))
    assert (ev["step"], ev["accuracy"], ev["t_s"]) == ("2", "0.8", "0.3")
    with open(tmp_path / "events.csv", newline="") as f:
        (e,) = list(csv.DictReader(f))
    assert e["t_s"] == "0.11" and e["kind"] == "microburst"
    assert json.loads(e["sources"]) == ["h2", "h3"]
    cal = json.loads((tmp_path / "calibration.json").read_text())
    assert cal["format"] == "scaleacross-emu/calibration/1" and "dblp" in cal["variants"]


# --- calibration math --------------------------------------------------------------------


def test_failure_windows_pair_apply_and_restore():
    evs = [event("apply", 1.0), event("apply", 1.5, **BURST),
           event("measured", 1.7), event("restore", 2.0),
           event("restore", 3.0, **BURST, target_drops=5),
           event("apply", 4.0, kind="switch_down", switch="p0s1"),
           {**event("apply", 4.5, kind="link_down", link="p1l0-p1s0"), "error": "boom"},
           event("apply", 1.0, rep=1)]
    ws = metrics.failure_windows(evs)
    got = [(w.rep, w.kind, w.start_s, w.end_s) for w in ws]
    assert got == [(0, "link_down", 1.0, 2.0), (0, "microburst", 1.5, 3.0),
                   (0, "switch_down", 4.0, math.inf), (1, "link_down", 1.0, math.inf)]
    assert ws[1].burst and ws[1].what["target"] == "p0l1:h4"
    w = ws[0]
    assert w.overlaps({"rep": 0, "t_s": 1.2, "step_s": 0.5})
    assert w.overlaps({"rep": 0, "t_s": 2.3, "step_s": 0.5})
    assert not w.overlaps({"rep": 0, "t_s": 1.0, "step_s": 0.5})  # ends as the cut starts
    assert not w.overlaps({"rep": 1, "t_s": 1.2, "step_s": 0.5})


def test_job_steps_take_the_slowest_rank():
    js = metrics.job_steps([step(0, 0, 1, 2.0, 0.2, 0.1), step(0, 1, 1, 2.1, 0.3, 0.25),
                        step(0, 0, 0, 1.0, 0.2, 0.1), step(1, 0, 0, 1.0, 0.4, 0.1)])
    assert [(j["rep"], j["step"], j["step_s"], j["t_s"], j["ranks"]) for j in js] == [
        (0, 0, 0.2, 1.0, 1), (0, 1, 0.3, 2.1, 2), (1, 0, 0.4, 1.0, 1)]
    assert js[1]["comm_s"] == 0.25


def test_line_rate_fraction_known_answer():
    # 1 MB in 0.1 s is 80 Mbit/s: 0.8 of a 100 Mbit/s bottleneck; the step during the
    # failure (10x slower) is left out, and a record's own bytes win over bytes_per_step.
    steps = [step(0, r, n, 1.0 + n, 0.2, 0.1) for n in range(3) for r in range(2)]
    steps.append(step(0, 0, 3, 10.0, 1.0, 1.0))
    steps.append(step(0, 1, 4, 11.0, 0.2, 0.05, bytes=500_000))
    windows = metrics.failure_windows([event("apply", 9.5), event("restore", 9.9)])
    got = metrics.line_rate_fraction(steps, windows, bytes_per_step=1_000_000, bottleneck_mbit=100)
    assert got["rounds"] == 7 and got["bytes"] == 6_500_000
    assert got["fraction"] == pytest.approx(6_500_000 * 8 / (0.65 * 100e6))
    assert got["fraction"] == pytest.approx(0.8)
    assert metrics.line_rate_fraction(steps, windows)["fraction"] is None  # bytes unknown
    assert metrics.line_rate_fraction(steps, windows, 1, None)["fraction"] is None


def test_tail_inflation_known_answer():
    # Healthy rounds: comm 0.1 s (median 0.1). During the bursts: 0.2 .. 1.1 s; p99 of
    # ten values 0.2, 0.3, ..., 1.1 interpolates to 1.1 - 0.01 * 0.9 * 1 = 1.091.
    healthy = [step(0, 0, n, 0.2 * (n + 1), 0.2, 0.1) for n in range(10)]
    t0 = 5.0
    burst = [step(0, 0, 10 + k, t0 + 0.2 * (k + 1), 0.2, 0.2 + 0.1 * k) for k in range(10)]
    windows = metrics.failure_windows([event("apply", t0, **BURST),
                                   event("restore", t0 + 2.0, **BURST)])
    got = metrics.tail_inflation(healthy + burst, windows)
    assert got["burst_rounds"] == 10 and got["healthy_rounds"] == 10
    assert got["p50_healthy_comm_s"] == pytest.approx(0.1)
    assert got["p99_burst_comm_s"] == pytest.approx(1.091)
    assert got["value"] == pytest.approx(10.91)
    assert metrics.tail_inflation(healthy, [])["value"] is None  # no bursts: null
    link = metrics.failure_windows([event("apply", t0), event("restore", t0 + 2.0)])
    assert metrics.tail_inflation(healthy + burst, link)["value"] is None


def test_time_lost_known_answer():
    # Job steps of 0.1 s (two ranks, the slower decides); the cut from 3.05 to 3.35 s
    # overlaps three steps of 0.3, 0.2 and 0.1 s: (0.2 + 0.1 + 0.0) = 0.3 s lost = 30 RTTs.
    steps, t = [], 0.0
    for n, s in enumerate([0.1] * 30 + [0.3, 0.2, 0.1] + [0.1] * 10):
        t += s
        steps += [step(0, 0, n, t, s, s / 2), step(0, 1, n, t - 0.001, s - 0.01, s / 2)]
    ends = sorted({round(x["t_s"], 9) for x in steps if x["rank"] == 0})
    assert ends[29] == pytest.approx(3.0) and ends[32] == pytest.approx(3.6)
    windows = metrics.failure_windows([event("apply", 3.05), event("restore", 3.55)])
    (lost,) = metrics.time_lost(steps, windows, rtt_s=0.01)
    assert lost["steps"] == 3 and lost["healthy_step_s"] == pytest.approx(0.1)
    assert lost["lost_s"] == pytest.approx(0.3) and lost["lost_rtts"] == pytest.approx(30)
    assert lost["kind"] == "link_down" and lost["what"] == {"kind": "link_down",
                                                          "link": "p0l0-p0s1"}
    (no_rtt,) = metrics.time_lost(steps, windows)
    assert no_rtt["lost_rtts"] is None
    after = metrics.failure_windows([event("apply", 100.0)])
    assert metrics.time_lost(steps, after)[0]["lost_s"] is None  # never overlapped training


def test_calibration_per_label():
    recs = [
        {"type": "meta", "label": "mrc", "experiment": {"name": "e"},
         "transport": {"name": "mrc"}, "bytes_per_step": 1_000_000, "bottleneck_mbit": 100,
         "rtt_s": 0.01},
        {"type": "meta", "label": "rc", "experiment": {"name": "e"}, "transport": {"name": "rc"}},
    ]
    for label, slow in (("mrc", 0.2), ("rc", 1.0)):
        t = 0.0
        for n in range(20):
            s = slow if n == 10 else 0.1
            t += s
            recs.append(step(0, 0, n, t, s, s / 2, label=label))
        recs += [event("apply", 1.05, label=label), event("restore", 1.1, label=label)]
    cal = metrics.calibration(recs, rtt_s=0.02)
    assert cal["format"] == metrics.CALIBRATION_FORMAT and cal["experiment"] == "e"
    mrc, rc = cal["variants"]["mrc"], cal["variants"]["rc"]
    assert (mrc["transport"], rc["transport"]) == ("mrc", "rc")
    assert mrc["line_rate"]["fraction"] == pytest.approx(1e6 * 8 / (0.05 * 100e6))
    assert rc["line_rate"]["fraction"] is None
    assert mrc["lost_s_per_failure"] == pytest.approx(0.1)
    assert mrc["lost_rtts_per_failure"] == pytest.approx(10)  # the label's own RTT
    assert rc["lost_s_per_failure"] == pytest.approx(0.9)
    assert rc["rtt_s"] == 0.02 and rc["lost_rtts_per_failure"] == pytest.approx(45)
    assert mrc["tail_inflation"]["value"] is None
    json.dumps(cal, allow_nan=False)


def test_time_to_accuracy():
    evals = [{"t_s": 3.0, "accuracy": 0.95, "loss": 0.2}, {"t_s": 1.0, "accuracy": 0.5,
                                                            "loss": 1.0},
             {"t_s": 2.0, "accuracy": 0.91, "loss": 0.4}]
    assert metrics.time_to_accuracy(evals, 0.9) == 2.0
    assert metrics.time_to_accuracy(evals, 0.99) is None
    assert metrics.time_to_accuracy(evals, 0.3, key="loss", higher_is_better=False) == 3.0


# --- plots ---------------------------------------------------------------------------------


def test_time_to_accuracy_plot(tmp_path):
    evals = {"mrc": [{"rep": 0, "t_s": 2.0, "accuracy": 0.7}, {"rep": 0, "t_s": 1.0,
                                                              "accuracy": 0.4},
                     {"rep": 1, "t_s": 1.5, "accuracy": 0.6}, {"rep": 1, "t_s": 2.5,
                                                              "accuracy": None}],
             "rc": [{"rep": 0, "t_s": 3.0, "accuracy": 0.9}]}
    series = plots.accuracy_series(evals)
    assert series["mrc"] == {0: ([1.0, 2.0], [0.4, 0.7]), 1: ([1.5], [0.6])}
    assert series["rc"] == {0: ([3.0], [0.9])}
    p = plots.plot_time_to_accuracy(evals, 0.9, tmp_path / "tta.png")
    assert p.read_bytes()[:8] == PNG and p.stat().st_size > 1000


def test_step_timeline_plot(tmp_path):
    steps = {"mrc": [step(0, r, n, 0.1 * (n + 1), 0.1 + (0.05 if n == 5 else 0), 0.04)
                     for n in range(10) for r in range(2)] + [step(1, 0, 0, 0.1, 9.0, 1.0)],
             "dblp": [step(0, 0, n, 0.1 * (n + 1), 0.1, 0.02, label="dblp") for n in range(10)]}
    s = plots.step_series(steps["mrc"], rep=0)
    assert len(s["t_s"]) == 10 and s["step_s"][5] == pytest.approx(0.15)
    for k in range(10):
        parts = s["compute_s"][k] + s["exposed_comm_s"][k] + s["other_s"][k]
        assert parts == pytest.approx(s["step_s"][k])
    evs = [event("apply", 0.45, label="mrc"), event("restore", 0.65, label="mrc"),
           event("measured", 0.5, label="mrc"),
           {**event("apply", 0.3, label="dblp", **BURST)},
           {"type": "event", "rep": 0, "t_s": 0.8, "action": "apply", "kind": "plane_down",
            "plane": 1}]
    marks = plots.event_markers(evs, "mrc", rep=0)
    assert [(m.t_s, m.action, m.text) for m in marks] == [
        (0.45, "apply", "apply link_down p0l0-p0s1"),
        (0.65, "restore", "restore link_down p0l0-p0s1"),
        (0.8, "apply", "apply plane_down 1")]
    assert [m.text for m in plots.event_markers(evs, "dblp")] == [
        "apply microburst p0l1:h4", "apply plane_down 1"]
    p = plots.plot_step_timeline(steps, evs, tmp_path / "sub" / "steps.png")
    assert p.read_bytes()[:8] == PNG and p.stat().st_size > 1000
    empty = plots.plot_step_timeline({}, [], tmp_path / "empty.png")
    assert empty.read_bytes()[:8] == PNG


def test_comparison_table():
    table = plots.comparison_table([
        {"type": "summary", "label": "mrc", "transport": "mrc", "rep": 0,
         "time_to_target_s": 12.3456, "final_accuracy": 0.93},
        {"type": "summary", "label": "dblp_phase_aware", "transport": "dblp", "rep": 0,
         "time_to_target_s": None, "final_accuracy": 0.9, "diverged": False},
    ])
    lines = table.splitlines()
    assert lines[0].split() == ["label", "transport", "rep", "time_to_target_s",
                                "final_accuracy", "diverged"]
    assert set(lines[1]) <= {"-", " "}
    assert lines[2].split() == ["mrc", "mrc", "0", "12.35", "0.93", "-"]
    assert lines[3].split() == ["dblp_phase_aware", "dblp", "0", "-", "0.9", "no"]
    assert len({len(x) for x in lines[:2]}) == 1
    assert plots.comparison_table([]) == "(no results)"


def test_cpu_reference_times_the_loop_it_names():
    from workloads.provenance import cpu_reference

    one = cpu_reference(loops=1000, tries=1)
    assert one["python_ns_per_iter"] > 0
    assert one["loadavg_1min"] is None or one["loadavg_1min"] >= 0
