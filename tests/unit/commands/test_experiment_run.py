"""`emu run` and an experiment's Python timeline: the help says it is code that runs as
root, and a script that only running can read runs before anything is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from commands import cli

EXPERIMENT = """name = "x"
timeline = "t.py"
[fabric]
spines = 2
leaves = 2
hosts_per_leaf = 2
[workload]
model = "digits_cnn"
workers = 2
steps = 5
"""


def test_run_help_says_a_python_timeline_runs_as_root(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "A Python timeline" in text and "runs as root when the run starts" in text


def _experiment(tmp_path: Path, script: str) -> Path:
    (tmp_path / "t.py").write_text(script)
    f = tmp_path / "x.toml"
    f.write_text(EXPERIMENT)
    return f


def test_a_scripts_error_comes_before_anything_is_built(tmp_path, monkeypatch, capsys):
    import workloads.training.runner

    built: list[object] = []
    monkeypatch.setattr(workloads.training.runner, "run_experiment",
                        lambda exp, out, **kw: built.append(exp))
    f = _experiment(tmp_path, "for i in range(1):\n    raise RuntimeError('boom')\n"
                              "timeline = []\n")
    assert cli.main(["run", str(f), "--out", str(tmp_path / "out")]) == 2
    assert built == []
    err = capsys.readouterr().err
    assert "t.py, line 2: RuntimeError: boom" in err and "timeline = " in err


def test_a_scripts_events_are_read_once_before_the_run(tmp_path, monkeypatch):
    import workloads.training.runner

    built: list[object] = []
    monkeypatch.setattr(workloads.training.runner, "run_experiment",
                        lambda exp, out, **kw: built.append(exp))
    f = _experiment(tmp_path, "c = fail_link('p0l0-p0s1')\nfor t in [1.0]:\n    pass\n"
                              "timeline = [at(t, c)]\n")
    assert cli.main(["run", str(f), "--out", str(tmp_path / "out")]) == 0
    (exp,) = built
    assert "events" in vars(exp)  # cached: run before run_experiment was called
    assert [ev.at for ev in exp.events] == [1.0]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
