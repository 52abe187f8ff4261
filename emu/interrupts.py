"""Stopping a command: Ctrl-C, SIGTERM and SIGHUP unwind alike, never through a teardown.

Schedulers and supervisors stop a job with SIGTERM (Slurm, systemd, `timeout`, `docker
stop`), a closed terminal sends SIGHUP, a user presses Ctrl-C: :func:`install` makes all
three raise ``KeyboardInterrupt`` in the main thread, so every ``with Fabric(...)``
tears down. A teardown runs inside :func:`uninterrupted`: a signal that arrives then is
held and raised once it ends, so nothing is left half torn down. Ctrl-C pressed twice
during a teardown still interrupts it (the way out of a teardown that hangs).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["STOP_SIGNALS", "install", "stopped_by", "uninterrupted"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_state = {"depth": 0}
_received: list[int] = []  # every stop signal received, in order
_held: list[int] = []  # those received during a teardown, not raised yet


# Python ignores (prints and drops) an exception raised in a finalizer or a weakref
# callback: an interrupt raised there would be lost, and the command would run on.
_SWALLOWING = ("__del__",)
_SWALLOWING_FILES = ("weakref.py", "_weakrefset.py")
RETRY_S = 0.01


def _swallowed_in(frame: FrameType | None) -> bool:
    return frame is not None and (frame.f_code.co_name in _SWALLOWING
                                  or frame.f_code.co_filename.endswith(_SWALLOWING_FILES))


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if signum == signal.SIGALRM:  # the retry of an interrupt that arrived in a finalizer
        if not _received:
            return
        if _state["depth"]:
            _held.append(_received[-1])
            return
    else:
        unwinding = bool(_received)
        _received.append(signum)
        if _state["depth"]:
            if signum == signal.SIGINT and signal.SIGINT in _held:
                raise KeyboardInterrupt  # Ctrl-C twice: the user wants out of this teardown
            _held.append(signum)
            return
        if unwinding and signum != signal.SIGINT:
            return  # a repeated SIGTERM or SIGHUP must not cut the unwinding short
    if _swallowed_in(frame):
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)  # raise it once out of there
        return
    raise KeyboardInterrupt


def _not_unwinding(record: logging.LogRecord) -> bool:
    # pyroute2 runs each netlink request on an asyncio loop: one cut short by the interrupt
    # makes asyncio log a traceback as its generator is closed. Expected, and not ours.
    return not _received


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt (main thread only).
    Call it again after a library that installs handlers of its own (Ray does)."""
    for s in (*STOP_SIGNALS, signal.SIGALRM):
        signal.signal(s, _on_signal)
    asyncio_log = logging.getLogger("asyncio")
    if _not_unwinding not in asyncio_log.filters:
        asyncio_log.addFilter(_not_unwinding)


def stopped_by() -> int | None:
    """The first stop signal this process received, if any."""
    return _received[0] if _received else None


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Hold stop signals while the body runs (a teardown); raise KeyboardInterrupt at its
    end if one arrived meanwhile and no exception is already on its way out."""
    _state["depth"] += 1
    ok = False
    try:
        yield
        ok = True
    finally:
        _state["depth"] -= 1
        if not _state["depth"] and _held:
            _held.clear()
            if ok:
                raise KeyboardInterrupt
