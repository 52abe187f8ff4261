"""SIGTERM and SIGHUP stop every long command exactly as Ctrl-C does (root).

Each command is started as a user or a scheduler would start it, the signal is sent to
its process once a fabric it built is up (its state file names this process as owner
and every namespace it records is bound), and then: the exit status says which signal
interrupted it, no traceback or native stack trace is printed, nothing of its own is
left (state file, namespace names, processes in its namespaces, temp dirs it recorded)
and the results it had written are still there. `emu sweep` (Ray tasks) is tested in
tests/root/test_sweep.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emu import registry

from .procs import process_tree, small_run

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
UP_TIMEOUT_S = 240.0  # the demo's BGP fabric on 2 loaded cores
STOP_TIMEOUT_S = 120.0

SMALL_RUN = small_run("sigrun", steps=100000)


def _cmd(tmp: Path, which: str) -> tuple[list[str], Path | None]:
    """(argv, the results directory or file whose survival is checked)."""
    exp = tmp / "e.toml"
    exp.write_text(SMALL_RUN)
    out = tmp / "out"
    table: dict[str, tuple[list[str], Path | None]] = {
        "fabric": (["fabric", "--planes", "1", "--spines", "1", "--leaves", "2",
                    "--hosts-per-leaf", "1", "--name", "sigfab"], None),
        "demo": (["demo", "--out", str(out)], out),
        "demo --paths": (["demo", "--paths", "--out", str(out)], None),
        "run": (["run", str(exp), "--out", str(out)], out / "results.jsonl"),
        "reproduce": (["reproduce", "failures", "--quick", "--out", str(out)], out),
        "calibrate": (["calibrate", "--quick", "--transports", "mrc", "--out",
                       str(out / "calibration.json")], None),
        "bench fabric": (["bench", "fabric", "--quick"], None),
        "bench transport": (["bench", "transport", "--quick"], None),
        "bench dblp": (["bench", "dblp", "--quick"], None),
        "bench training": (["bench", "training", "--quick", "--out", str(out)], out),
        "bench robustness": (["bench", "robustness", "--quick"], None),
        "bench failover": (["bench", "failover"], None),
        "bench sweep": (["bench", "sweep", "--quick"], None),
    }
    args, keep = table[which]
    return [sys.executable, "-m", "commands.cli", *args], keep


def _own_states(pid: int) -> list[registry.FabricState]:
    """The fabrics ``pid`` or one of its descendants (`emu bench sweep`'s runs) owns."""
    tree = process_tree(pid)
    return [s for s in registry._states() if s.owner_pid in tree]


# `emu bench fabric` tears each fabric down as soon as it is built: it is stopped while
# building (every namespace named, links and routes on their way).
MID_BUILD = {"bench fabric"}


def _fabric_up(pid: int, built: bool) -> bool:
    """A fabric owned by ``pid`` has every namespace it records bound to its name and,
    if ``built``, is built (its state file says so)."""
    for st in _own_states(pid):
        recs = list(st.namespaces.values())
        if (st.built or not built) and recs and all(registry.owns_name(r) for r in recs):
            return True
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM])
@pytest.mark.parametrize("which", [
    "fabric", "demo", "demo --paths", "run", "reproduce", "calibrate", "bench fabric",
    "bench transport", "bench dblp", "bench training", "bench robustness", "bench failover",
    "bench sweep"])
def test_a_stop_signal_tears_down_like_ctrl_c(tmp_path, which, signum):
    argv, keep = _cmd(tmp_path, which)
    # A foreground job of its own, as a scheduler runs it; the signal goes to the process.
    p = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    seen: list[registry.FabricState] = []
    try:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while not _fabric_up(p.pid, built=which not in MID_BUILD):
            if p.poll() is not None:
                _, err = p.communicate()
                pytest.fail(f"{which} exited ({p.returncode}) before a fabric was up: "
                            f"{err[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{which}: no fabric up within {UP_TIMEOUT_S:g} s")
            time.sleep(0.05)
        seen = _own_states(p.pid)
        os.kill(p.pid, signum)
        _, err = p.communicate(timeout=STOP_TIMEOUT_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    name = signal.Signals(signum).name
    assert p.returncode == 128 + signum, err[-3000:]
    assert f"interrupted ({name})" in err
    assert "Traceback" not in err and f"*** {name} received" not in err, err[-3000:]
    _assert_nothing_left(seen)
    if keep is not None:
        assert keep.exists(), f"{which}: {keep} was not kept"
        if keep.name == "results.jsonl":
            for line in keep.read_text().splitlines():
                json.loads(line)  # every record complete


def _assert_nothing_left(states: list[registry.FabricState]) -> None:
    assert states, "the test saw no fabric state"
    for st in states:
        assert not st.path.exists(), f"state file {st.path} left"
        for rec in st.namespaces.values():
            assert not (registry.NETNS_RUN_DIR / rec["netns"]).exists(), rec["netns"]
        inodes = {r["inode"] for r in st.namespaces.values() if r.get("inode")}
        left = registry.processes_in(inodes)
        assert left == [], f"processes left in its namespaces: {_cmdlines(left)}"
        for d in st.tmpdirs:
            assert not Path(d).exists(), f"temp dir {d} left"


def _cmdlines(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            out.append(f"{pid} (gone)")
    return out


def test_sighup_stops_a_held_fabric_like_ctrl_c(tmp_path):
    """A closed terminal: SIGHUP reaches `emu fabric` holding its fabric."""
    test_a_stop_signal_tears_down_like_ctrl_c(tmp_path, "fabric", signal.SIGHUP)
