"""Overrides: one experiment varied from the command line without a second file.

``with_overrides(exp, {"transport.name": "rc"})`` re-validates the experiment's document
with dotted keys replaced (``None`` removes a key); emu.tomlfile's ``parse_override``
reads one ``KEY=VALUE`` from the command line.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from emu.errors import EmuError
from workloads.experiment.config import Experiment
from workloads.experiment.loading import parse
from workloads.experiment.reader import type_name

__all__ = ["with_overrides"]


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
