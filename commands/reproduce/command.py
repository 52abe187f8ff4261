"""The `emu reproduce` subcommand (parser and entry point).

``emu reproduce [CLAIM ...] [--quick] [--out DIR] [--list]`` loads every claim file of
experiments/reproduce/, or the claim files named by path (each checked by its kind
before anything runs), runs the selected
ones in order and writes ``results/reproduce-TIME/`` (or ``--out``): a directory per
claim, ``summary.json``, ``report.md`` and ``report.html``. The exit status is 0 when
every claim reached a verdict (whatever it is), 1 when one failed to run.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from emu import safefs
from emu.errors import require_root


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def configure(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `emu reproduce` on the top-level subparsers."""
    p = sub.add_parser(
        "reproduce", help="check the MRC, DBLP and Explorer papers' claims on this machine "
        "and write a report with a verdict per claim",
        description="Runs each claim of experiments/reproduce/ (all of them, or those "
        "named) with its baselines in one run, repeated and interleaved, and writes "
        "report.md, report.html and summary.json. Building fabrics needs root.")
    p.add_argument("claims", nargs="*", metavar="CLAIM",
                   help="claim ids (file stems of experiments/reproduce/*.toml), or paths "
                   "of claim files (e.g. a copy with other [params]); default all")
    p.add_argument("--quick", action="store_true",
                   help="the claims' quick settings (all claims in about 15 minutes)")
    p.add_argument("--out", help="report directory (default results/reproduce-TIMESTAMP)")
    p.add_argument("--list", action="store_true", help="list the claims and exit")
    p.add_argument("--force", action="store_true",
                   help="write into an --out directory that already holds files")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of `emu reproduce`."""
    from commands.reproduce.kinds import KINDS
    from commands.reproduce.run import run_claims
    from commands.reproduce.spec import load_selected

    specs = load_selected(args.claims, KINDS)  # every selected claim checked first
    if args.list:
        for s in specs:
            print(f"{s.id:<16} {s.paper:<9} {s.kind:<10} x{s.repetitions}  {s.title}")
        return 0
    rooted = [s.id for s in specs if KINDS[s.kind].needs_root]
    if rooted:  # before the report directory exists: a refused run leaves nothing
        require_root(f"emu reproduce {' '.join(rooted)}")
    out = safefs.results_dir(args.out, "reproduce", force=args.force)
    command = "emu reproduce " + shlex.join(
        [*args.claims, *(["--quick"] if args.quick else []),
         *(["--out", args.out] if args.out else [])])
    t0 = time.monotonic()
    outcomes = run_claims(specs, KINDS, out, quick=args.quick, command=command.strip(),
                          say=_say)
    print(f"{len(outcomes)} claims in {time.monotonic() - t0:.0f} s; report in "
          f"{out / 'report.md'} and {out / 'report.html'}")
    for o in outcomes:
        print(f"  {o.spec.id:<16} {o.result.verdict:<20} {o.result.error or o.result.reason}")
    return 1 if any(o.result.verdict == "failed" for o in outcomes) else 0
