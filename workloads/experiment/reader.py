"""A generic typed reader of TOML tables whose every error names the file and the key path.

``Table(where, "workload", data, keys)`` refuses unknown keys at once; its getters check
a key's type and bounds and return its value or the default. Numbers are checked by
topologies.validate (the one numeric validator), so a bound reads the same here as in
a topology's own error. Every error is an :class:`~emu.errors.EmuError` of the form
``<where>: workload.batch_size = 30 is invalid: <rule>``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, NoReturn

from emu.errors import EmuError
from topologies.validate import InvalidValue, check_int, check_number, int_rule, number_rule
from transports.core.knobs import field_spec

__all__ = ["REQUIRED", "Table", "type_name"]

# The default of a key that must be given (``None`` is a default: "absent means None").
REQUIRED: Any = object()


def type_name(value: object) -> str:
    """What a TOML value is, in words (``a string``, ``a table``)."""
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)


class Table:
    """One TOML table being read: typed getters that name ``path.key`` in every error."""

    def __init__(self, where: str, path: str, data: object, keys: tuple[str, ...]) -> None:
        self.where, self.path = where, path
        if not isinstance(data, Mapping):
            self.fail("", f"must be a table, not {type_name(data)}", data)
        self.data: Mapping[str, Any] = data
        unknown = [k for k in data if k not in keys]
        if unknown:
            here = f"[{path}]" if path else "the top level"
            raise EmuError(f"{where}: unknown key {self.key(unknown[0])!r} in {here}; "
                           f"valid keys: {', '.join(keys)}")

    def key(self, name: str) -> str:
        """The dotted key path of ``name`` in this table."""
        return f"{self.path}.{name}" if self.path and name else (name or self.path)

    def fail(self, name: str, rule: str, value: object = REQUIRED) -> NoReturn:
        """EmuError: ``<where>: <key> = <value> is invalid: <rule>``."""
        shown = "" if value is REQUIRED else f" = {value!r}"
        raise EmuError(f"{self.where}: {self.key(name)}{shown} is invalid: {rule}")

    def has(self, name: str) -> bool:
        return name in self.data

    def _get(self, name: str, default: Any, what: str) -> Any:
        if name in self.data:
            return self.data[name]
        if default is REQUIRED:
            raise EmuError(f"{self.where}: {self.key(name)} is required ({what})")
        return default

    def get_int(self, name: str, default: Any = REQUIRED, lo: int = 0,
                hi: int | None = None) -> Any:
        """An integer in [lo, hi] (``default`` None: None when absent)."""
        v = self._get(name, default, int_rule(lo, hi))
        if v is None and default is None:
            return None
        try:
            return check_int(name, v, lo, hi)
        except InvalidValue as e:
            self.fail(name, f"must be {e.rule}", v)

    def get_number(self, name: str, default: Any = REQUIRED, lo: float = 0.0,
                   hi: float | None = None, lo_open: bool = False,
                   hi_open: bool = False) -> Any:
        """A finite number within the bounds, as a float (``default`` None: None when
        absent)."""
        v = self._get(name, default, number_rule(lo, hi, lo_open=lo_open, hi_open=hi_open))
        if v is None and default is None:
            return None
        try:
            return check_number(name, v, lo, hi, lo_open=lo_open, hi_open=hi_open)
        except InvalidValue as e:
            self.fail(name, f"must be {e.rule}", v)

    def get_str(self, name: str, default: Any = REQUIRED, choices: tuple[str, ...] | None = None,
                pattern: re.Pattern[str] | None = None, what: str = "") -> Any:
        """A string, one of ``choices`` or matching ``pattern`` (described by ``what``)."""
        rule = what or ("one of " + ", ".join(repr(c) for c in choices) if choices
                        else "a string")
        v = self._get(name, default, rule)
        if v is default and default is None:
            return None
        if not isinstance(v, str) or (choices is not None and v not in choices) or (
                pattern is not None and not pattern.fullmatch(v)):
            self.fail(name, f"must be {rule}", v)
        return v

    def get_bool(self, name: str, default: Any = REQUIRED) -> Any:
        v = self._get(name, default, "true or false")
        if not isinstance(v, bool):
            self.fail(name, "must be true or false", v)
        return v

    def get_field(self, cls: type, name: str, default: Any = REQUIRED) -> Any:
        """Key ``name`` as field ``name`` of the table dataclass ``cls`` takes it: its
        default (``default`` overrides it) and its rule from the field's knob
        (transports/core/knobs.py), None when absent and the field may be unset."""
        tp, optional, k = field_spec(cls, name)
        assert k is not None, f"{cls.__name__}.{name} is not a knob"
        if default is REQUIRED:
            f = next(f for f in dataclasses.fields(cls) if f.name == name)
            default = REQUIRED if f.default is dataclasses.MISSING else f.default
        rule = k.rule(tp)
        v = self._get(name, default, rule)
        if v is None and optional:
            return None
        try:
            return k.check(name, v, tp)
        except InvalidValue as e:
            self.fail(name, f"must be {e.rule}", v)

    def get_strs(self, name: str, default: Any = REQUIRED) -> Any:
        """An array of strings, as a tuple (``default`` None: None when absent)."""
        v = self._get(name, default, "an array of strings")
        if v is default and default is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.fail(name, "must be an array of strings", v)
        return tuple(v)

    def table(self, name: str, keys: tuple[str, ...]) -> Table:
        """The sub-table ``name`` (an empty one if absent)."""
        return Table(self.where, self.key(name), self.data.get(name, {}), keys)

    def refuse(self, name: str, why: str) -> None:
        """A key that is known but not allowed in this combination."""
        if name in self.data:
            self.fail(name, f"not allowed {why}", self.data[name])
