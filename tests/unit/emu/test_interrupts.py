"""Ctrl-C, SIGTERM and SIGHUP unwind alike and never cut a teardown short (no root: the
signals are sent to this process)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from emu import interrupts


@pytest.fixture(autouse=True)
def handlers():
    old = {s: signal.getsignal(s) for s in (*interrupts.STOP_SIGNALS, signal.SIGALRM)}
    interrupts._received.clear()
    interrupts._held.clear()
    interrupts.install()
    yield
    for s, h in old.items():
        signal.signal(s, h)
    interrupts._received.clear()
    interrupts._held.clear()


@pytest.mark.parametrize("signum", interrupts.STOP_SIGNALS)
def test_each_stop_signal_raises_keyboard_interrupt(signum):
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signum)
        signal.sigtimedwait([], 0)  # a bytecode boundary for the handler to run at
    assert interrupts.stopped_by() == signum


def test_a_signal_during_a_teardown_is_held_until_it_ends():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.uninterrupted():
            os.kill(os.getpid(), signal.SIGTERM)
            for step in range(3):  # the teardown's steps all run
                done.append(step)
    assert done == [0, 1, 2]
    assert interrupts.stopped_by() == signal.SIGTERM


def test_a_repeated_sigterm_does_not_cut_the_unwinding_short():
    unwound = []
    with pytest.raises(KeyboardInterrupt):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # the scheduler insists
            signal.sigtimedwait([], 0)
            unwound.append(True)
    assert unwound == [True]


def test_ctrl_c_twice_escapes_a_hanging_teardown():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.uninterrupted():
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0)
            reached.append("after the first")
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0)
            reached.append("after the second")
    assert reached == ["after the first"]


def test_an_interrupt_that_lands_in_a_finalizer_is_raised_once_out_of_it():
    """Python drops an exception raised in ``__del__``: the interrupt is raised again
    right after, so the command does not run on as if nothing happened."""

    class Finalized:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)

    with pytest.raises(KeyboardInterrupt):
        Finalized()  # dropped at once: its finalizer receives the signal
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.001)
    assert interrupts.stopped_by() == signal.SIGTERM
