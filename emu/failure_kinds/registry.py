"""The timeline vocabulary: which failure kind a verb (``fail_link``, ...) names.

A kind joins the vocabulary with a class decorator::

    @register("fail_link")
    @dataclass(frozen=True)
    class LinkDown(FailureKind):
        kind: ClassVar[str] = "link_down"
        link: str

Its arguments, their defaults and their types come from the class's signature (the
dataclass fields), or from a classmethod named by ``via`` when the kind is built from
plainer values than it holds (``microburst``'s arguments make a MicroburstSpec). The
types must be ones a TOML file can write: ``str``, ``int``, ``float``, ``bool``, a
``list``/``tuple`` of those, unions of them and ``None``; ``Annotated[str, "a host
name"]`` gives error messages a better description. That one signature is all the
timeline parser (emu.timeline_parse: TOML files, an experiment's ``[[event]]``) and
timeline scripts check arguments against.
"""

from __future__ import annotations

import inspect
import math
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, TypeVar, Union, get_args, get_origin, get_type_hints

from emu.errors import EmuError
from emu.failure_kinds.base import Failure

Check = Callable[[object], bool]
K = TypeVar("K", bound=type)

RESERVED = ("restore", "at", "at_step")  # the other words of a timeline


@dataclass(frozen=True)
class Param:
    """One argument of a verb: its name, default (``inspect.Parameter.empty``: required),
    what it must be (for messages: "a string") and the check of a value."""

    name: str
    default: object
    what: str
    accepts: Check

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty


@dataclass(frozen=True)
class Verb:
    """A timeline verb: calling it checks the arguments and builds the failure."""

    name: str
    cls: type
    make: Callable[..., Failure]
    params: tuple[Param, ...]

    def __call__(self, *args: object, **kwargs: object) -> Failure:
        try:
            bound = inspect.signature(self.make).bind(*args, **kwargs)
        except TypeError as e:
            raise EmuError(f"{self.name}: {e} (arguments: {self.usage()})") from None
        by_name = {p.name: p for p in self.params}
        for name, value in bound.arguments.items():
            p = by_name[name]
            if not p.accepts(value):
                raise EmuError(f"{self.name}: {name} = {value!r} is invalid: must be {p.what}")
        return self.make(*bound.args, **bound.kwargs)

    def usage(self) -> str:
        """``link`` or ``link, period_s, duty=0.5``: the arguments as a script writes them."""
        return ", ".join(p.name if p.required else f"{p.name}={p.default!r}"
                         for p in self.params)


_VERBS: dict[str, Verb] = {}


def register(name: str, via: str | None = None) -> Callable[[K], K]:
    """Class decorator: the class is the failure kind of timeline verb ``name``.

    ``via``: a classmethod building the kind from the timeline's arguments (default: the
    class itself). Raises ValueError for a name already taken (by another class), a
    reserved word, or an argument a timeline could not write.
    """
    if not name.isidentifier() or name in RESERVED:
        raise ValueError(f"verb {name!r}: must be an identifier, not one of {RESERVED}")

    def decorate(cls: K) -> K:
        make = getattr(cls, via) if via is not None else cls
        old = _VERBS.get(name)
        if old is not None and old.cls.__qualname__ != cls.__qualname__:
            raise ValueError(f"verb {name!r} is already {old.cls.__qualname__}")
        _VERBS[name] = Verb(name, cls, make, _params(name, make))
        return cls

    return decorate


def unregister(name: str) -> None:
    """Remove verb ``name`` (tests register kinds of their own)."""
    _VERBS.pop(name, None)


def verb(name: str) -> Verb:
    """The verb ``name``; KeyError if no kind registered it."""
    return _VERBS[name]


class _Vocabulary(Mapping[str, Verb]):
    """Every registered verb by name, as registered now (a live view)."""

    def __getitem__(self, name: str) -> Verb:
        return _VERBS[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_VERBS)

    def __len__(self) -> int:
        return len(_VERBS)


VOCABULARY: Mapping[str, Verb] = _Vocabulary()


# -- argument types, from annotations --------------------------------------------------------


def _params(name: str, make: Callable[..., object]) -> tuple[Param, ...]:
    sig = inspect.signature(make)
    # A class's hints are its fields' (and its bases'); a function's, its parameters'.
    hints = get_type_hints(make, include_extras=True)
    out = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"verb {name!r}: *{p.name} cannot be written in a timeline")
        if p.name not in hints:
            raise ValueError(f"verb {name!r}: argument {p.name!r} needs a type annotation")
        try:
            what, ok = describe_type(hints[p.name])
        except TypeError as e:
            raise ValueError(f"verb {name!r}: argument {p.name!r}: {e}") from None
        out.append(Param(p.name, p.default, what, ok))
    return tuple(out)


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


_SCALARS: dict[object, tuple[str, str, Check]] = {  # type -> (a ..., plural, check)
    str: ("a string", "strings", lambda v: isinstance(v, str)),
    int: ("an integer", "integers", lambda v: type(v) is int),
    float: ("a number", "numbers", _number),
    bool: ("true or false", "booleans", lambda v: type(v) is bool),
}


def describe_type(hint: object) -> tuple[str, Check]:
    """(what a value of type ``hint`` must be, in words; its check). TypeError for a type
    a timeline cannot write."""
    origin = get_origin(hint)
    if origin is Annotated:
        base, *meta = get_args(hint)
        what, ok = describe_type(base)
        return (next((m for m in meta if isinstance(m, str)), what), ok)
    if hint in _SCALARS:
        what, _, ok = _SCALARS[hint]
        return what, ok
    if origin in (Union, types.UnionType):
        members = [m for m in get_args(hint) if m is not type(None)]
        parts = [describe_type(m) for m in members]
        whats = list(dict.fromkeys(w for w, _ in parts))
        checks = [ok for _, ok in parts]
        none_ok = len(members) < len(get_args(hint))
        return (" or ".join(whats),
                lambda v: (none_ok and v is None) or any(ok(v) for ok in checks))
    if origin in (list, tuple, Sequence):
        args = [a for a in get_args(hint) if a is not Ellipsis]
        if len(set(args)) != 1 or args[0] not in _SCALARS:
            raise TypeError(f"{hint!r}: only arrays of one scalar type can be written")
        _, plural, ok = _SCALARS[args[0]]
        return (f"an array of {plural}",
                lambda v: isinstance(v, list | tuple) and all(ok(x) for x in v))
    raise TypeError(f"{hint!r} cannot be written in a timeline (use str, int, float, bool "
                    "or arrays of them)")
