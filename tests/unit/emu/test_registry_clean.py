"""emu clean when a namespace name cannot be removed: it says which and why, keeps the
record for a retry, and removes everything else; a name someone else holds is never
removed (no root needed: names are plain files, their inodes standing for namespaces)."""

from __future__ import annotations

import argparse
import errno
import subprocess

import pytest

from commands import cli
from emu import errors, registry


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(registry, "NETNS_RUN_DIR", tmp_path / "netns")
    (tmp_path / "netns").mkdir()
    pid = dead_pid()
    for fabric in ("ok", "busy"):
        name = tmp_path / "netns" / registry.netns_name(fabric, "h0")
        name.touch()
        registry.FabricState(fabric, pid, namespaces={
            "h0": {"netns": name.name, "pid": pid, "inode": name.stat().st_ino}}).save()
    removed: list[str] = []

    def unbind(name: str) -> bool:
        if "busy" in name:
            raise OSError(errno.EBUSY, "Device or resource busy")
        removed.append(name)
        return True

    monkeypatch.setattr(registry, "unbind_name", unbind)
    return tmp_path / "state", removed


def test_a_stuck_name_is_reported_and_its_record_kept_for_a_retry(state_dir):
    d, removed = state_dir
    report = registry.clean()
    assert removed == ["sae-ok-h0"] and report.namespaces == ["sae-ok-h0"]
    assert len(report.stuck) == 1
    assert "sae-busy-h0" in report.stuck[0] and "busy" in report.stuck[0]
    assert sorted(p.name for p in d.iterdir()) == ["fabric-busy.json"]
    # Only a fabric removed entirely is reported removed; the other is named as left.
    assert report.fabrics == ["ok"] and len(report.left) == 1 and "busy" in report.left[0]


def test_emu_clean_names_the_stuck_names_and_the_way_out(state_dir, monkeypatch, capsys):
    monkeypatch.setattr(errors, "require_root", lambda what: None)
    assert cli.cmd_clean(argparse.Namespace(force=False)) == 1
    err = capsys.readouterr().err
    assert "could not remove 1 namespace names" in err and "sae-busy-h0" in err
    assert "umount" in err and "emu clean" in err


def test_emu_clean_does_not_call_a_fabric_removed_when_a_name_is_left(state_dir, monkeypatch,
                                                                      capsys):
    monkeypatch.setattr(errors, "require_root", lambda what: None)
    cli.cmd_clean(argparse.Namespace(force=False))
    out = capsys.readouterr().out
    assert "fabrics ['ok']" in out and "'busy'" not in out.split("left:")[0]
    assert "left: fabric busy" in out


def test_a_name_someone_else_holds_is_never_removed(tmp_path, monkeypatch):
    """A state file records a name (say a failed build's) that another tool holds: its
    inode is not the one recorded, so clean neither unbinds it nor kills inside it."""
    monkeypatch.setattr(registry, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(registry, "NETNS_RUN_DIR", tmp_path / "netns")
    (tmp_path / "netns").mkdir()
    theirs = tmp_path / "netns" / "sae-run-h1"
    theirs.touch()
    pid = dead_pid()
    registry.FabricState("run", pid, namespaces={
        "h1": {"netns": "sae-run-h1", "pid": pid, "inode": theirs.stat().st_ino + 1}}).save()
    unbound: list[str] = []
    monkeypatch.setattr(registry, "unbind_name", lambda n: unbound.append(n) or True)
    killed: list[set[int]] = []
    monkeypatch.setattr(registry, "processes_in", lambda inodes: killed.append(inodes) or [])
    report = registry.clean()
    assert unbound == [] and report.namespaces == [] and theirs.exists()
    assert killed == []  # no inode of ours: nothing looked up, nothing killed
    assert report.fabrics == ["run"]


def test_a_recorded_temp_dir_is_removed_by_clean_once_its_owner_died(tmp_path, monkeypatch):
    """A sweep's local Ray directory, its owner SIGKILLed: the record outlives it and the
    next clean removes the directory (and only once its owner is dead)."""
    monkeypatch.setattr(registry, "STATE_DIR", tmp_path / "state")
    d = tmp_path / "sae-ray-x"
    d.mkdir()
    with registry.recorded_tmpdir("sweep-ray", d):
        (st,) = registry._states()
        assert st.tmpdirs == [str(d)] and registry.clean().tmpdirs == []  # owner alive
        # as if this process had been killed: the record names a dead owner
        registry.FabricState(st.fabric, dead_pid(), tmpdirs=[str(d)]).save()
        report = registry.clean()
    assert report.tmpdirs == [str(d)] and not d.exists()
    assert registry._states() == []
