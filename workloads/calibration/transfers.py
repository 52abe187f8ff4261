"""One harness transfer as `emu calibrate` runs it: its transport's settings, its check, its CPU.

Its one job is what every calibration phase does around ``transports.testing.harness``: the
configuration a transport runs with (:func:`transport_config`: TCP under Linux's
default congestion control), the check that every message arrived (:func:`checked`),
and the cores each driver used (:func:`cpu_use`), so that a figure measured while a
driver was CPU-bound can be told apart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from emu.errors import EmuError
from transports.plan import DEFAULT_CONFIG
from transports.testing.harness import TransferResult
from workloads.calibration.samples import CpuUse

TCP_CONFIG = {"cc": "cubic"}  # Linux's default (this host's namespaces may default to BBR)
# Shortest busy time CPU use is taken over: a driver's fixed start-up work (tens of ms for
# DBLP) would otherwise read as a busy core on a millisecond transfer.
CPU_WINDOW_S = 0.1
ECMP = ("rc", "tcp")  # transports whose paths ECMP hashes and the control plane moves


def transport_config(transport: str, rc: Mapping[str, Any] | None = None,
                     **extra) -> dict | None:
    """The harness configuration of ``transport`` (None: the harness's default; TCP's
    ``extra`` settings, e.g. a source port, go with its congestion control; ``rc``:
    settings of RC's core over its defaults, ``Plan.rc_config``)."""
    if transport == "rc" and rc:
        return {**DEFAULT_CONFIG["rc"], **rc}
    return {**TCP_CONFIG, **extra} if transport == "tcp" else None


def checked(res: TransferResult) -> TransferResult:
    """``res``, or EmuError naming how many of its transfers failed and the first."""
    if not res.ok:
        bad = [m for m in res.messages if not m["ok"]]
        raise EmuError(f"{len(bad)} of {len(res.messages)} transfers failed, e.g. "
                       f"{bad[0]['src']} -> {bad[0]['dst']}: {bad[0]['errors']}")
    return res


def cpu_use(res: TransferResult) -> CpuUse:
    """Cores of each driver: CPU seconds over its busy time (from the common start to its
    last completion, at least ``CPU_WINDOW_S``)."""
    drivers = []
    for host, d in sorted(res.drivers.items()):
        busy = max((m["t"] for m in d["messages"] if m.get("t") is not None), default=0.0)
        drivers.append((host, round(d["cpu_s"] / max(busy, CPU_WINDOW_S), 4)))
    return CpuUse(tuple(drivers), os.cpu_count() or 1)
