"""The protocol between the emulator and every child process it starts: the child side.

Transport drivers, training workers, collective checkers, burst senders and
delay-line relays all speak it (the parent side is ``emu.launch``):

- **stdin**: line 1 is the child's configuration (one JSON document, if it takes
  one); later lines are control records, one JSON object each.
- **stdout**: records, one JSON object per line with a ``"type"`` key. The first
  is ``{"type": "ready", ...}``: the child is set up and waits for the start
  instant. The parent then sends ``{"type": "start", "t0": T}`` to every child of
  the group: ``T`` is one CLOCK_MONOTONIC instant (shared by every process on the
  machine) at which they all begin. A line that is not a JSON object is not a
  record (a library printing to stdout) and is ignored.
- **stderr**: free text (progress, tracebacks); the parent keeps its tail for its
  error messages.
- **the lifeline**: the read end of a pipe whose only write end the parent holds,
  named by the environment variable ``SAE_LIFELINE_FD``. End of file on it means
  the parent is gone (it exited, crashed or was killed with SIGKILL): the child
  kills itself. Unlike PR_SET_PDEATHSIG it does not fire when the parent *thread*
  that started the child ends.

Standard library only: a child imports this before anything heavy, and the
delay-line relay and the burst sender import nothing else of the project.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any, TextIO

LIFELINE_ENV = "SAE_LIFELINE_FD"
READY = "ready"
START = "start"


def lifeline_fd() -> int | None:
    """The lifeline's fd given by the parent (None: started by hand, no lifeline).

    It is made non-inheritable, so grandchildren do not keep it open."""
    raw = os.environ.get(LIFELINE_ENV)
    if raw is None:
        return None
    try:
        fd = int(raw)
        os.set_inheritable(fd, False)
    except (ValueError, OSError):
        raise SystemExit(f"{LIFELINE_ENV}={raw!r} is not an open fd") from None
    return fd


def die_with_parent() -> None:
    """Kill this process when the parent's lifeline ends (a watcher thread blocked in
    ``read``: it costs nothing until then). No lifeline: nothing to watch."""
    fd = lifeline_fd()
    if fd is None:
        return

    def watch() -> None:
        while True:
            try:
                if not os.read(fd, 64):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def emit(record_type: str, out: TextIO | None = None, **fields: Any) -> None:
    """Write one record to stdout (or ``out``) and flush it."""
    out = out or sys.stdout
    out.write(json.dumps({"type": record_type, **fields}) + "\n")
    out.flush()


def read_config(src: TextIO | None = None) -> Any:
    """Line 1 of stdin, parsed; SystemExit with a clear message if there is none."""
    line = (src or sys.stdin).readline()
    if not line.strip():
        raise SystemExit("no configuration on stdin (line 1 must be one JSON document)")
    return json.loads(line)


def read_record(src: TextIO | None = None) -> dict[str, Any] | None:
    """The next control record on stdin; None at end of file (the parent gave up)."""
    for line in src or sys.stdin:
        if not line.strip():
            return None
        rec = json.loads(line)
        if isinstance(rec, dict) and "type" in rec:
            return rec
    return None


def start_instant(rec: dict[str, Any] | None) -> float | None:
    """``t0`` of a start record; None for anything else (or None)."""
    if rec is None or rec.get("type") != START:
        return None
    return float(rec["t0"])


def ready_then_start(src: TextIO | None = None, out: TextIO | None = None, *,
                     sleep: bool = True, **fields: Any) -> float | None:
    """Say ready (with ``fields``), read the start record and (``sleep``) sleep until its
    instant; return the instant, or None if the parent closed stdin instead."""
    emit(READY, out, **fields)
    t0 = start_instant(read_record(src))
    if t0 is not None and sleep:
        time.sleep(max(0.0, t0 - time.monotonic()))
    return t0
