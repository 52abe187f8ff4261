"""Claim files: ``experiments/reproduce/<id>.toml`` parsed into `ClaimSpec`s, strictly.

A claim file::

    paper = "MRC"                      # MRC | DBLP | Explorer
    title = "Spraying removes flow collisions"
    statement = "..."                  # the claim as the paper states it
    kind = "spraying"                  # a kind of commands/reproduce/kinds.py
    repetitions = 3                    # >= 3, interleaved by the kind

    [params]                           # the kind's parameters (its check says which)
    ...
    [quick]                            # overrides of params under --quick
    ...

Unknown keys, wrong types, an unknown kind, fewer than 3 repetitions and parameters the
kind refuses are `ClaimSpecError`s naming the file, the key and what is valid. Every
selected claim is checked before any runs (`load_selected`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from commands.reproduce.claim import ClaimKind, ClaimSpec, ClaimSpecError
from emu.errors import EmuError
from emu.tomlfile import read_toml

ROOT = Path(__file__).resolve().parents[2]
CLAIMS_DIR = ROOT / "experiments" / "reproduce"
PAPERS = ("MRC", "DBLP", "Explorer")
MIN_REPETITIONS = 3
_STRINGS = ("paper", "title", "statement", "kind")
_KEYS = (*_STRINGS, "repetitions", "params", "quick")


def parse(path: Path, kinds: Mapping[str, ClaimKind]) -> ClaimSpec:
    """Parse and check one claim file (its kind's ``check`` included)."""
    try:
        doc = read_toml(path, "claim")
    except EmuError as e:
        raise ClaimSpecError(str(e)) from None
    unknown = sorted(set(doc) - set(_KEYS))
    if unknown:
        raise ClaimSpecError(f"{path}: unknown key {unknown[0]!r}: valid keys are "
                             f"{', '.join(_KEYS)}")
    for key in (*_STRINGS, "repetitions"):
        if key not in doc:
            raise ClaimSpecError(f"{path}: missing key {key!r}")
    for key in _STRINGS:
        if not isinstance(doc[key], str) or not doc[key].strip():
            raise ClaimSpecError(f"{path}: {key} = {doc[key]!r} is invalid: must be a "
                                 "non-empty string")
    if doc["paper"] not in PAPERS:
        raise ClaimSpecError(f"{path}: paper = {doc['paper']!r} is invalid: must be one of "
                             f"{', '.join(PAPERS)}")
    if doc["kind"] not in kinds:
        raise ClaimSpecError(f"{path}: kind = {doc['kind']!r} is unknown: valid kinds are "
                             f"{', '.join(sorted(kinds)) or '(none registered)'}")
    reps = doc["repetitions"]
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < MIN_REPETITIONS:
        raise ClaimSpecError(f"{path}: repetitions = {reps!r} is invalid: must be an integer "
                             f">= {MIN_REPETITIONS} (median and spread need repetitions)")
    tables = {}
    for key in ("params", "quick"):
        value = doc.get(key, {})
        if not isinstance(value, dict):
            raise ClaimSpecError(f"{path}: {key} = {value!r} is invalid: must be a table "
                                 f"([{key}])")
        tables[key] = value
    spec = ClaimSpec(id=path.stem, paper=doc["paper"], title=doc["title"].strip(),
                     statement=" ".join(doc["statement"].split()), kind=doc["kind"],
                     repetitions=reps, params=tables["params"], quick=tables["quick"])
    kind = kinds[spec.kind]
    for quick, section in ((False, "params"), (True, "quick")):
        try:
            kind.check(spec.effective_params(quick))
        except ClaimSpecError as e:
            raise ClaimSpecError(f"{path}: [{section}] {e}") from None
    return spec


def claim_files(directory: Path = CLAIMS_DIR) -> list[Path]:
    """Every claim file of ``directory``, in name order."""
    return sorted(directory.glob("*.toml"))


def in_paper_order(specs: Sequence[ClaimSpec]) -> list[ClaimSpec]:
    """``specs`` by paper (MRC, DBLP, Explorer: the issue's order of the claims), then id."""
    return sorted(specs, key=lambda s: (PAPERS.index(s.paper), s.id))


def load_all(kinds: Mapping[str, ClaimKind], directory: Path = CLAIMS_DIR) -> list[ClaimSpec]:
    """Every claim file of ``directory``, parsed and checked."""
    return in_paper_order([parse(p, kinds) for p in claim_files(directory)])


def is_path(claim: str) -> bool:
    """Whether a CLAIM argument names a file (``*.toml`` or with a directory) rather
    than a claim id of experiments/reproduce/."""
    return claim.endswith(".toml") or "/" in claim


def load_selected(ids: Sequence[str], kinds: Mapping[str, ClaimKind],
                  directory: Path = CLAIMS_DIR) -> list[ClaimSpec]:
    """The claims named by ``ids``, in that order (all of them, in paper order, when
    empty), each parsed and checked before any runs. An id names a file of
    ``directory``; a path (``is_path``) names any claim file, e.g. a copy of one with
    other parameters, whose id is its stem. An unknown id names the valid ones."""
    files = {p.stem: p for p in claim_files(directory)}
    if not ids:
        if not files:
            raise ClaimSpecError(f"{directory}: no claim files (*.toml)")
        return in_paper_order([parse(p, kinds) for p in files.values()])
    chosen: dict[str, Path] = {}
    for i in dict.fromkeys(ids):
        if is_path(i):
            path = Path(i)
            if not path.is_file():
                raise ClaimSpecError(f"claim file {i!r} does not exist")
        elif i in files:
            path = files[i]
        else:
            raise ClaimSpecError(f"claim {i!r} is unknown: valid claims are "
                                 f"{', '.join(files) or '(none)'} (files in {directory}), "
                                 "or the path of a claim file (*.toml)")
        if path.stem in chosen and chosen[path.stem].resolve() != path.resolve():
            raise ClaimSpecError(f"claims {str(chosen[path.stem])!r} and {i!r} share the id "
                                 f"{path.stem!r} (a file's stem names its report directory): "
                                 "rename one")
        chosen[path.stem] = path
    return [parse(p, kinds) for p in chosen.values()]
