"""The only place the process records (workloads/records.py) become JSON lines and back.

``encode`` writes a record as one line tagged with its ``type``; ``decode`` (or
``decode_obj``, for an object already parsed) rebuilds it, checked against the
record's type hints: a field of the wrong type or unknown, or a required one missing,
is a ValueError naming the field, so a worker and the runner that disagree fail on the
first line instead of computing with a misread value.
"""

from __future__ import annotations

import json
from typing import Any

from emu.childproto import READY, START
from emu.typedjson import build as _build
from emu.typedjson import plain as _plain
from workloads.records import (
    Done,
    EvalRecord,
    GateReached,
    Ready,
    Record,
    Release,
    Start,
    StepRecord,
    WorkerConfig,
    WorkerError,
)

__all__ = ["decode", "decode_obj", "encode"]

_TYPES: dict[str, type] = {
    "config": WorkerConfig, START: Start, "release": Release, READY: Ready,
    "step": StepRecord, "eval": EvalRecord, "gate": GateReached, "done": Done,
    "error": WorkerError,
}
_TAGS = {cls: tag for tag, cls in _TYPES.items()}


def encode(record: Record) -> str:
    """One JSON line (newline included) for ``record``, tagged with its type."""
    tag = _TAGS.get(type(record))
    if tag is None:
        raise TypeError(f"{type(record).__name__} is not a process record; records are "
                        f"{', '.join(c.__name__ for c in _TYPES.values())}")
    return json.dumps({"type": tag, **_plain(record)}) + "\n"


def decode(line: str) -> Record:
    """The record of one line written by ``encode``; ValueError naming what is wrong."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a JSON record: {e}: {line[:200]!r}") from None
    return decode_obj(data, line)


def decode_obj(data: Any, line: str = "") -> Record:
    """The record of one parsed JSON object (``line``: its text, for the error)."""
    if not isinstance(data, dict) or data.get("type") not in _TYPES:
        raise ValueError(f"not a process record (type must be one of "
                         f"{', '.join(_TYPES)}): {(line or repr(data))[:200]!r}")
    data = dict(data)
    cls = _TYPES[data.pop("type")]
    return _build(cls, data, cls.__name__)
