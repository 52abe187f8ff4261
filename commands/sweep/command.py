"""The `emu sweep` subcommand (parser and entry point)."""

from __future__ import annotations

import argparse

from emu.errors import EmuError


def configure(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `emu sweep` on the top-level subparsers."""
    p = sub.add_parser("sweep", help="(under construction)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of `emu sweep`."""
    raise EmuError("emu sweep is under construction")
