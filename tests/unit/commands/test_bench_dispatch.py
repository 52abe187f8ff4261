"""Every `emu bench NAME` the parser offers has its function, and an unknown one is named."""
import argparse

import pytest

from commands.bench.run import NAMES, run_bench
from commands.cli import build_parser


def _bench_names() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bench = sub.choices["bench"]
    bsub = next(a for a in bench._actions if isinstance(a, argparse._SubParsersAction))
    return set(bsub.choices)


def test_the_parser_offers_exactly_the_dispatched_benches() -> None:
    assert _bench_names() == set(NAMES)


def test_an_unknown_bench_is_named() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        run_bench("nope", False, print, lambda: None, lambda: None)
