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
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["host_info", "software_versions"]

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
    """Hostname, kernel, machine and CPU count (where a result was measured)."""
    return {"hostname": socket.gethostname(), "kernel": platform.release(),
            "machine": platform.machine(), "cpus": os.cpu_count()}
