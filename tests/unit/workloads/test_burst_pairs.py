"""Step-locked bursts paired burst by burst across transports (synthetic records)."""

from __future__ import annotations

import pytest

from workloads.training.burst_pairs import burst_costs, pair_lines, paired_ratios


def job(label: str, rep: int, step: int, step_s: float) -> dict:
    return {"type": "job_step", "label": label, "rep": rep, "step": step, "step_s": step_s}


def window(label: str, rep: int, step: int, target: str = "p0l1:h4", **kw) -> dict:
    return {"type": "event", "action": "window", "label": label, "rep": rep, "step": step,
            "target": target, "burst": step // 3, **kw}


def run(label: str, rep: int, slow: dict[int, float]) -> list[dict]:
    """Ten 50 ms steps, some slower; bursts after the boundaries of steps 2 and 5, on two
    planes each."""
    recs = [job(label, rep, s, slow.get(s, 0.05)) for s in range(10)]
    for s in (2, 5):
        recs += [window(label, rep, s), window(label, rep, s, target="p1l1:h4")]
    return recs


def test_a_burst_costs_the_two_steps_after_its_boundary_once_for_both_planes():
    recs = run("mrc", 0, {3: 0.15, 7: 0.12})
    assert burst_costs(recs, "mrc", 0) == pytest.approx({2: 0.20, 5: 0.17})
    assert burst_costs(recs, "mrc", 1) == {}


def test_pairs_match_repetition_and_boundary_and_skip_failed_or_cut_short_windows():
    recs = (run("mrc", 0, {3: 0.15}) + run("rc", 0, {3: 0.25, 6: 0.10})
            + run("mrc", 1, {}) + run("rc", 1, {}))
    recs.append(window("rc", 1, 8))  # a window with no two steps after it: not paired
    recs.append(window("mrc", 1, 8, error="EmuError('x')"))
    assert paired_ratios(recs, "mrc", "rc") == pytest.approx(
        [0.20 / 0.30, 0.10 / 0.15, 1.0, 1.0])
    [line] = pair_lines(recs, ["mrc", "rc"])
    assert "mrc / rc 0.83" in line and "over 4 bursts paired; mrc's longer in 0" in line


def test_no_step_locked_bursts_no_lines():
    recs = [job("mrc", 0, s, 0.05) for s in range(5)] + [job("rc", 0, s, 0.05)
                                                         for s in range(5)]
    assert pair_lines(recs, ["mrc", "rc"]) == []
