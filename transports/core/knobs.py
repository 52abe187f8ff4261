"""Transport settings declared as data: each field of a settings dataclass says the values it
takes, and one checker reads that.

A settings class (``MrcConfig``, ``RcConfig``, ``NsccConfig``, ...) is a frozen dataclass
whose fields are ``knob(default, lo=..., hi=..., choices=...)``; its ``__post_init__``
calls :func:`check_knobs`, which checks each field's type (from its annotation: int,
float, bool, str, or one of them or None) and bounds, and turns an int given for a float
field into a float. A bad value raises :class:`~topologies.validate.InvalidValue` naming
the field, the value and the rule (``rto_max=-1 is invalid: must be a finite number >
0``), the same numeric rules and wording as the topologies' (topologies/validate.py).
Rules that tie fields together (``rto_min <= rto_max``) stay in the class.

:func:`settings_from` is how files set them: a base instance with the keys of a mapping
replaced; an unknown key raises :class:`UnknownKey` naming it and listing the valid ones,
a nested settings dataclass (``MrcConfig.nscc``) takes a nested mapping, and errors name
the dotted key (``nscc.eta``). :func:`describe` lists every knob with its default and
rule (for documentation and ``--keys``-style listings).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from topologies.validate import InvalidValue, check_int, check_number, int_rule, number_rule

__all__ = ["DOC", "Knob", "UnknownKey", "check_knobs", "describe", "documented", "field_doc",
           "field_spec", "knob", "settings_from"]

_KNOB = "knob"  # the dataclass field metadata key
DOC = "doc"  # the metadata key of what a field is, in words
_S = TypeVar("_S")


@dataclass(frozen=True)
class Knob:
    """What one settings field takes besides its type: numeric bounds (``lo_open`` /
    ``hi_open`` make them exclusive) or a set of strings."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[str, ...] | None = None

    def rule(self, tp: type) -> str:
        """What the field takes, in words (``an integer in [1, 8840]``)."""
        if tp is bool:
            return "true or false"
        if tp is str:
            if self.choices is not None:
                return "one of " + ", ".join(repr(c) for c in self.choices)
            return "a string"
        if tp is int:
            return int_rule(int(self.lo if self.lo is not None else 0),
                            None if self.hi is None else int(self.hi))
        return number_rule(self.lo if self.lo is not None else float("-inf"), self.hi,
                           lo_open=self.lo_open, hi_open=self.hi_open)

    def check(self, name: str, value: object, tp: type) -> object:
        """``value`` as the field keeps it; InvalidValue otherwise."""
        if tp is bool:
            if not isinstance(value, bool):
                raise InvalidValue(name, value, self.rule(tp))
            return value
        if tp is str:
            if not isinstance(value, str) or (self.choices is not None
                                              and value not in self.choices):
                raise InvalidValue(name, value, self.rule(tp))
            return value
        if tp is int:
            return check_int(name, value, int(self.lo if self.lo is not None else 0),
                             None if self.hi is None else int(self.hi))
        lo = self.lo if self.lo is not None else float("-inf")
        return check_number(name, value, lo, self.hi, lo_open=self.lo_open, hi_open=self.hi_open)


def knob(default: Any = dataclasses.MISSING, *, lo: float | None = None,
         hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
         choices: tuple[str, ...] | None = None, doc: str = "") -> Any:
    """A settings field: its default (none: a required field), the values it takes (see
    ``Knob``) and, for the reference pages and ``--keys`` listings, what it is (``doc``)."""
    return dataclasses.field(default=default, metadata={
        _KNOB: Knob(lo, hi, lo_open, hi_open, choices), DOC: doc})


def documented(default: Any = dataclasses.MISSING, *, doc: str) -> Any:
    """A field that is no knob (its values are checked elsewhere, e.g. by a topology
    dataclass) but says what it is (``doc``)."""
    return dataclasses.field(default=default, metadata={DOC: doc})


def field_spec(cls: type, name: str) -> tuple[type, bool, Knob | None]:
    """Field ``name`` of settings class ``cls``: its base type, whether None is allowed,
    and its knob (None: not a knob)."""
    for fname, tp, optional, k in _class_fields(cls):
        if fname == name:
            return tp, optional, k
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def field_doc(cls: type, name: str) -> str:
    """What field ``name`` of dataclass ``cls`` is, as its ``doc`` metadata says ("")."""
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    return "" if f is None else str(f.metadata.get(DOC, ""))



class UnknownKey(ValueError):
    """A key that names no field of a settings class; ``key`` is its dotted path and
    ``valid`` the fields of the class it was given to."""

    def __init__(self, key: str, valid: tuple[str, ...]) -> None:
        listed = ", ".join(valid) if valid else "none (it has no settings)"
        super().__init__(f"unknown key {key!r}; valid keys: {listed}")
        self.key, self.valid = key, valid


def _fields(obj: object) -> tuple[tuple[str, type, bool, Knob | None], ...]:
    """``_class_fields`` of ``obj``'s class."""
    return _class_fields(type(obj))  # type: ignore[arg-type]  # a class is hashable


@functools.cache
def _class_fields(cls: type) -> tuple[tuple[str, type, bool, Knob | None], ...]:
    """Per field of settings class ``cls``: name, base type, whether None is allowed, and
    its knob (None: not a knob, e.g. a nested settings dataclass)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp: Any = hints[f.name]
        optional = False
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = len(args) < len(typing.get_args(tp))
            tp = args[0] if len(args) == 1 else tp
        out.append((f.name, tp, optional, f.metadata.get(_KNOB)))
    return tuple(out)


def check_knobs(obj: object) -> None:
    """Check every knob of settings instance ``obj`` (see the module docstring); an int
    given for a float field is kept as a float."""
    for name, tp, optional, k in _fields(obj):
        if k is None:
            continue
        value = getattr(obj, name)
        if value is None and optional:
            continue
        try:
            checked = k.check(name, value, tp)
        except InvalidValue as e:
            if optional:  # say that the field may also be left unset
                raise InvalidValue(name, value, f"{e.rule} (or unset: None)") from None
            raise
        if checked is not value and type(checked) is not type(value):
            object.__setattr__(obj, name, checked)


def settings_from(base: _S, data: Mapping[str, Any]) -> _S:
    """``base`` (a settings instance) with the fields ``data`` names replaced, checked by
    its class: UnknownKey for a key that is no field, InvalidValue naming the dotted key
    for a bad value (a nested settings dataclass takes a mapping)."""
    cls = type(base)
    names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    changes: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            raise UnknownKey(key, names)
        current = getattr(base, key)
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            if not isinstance(value, Mapping):
                raise InvalidValue(key, value, f"a table of {type(current).__name__} keys")
            try:
                changes[key] = settings_from(current, value)
            except UnknownKey as e:
                raise UnknownKey(f"{key}.{e.key}", e.valid) from None
            except InvalidValue as e:
                raise InvalidValue(f"{key}.{e.name}", e.value, e.rule) from None
        else:
            changes[key] = value
    return dataclasses.replace(base, **changes)  # type: ignore[type-var]


def describe(settings: object, prefix: str = "") -> list[tuple[str, object, str]]:
    """Every knob of settings instance ``settings``: (dotted key, its value there, rule),
    nested settings included."""
    out: list[tuple[str, object, str]] = []
    for name, tp, optional, k in _fields(settings):
        value = getattr(settings, name)
        if k is None:
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                out.extend(describe(value, f"{prefix}{name}."))
            continue
        rule = k.rule(tp) + (" (or unset: None)" if optional else "")
        out.append((f"{prefix}{name}", value, rule))
    return out
