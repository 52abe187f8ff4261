"""MkDocs hooks (mkdocs.yml ``hooks:``): the reference pages, generated from the code at
build time, and root files included into pages, so no page copies what the code states.

Generated pages (added to the site's files before the navigation is read):

* ``reference/cli.md``: ``emu ... --help`` of every command, from commands.cli.build_parser;
* ``reference/experiment-file.md``: workloads/experiment's reference docstring, its key
  tables (tables.py) with the defaults of the dataclasses that own them (config.py), and
  every failure verb a timeline may use (emu.failure_kinds' registry);
* ``reference/sweep-file.md``: commands/sweep's reference docstring and sweepfile.py's keys;
* ``reference/claim-file.md``: commands/reproduce/spec.py's reference, and each claim
  kind's parameters (its module's SCHEMA, registered in kinds.py);
* ``reference/explore-file.md``: explorer/specfile.py's docstring and describe_keys().

Includes: a line ``<!-- include: PATH -->`` in a page (PATH relative to the repository,
``demote`` after it to push every heading one level down) is replaced by that file, its
links to ``docs/...`` made relative to the page. docs/benchmarks.md includes BENCHMARKS.md
this way, and the security page SECURITY.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import posixpath
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ("reference/cli.md", "reference/experiment-file.md", "reference/sweep-file.md",
             "reference/claim-file.md", "reference/explore-file.md")
INCLUDE = re.compile(r"^<!-- include: (\S+)( demote)? -->$", re.MULTILINE)
HELP_COLUMNS = "100"  # argparse wraps --help to the terminal: a fixed width for the page


def _code_path() -> None:
    """This tree's packages first: the pages document the code they are built with."""
    root = str(ROOT)
    if sys.path[:1] != [root]:
        sys.path.insert(0, root)


# --------------------------------------------------------------------------------------
# MkDocs events
# --------------------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    """Add the generated reference pages (before the navigation reads the files)."""
    from mkdocs.structure.files import File

    _code_path()
    for uri, make in zip(GENERATED, (cli_page, experiment_page, sweep_page, claim_page,
                                     explore_page), strict=True):
        files.append(File.generated(config, uri, content=make()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace ``<!-- include: PATH -->`` lines by the file's content."""
    def include(m: re.Match[str]) -> str:
        path = ROOT / m.group(1)
        text = path.read_text(encoding="utf-8")
        if m.group(2):
            text = re.sub(r"^(#+) ", r"#\1 ", text, flags=re.MULTILINE)
        return relink(text, page.file.src_uri)
    return INCLUDE.sub(include, markdown)


def relink(text: str, page_uri: str) -> str:
    """Links to ``docs/X`` (right from the repository root) made relative to the page."""
    here = posixpath.dirname(page_uri) or "."

    def fix(m: re.Match[str]) -> str:
        return f"]({posixpath.relpath(m.group(1), here)})"
    return re.sub(r"\]\(docs/([^)\s]+)\)", fix, text)


# --------------------------------------------------------------------------------------
# Docstrings to Markdown
# --------------------------------------------------------------------------------------


def docstring_md(doc: str, code_lang: str = "toml") -> str:
    """A module docstring (reStructuredText habits) as Markdown: ``x`` and :role:`x` as
    code, a paragraph ending in ``::`` followed by its indented block as a fenced block."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            out.append(_inline(line.rstrip()[:-1]))
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            out += ["", f"```{code_lang}", textwrap.dedent("\n".join(block)).strip("\n"),
                    "```", ""]
            continue
        out.append(_inline(line))
        i += 1
    return "\n".join(out).strip() + "\n"


def _inline(line: str) -> str:
    line = re.sub(r":(?:class|func|mod|meth|attr|data):`~?([^`]+)`", r"`\1`", line)
    return line.replace("``", "`")


def _value(v: object) -> str:
    """A default as a TOML file writes it."""
    if v is dataclasses.MISSING or v is inspect.Parameter.empty:
        return "*required*"
    if v is None:
        return "(none)"
    return f"`{_toml(v)}`"


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(v)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


GENERATED_NOTE = ("*Generated when the site is built, from {src}: it cannot drift from the "
                  "code. Edit the code, not this page.*\n")


# --------------------------------------------------------------------------------------
# emu --help
# --------------------------------------------------------------------------------------


def cli_page() -> str:
    """Every command's ``--help``, in the order ``emu --help`` lists them."""
    import argparse

    from commands.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parts = ["# `emu` command line\n",
                 GENERATED_NOTE.format(src="`commands.cli.build_parser`"),
                 "Every command that builds a fabric runs as root. "
                 "What each command is for: [Commands](../commands.md).\n"]

        def walk(parser: argparse.ArgumentParser, level: int) -> None:
            parts.append(f"{'#' * level} `{parser.prog}`\n")
            parts.append("```text\n" + parser.format_help().rstrip() + "\n```\n")
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    for sub in dict.fromkeys(action.choices.values()):
                        walk(sub, min(level + 1, 3))
        walk(build_parser(), 2)
        return "\n".join(parts)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


# --------------------------------------------------------------------------------------
# Experiment files
# --------------------------------------------------------------------------------------


def _default(key: str, *classes: type) -> object:
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.name == key:
                if f.default is not dataclasses.MISSING:
                    return f.default
                if f.default_factory is not dataclasses.MISSING:
                    return f.default_factory()
                return dataclasses.MISSING
    return None


def experiment_page() -> str:
    import workloads.experiment as ex
    from emu.failure_kinds.registry import VOCABULARY
    from workloads.experiment import reference, schema

    parts = ["# Experiment files\n",
             GENERATED_NOTE.format(src="`workloads/experiment/schema.py` (every key's default, "
                                   "rule and meaning, read off the dataclasses that own "
                                   "them), the package's docstring and the failure-kind "
                                   "registry (the timeline verbs)"),
             "`emu run FILE` runs one; `emu sweep` runs a grid of them; `emu run --keys` "
             "prints the table below. "
             "A tutorial: [first experiment](../tutorial/first-experiment.md).\n",
             "## The file\n",
             docstring_md(ex.__doc__ or ""),
             "## Keys, their defaults, values and meaning\n",
             "Each default is the one the loader fills in; *required* keys have none. "
             "A transport's own settings are its table, `[transport.<name>]`.\n"]
    groups: dict[str, list[tuple[str, ...]]] = {}
    for k in reference.keys():
        head, _, _ = k.path.rpartition(".")
        title = "top level" if not head else f"[{head}]"
        if head.startswith("transport.") and head.count(".") >= 1:
            title = f"[{head.split('.')[0]}.{head.split('.')[1]}]"
        default = k.default if k.default == schema.REQUIRED else _value(k.default)
        groups.setdefault(title, []).append((f"`{k.path}`", str(default), _cell(k.rule),
                                             _cell(k.doc)))
    for title, rows in groups.items():
        parts += [f"### {title}\n", _table(("key", "default", "values", "what it is"), rows)]
    parts += ["## Timeline verbs\n",
              "What an `[[event]]` table's `do`, a TOML timeline or a Python timeline may "
              "fire, with its arguments (from each failure kind's fields). "
              "`restore` undoes an earlier event. "
              "How to add one: [Add a failure kind](../howto/add-a-failure-kind.md).\n"]
    rows = []
    for name in sorted(VOCABULARY):
        verb = VOCABULARY[name]
        args = "; ".join(
            f"`{p.name}`: {p.what}" + ("" if p.required else f" (default {_value(p.default)})")
            for p in verb.params)
        doc = inspect.getdoc(verb.cls) or ""
        first = doc.split("\n\n")[0]
        rows.append((f"`{name}`", args, _inline(first)))
    parts.append(_table(("verb", "arguments", "what it does"), rows))
    return "\n".join(parts)


# --------------------------------------------------------------------------------------
# Sweep files
# --------------------------------------------------------------------------------------


def sweep_page() -> str:
    import commands.sweep as sweep
    from commands.sweep import sweepfile

    return "\n".join([
        "# Sweep files\n",
        GENERATED_NOTE.format(src="`commands/sweep/__init__.py` and `sweepfile.py`"),
        "`emu sweep FILE` runs one; [Sweeps](../concepts/sweeps.md) says how. "
        "A tutorial: [first sweep](../tutorial/first-sweep.md).\n",
        docstring_md(sweep.__doc__ or ""),
        "## Keys, their defaults, values and meaning\n",
        "From `sweepfile.KEYS`, the table the reader takes its keys and rules from "
        "(`emu sweep --keys` prints it).\n",
        _table(("key", "default", "values", "what it is"), [
            (f"`{k.path}`", str(k.default if k.default == sweepfile.REQUIRED
                                else _value(k.default)), _cell(k.rule), _cell(k.doc))
            for k in sweepfile.KEYS]),
    ])


# --------------------------------------------------------------------------------------
# Claim files
# --------------------------------------------------------------------------------------


def claim_page() -> str:
    import tomllib

    from commands.reproduce import spec
    from commands.reproduce.kinds import KINDS

    shipped: dict[str, list[str]] = {}
    for path in spec.claim_files():
        with path.open("rb") as f:
            kind = tomllib.load(f).get("kind", "?")
        shipped.setdefault(kind, []).append(f"`experiments/reproduce/{path.name}`")
    parts = ["# Claim files\n",
             GENERATED_NOTE.format(src="`commands/reproduce/spec.py` and each claim kind's "
                                   "`SCHEMA` (registered in `commands/reproduce/kinds.py`)"),
             "`emu reproduce` runs them; [Reproducing the claims](../concepts/reproduce.md) "
             "says how they are judged. "
             "How to add one: [Add a claim](../howto/add-a-claim.md).\n",
             docstring_md(spec.__doc__ or ""),
             _table(("what", "value"), [
                 ("papers", ", ".join(f"`{p}`" for p in spec.PAPERS)),
                 ("repetitions, at least", f"`{spec.MIN_REPETITIONS}`"),
                 ("kinds", ", ".join(f"`{k}`" for k in KINDS)),
             ]),
             "## Parameters of each kind\n",
             "A claim file's `[params]` (and `[quick]`) are checked against its kind's "
             "schema before anything runs.\n"]
    for name, kind in KINDS.items():
        module = importlib.import_module(type(kind).__module__)
        schema = getattr(module, "SCHEMA", {})
        files = ", ".join(shipped.get(name, [])) or "none"
        parts += [f"### `{name}`\n",
                  f"Module `{module.__name__}`; needs root: "
                  f"{'yes' if kind.needs_root else 'no'}; shipped claim files: {files}.\n"]
        rows = []
        for key, p in schema.items():
            types = p.types if isinstance(p.types, tuple) else (p.types,)
            rows.append((f"`{key}`", _toml_type(types),
                         "yes" if p.required else "no", p.valid))
        parts.append(_table(("parameter", "type", "required", "what is valid"), rows))
    return "\n".join(parts)


_TOML_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string",
               list: "array", dict: "table"}


def _toml_type(types: tuple[type, ...]) -> str:
    """A parameter's Python types as a TOML file writes them (int or float: a number)."""
    if set(types) == {int, float}:
        return "number"
    return " or ".join(_TOML_TYPES.get(t, t.__name__) for t in types)


# --------------------------------------------------------------------------------------
# Explore files
# --------------------------------------------------------------------------------------


def explore_page() -> str:
    from explorer import specfile

    parts = ["# Explore files\n",
             GENERATED_NOTE.format(src="`explorer/specfile.py` (`describe_keys`, the output "
                                   "of `emu explore --keys`)"),
             "`emu explore FILE` searches one; [The explorer](../concepts/explorer.md) says "
             "what it models. "
             "A tutorial: [first projection](../tutorial/first-projection.md).\n",
             docstring_md(specfile.__doc__ or ""),
             "## Every key\n",
             "Each line: the key, what is valid, its default, what it means. "
             "Any key may be given a list: the list is a search axis.\n"]
    section = ""
    body: list[str] = []

    def flush() -> None:
        if section:
            parts.extend([f"### `[{section}]`\n", "```text", *body, "```\n"])
    for line in specfile.describe_keys().splitlines():
        m = re.fullmatch(r"\[(\S+)\]", line.strip())
        if m:
            flush()
            section, body = m.group(1), []
        else:
            body.append(line[2:] if line.startswith("  ") else line)
    flush()
    return "\n".join(parts)


def on_post_build(config: Any) -> None:
    """The search index as a script too, as the site read from disk (file://) loads it."""
    index = Path(config.site_dir) / "search" / "search_index.json"
    if index.is_file():
        (index.parent / "search_index.js").write_text(
            "var __index = " + index.read_text(encoding="utf-8"), encoding="utf-8")
