"""Running the selected claims into a report directory.

Every claim runs in order in its own directory (``OUT/<id>/``); after each one,
``summary.json``, ``report.md`` and ``report.html`` are rewritten, so a crash or Ctrl-C
keeps what finished. A claim whose run raises is caught here and reported as "failed"
with its error and a traceback file, never with a verdict; a result that breaks the
contract (a bad verdict, plots that were not written) is reported the same way.
"""

from __future__ import annotations

import os
import platform
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from commands.reproduce import report, summary
from commands.reproduce.claim import VERDICTS, ClaimContext, ClaimKind, ClaimResult, ClaimSpec
from commands.reproduce.summary import Header, Outcome
from emu import safefs

TRACEBACK = "traceback.txt"


def machine() -> dict[str, object]:
    """Kernel, cores, netem (as `emu doctor` probes it) and the git commit."""
    from emu import doctor
    from workloads.provenance import software_versions

    netem = "not probed"
    try:
        cap = next(c for c in doctor.check() if c.name == "netem")
        netem = f"{'yes' if cap.available else 'no'} ({cap.detail})"
    except Exception as e:  # noqa: BLE001 - the header says why instead of failing the run
        netem = f"not probed ({type(e).__name__}: {e})"
    return {"kernel": platform.release(), "cores": os.cpu_count() or 1, "netem": netem,
            "commit": software_versions().get("git") or "unknown (not a git checkout)"}


def checked_result(spec: ClaimSpec, res: object, out_dir: Path) -> ClaimResult:
    """``res`` if it keeps the contract, else a "failed" result saying what is wrong."""
    problem = ""
    if not isinstance(res, ClaimResult):
        problem = f"the claim returned {type(res).__name__}, not a ClaimResult"
    elif res.verdict not in VERDICTS:
        problem = f"verdict {res.verdict!r} is not one of {', '.join(VERDICTS)}"
    else:
        missing = [p for p in res.plots if not (out_dir / p).is_file()]
        if missing:
            problem = f"plots {missing} were not written in {out_dir}"
    if problem:
        return ClaimResult(spec.id, "failed", problem, "", error=problem)
    assert isinstance(res, ClaimResult)
    if res.claim_id != spec.id:
        res = replace(res, claim_id=spec.id)
    if res.verdict == "failed" and not res.error:
        res = replace(res, error=res.reason or "the claim reported a failure")
    return res


def run_one(spec: ClaimSpec, kind: ClaimKind, ctx: ClaimContext) -> tuple[ClaimResult, str]:
    """Run one claim; (its result, the traceback file name if it raised)."""
    try:
        res = kind.run(spec, ctx)
    except Exception as e:  # noqa: BLE001 - any failure of a claim is reported, not raised
        safefs.write_text(ctx.out_dir / TRACEBACK, traceback.format_exc())
        err = f"{type(e).__name__}: {e}"
        ctx.say(f"{spec.id}: failed: {err}")
        return ClaimResult(spec.id, "failed", "the run raised an error", "", error=err), \
            TRACEBACK
    return checked_result(spec, res, ctx.out_dir), ""


def _prefixed(say: Callable[[str], None], claim_id: str) -> Callable[[str], None]:
    def said(msg: str) -> None:
        say(f"  {claim_id}: {msg}")
    return said


def write_reports(out: Path, header: Header, outcomes: Sequence[Outcome]) -> None:
    """``summary.json``, ``report.md`` and ``report.html`` in ``out``."""
    summary.write(out / "summary.json", header, outcomes)
    bl = report.blocks(header, outcomes)
    safefs.replace_text(out / "report.md", report.markdown(bl))
    safefs.replace_text(out / "report.html", report.to_html(bl))


def run_claims(specs: Sequence[ClaimSpec], kinds: Mapping[str, ClaimKind], out: Path, *,
               quick: bool, command: str, say: Callable[[str], None],
               info: Mapping[str, object] | None = None) -> list[Outcome]:
    """Run ``specs`` in order into ``out`` (see the module docstring); ``info`` is the
    machine's description (`machine()` when None)."""
    safefs.mkdir_private(out)
    m = dict(info) if info is not None else machine()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()

    def header() -> Header:
        return Header(started=started, command=command, kernel=str(m["kernel"]),
                      cores=int(str(m["cores"])), netem=str(m["netem"]),
                      commit=str(m["commit"]), quick=quick,
                      wall_s=round(time.monotonic() - t0, 2))

    outcomes: list[Outcome] = []
    for i, spec in enumerate(specs):
        say(f"[{i + 1}/{len(specs)}] {spec.id}: {spec.title}"
            f"{' (quick)' if quick else ''}")
        d = out / spec.id
        safefs.mkdir_private(d)
        ctx = ClaimContext(out_dir=d, quick=quick, repetitions=spec.repetitions,
                           say=_prefixed(say, spec.id))
        t1 = time.monotonic()
        res, tb = run_one(spec, kinds[spec.kind], ctx)
        outcomes.append(Outcome(spec, res, round(time.monotonic() - t1, 2), tb))
        say(f"  {spec.id}: {res.verdict}: {res.error or res.reason}")
        write_reports(out, header(), outcomes)
    return outcomes
