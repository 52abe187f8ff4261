"""The reproduction report: ``report.md`` and ``report.html`` from one list of blocks.

Both files render the same blocks (headings, paragraphs, key-value lists, tables,
images, verdicts, folds), so they say the same thing by construction. Per claim, what
decides it comes first: the claim as the paper states it, the verdict with its reason
(the comparison that decides it), the plots, the setting; the raw figures (the measured
figures' table in readable units, median, spread, repetitions, clock, and the claim's
own tables) are folded below (``<details>``). A claim whose run raised shows as failed
with its error and traceback file, never with a verdict.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from commands.reproduce.claim import Figure, Table
from commands.reproduce.summary import Header, Outcome

FIGURE_COLUMNS = ("figure", "system", "median", "spread", "unit", "clock", "n")
_BADGE = {"holds": "#1a7f37", "holds in direction": "#9a6700",
          "does not hold here": "#cf222e", "failed": "#6e7781"}


@dataclass(frozen=True)
class Block:
    """One piece of the report: ``kind`` is h1, h2, h3, p, kv, table, img, verdict, fold
    (a folded section starts: ``text`` is its summary line) or endfold."""

    kind: str
    text: str = ""
    items: tuple[tuple[str, str], ...] = ()  # kv
    table: Table | None = None
    src: str = ""  # img: a path relative to the report


def num(x: object) -> str:
    """A measured number, to three significant digits or so."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    a = abs(x)
    if a >= 100 or (isinstance(x, int) and a >= 1):
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


# Units a figure is shown in, largest first, by the unit it is measured in: a value is
# shown in the largest unit it reaches (0.0000313 s reads "31.3 us").
_SCALES = {"s": (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)),
           "B": (("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1.0)),
           "bytes": (("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1.0))}


def readable_unit(values: Sequence[float], unit: str) -> tuple[str, float]:
    """The unit to show ``values`` (measured in ``unit``) in, and the divisor: chosen
    by their median so a row's median and spread share one unit."""
    scales = _SCALES.get(unit)
    finite = sorted(abs(v) for v in values if isinstance(v, int | float) and math.isfinite(v))
    if not scales or not finite:
        return unit, 1.0
    mid = finite[len(finite) // 2]
    for name, div in scales:
        if mid >= div:
            return name, div
    return scales[-1]


def figure_table(figures: Sequence[Figure]) -> Table:
    """The measured figures as one table, in readable units: median and spread, unit,
    clock, repetitions."""
    rows = []
    for f in figures:
        unit, div = readable_unit((f.median, f.lo, f.hi), f.unit)
        rows.append((f.name, f.system or "-", num(f.median / div),
                     f"{num(f.lo / div)} - {num(f.hi / div)}", unit, f.clock, f.n))
    rows_t = tuple(rows)
    return Table("Measured figures (median and spread over the repetitions)",
                 FIGURE_COLUMNS, rows_t)


def _hms(s: float) -> str:
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec:02d} s" if m else f"{s:.1f} s"


def blocks(header: Header, outcomes: Sequence[Outcome]) -> list[Block]:
    """The whole report as blocks (rendered by `markdown` and `to_html`)."""
    out = [Block("h1", "Reproducing the papers' claims"),
           Block("p", "Each claim ran on this machine, with its baselines in the same run, "
                      "repeated and interleaved; figures are medians with their spread. "
                      "Verdicts: holds; holds in direction (smaller than claimed); does not "
                      "hold here; failed (the run raised: no verdict).")]
    scales = [f"{o.spec.id}: {o.time_scale}" for o in outcomes if o.time_scale]
    out.append(Block("kv", items=(
        ("started (UTC)", header.started), ("command", header.command),
        ("machine", f"Linux {header.kernel}, {header.cores} cores"),
        ("netem", header.netem), ("git commit", header.commit),
        ("mode", "quick" if header.quick else "full"),
        ("time scale", "; ".join(scales) if scales else "no claim ran on an emulated clock"),
        ("total wall time", _hms(header.wall_s)))))
    out.append(Block("table", table=Table(
        "Verdicts", ("claim", "paper", "title", "verdict", "wall time"),
        tuple((o.spec.id, o.spec.paper, o.spec.title, o.result.verdict, _hms(o.wall_s))
              for o in outcomes))))
    for o in outcomes:
        out.extend(claim_blocks(o))
    return out


def claim_blocks(o: Outcome) -> list[Block]:
    """One claim's section."""
    s, r = o.spec, o.result
    out = [Block("h2", f"{s.paper}: {s.title} ({s.id})"),
           Block("p", f"The claim: {s.statement}")]
    if r.verdict == "failed":
        msg = f"The run failed: {r.error or r.reason}"
        if o.traceback:
            msg += f" (traceback: {s.id}/{o.traceback})"
        out.append(Block("verdict", "failed", items=(("reason", msg),)))
    else:
        out.append(Block("verdict", r.verdict, items=(("reason", r.reason),)))
    out.extend(Block("img", text=p, src=f"{s.id}/{p}") for p in r.plots)
    if r.setting:
        out.append(Block("p", f"Setting: {r.setting}"))
    raw = ([Block("table", table=figure_table(r.figures))] if r.figures else []) + [
        Block("table", table=t) for t in r.tables]
    if raw:
        rows = sum(len(b.table.rows) for b in raw if b.table is not None)
        out += [Block("fold", f"Raw figures ({len(raw)} tables, {rows} rows)"), *raw,
                Block("endfold")]
    out.append(Block("p", f"Wall time: {_hms(o.wall_s)}."))
    return out


def _md_cell(x: object) -> str:
    return num(x).replace("|", "\\|").replace("\n", " ")


def markdown(bl: Sequence[Block]) -> str:
    """Render blocks as Markdown."""
    lines: list[str] = []
    for b in bl:
        if b.kind in ("h1", "h2", "h3"):
            lines += ["#" * int(b.kind[1]) + " " + b.text, ""]
        elif b.kind == "p":
            lines += [b.text, ""]
        elif b.kind == "kv":
            lines += [f"- **{k}**: {v}" for k, v in b.items] + [""]
        elif b.kind == "table" and b.table is not None:
            t = b.table
            lines += [f"**{t.title}**", "", "| " + " | ".join(t.columns) + " |",
                      "|" + "---|" * len(t.columns)]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
            lines.append("")
        elif b.kind == "img":
            lines += [f"![{b.text}]({b.src})", ""]
        elif b.kind == "verdict":
            lines += [f"**Verdict: {b.text}.** {b.items[0][1]}", ""]
        elif b.kind == "fold":
            lines += ["<details>", f"<summary>{html.escape(b.text)}</summary>", ""]
        elif b.kind == "endfold":
            lines += ["</details>", ""]
    return "\n".join(lines)


def to_html(bl: Sequence[Block], title: str = "Reproducing the papers' claims") -> str:
    """Render blocks as one self-contained HTML page (plots by relative path)."""
    e = html.escape
    body: list[str] = []
    for b in bl:
        if b.kind in ("h1", "h2", "h3"):
            body.append(f"<{b.kind}>{e(b.text)}</{b.kind}>")
        elif b.kind == "p":
            body.append(f"<p>{e(b.text)}</p>")
        elif b.kind == "kv":
            body.append("<ul>" + "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>"
                                         for k, v in b.items) + "</ul>")
        elif b.kind == "table" and b.table is not None:
            t = b.table
            head = "".join(f"<th>{e(c)}</th>" for c in t.columns)
            rows = "".join("<tr>" + "".join(f"<td>{e(num(c))}</td>" for c in row) + "</tr>"
                           for row in t.rows)
            body.append(f"<table><caption>{e(t.title)}</caption><thead><tr>{head}</tr>"
                        f"</thead><tbody>{rows}</tbody></table>")
        elif b.kind == "img":
            body.append(f'<p><img src="{e(b.src)}" alt="{e(b.text)}"></p>')
        elif b.kind == "verdict":
            color = _BADGE.get(b.text, "#000")
            body.append(f'<p class="verdict"><b style="color:{color}">Verdict: '
                        f"{e(b.text)}.</b> {e(b.items[0][1])}</p>")
        elif b.kind == "fold":
            body.append(f"<details><summary>{e(b.text)}</summary>")
        elif b.kind == "endfold":
            body.append("</details>")
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}"
             "table{border-collapse:collapse;margin:1em 0}caption{font-weight:bold;"
             "text-align:left}td,th{border:1px solid #ccc;padding:.2em .5em}"
             "img{max-width:100%}summary{cursor:pointer;color:#555;margin:1em 0}"
             "p.verdict{font-size:1.1em}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{e(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")
