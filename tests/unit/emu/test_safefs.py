"""Writes as root never follow a planted symlink, new files are exclusive, and a results
directory that holds someone's files is written into only with --force (no root: the
planted links point at files of the test's own)."""

from __future__ import annotations

import os
import stat

import pytest

from emu import safefs
from emu.errors import EmuError


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim"
    v.write_text("precious\n")
    return v


@pytest.mark.parametrize("write", [
    lambda p: safefs.write_text(p, "x"),
    lambda p: safefs.write_bytes(p, b"x"),
    lambda p: safefs.open_append(p).close(),
    lambda p: safefs.open_write(p, binary=True).close(),
    lambda p: safefs.open_new(p).close(),
])
def test_no_write_follows_a_symlink(tmp_path, victim, write):
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    with pytest.raises(EmuError, match="symbolic link|already exists"):
        write(link)
    assert victim.read_text() == "precious\n"


def test_an_atomic_write_replaces_a_symlink_instead_of_following_it(tmp_path, victim):
    link = tmp_path / "summary.json"
    link.symlink_to(victim)
    safefs.write_json(link, {"a": 1})
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text() == '{"a": 1}\n'
    assert stat.S_IMODE(link.stat().st_mode) == safefs.FILE_MODE
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_new_file_is_exclusive(tmp_path):
    p = tmp_path / "a.pcap"
    safefs.open_new(p, binary=True).close()
    with pytest.raises(EmuError, match="already exists"):
        safefs.open_new(p, binary=True)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "steps.csv"
    os.mkfifo(fifo)
    with pytest.raises(EmuError, match="not a regular file"):
        safefs.write_text(fifo, "x")


def test_copy_refuses_a_linked_source_and_destination(tmp_path, victim):
    src = tmp_path / "src"
    src.write_text("data")
    link = tmp_path / "dest"
    link.symlink_to(victim)
    with pytest.raises(EmuError, match="symbolic link"):
        safefs.copy_file(src, link)
    with pytest.raises(EmuError, match="symbolic link"):
        safefs.copy_file(link, tmp_path / "other")
    assert victim.read_text() == "precious\n"


def test_an_out_dir_with_files_needs_force(tmp_path):
    d = tmp_path / "precious"
    d.mkdir()
    (d / "grid.csv").write_text("hand-written")
    with pytest.raises(safefs.OutDirNotEmpty, match=r"--out .*precious already holds 1 "
                       r"entries \(grid.csv\).*--force"):
        safefs.out_dir(d)
    assert safefs.out_dir(d, force=True) == d
    assert (d / "grid.csv").read_text() == "hand-written"
    assert safefs.out_dir(tmp_path / "new" / "deeper").is_dir()


def test_an_out_dir_that_is_a_symlink_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(EmuError, match="symbolic link"):
        safefs.out_dir(link, force=True)


def test_a_world_writable_out_dir_needs_force(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    with pytest.raises(safefs.OutDirNotEmpty, match="writable by every user"):
        safefs.out_dir(d)
    d.chmod(0o1777)  # sticky, like /tmp: others cannot replace our files there
    assert safefs.out_dir(d) == d


def test_default_results_dirs_never_reuse_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(safefs.time, "strftime", lambda fmt: fmt.replace("%Y%m%d-%H%M%S",
                                                                          "20260101-000000"))
    a = safefs.results_dir(None, "demo")
    b = safefs.results_dir(None, "demo")
    assert a != b and a.is_dir() and b.is_dir() and b.name == f"{a.name}-2"


def test_input_files_are_bounded(tmp_path):
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (safefs.MAX_INPUT_BYTES + 1))
    with pytest.raises(EmuError, match=r"experiment file .*big.toml.* is 1,048,577 bytes"):
        safefs.read_input(big, "experiment")
