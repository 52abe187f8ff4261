"""Capture points ("NODE:IFNAME") checked against a topology before anything is built, and
where a run's pcaps go (no root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from commands import cli
from emu.capture import capture_point
from emu.errors import EmuError
from topologies import MultiPlaneClos
from workloads.training.captures import capture_path

TOPO = MultiPlaneClos()  # 2 planes x 4 spines x 4 leaves x 4 hosts


def test_a_host_port_and_a_switch_port():
    assert capture_point(TOPO, "h4:p0") == ("h4", "p0")
    assert capture_point(TOPO, "p0l1:h4") == ("p0l1", "h4")
    assert capture_point(TOPO, "p1s2:l3") == ("p1s2", "l3")


@pytest.mark.parametrize("where, words", [
    ("h4", ["'h4'", "NODE:IFNAME", "h4:p0"]),
    (":p0", ["':p0'", "NODE:IFNAME"]),
    ("h4:", ["'h4:'", "NODE:IFNAME"]),
    ("h99:p0", ["capture point 'h99:p0'", "unknown node 'h99'", "h0, h1"]),
    ("h4:p7", ["'h4' has no interface 'p7'", "p0, p1"]),
    ("p0l1:h9", ["'p0l1' has no interface 'h9'", "h4"]),
])
def test_a_bad_point_names_itself_and_what_is_valid(where, words):
    with pytest.raises(EmuError) as e:
        capture_point(TOPO, where)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_one_pcap_per_run_and_point_with_a_file_name_of_the_label():
    out = Path("/r")
    assert capture_path(out, "mrc", 2, "h4", "p0") == Path("/r/captures/mrc-rep2-h4-p0.pcap")
    assert capture_path(out, "mrc/bursts", 0, "p0l1", "h4") == \
        Path("/r/captures/mrc-bursts-rep0-p0l1-h4.pcap")
    assert capture_path(out, "//", 0, "h0", "p1").name == "run-rep0-h0-p1.pcap"


def test_emu_run_refuses_a_bad_capture_point_before_building(tmp_path, monkeypatch, capsys):
    import workloads.training.runner

    built: list[object] = []
    monkeypatch.setattr(workloads.training.runner, "require_root", lambda what: None)
    monkeypatch.setattr(workloads.training.runner, "Fabric", lambda *a, **kw: built.append(a))
    f = tmp_path / "x.toml"
    f.write_text('name = "x"\n[fabric]\nspines = 2\nleaves = 2\nhosts_per_leaf = 2\n'
                 '[workload]\nmodel = "digits_cnn"\nworkers = 2\nsteps = 5\n')
    out = tmp_path / "out"
    assert cli.main(["run", str(f), "--out", str(out), "--capture", "h1:p0",
                     "--capture", "h1:p5"]) == 2
    assert built == [] and not out.exists()
    assert "'h1' has no interface 'p5'" in capsys.readouterr().err
