"""What an unprivileged local user can plant does not steer what root's `emu` runs or
writes (root: the attacker's files are planted as `nobody`, `emu` runs as root, as CI
runs it). See SECURITY.md for the threat model."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from workloads.training.results import read_jsonl

from .procs import small_run

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
EMU = str(Path(sys.executable).parent / "emu")  # the installed entry point, as users run it

SMALL_RUN = small_run("sectest", steps=4)


def as_nobody(*argv: str) -> None:
    subprocess.run(["runuser", "-u", "nobody", "--", *argv], check=True, timeout=30)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may write into (as a shared /tmp subdirectory would be),
    reachable by `nobody` (pytest's own tmp_path is root's 0700)."""
    d = Path(tempfile.mkdtemp(prefix="sae-sectest-"))
    d.chmod(0o777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_children_never_import_from_the_callers_directory(shared_dir, tmp_path):
    """A `json.py` planted by `nobody` where root starts `emu run`: no worker, driver or
    other child imports it (each would create the marker)."""
    marker = shared_dir / "pwned"
    as_nobody("sh", "-c", f"printf 'open({str(marker)!r}, \"a\").write(\"x\")\\n"
              f"raise ImportError(\"planted\")\\n' > {shared_dir}/json.py")
    exp = tmp_path / "e.toml"
    exp.write_text(SMALL_RUN)
    out = tmp_path / "out"
    p = subprocess.run([EMU, "run", str(exp), "--out", str(out)], cwd=shared_dir,
                       capture_output=True, text=True, timeout=300)
    assert not marker.exists(), "a child imported the planted module"
    assert p.returncode == 0, p.stderr[-3000:]
    assert any(r["type"] == "job_step" for r in read_jsonl(out / "results.jsonl"))


def test_a_capture_never_writes_through_a_planted_symlink(shared_dir):
    victim = Path(tempfile.mkstemp(prefix="sae-victim-")[1])
    victim.write_text("root's file\n")
    try:
        as_nobody("ln", "-s", str(victim), str(shared_dir / "h0-p0.pcap"))
        p = subprocess.Popen([EMU, "fabric", "--planes", "1", "--spines", "1", "--leaves",
                              "2", "--hosts-per-leaf", "1", "--name", "secfab", "--capture",
                              "h0:p0", "--capture-dir", str(shared_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            _, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert victim.read_text() == "root's file\n"
        assert p.returncode == 2 and "symbolic link" in err, err[-2000:]
    finally:
        victim.unlink()
    assert not Path("/run/netns/sae-secfab-h0").exists()


def test_results_never_go_through_a_planted_symlink(shared_dir, tmp_path):
    victim = Path(tempfile.mkstemp(prefix="sae-victim-")[1])
    victim.write_text("root's file\n")
    try:
        as_nobody("ln", "-s", str(victim), str(shared_dir / "results.jsonl"))
        exp = tmp_path / "e.toml"
        exp.write_text(SMALL_RUN)
        p = subprocess.run([EMU, "run", str(exp), "--out", str(shared_dir)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "--force" in p.stderr  # not empty, and others write
        p = subprocess.run([EMU, "run", str(exp), "--out", str(shared_dir), "--force"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "symbolic link" in p.stderr, p.stderr[-2000:]
        assert victim.read_text() == "root's file\n"
    finally:
        victim.unlink()


def test_a_namespace_name_held_by_another_is_an_error_and_is_left_alone(tmp_path):
    """`ip netns add sae-run-h1` by someone else: `emu run` says so and how out, removes
    nothing of theirs, and its results file records the failed build."""
    name = "sae-run-h1"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        exp = tmp_path / "e.toml"
        exp.write_text(SMALL_RUN)
        out = tmp_path / "out"
        p = subprocess.run([EMU, "run", str(exp), "--out", str(out)], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 2, p.stderr[-2000:]
        assert "Traceback" not in p.stderr
        assert f"namespace name {name!r} already exists" in p.stderr
        assert f"ip netns delete {name}" in p.stderr
        assert Path("/run/netns", name).exists()
        errors = [r for r in read_jsonl(out / "results.jsonl") if r["type"] == "error"]
        assert errors and name in errors[0]["traceback"]
        assert not Path("/run/netns/sae-run-h0").exists()  # ours: torn down
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


def _private_dir(path: Path) -> subprocess.CompletedProcess[str]:
    common = REPO / "scripts/vagrant/common.sh"
    return subprocess.run(["bash", "-c", f'set -euo pipefail; source "{common}"; '
                           f'private_dir "{path}"'], capture_output=True, text=True,
                          timeout=30)


def test_vagrant_state_and_lock_live_in_a_root_only_directory(shared_dir):
    fresh = shared_dir / "state"
    assert _private_dir(fresh).returncode == 0
    st = fresh.stat()
    assert st.st_uid == 0 and st.st_mode & 0o777 == 0o700
    planted = shared_dir / "planted"
    as_nobody("mkdir", str(planted))
    p = _private_dir(planted)
    assert p.returncode != 0 and "owned by uid" in p.stderr
    linked = shared_dir / "linked"
    as_nobody("ln", "-s", str(fresh), str(linked))
    p = _private_dir(linked)
    assert p.returncode != 0 and "symlink" in p.stderr
    for script in ("check.sh", "common.sh", "build-box.sh", "in-vm.sh"):
        fixed = [line for line in (REPO / "scripts/vagrant" / script).read_text().splitlines()
                 if "/tmp/" in line and "mktemp" not in line and not line.lstrip().startswith("#")]
        assert fixed == [], f"{script}: a fixed path under /tmp or /var/tmp: {fixed}"


def test_the_state_directory_must_be_roots_alone(monkeypatch, shared_dir):
    """A state directory another user could write would let them feed `emu clean`."""
    from emu import registry
    from emu.errors import EmuError

    planted = shared_dir / "state"
    as_nobody("mkdir", "-m", "0700", str(planted))
    monkeypatch.setattr(registry, "STATE_DIR", planted)
    with pytest.raises(EmuError, match="another user may have planted it"):
        registry.state_dir()
