"""Timeline scripts: Python defining ``timeline``, read without running it when it only
declares events.

A script sees the vocabulary (every registered verb, its arguments checked against the
failure kind's signature), ``at``, ``at_step`` and ``restore``. Most scripts only
declare::

    cut = fail_link("p0l0-p0s1")
    timeline = [at(2.0, cut), at(4.0, restore(cut))]

Such a script is evaluated from its syntax tree: assignments to names of calls of those
words, names assigned before, lists and tuples, numbers (with + - * /), strings, True,
False and None. None of the script's code runs, so validating an experiment that names
it runs nothing, and reading it is bounded: the file's size (``emu.safefs``), the
syntax tree's size, every number's magnitude and the time spent. A script that does
more (a loop, an import, a function of its own) can only be read by running it:
``read_script(path, run=True)`` runs it, as the user's own code when they asked for a
run; ``run=False`` raises :class:`NeedsRun` naming the first statement that needs it.
"""

from __future__ import annotations

import ast
import math
import operator
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path

from emu import safefs
from emu.errors import EmuError
from emu.failure_kinds.registry import VOCABULARY
from emu.timeline_events import Event, Timeline, at, at_step, restore


class NeedsRun(EmuError):
    """A timeline script that does more than declare events: only running it reads it."""


class _NotDeclared(Exception):
    def __init__(self, node: ast.AST, what: str) -> None:
        super().__init__(what)
        self.line, self.what = getattr(node, "lineno", 0), what


def words() -> dict[str, Callable[..., object]]:
    """What a script can call: every verb registered now, ``at``, ``at_step``, ``restore``."""
    return {**VOCABULARY, "at": at, "at_step": at_step, "restore": restore}


def read_script(path: Path, run: bool) -> Timeline:
    """The timeline script ``path`` defines (see the module docstring for ``run``)."""
    try:
        text = safefs.read_input(path, "timeline")
        tree = ast.parse(text, str(path))
    except UnicodeDecodeError as e:
        raise EmuError(f"{path}: not a text file: {e}") from None
    except SyntaxError as e:
        raise EmuError(f"{path}, line {e.lineno}: invalid Python: {e.msg}") from None
    scope = words()
    try:
        events = _declared(tree, scope, path)
    except _NotDeclared as nd:
        if not run:
            raise NeedsRun(f"{path}, line {nd.line}: {nd.what} makes this script more than "
                           "declarations of events: it is read by running it, which only "
                           "a run does") from None
        events = _run(path, text, scope)
    if not isinstance(events, list | tuple) or not all(isinstance(e, Event) for e in events):
        raise EmuError(f"{path}: must define `timeline = [at(t, ...), ...]` (or "
                       "`at_step(k, ...)`)")
    return Timeline(tuple(events))


def _run(path: Path, text: str, scope: Mapping[str, object]) -> object:
    ns: dict[str, object] = {"__name__": "timeline", **scope}
    try:
        exec(compile(text, str(path), "exec"), ns)  # noqa: S102 - the user's script, for a run
    except EmuError as e:
        raise EmuError(f"{path}{_line(e, path)}: {e}") from None
    except Exception as e:  # noqa: BLE001 - user code: report where it failed, no traceback
        raise EmuError(f"{path}{_line(e, path)}: {type(e).__name__}: {e}") from None
    return ns.get("timeline")


def _line(e: BaseException, path: Path) -> str:
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == str(path)]
    return f", line {lines[-1]}" if lines else ""


_STATEMENTS = {ast.For: "a loop", ast.While: "a loop", ast.Import: "an import",
               ast.ImportFrom: "an import", ast.FunctionDef: "a function definition",
               ast.If: "an if statement", ast.With: "a with statement"}
_ARITHMETIC: dict[type, Callable[[object, object], object]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv}


# Bounds of reading declarations: no timeline needs a number beyond a year of seconds
# or a step count this large, nor a tree this big, nor this long to read.
MAX_NUMBER = 1e12
MAX_NODES = 100_000
MAX_READ_S = 5.0


def _declared(tree: ast.Module, scope: Mapping[str, Callable[..., object]],
              path: Path) -> object:
    """What ``timeline`` is bound to, evaluating declarations only (else _NotDeclared)."""
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES:
        raise EmuError(f"{path}: {nodes:,} syntax nodes: a timeline script of declarations "
                       f"has at most {MAX_NODES:,}")
    deadline = time.monotonic() + MAX_READ_S
    env: dict[str, object] = {}
    for stmt in tree.body:
        if time.monotonic() > deadline:
            raise EmuError(f"{path}, line {stmt.lineno}: still reading its declarations after "
                           f"{MAX_READ_S:g} s: a timeline this costly to read is refused")
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and \
                isinstance(stmt.value.value, str):
            continue  # a docstring
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            value = _eval(stmt.value, env, scope, path)
            for target in stmt.targets:
                assert isinstance(target, ast.Name)  # checked above
                env[target.id] = value
            continue
        raise _NotDeclared(stmt, _STATEMENTS.get(type(stmt), f"a {type(stmt).__name__} "
                                                             "statement"))
    return env.get("timeline")


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _eval(node: ast.expr, env: Mapping[str, object],
          scope: Mapping[str, Callable[..., object]], path: Path) -> object:
    if isinstance(node, ast.Constant) and (node.value is None or
                                           isinstance(node.value, int | float | str)):
        return node.value
    if isinstance(node, ast.List | ast.Tuple) and \
            not any(isinstance(e, ast.Starred) for e in node.elts):
        items = [_eval(e, env, scope, path) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _eval(node.operand, env, scope, path)
        if _number(v):
            return -v if isinstance(node.op, ast.USub) else v  # type: ignore[operator]
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        a, b = _eval(node.left, env, scope, path), _eval(node.right, env, scope, path)
        if _number(a) and _number(b) and not (isinstance(node.op, ast.Div) and b == 0):
            v = _ARITHMETIC[type(node.op)](a, b)
            assert isinstance(v, int | float)  # numbers in, a number out
            if not math.isfinite(v) or abs(v) > MAX_NUMBER:
                raise EmuError(f"{path}, line {node.lineno}: {ast.unparse(node)!r} is "
                               f"beyond +-{MAX_NUMBER:g}: no timeline needs such a number")
            return v
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id in scope and node.func.id not in env and \
            not any(isinstance(a, ast.Starred) for a in node.args) and \
            all(k.arg is not None for k in node.keywords):
        args = [_eval(a, env, scope, path) for a in node.args]
        kwargs = {str(k.arg): _eval(k.value, env, scope, path) for k in node.keywords}
        try:
            return scope[node.func.id](*args, **kwargs)
        except (EmuError, TypeError, ValueError) as e:
            raise EmuError(f"{path}, line {node.lineno}: {e}") from None
    raise _NotDeclared(node, f"{ast.unparse(node)!r}")
