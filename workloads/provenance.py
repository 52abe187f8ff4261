"""Where and with what a result was measured: software versions, git commit, machine.

A result is only comparable with another when both say which code and which machine
produced them, so every record that leaves the emulator as a result (the ``meta`` record
of results.jsonl, the calibration record of ``emu calibrate``) embeds these two tables.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["cpu_reference", "host_info", "software_versions"]

# The packages whose version can change a result (the project itself included).
_PACKAGES = ("scaleacross-emu", "torch", "numpy", "matplotlib", "scikit-learn", "pyroute2",
             "scapy")


def software_versions() -> dict[str, Any]:
    """Python, the packages results depend on, and the project's git commit."""
    out: dict[str, Any] = {"python": platform.python_version()}
    for pkg in _PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    out["git"] = _git_commit()
    return out


def _git_commit() -> str | None:
    """The project's commit (with ``-dirty`` if modified), or None outside a checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("-dirty" if dirty else "") if rev else None


def host_info() -> dict[str, Any]:
    """Hostname, kernel, machine, CPU count and model (where a result was measured), and
    how fast its CPU ran Python then (``cpu_reference``)."""
    return {"hostname": socket.gethostname(), "kernel": platform.release(),
            "machine": platform.machine(), "cpus": os.cpu_count(), "cpu_model": _cpu_model(),
            "cpu_reference": cpu_reference()}


def cpu_reference(loops: int = 100_000, tries: int = 3) -> dict[str, Any]:
    """How fast this machine runs Python at this moment: the best of ``tries`` timings of
    one fixed loop (ns per iteration; the best, so that the figure is the CPU's speed, not
    the contention of the moment), and the 1-minute load average. A virtual machine's
    CPUs change speed between runs (other tenants, the host's clock): CPU-bound figures
    of two results whose references differ are not comparable."""
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        x = 0
        for i in range(loops):
            x += i & 7
        best = min(best, time.perf_counter() - t0)
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:
        load = None
    return {"python_ns_per_iter": round(best / loops * 1e9, 2), "loadavg_1min": load}


def _cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo), or None where it is not given."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
