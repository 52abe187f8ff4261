"""Root tests of the DCI delay line's life cycle: stopping, its relay's death, its
parent's death and a taken TAP name leave no relay and no TAP behind (the rig in
tests/root/delayline_rig.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from emu.delayline import DelayLine
from emu.registry import pid_alive

from .delayline_rig import (
    IF_A,
    IF_B,
    Namespace,
    namespace_pair,
    open_line,
)

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Namespace, Namespace]]:
    yield from namespace_pair()


def test_stop_leaves_nothing(pair: tuple[Namespace, Namespace]) -> None:
    a, b = pair
    links_a, links_b = a.links(), b.links()
    line = open_line(pair, 2.0)
    pid = line.pid
    assert pid is not None and pid_alive(pid)
    assert IF_A in a.links() and IF_B in b.links()
    line.stop()
    assert not pid_alive(pid)
    assert a.links() == links_a and b.links() == links_b
    line.stop()  # idempotent


def test_relay_death_removes_taps(pair: tuple[Namespace, Namespace]) -> None:
    a, b = pair
    line = open_line(pair, 2.0)
    assert line.pid is not None
    os.kill(line.pid, 9)
    deadline = time.monotonic() + 5
    while IF_A in a.links() or IF_B in b.links():
        assert time.monotonic() < deadline, "TAPs outlived their relay"
        time.sleep(0.01)
    line.stop()


PARENT = r"""
import os, sys, time
from emu.delayline import DelayLine
from emu.registry import pid_alive
a, b = (os.open(p, os.O_RDONLY) for p in sys.argv[1:3])
line = DelayLine(a, "dci-a", b, "dci-b", 3.0).start()
print(line.pid, flush=True)
time.sleep(60)
"""


def test_relay_dies_with_parent(pair: tuple[Namespace, Namespace]) -> None:
    a, b = pair
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, f"/proc/{a.proc.pid}/ns/net",
         f"/proc/{b.proc.pid}/ns/net"], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        relay = int(parent.stdout.readline())
        assert pid_alive(relay) and IF_A in a.links()
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 5
    while pid_alive(relay) or IF_A in a.links() or IF_B in b.links():
        assert time.monotonic() < deadline, "relay or TAPs outlived the parent"
        time.sleep(0.01)


def test_taken_name_is_a_clear_error(pair: tuple[Namespace, Namespace]) -> None:
    a, b = pair
    with DelayLine(a.fd, IF_A, b.fd, IF_B, 1.0):
        with pytest.raises(OSError, match="cannot create TAP 'dci-a'"):
            DelayLine(a.fd, IF_A, b.fd, "other", 1.0).start()
    assert IF_A not in a.links() and "other" not in b.links()
