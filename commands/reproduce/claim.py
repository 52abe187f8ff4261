"""The contract between `emu reproduce` and the claims it checks.

A claim is one experiment file under ``experiments/reproduce/`` (parsed into a
`ClaimSpec`); its ``kind`` names a `ClaimKind` in the registry
(`commands.reproduce.kinds`), which checks the file's parameters before anything runs
and then runs the claim into a `ClaimResult`: a verdict, the reason for it, the setting,
and the measured figures (each with its spread, repetitions and clock), tables and plots.
The report is written from `ClaimResult`s only, so it can be tested on recorded results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

Verdict = Literal["holds", "holds in direction", "does not hold here", "failed"]
VERDICTS: tuple[Verdict, ...] = ("holds", "holds in direction", "does not hold here", "failed")
CLOCKS = ("emulated", "full-scale", "dimensionless")


@dataclass(frozen=True)
class Figure:
    """One measured figure over repetitions: its median and spread.

    ``lo``/``hi`` is the spread (the min and max, or a percentile band: the claim's
    setting says which). ``clock`` is "emulated" (the emulator's clock, at its time
    scale), "full-scale" (projected to the real network) or "dimensionless" (a ratio or
    a fraction).
    """

    name: str
    system: str
    unit: str
    clock: str
    median: float
    lo: float
    hi: float
    n: int


@dataclass(frozen=True)
class Table:
    """A table of the report: a title, column names, and rows of printable cells."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[object, ...], ...]


@dataclass(frozen=True)
class ClaimSpec:
    """A claim's experiment file (``experiments/reproduce/<id>.toml``), parsed.

    ``params`` are the kind's parameters; ``quick`` overrides some of them under
    ``--quick`` (see `effective_params`).
    """

    id: str
    paper: str
    title: str
    statement: str
    kind: str
    repetitions: int
    params: Mapping[str, object]
    quick: Mapping[str, object]

    def effective_params(self, quick: bool) -> dict[str, object]:
        """The parameters to run with: ``params``, overridden by ``quick`` if asked."""
        out = dict(self.params)
        if quick:
            out.update(self.quick)
        return out


@dataclass(frozen=True)
class ClaimContext:
    """What a running claim gets from the framework."""

    out_dir: Path  # this claim's own directory (exists); plots go here
    quick: bool
    repetitions: int
    say: Callable[[str], None]  # progress


@dataclass(frozen=True)
class ClaimResult:
    """A claim's outcome: the verdict, its reason, the setting and the measurements.

    ``plots`` are file names inside the claim's ``out_dir``; ``raw`` is JSON-able detail
    kept in the summary; ``error`` is set (and only then) when ``verdict == "failed"``.
    """

    claim_id: str
    verdict: Verdict
    reason: str
    setting: str
    figures: tuple[Figure, ...] = ()
    tables: tuple[Table, ...] = ()
    plots: tuple[str, ...] = ()
    raw: Mapping[str, object] = field(default_factory=dict)
    error: str = ""


class ClaimSpecError(ValueError):
    """A claim file is wrong: the message names the file, the key and what is valid."""


class ClaimKind(Protocol):
    """A kind of claim: checks a claim file's parameters, then runs the claim."""

    name: str
    needs_root: bool  # it builds fabrics (a refused run then creates nothing)

    def check(self, params: Mapping[str, object]) -> None:
        """Raise `ClaimSpecError` if ``params`` are not valid for this kind."""
        ...

    def run(self, spec: ClaimSpec, ctx: ClaimContext) -> ClaimResult:
        """Run the claim and judge it."""
        ...
