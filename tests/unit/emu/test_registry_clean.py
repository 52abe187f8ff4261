"""emu clean when a namespace name cannot be removed: it says which and why, keeps the
record for a retry, and removes everything else (no root needed: names are faked)."""

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
    pid = dead_pid()
    for fabric in ("ok", "busy"):
        registry.FabricState(fabric, pid, namespaces={
            "h0": {"netns": registry.netns_name(fabric, "h0"), "pid": pid, "inode": 0}}).save()
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


def test_emu_clean_names_the_stuck_names_and_the_way_out(state_dir, monkeypatch, capsys):
    monkeypatch.setattr(errors, "require_root", lambda what: None)
    assert cli.cmd_clean(argparse.Namespace(force=False)) == 1
    err = capsys.readouterr().err
    assert "could not remove 1 namespace names" in err and "sae-busy-h0" in err
    assert "umount" in err and "emu clean" in err
