"""Errors a user can cause, with messages that say what to do."""

from __future__ import annotations

import os


class EmuError(Exception):
    """A problem the user can fix (bad input, missing privilege, a busy fabric)."""


def require_root(what: str) -> None:
    """Fail clearly when not root: namespaces, veths and netlink writes need it."""
    if os.geteuid() != 0:
        raise EmuError(f"{what} needs root (network namespaces, veth, tc and routes): "
                       "run it with sudo, e.g. `sudo .venv/bin/emu ...` or `sudo make demo`")
