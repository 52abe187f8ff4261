"""Starting the emulator's child processes: the parent side of ``emu.childproto``.

One launcher for every child the emulator starts (transport drivers, training
workers, collective checkers, burst senders, delay-line relays)::

    with ChildGroup() as group:
        for host in hosts:
            group.spawn(host, fab.in_netns(host, sys.executable, "-m", "transports.io.driver"),
                        config=plan_of[host])
        group.wait_ready(30.0)           # every child set up, or an error naming it
        t0 = group.start()               # one CLOCK_MONOTONIC instant for all of them
        for c in group:
            result = c.record("result", timeout=60.0)

Each child gets the project's own code first on its ``PYTHONPATH`` (the children run
this very code) and nothing from anyone's working directory: it runs in ``/`` with
``PYTHONSAFEPATH=1`` (as ``python -P``, for its own children too), so a module another
user planted where ``emu`` was started is never imported as root. It also gets a
lifeline pipe (it dies with this process, however this process ends), its
configuration on stdin, and its own session (Ctrl-C in the terminal reaches only this
process, which stops its children itself). Its stdout records are read by a thread as
they arrive; its stderr is drained into a bounded tail that error messages quote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from emu.childproto import LIFELINE_ENV, READY, START
from emu.errors import EmuError
from emu.timeouts import describe, scaled

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# A child's working directory: root's own, and never on its import path (PYTHONSAFEPATH).
CHILD_CWD = "/"
STDERR_TAIL_LINES = 200
JOIN_S = 5.0  # for a child's reader threads after it exited
POLL_S = 0.02  # a group waiting for its children's ready records looks at all this often

Record = dict[str, Any]
OnRecord = Callable[["Child", Record], None]


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the project root first on ``PYTHONPATH`` and
    ``PYTHONSAFEPATH=1`` (no script directory or working directory on a Python child's
    import path, nor on its own children's)."""
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(PROJECT_ROOT) + (os.pathsep + old if old else "")
    env["PYTHONSAFEPATH"] = "1"
    env.update(extra or {})
    return env


class Child:
    """One child process speaking ``emu.childproto``.

    ``on_record(child, record)``, if given, receives every record but ``ready`` on the
    reader thread (an exception it raises is kept as :attr:`callback_error` and the
    reading goes on); without it records are kept for :meth:`record`."""

    def __init__(self, name: str, argv: Sequence[str], *, config: Any = None,
                 env: Mapping[str, str] | None = None, pass_fds: Sequence[int] = (),
                 new_session: bool = True, on_record: OnRecord | None = None) -> None:
        self.name = name
        self.on_record = on_record
        self.ready_record: Record | None = None
        self.malformed = 0  # stdout lines that looked like records but were not
        self.callback_error: BaseException | None = None
        self._ready = threading.Event()
        self._cond = threading.Condition()
        self._records: list[Record] = []
        self._eof = False
        self._stderr: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        life_r, self._lifeline = os.pipe()
        try:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True,
                env=child_env({**(env or {}), LIFELINE_ENV: str(life_r)}), cwd=CHILD_CWD,
                pass_fds=(life_r, *pass_fds), start_new_session=new_session)
        except OSError as e:
            os.close(self._lifeline)
            raise EmuError(f"could not start {name} ({argv[0]!r}): {e}") from None
        finally:
            os.close(life_r)  # the child holds the read end now
        self._threads = [threading.Thread(target=self._read, name=f"{name}-out", daemon=True),
                         threading.Thread(target=self._drain, name=f"{name}-err", daemon=True)]
        for t in self._threads:
            t.start()
        if config is not None:
            self.send_line(config if isinstance(config, str) else json.dumps(config))

    def __repr__(self) -> str:
        return f"Child({self.name!r}, pid={self.proc.pid})"

    # -- reading ---------------------------------------------------------------------------

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue  # not a record (a library writing to stdout)
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
                self.malformed += 1
                continue
            if rec["type"] == READY and self.ready_record is None:
                self.ready_record = rec
                self._ready.set()
                continue
            if self.on_record is not None:
                try:
                    self.on_record(self, rec)
                except Exception as e:  # noqa: BLE001 - kept for the caller; keep draining
                    self.callback_error = self.callback_error or e
                continue
            with self._cond:
                self._records.append(rec)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()
        self._ready.set()  # a child that exited before ready: waiters see it at once

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr_tail(self) -> str:
        """The last lines the child wrote to stderr."""
        return "".join(self._stderr)

    def record(self, record_type: str, timeout: float) -> Record | None:
        """The first kept record of ``record_type`` (removed from the kept ones); None if
        the child's stdout ended or ``timeout`` passed without one."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for i, rec in enumerate(self._records):
                    if rec["type"] == record_type:
                        return self._records.pop(i)
                left = end - time.monotonic()
                if self._eof or left <= 0:
                    return None
                self._cond.wait(left)

    def records(self) -> list[Record]:
        """Every kept record so far (not removed)."""
        with self._cond:
            return list(self._records)

    # -- protocol ----------------------------------------------------------------------------

    @property
    def settled(self) -> bool:
        """It said ready, or its stdout ended before it did."""
        return self._ready.is_set()

    def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` until :attr:`settled`."""
        return self._ready.wait(max(0.0, timeout))

    def wait_ready(self, timeout: float) -> Record:
        """Its ``ready`` record; EmuError naming the child if it exits or times out first.
        ``timeout`` is in this machine's seconds: callers scale a normal-machine bound
        with ``emu.timeouts.scaled`` (a group's ``wait_ready`` does)."""
        if not self._ready.wait(max(0.0, timeout)):
            raise EmuError(self.why(f"did not get ready within {timeout:.0f} s"))
        if self.ready_record is None:
            self.wait(JOIN_S)
            raise EmuError(self.why("exited before it was ready"))
        return self.ready_record

    def send(self, record_type: str, **fields: Any) -> None:
        """Write one control record to its stdin."""
        self.send_line(json.dumps({"type": record_type, **fields}))

    def send_line(self, line: str) -> None:
        """Write one line to its stdin; a child that already died is left to its exit
        code and stderr (the others still get theirs)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line.rstrip("\n") + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def close_stdin(self) -> None:
        """End of file on its stdin (it takes no more control records)."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    # -- ending ------------------------------------------------------------------------------

    def poll(self) -> int | None:
        """Its exit code, or None while it runs."""
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to exit (EmuError after ``timeout``) and for its output to be read;
        return its exit code."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise EmuError(self.why(f"still running after {timeout:.0f} s")) from None
        for t in self._threads:
            t.join(JOIN_S)
        self._close()
        return code

    def terminate(self, timeout: float) -> int:
        """SIGTERM (a child that reports on it gets ``timeout`` to do so), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except EmuError:
            return self.kill()

    def kill(self) -> int:
        """SIGKILL it if it still runs and reap it. Idempotent."""
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        for t in self._threads:
            t.join(JOIN_S)
        self._close()
        return code

    def _close(self) -> None:
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def why(self, what: str) -> str:
        """``what`` happened to this child, with its exit code and stderr's tail."""
        code = self.proc.poll()
        state = "running" if code is None else f"exit code {code}"
        tail = self.stderr_tail.strip()[-2000:]
        return f"{self.name} {what} ({state})" + (f": {tail}" if tail else "")


class ChildGroup:
    """Children started together: ready together, started on one instant, killed
    together when the ``with`` block ends (those already reaped are left alone)."""

    def __init__(self) -> None:
        self.children: dict[str, Child] = {}

    def spawn(self, name: str, argv: Sequence[str], **kw: Any) -> Child:
        """Start one child (keyword arguments as :class:`Child`)."""
        if name in self.children:
            raise EmuError(f"a child named {name!r} is already in this group")
        child = self.children[name] = Child(name, argv, **kw)
        return child

    def __iter__(self) -> Iterator[Child]:
        return iter(self.children.values())

    def __len__(self) -> int:
        return len(self.children)

    def __getitem__(self, name: str) -> Child:
        return self.children[name]

    def wait_ready(self, timeout: float) -> dict[str, Record]:
        """Every child's ``ready`` record; EmuError naming the first child that exits
        before it is ready (at once, not after the others), or one still not ready.
        ``timeout`` is a normal machine's bound, scaled by ``SAE_TIMEOUT_SCALE``."""
        end = time.monotonic() + scaled(timeout)
        pending = list(self)
        while pending:
            for c in [c for c in pending if c.settled]:
                c.wait_ready(0.0)  # raises for a child that exited instead
                pending.remove(c)
            left = end - time.monotonic()
            if pending and left <= 0:
                raise EmuError(pending[0].why(f"did not get ready within {describe(timeout)}"))
            if pending:
                pending[0].settle(min(POLL_S, left))
        return {c.name: c.ready_record for c in self if c.ready_record is not None}

    def start(self, lead_s: float = 0.05) -> float:
        """Send every child the start instant ``now + lead_s``; return it."""
        t0 = time.monotonic() + lead_s
        self.start_at(t0)
        return t0

    def start_at(self, t0: float) -> None:
        """Send every child the start instant ``t0`` (CLOCK_MONOTONIC)."""
        for c in self:
            c.send(START, t0=t0)

    def kill(self) -> None:
        """SIGKILL every child still running and reap all of them."""
        for c in self:
            if c.poll() is None:
                c.proc.kill()
        for c in self:
            c.kill()

    def __enter__(self) -> ChildGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
