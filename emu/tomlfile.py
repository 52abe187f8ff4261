"""The one reader of the project's TOML files and the one ``KEY=VALUE`` override parser.

Experiment, sweep, claim, explore and timeline files are all read by :func:`read_toml`
(bounded in size by ``emu.safefs``; an error names the file), and every ``--set
KEY=VALUE`` is read by :func:`parse_override` (the value as TOML, a bare word as a
string), so the file kinds cannot drift apart in what they accept.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from emu import safefs
from emu.errors import EmuError

__all__ = ["parse_override", "read_toml"]


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """The tables of the TOML file ``path`` (a ``what`` file, e.g. "experiment"), or an
    EmuError naming the file: missing, not .toml, too large, unreadable, not valid TOML."""
    p = Path(path)
    if not p.is_file():
        raise EmuError(f"{what} file {str(p)!r} does not exist")
    if p.suffix != ".toml":
        raise EmuError(f"{what} file {str(p)!r}: must be a .toml file")
    try:
        return tomllib.loads(safefs.read_input(p, what))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise EmuError(f"{p}: not valid TOML: {e}") from None
    except OSError as e:
        raise EmuError(f"{p}: cannot read: {e.strerror}") from None


def parse_override(text: str, flag: str = "--set") -> tuple[str, Any]:
    """``"workload.steps=50"`` -> ``("workload.steps", 50)``: the value read as TOML
    (``["h0", "h3"]``, ``true``, ``0.5``), a bare word as a string (``rc``)."""
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
        raise EmuError(f"{flag} {text!r}: must be KEY=VALUE, e.g. workload.steps=50")
    try:
        return key, tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value
