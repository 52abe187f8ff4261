"""A sweep's output directory: what is done is on disk the moment it arrives.

Layout (``DIR`` is ``--out``, or the ``--resume`` directory)::

    DIR/sweep.toml        the sweep file as first run (for the record)
    DIR/points.json       the grid: every point's index, id, axis values and overrides
    DIR/sweep.jsonl       one JSON record per line, appended and flushed as things happen:
                          {"type": "session", ...} at every start (or resume);
                          {"type": "attempt", "id", "index", "attempt", "session",
                           "status": "done" | "error" | "cancelled", "node", "start", "end"
                           (the node's clock), "submitted", "finished" (the head's),
                           "error", "traceback"} per finished attempt;
                          {"type": "failed", "id", "index", "attempts", "error"} for a point
                          that ran out of retries
    DIR/points/ID/        a done point's results, as `emu run` writes them (results.jsonl,
                          CSVs, calibration.json, plots) plus point.log
    DIR/failed/ID-N/      the files of a failed attempt N of point ID (for diagnosis)
    DIR/grid.csv, grid.json, calibration.json, plots/   the aggregation (aggregate.py)

A point is done when an ``attempt`` record says so *and* its directory exists; its files
are written to a temporary directory and renamed into place before the record is
appended, so a crash between the two leaves an unrecorded directory that is run again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commands.sweep.grid import Point
from commands.sweep.task import PointOutcome
from emu import safefs
from emu.errors import EmuError

__all__ = ["Attempt", "SweepStore", "read_records"]

STATE = "sweep.jsonl"


@dataclass(frozen=True)
class Attempt:
    """One finished attempt of a point, as ``sweep.jsonl`` records it."""

    id: str
    index: int
    attempt: int
    session: int
    status: str  # "done" | "error" | "cancelled"
    node: str | None
    start: float | None
    end: float | None
    submitted: float
    finished: float
    error: str | None = None
    traceback: str | None = None

    def as_record(self) -> dict[str, Any]:
        return {"type": "attempt", **dataclasses.asdict(self)}


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a ``sweep.jsonl`` (a torn last line, from a crash, is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


class SweepStore:
    """The output directory of a sweep (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / STATE

    @classmethod
    def create(cls, root: Path, sweep_file: Path, force: bool = False) -> SweepStore:
        """A new output directory: refused if it already holds a sweep (use --resume), or
        anything else unless ``force`` (the user's --force)."""
        if (root / STATE).exists():
            raise EmuError(f"--out {str(root)!r} already holds a sweep ({STATE}): continue it "
                           f"with --resume {root}, or choose a new directory")
        safefs.out_dir(root, force=force)
        safefs.copy_file(sweep_file, root / "sweep.toml")
        safefs.open_new(root / STATE).close()
        return cls(root)

    @classmethod
    def open(cls, root: Path) -> SweepStore:
        """An existing output directory, to resume."""
        if not (root / STATE).exists():
            raise EmuError(f"--resume {str(root)!r}: no sweep there (no {STATE}); start one "
                           "with --out")
        return cls(root)

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.state)

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one record and flush it to disk."""
        with safefs.open_append(self.state) as f:
            f.write(json.dumps(record, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def start_session(self, points: Sequence[Point], todo: int, cluster: str) -> int:
        """Record a session's start and the grid; returns the session number."""
        session = sum(1 for r in self.records() if r.get("type") == "session")
        safefs.write_json(self.root / "points.json", [p.as_record() for p in points],
                          indent=1, default=str)
        self.append({"type": "session", "session": session, "started": time.time(),
                     "cluster": cluster, "points": len(points), "to_run": todo})
        return session

    def point_dir(self, pid: str) -> Path:
        return self.root / "points" / pid

    def done_ids(self) -> set[str]:
        """The points whose results are recorded as done and present."""
        return {r["id"] for r in self.records()
                if r.get("type") == "attempt" and r.get("status") == "done"
                and self.point_dir(r["id"]).is_dir()}

    def attempts(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("type") == "attempt"]

    def write_files(self, dest: Path, files: Mapping[str, bytes]) -> None:
        """``files`` under ``dest``, all or nothing (written aside, then renamed)."""
        tmp = dest.with_name(dest.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        for rel, data in files.items():
            p = tmp / rel
            if not p.resolve().is_relative_to(tmp.resolve()):
                raise EmuError(f"a point returned a file outside its directory: {rel!r}")
            safefs.mkdir_private(p.parent)
            safefs.write_bytes(p, data)
        safefs.mkdir_private(tmp)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)

    def record(self, attempt: Attempt, outcome: PointOutcome | None) -> None:
        """Keep an attempt: a done point's files in points/ID, a failed one's in
        failed/ID-N, then its record."""
        if outcome is not None and outcome.files:
            dest = (self.point_dir(attempt.id) if attempt.status == "done"
                    else self.root / "failed" / f"{attempt.id}-{attempt.attempt}")
            safefs.mkdir_private(dest.parent)
            self.write_files(dest, outcome.files)
        self.append(attempt.as_record())

    def failed(self, point: Point, attempts: int, error: str | None) -> None:
        self.append({"type": "failed", "id": point.id, "index": point.index,
                     "attempts": attempts, "error": error})
