"""The `emu sweep` subcommand (parser and entry point)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_HELP = ("run a grid of experiments (a sweep file) over a Ray cluster, one fabric per node; "
         "resumable; table, plots and merged calibration")
_DESCRIPTION = (
    "Run a sweep file (experiments/sweeps/*.toml: a base experiment, [set] overrides, [axes] "
    "of experiment keys, seeds, repetitions; every key is documented in "
    "commands/sweep/__init__.py). Every point is validated before anything runs, then runs "
    "as a Ray task needing one fabric_slot (each node advertises one, so two fabrics never "
    "share a node), its results copied back here as it finishes. A failed point is retried "
    "up to the file's `retries`, then recorded as failed. Ctrl-C cancels the running "
    "points (their fabrics are torn down) and keeps what is done; --resume DIR continues. "
    "Needs Ray (the [sweep] extra); the points need root on their nodes.")


def configure(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `emu sweep` on the top-level subparsers."""
    p = sub.add_parser("sweep", help=_HELP, description=_DESCRIPTION)
    p.add_argument("file", help="sweep file, e.g. experiments/sweeps/digits_transports_smoke.toml")
    p.add_argument("--cluster", default="local", metavar="local|auto|ADDRESS",
                   help="local (default): a one-node Ray cluster on this machine, stopped at "
                   "the end; auto: the cluster `ray start` runs here; HOST:PORT: that one")
    p.add_argument("--out", help="results directory (default results/sweep-NAME-TIMESTAMP)")
    p.add_argument("--resume", metavar="DIR",
                   help="continue the sweep in DIR: points done there are skipped")
    p.add_argument("--max-parallel", type=int, metavar="N",
                   help="points running at once (default: the cluster's fabric slots)")
    p.add_argument("--quick", action="store_true",
                   help="one repetition per point and the file's [quick] overrides")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of `emu sweep`: 0 when every point is done, 1 when some failed."""
    from commands.sweep.run import run_sweep

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    res = run_sweep(args.file, cluster=args.cluster, out=Path(args.out) if args.out else None,
                    resume=Path(args.resume) if args.resume else None,
                    max_parallel=args.max_parallel, quick=args.quick, say=say)
    print(res.out)
    return 1 if res.failed or res.grid["counts"]["missing"] else 0
