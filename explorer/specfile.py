"""Explore files: a design space written as TOML, validated before any work.

``load(path, overrides)`` reads ``experiments/explore/*.toml`` into a :class:`Space`.
Every table and key is one of explorer/spec.py's declarations (``emu explore --keys``
prints them with their ranges); anything else is an error naming the file and the key.
Any key may be given a list: the list is a *search axis* and the space is the product of
all axes. A key given once is fixed; a key not given takes the preset's value (``model``
and ``gpu`` take ``preset = "..."``, itself possibly an axis), else the declared default.
``cluster.dc_gpus`` is an array by nature: an axis of it is an array of arrays.

Top-level keys: ``name`` (required), ``description``, ``calibration`` (a path or a list of
paths of calibration records, relative to the file), and the tables ``[model] [gpu]
[cluster] [fabric] [dci] [placement] [schedule] [network] [cost]``.

Every value of every axis is checked, and every combination of one section's axes must
make a valid section (e.g. ``kv_heads`` must divide ``heads``): the error names the
combination. Constraints *between* sections (a TP degree that does not divide the heads,
a placement that does not fit in memory) are not errors: the search prunes those points
and counts them by reason.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emu import tomlfile
from emu.errors import EmuError
from explorer.presets import preset as preset_values
from explorer.spec import (
    SECTIONS,
    Config,
    SpecError,
    check_value,
    field_check,
    section_fields,
)

__all__ = ["Axis", "Space", "load", "parse", "parse_override"]

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_TOP = ("name", "description", "calibration", *SECTIONS)
# A section's axes are checked combination by combination up to this many; beyond, a
# sample (first, last and random ones) is checked and the rest fail later if invalid.
_MAX_SECTION_CHECKS = 20000


@dataclass(frozen=True)
class Axis:
    """One search axis: a dotted key and its values (already validated)."""

    key: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Space:
    """A design space: fixed values and axes. ``fixed`` holds every key the file set once
    (after presets were resolved per point, see :meth:`value`)."""

    name: str
    description: str
    source: str
    fixed: Mapping[str, Any]
    axes: tuple[Axis, ...]
    calibration: tuple[str, ...] = ()
    base_dir: str | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        """Points in the raw space (product of the axes' lengths)."""
        return math.prod(len(a.values) for a in self.axes)

    def axis(self, key: str) -> Axis | None:
        """The axis of ``key``, if it is one."""
        for a in self.axes:
            if a.key == key:
                return a
        return None

    def config(self, choice: Mapping[str, Any] | None = None) -> Config:
        """The point where every axis takes ``choice[key]`` (default: its first value)."""
        choice = dict(choice or {})
        unknown = set(choice) - {a.key for a in self.axes}
        if unknown:
            raise SpecError(f"not axes of {self.name}: {', '.join(sorted(unknown))}")
        values = dict(self.fixed)
        for a in self.axes:
            values[a.key] = choice.get(a.key, a.values[0])
        return build_config(values)

    def points(self) -> Iterator[Config]:
        """Every point, in axis order (the last axis varies fastest). For small spaces."""
        keys = [a.key for a in self.axes]
        for combo in itertools.product(*(a.values for a in self.axes)):
            yield self.config(dict(zip(keys, combo, strict=True)))


def build_config(values: Mapping[str, Any]) -> Config:
    """A :class:`Config` from dotted keys; presets fill what ``values`` leaves out."""
    for key in values:
        section, _, name = key.partition(".")
        if section not in SECTIONS or name not in section_fields(section):
            valid = ", ".join(section_fields(section)) if section in SECTIONS else \
                "tables " + ", ".join(SECTIONS)
            raise SpecError(f"unknown key {key!r}; valid: {valid}")
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        given = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith(name + ".")}
        sections[name] = cls(**merge_preset(name, given))
    return Config(**sections)


_EITHER = {"global_batch_seqs": "global_batch_tokens", "global_batch_tokens": "global_batch_seqs"}


def merge_preset(section: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """A section's keys: its preset's values (if ``given`` names one) under ``given``."""
    merged: dict[str, Any] = {}
    if given.get("preset") is not None:
        merged.update(preset_values(section, given["preset"]))
        for key, other in _EITHER.items():
            if key in given and section == "model":
                merged.pop(other, None)
    merged.update(given)
    return merged


def parse_override(text: str) -> tuple[str, Any]:
    """``"placement.tp=[4,8]"`` -> ``("placement.tp", [4, 8])`` (emu.tomlfile's parser; its
    error as a SpecError)."""
    try:
        return tomlfile.parse_override(text)
    except EmuError as e:
        raise SpecError(str(e)) from None


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """An explore file as a dict (emu.tomlfile's reader; its error as a SpecError)."""
    try:
        return tomlfile.read_toml(path, what)
    except EmuError as e:
        raise SpecError(str(e)) from None


def load(path: str | Path, overrides: Sequence[str] = ()) -> Space:
    """Read and validate an explore file; ``overrides`` are ``KEY=VALUE`` strings."""
    p = Path(path)
    data = read_toml(p, "explore file")
    for text in overrides:
        key, value = parse_override(text)
        _set(data, key, value, str(p))
    return parse(data, str(p), base_dir=p.resolve().parent)


def _set(data: dict, key: str, value: Any, where: str) -> None:
    section, _, name = key.partition(".")
    if not name:
        if section not in ("name", "description", "calibration"):
            raise SpecError(f"{where}: --set {key}: unknown key; valid: a top-level key or "
                            "SECTION.KEY")
        data[section] = value
        return
    if section not in SECTIONS:
        raise SpecError(f"{where}: --set {key}: unknown table [{section}]; valid tables: "
                        + ", ".join(SECTIONS))
    table = data.setdefault(section, {})
    if not isinstance(table, dict):
        raise SpecError(f"{where}: [{section}] must be a table")
    table[name] = value


def parse(data: Mapping[str, Any], where: str = "<explore>",
          base_dir: str | Path | None = None) -> Space:
    """Validate an explore document (as ``tomllib`` returns it)."""
    unknown = [k for k in data if k not in _TOP]
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r} at the top level; valid keys: "
                        + ", ".join(_TOP))
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SpecError(f"{where}: name = {name!r} is invalid: required, letters, digits, "
                        "'_', '.' or '-'")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise SpecError(f"{where}: description must be a string")
    calibration = _calibration_paths(data.get("calibration", []), where, base_dir)

    fixed: dict[str, Any] = {}
    axes: list[Axis] = []
    for section in SECTIONS:
        table = data.get(section, {})
        if not isinstance(table, Mapping):
            raise SpecError(f"{where}: [{section}] must be a table")
        fields = section_fields(section)
        for key, raw in table.items():
            dotted = f"{section}.{key}"
            if key not in fields:
                raise SpecError(f"{where}: unknown key {dotted!r}; valid keys of [{section}]: "
                                + ", ".join(fields))
            check = field_check(fields[key])
            is_axis = isinstance(raw, list) and (
                check.kind != "ints" or any(isinstance(v, list) for v in raw))
            try:
                if is_axis:
                    if not raw:
                        raise SpecError(f"{dotted} = [] is invalid: an axis needs at least "
                                        "one value")
                    vals = tuple(check_value(dotted, v, check) for v in raw)
                    if key == "preset":
                        for v in vals:
                            preset_values(section, v)
                    if len(set(vals)) != len(vals):
                        raise SpecError(f"{dotted} = {raw!r} is invalid: repeated values")
                    axes.append(Axis(dotted, vals))
                else:
                    v = check_value(dotted, raw, check)
                    if key == "preset" and v is not None:
                        preset_values(section, v)
                    fixed[dotted] = v
            except (SpecError, ValueError) as e:
                raise SpecError(f"{where}: {e}") from None
    space = Space(name=name, description=description, source=where, fixed=fixed,
                  axes=tuple(axes), calibration=calibration,
                  base_dir=None if base_dir is None else str(base_dir))
    _check_sections(space, where)
    return space


def _calibration_paths(raw: Any, where: str, base_dir: str | Path | None) -> tuple[str, ...]:
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise SpecError(f"{where}: calibration must be a path or a list of paths")
    out = []
    for item in items:
        p = Path(item)
        if not p.is_absolute() and base_dir is not None and (Path(base_dir) / p).exists():
            p = Path(base_dir) / p
        if not p.is_file():
            raise SpecError(f"{where}: calibration file {item!r} does not exist")
        out.append(str(p))
    return tuple(out)


def _check_sections(space: Space, where: str) -> None:
    """Every combination of one section's axes must build a valid section."""
    for section, cls in SECTIONS.items():
        axes = [a for a in space.axes if a.key.startswith(section + ".")]
        base = {k.split(".", 1)[1]: v for k, v in space.fixed.items()
                if k.startswith(section + ".")}
        combos = math.prod(len(a.values) for a in axes)
        indices: Any = itertools.product(*(range(len(a.values)) for a in axes))
        if combos > _MAX_SECTION_CHECKS:
            indices = _sample_indices(axes, _MAX_SECTION_CHECKS)
        for idx in indices:
            values = dict(base)
            for a, i in zip(axes, idx, strict=True):
                values[a.key.split(".", 1)[1]] = a.values[i]
            try:
                cls(**merge_preset(section, values))
            except SpecError as e:
                at = ", ".join(f"{a.key} = {a.values[i]!r}" for a, i in zip(axes, idx,
                                                                             strict=True))
                raise SpecError(f"{where}: {e}" + (f" (at {at})" if at else "")) from None


def _sample_indices(axes: list[Axis], n: int) -> Iterator[tuple[int, ...]]:
    import random

    rng = random.Random(0)
    yield tuple(0 for _ in axes)
    yield tuple(len(a.values) - 1 for a in axes)
    for _ in range(n):
        yield tuple(rng.randrange(len(a.values)) for a in axes)


def describe_keys() -> str:
    """Every key of every table with its rule, default and meaning (``--keys``)."""
    lines = []
    for section, cls in SECTIONS.items():
        lines.append(f"[{section}]")
        for f in dataclasses.fields(cls):
            check = field_check(f)
            default = "derived" if f.default is None else repr(f.default)
            lines.append(f"  {f.name:<22} {check.rule():<40} default {default:<10} "
                         f"{f.metadata['doc']}")
    return "\n".join(lines)
