"""The report generator on recorded results: tables, plots, summary.json round trip,
report.md / report.html content, and a claim whose run raised shown as failed."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from commands.reproduce import report, summary
from commands.reproduce.claim import ClaimContext, ClaimResult, ClaimSpec, Figure, Table, Verdict
from commands.reproduce.plots import bars
from commands.reproduce.run import TRACEBACK, run_claims

INFO = {"kernel": "6.1.0-test", "cores": 2, "netem": "yes (probe)", "commit": "abc123"}
FIG = Figure("goodput over ideal", "mrc", "fraction", "dimensionless", 0.95, 0.9, 0.98, 3)
FIG_RC = Figure("goodput over ideal", "rc", "fraction", "dimensionless", 0.3, 0.25, 0.33, 3)


def _spec(cid: str, kind: str) -> ClaimSpec:
    return ClaimSpec(id=cid, paper="MRC", title=f"title of {cid}",
                     statement=f"statement of {cid}", kind=kind, repetitions=3,
                     params={"a": 1}, quick={"a": 0})


@dataclass
class FakeKind:
    """A kind whose run returns ``verdict`` (with a plot), raises, or breaks the contract."""

    name: str
    verdict: Verdict = "holds"
    raise_error: bool = False
    missing_plot: bool = False
    seen_quick: bool | None = None

    def check(self, params: Mapping[str, object]) -> None:
        pass

    def run(self, spec: ClaimSpec, ctx: ClaimContext) -> ClaimResult:
        self.seen_quick = ctx.quick
        ctx.say("measuring")
        if self.raise_error:
            raise RuntimeError("fabric exploded at rep 2")
        plots: tuple[str, ...] = ("missing.png",)
        if not self.missing_plot:
            plots = (bars(ctx.out_dir / "plot.png", "t", "fraction",
                          [("perm", (FIG, FIG_RC))], refs=(("ideal", 1.0),)),)
        return ClaimResult("wrong-id", self.verdict, f"reason of {spec.id}",
                           f"setting of {spec.id}", (FIG, FIG_RC),
                           (Table("per rep", ("rep", "x"), ((0, 1.5), (1, "a|b"))),),
                           plots, {"time_scale": "5 Mbit/s stand for 100 Gbit/s"})


def _run(tmp_path: Path) -> tuple[Path, dict[str, FakeKind], list[str]]:
    kinds = {"ok": FakeKind("ok"), "weak": FakeKind("weak", "holds in direction"),
             "boom": FakeKind("boom", raise_error=True),
             "noplot": FakeKind("noplot", missing_plot=True),
             "selffail": FakeKind("selffail", "failed")}
    specs = [_spec(k, k) for k in kinds]
    said: list[str] = []
    out = tmp_path / "rep"
    run_claims(specs, kinds, out, quick=True, command="emu reproduce --quick",
               say=said.append, info=INFO)
    return out, kinds, said


def test_summary_round_trip_and_verdicts(tmp_path: Path) -> None:
    out, kinds, said = _run(tmp_path)
    assert all(k.seen_quick is True for k in kinds.values())
    doc = json.loads((out / "summary.json").read_text())
    assert doc["verdicts"] == {"ok": "holds", "weak": "holds in direction", "boom": "failed",
                               "noplot": "failed", "selffail": "failed"}
    header, outcomes = summary.read(out / "summary.json")
    assert (header.kernel, header.cores, header.commit, header.quick) == \
        ("6.1.0-test", 2, "abc123", True)
    ok = outcomes[0]
    assert ok.result.claim_id == "ok"  # the framework's id, not the claim's
    assert ok.result.figures == (FIG, FIG_RC)
    assert ok.result.tables[0].rows == ((0, 1.5), (1, "a|b"))
    assert ok.result.plots == ("plot.png",) and (out / "ok" / "plot.png").stat().st_size > 1000
    assert ok.spec == _spec("ok", "ok")
    boom = outcomes[2]
    assert boom.result.error == "RuntimeError: fabric exploded at rep 2"
    assert boom.traceback == TRACEBACK
    assert "fabric exploded" in (out / "boom" / TRACEBACK).read_text()
    assert "were not written" in outcomes[3].result.error
    assert outcomes[4].result.error == "reason of selffail"  # failed always carries an error
    assert "  boom: measuring" in said and any("boom: failed" in s for s in said)
    # the report re-rendered from the summary is the report written
    bl = report.blocks(header, outcomes)
    assert report.markdown(bl) == (out / "report.md").read_text()
    assert report.to_html(bl) == (out / "report.html").read_text()


def test_report_md_content(tmp_path: Path) -> None:
    out, _, _ = _run(tmp_path)
    md = (out / "report.md").read_text()
    assert "- **machine**: Linux 6.1.0-test, 2 cores" in md
    assert "- **netem**: yes (probe)" in md and "- **git commit**: abc123" in md
    assert "- **time scale**: ok: 5 Mbit/s stand for 100 Gbit/s" in md
    assert "- **mode**: quick" in md
    assert "| ok | MRC | title of ok | holds |" in md
    assert "| boom | MRC | title of boom | failed |" in md
    ok = md.split("## MRC: title of ok (ok)")[1].split("## ")[0]
    assert "The claim: statement of ok" in ok and "Setting: setting of ok" in ok
    assert "**Verdict: holds.** reason of ok" in ok
    assert "| goodput over ideal | mrc | 0.95 | 0.9 - 0.98 | fraction | dimensionless | 3 |" in ok
    assert "| 1 | a\\|b |" in ok  # a pipe inside a cell is escaped
    assert "![plot.png](ok/plot.png)" in ok
    boom = md.split("## MRC: title of boom (boom)")[1].split("## ")[0]
    assert ("**Verdict: failed.** The run failed: RuntimeError: fabric exploded at rep 2 "
            "(traceback: boom/traceback.txt)") in boom
    assert not re.search(r"Verdict: (holds|does not hold)", boom)  # never a verdict
    assert "Measured figures" not in boom


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.imgs: list[str] = []
        self.cells: list[str] = []
        self.text: list[str] = []
        self._td = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.imgs.append(dict(attrs)["src"] or "")
        self._td = tag in ("td", "th")

    def handle_endtag(self, tag: str) -> None:
        self._td = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._td:
            self.cells.append(data)


def test_report_html_has_the_same_content(tmp_path: Path) -> None:
    out, _, _ = _run(tmp_path)
    p = _Collect()
    p.feed((out / "report.html").read_text())
    assert p.imgs == ["ok/plot.png", "weak/plot.png", "selffail/plot.png"]
    assert all((out / src).is_file() for src in p.imgs)  # relative to the report
    assert ["goodput over ideal", "mrc", "0.95", "0.9 - 0.98", "fraction", "dimensionless",
            "3"] == p.cells[p.cells.index("goodput over ideal"):][:7]
    text = "".join(p.text)
    assert "Verdict: holds in direction." in text and "a|b" in text
    assert "The run failed: RuntimeError: fabric exploded at rep 2" in text


def test_number_formatting() -> None:
    assert [report.num(x) for x in (1234.5, 12.34, 1.234, 0.01234, 7, True, "x")] == \
        ["1,234", "12.3", "1.23", "0.0123", "7", "True", "x"]


def test_each_claim_leads_with_its_verdict_and_plot_and_folds_the_raw_figures(
        tmp_path: Path) -> None:
    out, _, _ = _run(tmp_path)
    for name in ("report.md", "report.html"):
        text = (out / name).read_text()
        ok = text.split("title of ok (ok)")[1].split("title of weak")[0]
        verdict = ok.index("Verdict: holds.")
        plot = ok.index("ok/plot.png")
        fold = ok.index("<details>")
        assert verdict < plot < fold < ok.index("Measured figures") < ok.index("</details>")
        assert "Raw figures (2 tables, 4 rows)" in ok


def test_figures_are_shown_in_readable_units() -> None:
    fig = Figure("round latency", "dblp", "s", "emulated", 3.13e-05, 2.9e-05, 4.1e-05, 12)
    big = Figure("gradient", "-", "B", "full-scale", 2.5e9, 2.4e9, 2.6e9, 3)
    rows = report.figure_table((fig, big)).rows
    assert rows[0][2:5] == ("31.3", "29.0 - 41.0", "us")
    assert rows[1][2:5] == ("2.50", "2.40 - 2.60", "GB")
    assert report.readable_unit((0.5, 0.4), "fraction") == ("fraction", 1.0)
