"""Every `emu` subcommand prints its help: a stray `%` in a help string crashes argparse."""

from __future__ import annotations

import argparse

import pytest

from commands.cli import build_parser


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _all_paths() -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []

    def walk(p: argparse.ArgumentParser, prefix: tuple[str, ...]) -> None:
        for name, child in _subparsers(p).items():
            paths.append(prefix + (name,))
            walk(child, prefix + (name,))

    walk(build_parser(), ())
    return paths


def test_every_documented_command_is_reached() -> None:
    names = {p[0] for p in _all_paths()}
    assert {"doctor", "fabric", "clean", "demo", "run", "bench", "calibrate", "explore",
            "reproduce", "sweep"} <= names
    assert ("bench", "robustness") in _all_paths()


@pytest.mark.parametrize("path", _all_paths(), ids=" ".join)
def test_help_prints(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*path, "--help"])
    assert e.value.code == 0
    assert "usage: emu " + " ".join(path) in capsys.readouterr().out
