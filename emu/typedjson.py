"""Frozen records to JSON-able data and back, checked against their type hints.

The one codec of the records that cross between processes: a transfer driver's plan
(transports/planrecord.py) and a training worker's records (workloads/recordcodec.py).
``plain`` writes a record as dicts, lists and scalars (a record's own ``to_dict`` where it
has one); ``build`` rebuilds one from such data, refusing an unknown key, a missing
required one or a value of the wrong type with a ValueError that names it
(``where``: the dotted path to it) and what is valid. A record's own rules (its
``__post_init__``) come back as ValueErrors under the same path.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, cast

__all__ = ["build", "fields", "obj", "plain", "value"]

_R = TypeVar("_R")


def fields(obj: Any) -> dict[str, Any]:
    """A record's fields as JSON-able data."""
    return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def plain(obj: Any) -> Any:
    """JSON-able data: records to dicts (a record's own ``to_dict``), tuples to lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        to_dict = getattr(obj, "to_dict", None)
        return to_dict() if to_dict is not None else fields(obj)
    if isinstance(obj, Mapping):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    return obj


def obj(data: object, where: str) -> dict[str, Any]:
    """``data`` as a dict, or a ValueError saying it is not an object."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: must be an object, not {type(data).__name__}")
    return dict(data)


def build(cls: type[_R], data: object, where: str, ready: tuple[str, ...] = ()) -> _R:
    """A ``cls`` from its fields' data (those named in ``ready`` already decoded)."""
    data = obj(data, where)
    hints = typing.get_type_hints(cls)
    declared = dataclasses.fields(cast(Any, cls))
    names = [f.name for f in declared]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; keys are {names}")
    missing = [f.name for f in declared if f.name not in data
               and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{where}: required keys {missing} missing; keys are {names}")
    args = {k: v if k in ready else value(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**args)
    except (TypeError, ValueError) as e:  # a rule of the record (its __post_init__)
        raise ValueError(f"{where}: {e}") from None


def value(tp: Any, v: Any, where: str) -> Any:
    """``v`` (decoded JSON) as type ``tp``: the inverse of ``plain``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return v
    if origin in (typing.Union, types.UnionType):
        return _union(typing.get_args(tp), v, where)
    if dataclasses.is_dataclass(tp):
        from_dict = getattr(tp, "from_dict", None)
        if from_dict is not None:
            return from_dict(v, where)
        return build(cast(type, tp), v, where)  # a type hint: a class, not an instance
    if origin is tuple:
        if not isinstance(v, list | tuple):
            raise ValueError(f"{where} = {v!r}: must be an array")
        item = typing.get_args(tp)[0]
        return tuple(value(item, x, f"{where}[{i}]") for i, x in enumerate(v))
    if origin in (Mapping, dict):
        if not isinstance(v, Mapping):
            raise ValueError(f"{where} = {v!r}: must be an object")
        kt, vt = typing.get_args(tp)
        # JSON object keys are strings: integer keys (peer ranks) come back as such.
        return {(int(k) if kt is int else str(k)): value(vt, x, f"{where}[{k}]")
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


def _union(args: tuple[Any, ...], v: Any, where: str) -> Any:
    options = [a for a in args if a is not type(None)]
    if v is None:
        if len(options) < len(args):
            return None
        raise ValueError(f"{where}: must not be null")
    if len(options) == 1:
        return value(options[0], v, where)
    if isinstance(v, Mapping):  # a record: the option whose fields it has (plain writes all)
        exact = [a for a in options if dataclasses.is_dataclass(a)
                 and {f.name for f in dataclasses.fields(a)} == set(v)]
        if len(exact) == 1:
            return value(exact[0], v, where)
    errors = []
    for a in options:
        try:
            return value(a, v, where)
        except ValueError as e:
            errors.append(str(e))
    raise ValueError("; ".join(errors))
