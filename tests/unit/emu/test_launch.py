"""The child launcher (emu.launch) and the child protocol (emu.childproto), with small
Python children on this machine (no namespaces, no root)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from emu import childproto
from emu.errors import EmuError
from emu.launch import PROJECT_ROOT, Child, ChildGroup, child_env


def py(body: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(body)]


ECHO = py("""
    from emu import childproto
    childproto.die_with_parent()
    cfg = childproto.read_config()
    print("a library chatting on stdout")
    print("{not json")
    t0 = childproto.ready_then_start(pid=__import__("os").getpid())
    childproto.emit("result", got=cfg, t0=t0)
""")


def test_config_ready_start_and_records_in_order():
    with ChildGroup() as group:
        for i in range(3):
            group.spawn(f"echo {i}", ECHO, config={"i": i})
        ready = group.wait_ready(30)
        assert sorted(ready) == ["echo 0", "echo 1", "echo 2"]
        assert all(r["pid"] == group[n].proc.pid for n, r in ready.items())
        t0 = group.start(0.01)
        results = [c.record("result", 30) for c in group]
        assert [c.wait(30) for c in group] == [0, 0, 0]
    assert [r["got"] for r in results] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert all(r["t0"] == t0 for r in results)  # one instant for all of them
    # a plain line is not a record; a broken one is counted
    assert all(c.malformed == 1 for c in group)


def test_a_child_that_fails_before_ready_is_named_at_once():
    slow = py("import time; time.sleep(60)")
    bad = py("import sys; sys.stderr.write('cannot bind port 4791'); sys.exit(3)")
    with ChildGroup() as group:
        group.spawn("slow", slow)
        group.spawn("bad", bad)
        with pytest.raises(EmuError) as e:
            group.wait_ready(60)
    # named with its exit code and stderr, not a timeout of the slow one
    assert "bad exited before it was ready (exit code 3): cannot bind port 4791" in str(e.value)
    assert all(c.poll() is not None for c in group)  # the group killed the slow one


def test_a_child_that_never_gets_ready_times_out_by_name():
    with ChildGroup() as group:
        group.spawn("mute", py("import time; time.sleep(60)"))
        with pytest.raises(EmuError, match="mute did not get ready within 0.2 s"):
            group.wait_ready(0.2)


def test_a_slow_machine_scales_the_ready_wait(monkeypatch):
    monkeypatch.setenv("SAE_TIMEOUT_SCALE", "3")
    with ChildGroup() as group:
        group.spawn("mute", py("import time; time.sleep(60)"))
        t = time.monotonic()
        with pytest.raises(EmuError, match=r"within 0.6 s \(0.2 s x SAE_TIMEOUT_SCALE 3\)"):
            group.wait_ready(0.2)
        assert time.monotonic() - t >= 0.6  # it waited the scaled bound, not the nominal one


def test_record_returns_none_at_end_of_output():
    c = Child("quiet", py("from emu import childproto; childproto.emit('ready')"))
    try:
        c.wait_ready(30)
        assert c.record("result", 30) is None
        assert c.wait(30) == 0
    finally:
        c.kill()


def test_on_record_receives_everything_but_ready_and_its_errors_are_kept():
    got = []

    def on_record(child, rec):
        got.append((child.name, rec["type"], rec.get("n")))
        if rec.get("n") == 1:
            raise ValueError("a bad record")

    c = Child("counter", py("""
        from emu import childproto
        childproto.emit("ready")
        for n in range(3):
            childproto.emit("tick", n=n)
    """), on_record=on_record)
    c.wait_ready(30)
    assert c.wait(30) == 0
    assert got == [("counter", "tick", 0), ("counter", "tick", 1), ("counter", "tick", 2)]
    assert isinstance(c.callback_error, ValueError)


def test_duplicate_names_are_refused():
    with ChildGroup() as group:
        group.spawn("a", py("pass"))
        with pytest.raises(EmuError, match="'a' is already in this group"):
            group.spawn("a", py("pass"))


def test_a_missing_program_is_a_clear_error():
    with pytest.raises(EmuError, match="could not start ghost"):
        Child("ghost", ["/nonexistent/program"])


def test_the_child_runs_this_projects_code():
    env = child_env({"X": "1"})
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(PROJECT_ROOT) and env["X"] == "1"


def _gone(pid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True  # dead, waiting for a reaper
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


def test_a_child_dies_with_its_parent_even_after_sigkill():
    # A parent that starts a child from a thread that then ends (PR_SET_PDEATHSIG would
    # fire there) and keeps running: the child must live; then the parent is SIGKILLed:
    # the child must die.
    parent = subprocess.Popen(py("""
        import sys, threading, time
        from emu.launch import Child
        box = []
        t = threading.Thread(target=lambda: box.append(Child("sleeper", [sys.executable,
            "-c", "import time; from emu import childproto; childproto.die_with_parent(); "
                  "childproto.emit('ready'); time.sleep(120)"])))
        t.start(); t.join()
        box[0].wait_ready(30)
        print(box[0].proc.pid, flush=True)
        time.sleep(120)
    """), stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert not _gone(pid, 0.3), "the child died with the thread that started it"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert _gone(pid, 10), "the child outlived its parent"
    finally:
        parent.kill()
        parent.wait()


def test_child_side_without_a_lifeline(monkeypatch):
    monkeypatch.delenv(childproto.LIFELINE_ENV, raising=False)
    assert childproto.lifeline_fd() is None
    childproto.die_with_parent()  # nothing to watch: a no-op
    monkeypatch.setenv(childproto.LIFELINE_ENV, "not-a-number")
    with pytest.raises(SystemExit, match="is not an open fd"):
        childproto.lifeline_fd()


def test_child_side_records():
    out = io.StringIO()
    t0 = time.monotonic() - 1.0
    start = io.StringIO(json.dumps({"type": "start", "t0": t0}) + "\n")
    got = childproto.ready_then_start(start, out, rank=2)
    assert got == t0 and out.getvalue() == '{"type": "ready", "rank": 2}\n'
    # end of file instead of a start record: the parent gave up
    assert childproto.ready_then_start(io.StringIO(""), io.StringIO()) is None
    assert childproto.start_instant({"type": "release"}) is None
    with pytest.raises(SystemExit, match="no configuration on stdin"):
        childproto.read_config(io.StringIO(""))
