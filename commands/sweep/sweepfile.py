"""Sweep files: what a sweep varies, read and checked before anything runs.

``load(path)`` reads a sweep file (the reference is the package docstring) into a
:class:`SweepFile`. Only the sweep's own keys are checked here (unknown keys, empty or
non-list axes, a key given twice); what the axes *mean* is the experiment's business:
every point is validated by the experiment's own loader and overrides (grid.py), so
there is one validator of experiment keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emu.errors import EmuError
from emu.tomlfile import read_toml
from transports.core.knobs import field_doc, field_spec, knob
from workloads.experiment import limits
from workloads.experiment.reader import Table, type_name
from workloads.experiment.schema import REQUIRED, Key

__all__ = ["DEFAULT_RETRIES", "KEYS", "MAX_POINTS", "MAX_RETRIES", "REQUIRED", "TOP", "SweepFile",
           "describe_keys", "flatten", "load", "parse"]

DEFAULT_RETRIES = 1
MAX_RETRIES = 10
# A grid is validated point by point (~400 points/s here) before anything runs, and each
# point is a fabric and a training run (rarely under half a minute): 10,000 points is
# already days on a small cluster.
MAX_POINTS = 10_000
MIN_POINT_S = 30.0


@dataclass(frozen=True)
class SweepFile:
    """A sweep as its file states it (paths resolved, dotted keys flattened).

    ``axes``: (experiment key, values) in file order, ``seed`` last when ``seeds`` is
    given; ``fixed``: the ``[set]`` overrides of every point; ``quick``: what ``--quick``
    adds on top of them; ``repetitions``: every point's, None to keep the base's.
    """

    name: str
    base: str
    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    quick: Mapping[str, Any] = field(default_factory=dict)
    repetitions: int | None = knob(None, lo=1, hi=limits.MAX_REPETITIONS,
                                   doc="every point's repetitions (default: the base's)")
    retries: int = knob(DEFAULT_RETRIES, lo=0, hi=MAX_RETRIES,
                        doc="how often a point that failed at run time is run again")
    description: str = ""
    source: str = "<sweep>"

    @property
    def size(self) -> int:
        """The number of points of the grid."""
        n = 1
        for _, values in self.axes:
            n *= len(values)
        return n


def _knob_key(name: str) -> Key:
    tp, optional, k = field_spec(SweepFile, name)
    assert k is not None
    f = next(f for f in dataclasses.fields(SweepFile) if f.name == name)
    return Key(name, f.default, k.rule(tp) + (" (or unset)" if optional else ""),
               field_doc(SweepFile, name))


# Every key of a sweep file: its default, the values it takes, what it is (the reader's
# key list, `emu sweep --keys` and the reference page read this one table).
KEYS: tuple[Key, ...] = (
    Key("name", REQUIRED, limits.NAME_RULE, "the sweep; names its results directory"),
    Key("description", "", "a string", "free text"),
    Key("base", REQUIRED, "the path of an experiment file (.toml), relative to this file, "
        "else to the working directory", "the experiment every point varies"),
    Key("seeds", None, "a non-empty array of integers", "an axis of seeds (the base's "
        "seed key varied last); not together with axes.seed"),
    _knob_key("repetitions"),
    _knob_key("retries"),
    Key("set", {}, "a table of experiment keys (dotted or nested)",
        "overrides of every point"),
    Key("axes", {}, "a table of experiment keys, each an array of at least one value",
        "the grid: every combination of the axes (and seeds) is a point; at least one "
        f"axis here or seeds, at most {MAX_POINTS:,} points"),
    Key("quick", {}, "a table of experiment keys", "what --quick adds on top of [set]"),
)
TOP = tuple(k.path for k in KEYS)


def describe_keys() -> str:
    """Every key of a sweep file, one block each (``emu sweep --keys``)."""
    return "\n".join(f"{k.path} = {k.default if k.default == REQUIRED else repr(k.default)}"
                     f"\n    {k.rule}\n    {k.doc}" for k in KEYS)

def flatten(where: str, table: str, data: object) -> dict[str, Any]:
    """``{"fabric": {"dcs": 2}}`` -> ``{"fabric.dcs": 2}`` (a quoted ``"fabric.dcs"`` key
    reads the same); a value that is not a table ends a key."""
    if not isinstance(data, Mapping):
        raise EmuError(f"{where}: [{table}] must be a table of experiment keys, not "
                       f"{type_name(data)}")
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Mapping[str, Any]) -> None:
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else k
            if isinstance(v, Mapping) and v:
                walk(key, v)
            else:
                out[key] = v
    walk("", data)
    return out


def load(path: str | Path) -> SweepFile:
    """Read and check a sweep file (see the package docstring)."""
    p = Path(path)
    data = read_toml(p, "sweep")
    return parse(data, str(p), base_dir=p.resolve().parent)


def parse(data: Mapping[str, Any], where: str = "<sweep>",
          base_dir: str | Path | None = None) -> SweepFile:
    """Check a sweep given as a dict; ``base`` is looked up relative to ``base_dir``
    first, then the working directory."""
    top = Table(where, "", data, TOP)
    name = top.get_str("name", pattern=limits.NAME, what=limits.NAME_RULE)
    description = top.get_str("description", "")
    base = _base(top, where, base_dir)
    repetitions = top.get_field(SweepFile, "repetitions")
    retries = top.get_field(SweepFile, "retries")
    fixed = flatten(where, "set", data.get("set", {}))
    quick = flatten(where, "quick", data.get("quick", {}))
    raw_axes = flatten(where, "axes", data.get("axes", {}))
    axes: list[tuple[str, tuple[Any, ...]]] = []
    for key, values in raw_axes.items():
        if not isinstance(values, list):
            raise EmuError(f"{where}: axes.{key} = {values!r} is invalid: an axis must be an "
                           "array of values, e.g. [1.0, 5.0]")
        if not values:
            raise EmuError(f"{where}: axes.{key} is empty: an axis needs at least one value")
        axes.append((key, tuple(values)))
    if "seeds" in data:
        seeds = data["seeds"]
        if not isinstance(seeds, list) or not seeds or not all(
                isinstance(s, int) and not isinstance(s, bool) for s in seeds):
            top.fail("seeds", "must be a non-empty array of integers", seeds)
        if "seed" in raw_axes:
            raise EmuError(f"{where}: seeds and axes.seed both vary the seed: keep one")
        axes.append(("seed", tuple(seeds)))
    if not axes:
        raise EmuError(f"{where}: no axis: give [axes] (experiment key = [values, ...]) "
                       "or seeds")
    for key in fixed:
        if key in dict(axes):
            raise EmuError(f"{where}: {key} is both in [set] and an axis: keep one")
    for key in ("repetitions", "name"):
        for table, keys in (("set", fixed), ("axes", dict(axes)), ("quick", quick)):
            if key in keys:
                raise EmuError(f"{where}: {table}.{key} is not allowed: "
                               + ("the sweep's top-level repetitions sets every point's"
                                  if key == "repetitions" else
                                  "points are named by the sweep (their ids tell them apart)"))
    sweep = SweepFile(name=name, base=base, axes=tuple(axes), fixed=fixed, quick=quick,
                      repetitions=repetitions, retries=retries, description=description,
                      source=where)
    if sweep.size > MAX_POINTS:  # before expanding it: a grid too large is never built
        shape = " x ".join(f"{len(v)} {k}" for k, v in axes)
        raise EmuError(f"{where}: the grid has {sweep.size:,} points ({shape}): at most "
                       f"{MAX_POINTS:,} are allowed; "
                       + limits.too_long(sweep.size, "points", MIN_POINT_S)
                       + " (split it into several sweeps, or drop axis values)")
    return sweep


def _base(top: Table, where: str, base_dir: str | Path | None) -> str:
    base = top.get_str("base", what="the path of an experiment file (.toml)")
    candidates = [Path(base)] if Path(base).is_absolute() else (
        ([Path(base_dir) / base] if base_dir is not None else []) + [Path(base)])
    for c in candidates:
        if c.is_file():
            return str(c.resolve())
    tried = ", ".join(repr(str(c)) for c in candidates)
    raise EmuError(f"{where}: base = {base!r}: no such experiment file (tried {tried})")
