"""How much longer than on a normal machine the emulator waits for things to get ready.

Every bounded wait for readiness (a child process saying ready, BGP converging, a route
withdrawn, a port forwarding again) is written for a normal machine: a few cores, KVM
or bare metal. On a much slower one (a VM under qemu's software emulation runs 10-40x
slower) the same waits time out although nothing is wrong. ``SAE_TIMEOUT_SCALE`` (or
``emu --timeout-scale``, which sets it for every child too) multiplies them all.

Only readiness waits scale. What an experiment measures (a transfer's deadline, a
failure's time lost, BFD and BGP timers) does not: the result then says what the slow
machine did, rather than being hidden by a longer bound.
"""

from __future__ import annotations

import math
import os

from emu.errors import EmuError

ENV = "SAE_TIMEOUT_SCALE"
MAX_SCALE = 1000.0  # beyond this a wait is effectively unbounded: refuse a typo instead


def parse_scale(text: str, source: str = ENV) -> float:
    """``text`` as a timeout scale (a number from 1 to MAX_SCALE); EmuError naming
    ``source`` and the bad value otherwise."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (1.0 <= value <= MAX_SCALE):
        raise EmuError(f"{source}={text!r} is invalid: must be a number from 1 to "
                       f"{MAX_SCALE:g}, how many times longer than on a normal machine "
                       f"to wait for processes, routes and ports to get ready")
    return value


def timeout_scale() -> float:
    """The scale in force: ``SAE_TIMEOUT_SCALE`` if set (validated), else 1."""
    text = os.environ.get(ENV, "").strip()
    return parse_scale(text) if text else 1.0


def scaled(seconds: float) -> float:
    """A readiness wait of ``seconds`` on a normal machine, on this one."""
    return seconds * timeout_scale()


def describe(seconds: float) -> str:
    """How long a scaled wait of ``seconds`` (normal-machine) lasted, for messages:
    "60 s", or "600 s (60 s x SAE_TIMEOUT_SCALE 10)"."""
    scale = timeout_scale()
    if scale == 1.0:
        return f"{seconds:g} s"
    return f"{seconds * scale:g} s ({seconds:g} s x {ENV} {scale:g})"
