"""Overrides: one experiment varied from the command line without a second file.

``with_overrides(exp, {"transport.name": "rc"})`` re-validates the experiment's document
with dotted keys replaced (``None`` removes a key); ``parse_override("workload.steps=50")``
reads one ``KEY=VALUE`` (VALUE in TOML syntax, a bare word being a string).
"""

from __future__ import annotations

import copy
import dataclasses
import tomllib
from collections.abc import Mapping
from typing import Any

from emu.errors import EmuError
from workloads.experiment.config import Experiment
from workloads.experiment.loading import parse
from workloads.experiment.reader import type_name

__all__ = ["parse_override", "with_overrides"]


def with_overrides(exp: Experiment, overrides: Mapping[str, Any]) -> Experiment:
    """``exp`` with dotted keys of its document replaced, validated like a file.

    ``{"transport.name": "rc", "transport.dblp": None}``: a value None removes the key
    (a dblp experiment switched to rc must drop its [transport.dblp] table; nothing is
    dropped silently). Errors name the file and the overridden keys.
    """
    doc = copy.deepcopy(dict(exp.document))
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if not dotted or not all(parts):
            raise EmuError(f"override {dotted!r}: must be a dotted key such as workload.steps")
        table: dict = doc
        for i, part in enumerate(parts[:-1]):
            nxt = table.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise EmuError(f"override {dotted!r}: {'.'.join(parts[:i + 1])} is "
                               f"{type_name(nxt)}, not a table")
            table = nxt
        if value is None:
            table.pop(parts[-1], None)
        else:
            table[parts[-1]] = copy.deepcopy(value)
    where = f"{exp.source} (with overrides {', '.join(overrides)})"
    new = parse(doc, where, base_dir=exp.base_dir)
    # ``source`` stays the file; what was changed is recorded next to it.
    return dataclasses.replace(new, source=exp.source,
                               overrides={**exp.overrides, **copy.deepcopy(dict(overrides))})


def parse_override(text: str) -> tuple[str, Any]:
    """``"workload.steps=50"`` -> ``("workload.steps", 50)``; the value is read as TOML
    (``"[\\"h0\\", \\"h3\\"]"``, ``true``, ``0.5``), a bare word as a string (``rc``)."""
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key:
        raise EmuError(f"override {text!r}: must be KEY=VALUE, e.g. workload.steps=50")
    try:
        return key, tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value
