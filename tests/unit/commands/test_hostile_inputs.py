"""Inputs that could make a root tool work for hours, run code or leave things behind,
refused before any work with a message naming the value, the bound and the estimate
(no root: everything here is refused before anything is built)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from commands import cli
from commands.sweep import sweepfile
from emu.errors import EmuError
from emu.timeline_script import MAX_NODES, read_script
from workloads import experiment

REPO = Path(__file__).resolve().parents[3]
LINKCUT = REPO / "experiments/training/digits_mrc_linkcut.toml"


def test_steps_beyond_the_bound_are_refused_with_an_estimate():
    exp = experiment.load(LINKCUT)
    with pytest.raises(EmuError, match=r"workload.steps = 1000000000000 is invalid: must be an "
                       r"integer in \[1, 100,000\]: .* would take at least 317 years"):
        experiment.with_overrides(exp, {"workload.steps": 10**12})


def test_repetitions_beyond_the_bound_are_refused_with_an_estimate():
    exp = experiment.load(LINKCUT)
    with pytest.raises(EmuError, match=r"repetitions = 1000000000 is invalid: must be an "
                       r"integer in \[1, 100\]: .* steps in all would take at least"):
        experiment.with_overrides(exp, {"repetitions": 10**9})


def test_a_huge_sweep_grid_is_refused_before_it_is_expanded():
    axes = {"workload.lr": [0.01 * i for i in range(1, 1001)],
            "workload.batch_size": list(range(8, 1008)), "seed": list(range(1000))}
    t0 = time.process_time()
    with pytest.raises(EmuError, match=r"the grid has 1,000,000,000 points .* at most 10,000 "
                       r"are allowed; .* would take at least"):
        sweepfile.parse({"name": "big", "base": str(LINKCUT), "axes": axes}, "big.toml")
    assert time.process_time() - t0 < 5  # refused from the axes' sizes, never expanded


@pytest.mark.parametrize("rate", ["1e-300", "0", "-5", "1e9", "nan"])
def test_link_rates_outside_what_tc_encodes_are_refused(rate, capsys):
    assert cli.main(["fabric", "--rate", rate]) == 2
    err = capsys.readouterr().err
    assert "rate_mbit" in err and "[0.01, 40000]" in err


def test_a_costly_declaration_only_timeline_is_refused_quickly(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("y = 3\n" + "y = y * y\n" * 26 + "timeline = []\n")
    t0 = time.monotonic()
    with pytest.raises(EmuError, match=r"line \d+: 'y \* y' is beyond"):
        read_script(script, run=False)
    assert time.monotonic() - t0 < 5  # refused at the first number too large, not after


def test_a_declaration_only_timeline_too_large_to_read_is_refused(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("x = [" + "1, " * MAX_NODES + "]\ntimeline = []\n")
    with pytest.raises(EmuError, match="syntax nodes"):
        read_script(script, run=False)


def test_predict_never_runs_timeline_code(tmp_path, capsys):
    marker = tmp_path / "ran"
    (tmp_path / "t.py").write_text(f"for _ in range(1):\n    open({str(marker)!r}, 'w')\n"
                                   "timeline = []\n")
    exp = tmp_path / "e.toml"
    exp.write_text('name = "p"\ntimeline = "t.py"\n[fabric]\nplanes = 2\nspines = 2\n'
                   'leaves = 2\nhosts_per_leaf = 2\n[workload]\nmodel = "digits_cnn"\n'
                   'workers = 4\nsteps = 50\nbatch_size = 64\ncompute = "modelled"\n'
                   'compute_ms = 10\n')
    code = cli.main(["explore", "--predict", str(exp)])
    assert not marker.exists()
    assert code == 2 and "never runs timeline code" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["run", str(LINKCUT)],
    ["demo"],
    ["demo", "--paths"],
    ["calibrate", "--quick"],
    ["bench", "training", "--quick"],
    ["reproduce", "failures", "--quick"],
])
def test_a_refused_non_root_command_leaves_no_out_dir(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    out = tmp_path / "out"
    extra = ["--out", str(out / "c.json" if argv[0] == "calibrate" else out)]
    assert cli.main([*argv, *extra]) == 2
    assert "needs root" in capsys.readouterr().err
    assert not out.exists()


def test_run_refuses_an_out_dir_holding_files_unless_forced(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("os.geteuid", lambda: 0)
    out = tmp_path / "precious"
    out.mkdir()
    (out / "grid.csv").write_text("hand-written")
    assert cli.main(["run", str(LINKCUT), "--out", str(out)]) == 2
    assert "already holds 1 entries (grid.csv)" in capsys.readouterr().err
    assert (out / "grid.csv").read_text() == "hand-written"


def test_explore_refuses_an_out_dir_holding_files_unless_forced(tmp_path, capsys):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "summary.json").write_text("hand-written")
    space = REPO / "experiments/explore/small_2dc.toml"
    assert cli.main(["explore", str(space), "--quick", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert (out / "summary.json").read_text() == "hand-written"
    assert cli.main(["explore", str(space), "--quick", "--no-points", "--out", str(out),
                     "--force"]) == 0
    assert (out / "summary.json").read_text() != "hand-written"


def test_calibrate_refuses_to_replace_a_record_unless_forced(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("os.geteuid", lambda: 0)
    rec = tmp_path / "calibration.json"
    rec.write_text("{}")
    assert cli.main(["calibrate", "--quick", "--out", str(rec)]) == 2
    assert "already exists" in capsys.readouterr().err and rec.read_text() == "{}"


def test_an_explore_space_of_too_many_scenarios_is_refused_with_an_estimate(capsys, tmp_path):
    space = str(REPO / "experiments/explore/small_2dc.toml")
    delays = "[" + ",".join(str(0.1 + i) for i in range(50)) + "]"
    rates = "[" + ",".join(str(10 + i) for i in range(50)) + "]"
    t0 = time.process_time()
    code = cli.main(["explore", space, "--set", f"dci.delay_ms={delays}", "--set",
                     f"dci.pair_tbps={rates}", "--no-points", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "2,500 scenarios" in err and "GiB" in err, err
    assert time.process_time() - t0 < 10


def test_an_explore_space_of_too_many_raw_points_is_refused_with_an_estimate(capsys, tmp_path):
    space = str(REPO / "experiments/explore/small_2dc.toml")
    many = "[" + ",".join(str(i) for i in range(1, 4097)) + "]"
    code = cli.main(["explore", space, "--set", f"placement.microbatch={many}", "--set",
                     f"schedule.virtual_stages={many}", "--no-points", "--out",
                     str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "raw points is more than" in err and "M raw points/s" in err, err
