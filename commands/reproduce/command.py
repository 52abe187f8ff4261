"""The `emu reproduce` subcommand (parser and entry point)."""

from __future__ import annotations

import argparse

from emu.errors import EmuError


def configure(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `emu reproduce` on the top-level subparsers."""
    p = sub.add_parser("reproduce", help="(under construction)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of `emu reproduce`."""
    raise EmuError("emu reproduce is under construction")
