"""Sweep files and their grids (no root, no Ray): expansion, stable ids, validation
errors naming the point and the key."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from commands.sweep import grid, sweepfile
from emu.errors import EmuError

BASE = """\
name = "tiny"
seed = 1
[fabric]
planes = 2
spines = 2
leaves = 2
hosts_per_leaf = 1
[workload]
model = "digits_cnn"
workers = 2
steps = 10
batch_size = 32
"""


def _files(tmp_path: Path, sweep: str, base: str = BASE) -> Path:
    (tmp_path / "exp").mkdir(exist_ok=True)
    (tmp_path / "exp" / "tiny.toml").write_text(base)
    p = tmp_path / "s.toml"
    p.write_text('name = "s"\nbase = "exp/tiny.toml"\n' + sweep)
    return p


def _points(tmp_path: Path, sweep: str, quick: bool = False) -> tuple[grid.Point, ...]:
    return grid.expand(sweepfile.load(_files(tmp_path, sweep)), quick)


def test_the_grid_is_the_product_of_the_axes_first_axis_slowest(tmp_path):
    pts = _points(tmp_path, 'seeds = [3, 4]\n[set]\n"workload.steps" = 7\n[axes]\n'
                  '"transport.name" = ["mrc", "rc", "gloo"]\n"fabric.queue_packets" = [32, 64]\n')
    assert len(pts) == 12 and [p.index for p in pts] == list(range(12))
    want = list(itertools.product(["mrc", "rc", "gloo"], [32, 64], [3, 4]))
    assert [tuple(v for _, v in p.values) for p in pts] == want
    assert [k for k, _ in pts[0].values] == ["transport.name", "fabric.queue_packets", "seed"]
    assert pts[5].overrides == {"workload.steps": 7, "transport.name": "rc",
                                "fabric.queue_packets": 32, "seed": 4}
    assert pts[5].label == "transport.name=rc, fabric.queue_packets=32, seed=4"
    assert [p.transport for p in pts] == [t for t, _, _ in want]
    assert len({p.id for p in pts}) == 12


def test_repetitions_and_quick_overrides(tmp_path):
    sweep = 'repetitions = 3\n[axes]\n"seed" = [1]\n[quick]\n"workload.steps" = 4\n'
    (full,) = _points(tmp_path, sweep)
    (quick,) = _points(tmp_path, sweep, quick=True)
    assert full.overrides == {"seed": 1, "repetitions": 3}
    assert quick.overrides == {"workload.steps": 4, "seed": 1, "repetitions": 1}
    assert full.id != quick.id


def test_nested_tables_and_dotted_keys_are_the_same_axes(tmp_path):
    a = _points(tmp_path, '[axes]\n"fabric.queue_packets" = [32, 64]\n')
    b = _points(tmp_path, "[axes.fabric]\nqueue_packets = [32, 64]\n")
    assert [p.id for p in a] == [p.id for p in b]
    assert a[0].values == b[0].values == (("fabric.queue_packets", 32),)


def test_ids_depend_on_the_resolved_experiment_not_on_how_it_is_written(tmp_path):
    ab = _points(tmp_path, '[axes]\n"transport.name" = ["mrc", "rc"]\n"seed" = [1, 2]\n')
    ba = _points(tmp_path, '[axes]\n"seed" = [2, 1]\n"transport.name" = ["rc", "mrc"]\n')
    by_values = {frozenset(p.values): p.id for p in ab}
    assert {frozenset(p.values): p.id for p in ba} == by_values  # axis order irrelevant
    # a key set to the value the base already resolves to (planes = 2, the rate's
    # default 100 Mbit/s, seed 1, explicit default placement) changes nothing
    same = _points(tmp_path, '[set]\n"fabric.planes" = 2\n"fabric.rate_mbit" = 100\n'
                   '"workload.hosts" = ["h0", "h1"]\n[axes]\n"transport.name" = ["mrc"]\n'
                   '"seed" = [1]\n')
    assert same[0].id == by_values[frozenset({("transport.name", "mrc"), ("seed", 1)})]
    # the experiment's name and description are not part of it
    renamed = BASE.replace('name = "tiny"', 'name = "other"\ndescription = "x"')
    (tmp_path / "r").mkdir()
    p = _files(tmp_path / "r", '[axes]\n"transport.name" = ["mrc"]\n"seed" = [1]\n', renamed)
    (q,) = grid.expand(sweepfile.load(p))
    assert q.id == same[0].id
    # and it is deterministic across loads, 16 hex digits
    assert [x.id for x in ab] == [x.id for x in _points(
        tmp_path, '[axes]\n"transport.name" = ["mrc", "rc"]\n"seed" = [1, 2]\n')]
    assert all(len(x.id) == 16 and int(x.id, 16) >= 0 for x in ab)


def test_two_points_that_are_one_experiment_are_refused(tmp_path):
    with pytest.raises(EmuError, match=r"points 0 \(fabric.rate_mbit=100\) and 1 "
                       r"\(fabric.rate_mbit=100.0\) are the same experiment"):
        _points(tmp_path, '[axes]\n"fabric.rate_mbit" = [100, 100.0]\n')


@pytest.mark.parametrize("sweep, message", [
    ('[axes]\n"seed" = [1]\nmax_parallel = 2\n',  # a top-level key written under [axes]
     "axes.max_parallel = 2 is invalid: an axis must be an array"),
    ('sead = [1]\n', "unknown key 'sead'"),
    ('[axes]\n"fabric.planes" = []\n', "axes.fabric.planes is empty"),
    ('[axes]\n"fabric.planes" = 2\n', "axes.fabric.planes = 2 is invalid: an axis must be"),
    ("", "no axis"),
    ('seeds = [1, "2"]\n', "seeds = [1, '2'] is invalid"),
    ('seeds = [1]\n[axes]\nseed = [2]\n', "seeds and axes.seed"),
    ('[set]\n"fabric.planes" = 2\n[axes]\n"fabric.planes" = [1]\n',
     "fabric.planes is both in [set] and an axis"),
    ('[axes]\n"repetitions" = [1, 2]\n', "axes.repetitions is not allowed"),
    ("retries = 11\n[axes]\nseed = [1]\n", "retries = 11 is invalid"),
])
def test_sweep_file_errors_name_the_key(tmp_path, sweep, message):
    with pytest.raises(EmuError, match=message.replace("[", r"\[").replace("(", r"\(")):
        _points(tmp_path, sweep)


def test_unknown_axes_key_is_an_error_of_the_table(tmp_path):
    # A misspelt axis is a key the experiment does not know: its own validator says so.
    with pytest.raises(EmuError) as e:
        _points(tmp_path, '[axes]\n"fabric.plnaes" = [1, 2]\n')
    assert "point 0 (fabric.plnaes=1)" in str(e.value)
    assert "unknown key 'fabric.plnaes' in [fabric]" in str(e.value)


def test_an_invalid_combination_names_the_point_and_the_key(tmp_path):
    # hierarchical all-reduce needs dcs > 1: only the points that combine both fail
    with pytest.raises(EmuError) as e:
        _points(tmp_path, '[axes]\n"fabric.dcs" = [2, 1]\n'
                '"transport.collective" = ["ring", "hierarchical"]\n')
    msg = str(e.value)
    assert msg.startswith(str(tmp_path / "s.toml") + ": point 3 (fabric.dcs=1, "
                          "transport.collective=hierarchical): ")
    assert "transport.collective" in msg.split("): ", 1)[1]


def test_a_value_of_the_wrong_type_names_the_point_and_the_key(tmp_path):
    with pytest.raises(EmuError, match=r"point 1 \(workload.steps=many\): .*workload.steps = "
                       r"'many' is invalid"):
        _points(tmp_path, '[axes]\n"workload.steps" = [5, "many"]\n')


def test_a_missing_base_is_named(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('name = "s"\nbase = "nope.toml"\n[axes]\nseed = [1]\n')
    with pytest.raises(EmuError, match="base = 'nope.toml': no such experiment file"):
        sweepfile.load(p)


def test_the_shipped_sweep_files_are_valid():
    files = sorted(Path("experiments/sweeps").glob("*.toml"))
    assert files
    for f in files:
        sweep = sweepfile.load(f)
        pts = grid.expand(sweep)
        assert len(pts) == sweep.size and len({p.id for p in pts}) == sweep.size
        assert grid.expand(sweep, quick=True)


@pytest.mark.parametrize("cluster", ["local", "auto", "10.0.0.1:6379", "[fd00::1]:6379"])
def test_cluster_forms_that_are_accepted(cluster):
    from commands.sweep.cluster import check_cluster

    check_cluster(cluster)


@pytest.mark.parametrize("cluster", ["head", "head:port", ":6379", "lcoal", "head:0",
                                     "head:65536"])
def test_a_cluster_that_is_no_address_is_refused_before_anything_runs(cluster, tmp_path):
    from commands.sweep.run import run_sweep

    f = _files(tmp_path, '[axes]\nseed = [1]\n')
    with pytest.raises(EmuError, match=f"--cluster '{cluster}' is invalid: must be local, "
                       "auto or HOST:PORT"):
        run_sweep(f, cluster=cluster, out=tmp_path / "out", say=lambda m: None)
    assert not (tmp_path / "out").exists()


def test_a_ray_client_address_is_refused_naming_the_form_to_use(tmp_path):
    from commands.sweep.run import run_sweep

    f = _files(tmp_path, '[axes]\nseed = [1]\n')
    with pytest.raises(EmuError, match="Ray Client addresses are not supported.*HOST:PORT"):
        run_sweep(f, cluster="ray://head:10001", out=tmp_path / "out", say=lambda m: None)
    assert not (tmp_path / "out").exists()


def test_a_refused_non_root_sweep_leaves_no_out_directory(tmp_path, monkeypatch):
    """Finding 12: the retry must not find a directory that "already holds a sweep"."""
    from commands.sweep import run
    from emu import errors

    monkeypatch.setattr(errors.os, "geteuid", lambda: 65534)
    monkeypatch.setattr(run, "connect", None)  # nothing may start
    f = _files(tmp_path, '[axes]\nseed = [1]\n')
    for _ in range(2):  # the second try is refused for the same reason, not another
        with pytest.raises(EmuError, match="emu sweep --cluster local .* needs root"):
            run.run_sweep(f, out=tmp_path / "out", say=lambda m: None)
        assert not (tmp_path / "out").exists()


def test_a_cluster_to_join_without_a_token_here_leaves_no_out_directory(tmp_path,
                                                                          monkeypatch):
    from commands.sweep.run import run_sweep

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token
    for k in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(k, raising=False)
    f = _files(tmp_path, '[axes]\nseed = [1]\n')
    with pytest.raises(EmuError, match="--cluster 127.0.0.1:9: no Ray token on this machine.*"
                       "auth_token"):
        run_sweep(f, cluster="127.0.0.1:9", out=tmp_path / "out", say=lambda m: None)
    assert not (tmp_path / "out").exists()


def test_the_sweep_schema_is_the_readers(capsys):
    """One table (sweepfile.KEYS) gives the reader its keys and rules, `emu sweep --keys`
    and the reference page their listing."""
    from commands import cli
    from commands.sweep import sweepfile
    from emu.errors import EmuError

    assert sweepfile.TOP == tuple(k.path for k in sweepfile.KEYS)
    rule = next(k.rule for k in sweepfile.KEYS if k.path == "retries")
    root = Path(__file__).resolve().parents[3]
    base = str(root / "experiments/training/digits_mrc_linkcut.toml")
    with pytest.raises(EmuError, match=re.escape(f"retries = 11 is invalid: must be {rule}")):
        sweepfile.parse({"name": "s", "base": base, "seeds": [1], "retries": 11}, "s.toml")
    assert cli.main(["sweep", "--keys"]) == 0
    assert "retries = 1" in capsys.readouterr().out
