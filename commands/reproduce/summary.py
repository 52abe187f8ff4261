"""What a reproduction run found, as data: its header and one outcome per claim, and the
``summary.json`` round trip (written after every claim, so a crash keeps what finished;
read back to re-render or to test the report)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from commands.reproduce.claim import VERDICTS, ClaimResult, ClaimSpec, Figure, Table, Verdict
from emu import safefs

SUMMARY_VERSION = 1


@dataclass(frozen=True)
class Header:
    """Where, with what and how the claims ran."""

    started: str  # ISO 8601, UTC
    command: str
    kernel: str
    cores: int
    netem: str  # "yes (...)" or "no (...)": the DCI delay backend's kernel part
    commit: str
    quick: bool
    wall_s: float  # the whole run so far


@dataclass(frozen=True)
class Outcome:
    """One claim: its file, its result, its wall time and, if it raised, its traceback
    file (inside the claim's directory)."""

    spec: ClaimSpec
    result: ClaimResult
    wall_s: float
    traceback: str = ""

    @property
    def time_scale(self) -> str:
        """The claim's time scale as its result states it ("" if it has none)."""
        ts = self.result.raw.get("time_scale")
        return ts if isinstance(ts, str) else ""


def _result_dict(r: ClaimResult) -> dict[str, Any]:
    return {"verdict": r.verdict, "reason": r.reason, "setting": r.setting,
            "figures": [asdict(f) for f in r.figures],
            "tables": [{"title": t.title, "columns": list(t.columns),
                        "rows": [list(row) for row in t.rows]} for t in r.tables],
            "plots": list(r.plots), "raw": dict(r.raw), "error": r.error}


def to_dict(header: Header, outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The JSON summary: header, then per claim its file's fields, verdict and figures."""
    claims = []
    for o in outcomes:
        s = o.spec
        claims.append({"id": s.id, "paper": s.paper, "title": s.title,
                       "statement": s.statement, "kind": s.kind,
                       "repetitions": s.repetitions, "params": dict(s.params),
                       "quick_params": dict(s.quick), "wall_s": round(o.wall_s, 2),
                       "traceback": o.traceback, **_result_dict(o.result)})
    return {"version": SUMMARY_VERSION, "header": asdict(header),
            "verdicts": {o.spec.id: o.result.verdict for o in outcomes}, "claims": claims}


def write(path: Path, header: Header, outcomes: Sequence[Outcome]) -> None:
    """Write ``summary.json`` atomically (a crash mid-write keeps the previous one)."""
    safefs.write_json(path, to_dict(header, outcomes), indent=1, default=str)


def _verdict(v: object) -> Verdict:
    if v not in VERDICTS:
        raise ValueError(f"summary: verdict {v!r} is not one of {VERDICTS}")
    return cast(Verdict, v)


def from_dict(doc: Mapping[str, Any]) -> tuple[Header, list[Outcome]]:
    """Read a summary back (the inverse of `to_dict`)."""
    if doc.get("version") != SUMMARY_VERSION:
        raise ValueError(f"summary version {doc.get('version')!r} is not {SUMMARY_VERSION}")
    header = Header(**doc["header"])
    outcomes = []
    for c in doc["claims"]:
        spec = ClaimSpec(id=c["id"], paper=c["paper"], title=c["title"],
                         statement=c["statement"], kind=c["kind"],
                         repetitions=c["repetitions"], params=c["params"],
                         quick=c["quick_params"])
        result = ClaimResult(
            claim_id=c["id"], verdict=_verdict(c["verdict"]), reason=c["reason"],
            setting=c["setting"], figures=tuple(Figure(**f) for f in c["figures"]),
            tables=tuple(Table(t["title"], tuple(t["columns"]),
                               tuple(tuple(r) for r in t["rows"])) for t in c["tables"]),
            plots=tuple(c["plots"]), raw=c["raw"], error=c["error"])
        outcomes.append(Outcome(spec, result, c["wall_s"], c["traceback"]))
    return header, outcomes


def read(path: Path) -> tuple[Header, list[Outcome]]:
    """Read ``summary.json``."""
    return from_dict(json.loads(path.read_text()))
