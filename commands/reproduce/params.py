"""Checking a claim kind's parameters against a small schema (for `ClaimKind.check`).

A kind declares each parameter as a `Param` (its Python type(s), whether it is required,
and what is valid, in words and as a predicate); `check_params` raises `ClaimSpecError`
naming the key, the bad value and what is valid, and refuses unknown keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from commands.reproduce.claim import ClaimSpecError


def _any(value: object) -> bool:
    return True


@dataclass(frozen=True)
class Param:
    """One parameter: its type(s), what is valid (words and predicate), required or not."""

    types: type | tuple[type, ...]
    valid: str
    ok: Callable[[object], bool] = _any
    required: bool = True


def check_params(params: Mapping[str, object], schema: Mapping[str, Param]) -> None:
    """Raise `ClaimSpecError` on an unknown, missing, mistyped or invalid parameter."""
    for key in params:
        if key not in schema:
            raise ClaimSpecError(f"unknown parameter {key!r}: valid parameters are "
                                 f"{', '.join(schema)}")
    for key, p in schema.items():
        if key not in params:
            if p.required:
                raise ClaimSpecError(f"missing parameter {key!r} ({p.valid})")
            continue
        v = params[key]
        types = p.types if isinstance(p.types, tuple) else (p.types,)
        # a bool is an int to Python, never to a claim file
        if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
            raise ClaimSpecError(f"{key} = {v!r} is invalid: must be {p.valid}")
        if not p.ok(v):
            raise ClaimSpecError(f"{key} = {v!r} is invalid: must be {p.valid}")


def positive_int(v: object) -> bool:
    """An int > 0."""
    return isinstance(v, int) and v > 0


def positive(v: object) -> bool:
    """A number > 0."""
    return isinstance(v, int | float) and v > 0


def subset_of(valid: tuple[str, ...]) -> Callable[[object], bool]:
    """A non-empty list of distinct strings among ``valid``."""
    def ok(v: object) -> bool:
        return (isinstance(v, list) and bool(v) and len(set(v)) == len(v)
                and all(x in valid for x in v))
    return ok
