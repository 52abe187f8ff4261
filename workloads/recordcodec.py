"""The only place the process records (workloads/records.py) become JSON lines and back.

``encode`` writes a record as one line tagged with its ``type``; ``decode`` (or
``decode_obj``, for an object already parsed) rebuilds it, checked against the
record's type hints: a field of the wrong type or unknown, or a required one missing,
is a ValueError naming the field, so a worker and the runner that disagree fail on the
first line instead of computing with a misread value.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, cast

from emu.childproto import READY, START
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


def _plain(obj: Any) -> Any:
    """JSON-able data of a record: dataclasses to dicts, tuples to lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


def _build(cls: type, data: object, where: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must be an object, not {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown}; fields are {sorted(names)}")
    args = {k: _value(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**args)
    except TypeError as e:  # a required field is missing
        raise ValueError(f"{where}: {e}") from None


def _value(tp: Any, v: Any, where: str) -> Any:
    """``v`` (decoded JSON) as type ``tp``: the inverse of ``_plain``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return v
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if v is None:
            if len(options) < len(typing.get_args(tp)):
                return None
            raise ValueError(f"{where}: must not be null")
        if isinstance(v, dict):  # a record: the option whose fields it has (encode writes all)
            exact = [a for a in options if dataclasses.is_dataclass(a)
                     and {f.name for f in dataclasses.fields(a)} == set(v)]
            if len(exact) == 1:
                return _value(exact[0], v, where)
        errors = []
        for a in options:
            try:
                return _value(a, v, where)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError("; ".join(errors))
    if dataclasses.is_dataclass(tp):
        return _build(cast(type, tp), v, where)  # a type hint: a class, not an instance
    if origin is tuple:
        if not isinstance(v, list):
            raise ValueError(f"{where}: must be an array, not {type(v).__name__}")
        item = typing.get_args(tp)[0]
        return tuple(_value(item, x, f"{where}[{i}]") for i, x in enumerate(v))
    if origin in (Mapping, dict):
        if not isinstance(v, dict):
            raise ValueError(f"{where}: must be an object, not {type(v).__name__}")
        kt, vt = typing.get_args(tp)
        # JSON object keys are strings: integer keys (peer ranks) come back as such.
        return {(int(k) if kt is int else k): _value(vt, x, f"{where}[{k}]")
                for k, x in v.items()}
    if tp is float:
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    elif tp is int or tp is bool or tp is str:
        if type(v) is tp:
            return v
    else:
        raise TypeError(f"{where}: no decoding for {tp!r}")  # a record definition's bug
    raise ValueError(f"{where} = {v!r}: must be {getattr(tp, '__name__', tp)}")
