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
    "up to the file's `retries`, then recorded as failed. Ctrl-C, SIGTERM or SIGHUP cancels "
    "the running points (their fabrics are torn down) and keeps what is done; --resume DIR "
    "continues. Every Ray cluster it starts or joins must use token authentication. Needs "
    "Ray (the [sweep] extra); the points need root on their nodes.")


def configure(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `emu sweep` on the top-level subparsers."""
    p = sub.add_parser("sweep", help=_HELP, description=_DESCRIPTION)
    p.add_argument("file", nargs="?",
                   help="sweep file, e.g. experiments/sweeps/digits_transports_smoke.toml")
    p.add_argument("--keys", action="store_true",
                   help="print every sweep-file key: default, values, meaning")
    p.add_argument("--cluster", default="local", metavar="local|auto|ADDRESS",
                   help="local (default): a one-node Ray cluster on this machine (127.0.0.1 "
                   "only, a fresh token), stopped at the end; auto: the cluster `ray start` "
                   "runs here, if its address file is root's and nobody else can replace it; "
                   "HOST:PORT: the head's GCS there. A cluster to join must use token "
                   "authentication (RAY_AUTH_MODE=token), and this machine must hold its "
                   "token (/root/.ray/auth_token or RAY_AUTH_TOKEN_PATH)")
    p.add_argument("--out", help="results directory (default results/sweep-NAME-TIMESTAMP)")
    p.add_argument("--force", action="store_true",
                   help="write into an --out directory that already holds other files")
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

    if args.keys:
        from commands.sweep.sweepfile import describe_keys

        print(describe_keys())
        return 0
    if not args.file:
        from emu.errors import EmuError

        raise EmuError("emu sweep needs a sweep file (or --keys to list its keys)")

    def say(msg: str) -> None:
        try:
            print(msg, file=sys.stderr, flush=True)
        except OSError:
            # A terminal that hung up (SIGHUP) fails every write: the cancelling of the
            # running points and their teardown must go on without their progress lines.
            pass

    res = run_sweep(args.file, cluster=args.cluster, out=Path(args.out) if args.out else None,
                    resume=Path(args.resume) if args.resume else None,
                    max_parallel=args.max_parallel, quick=args.quick, say=say,
                    force=args.force)
    print(res.out)
    return 1 if res.failed or res.grid["counts"]["missing"] else 0
