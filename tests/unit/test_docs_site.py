"""The docs site seen in a browser: built with --strict into a temporary directory, every
page opened in headless Chromium (browser.py): it loads with a title, its console shows
no error, no request fails, and every image is present. The reference pages come from
the code when the site is built, so they are checked against the code here too."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from browser import PageCheck, open_pages

REPO = Path(__file__).resolve().parents[2]


def _nav_pages(nav: list) -> list[str]:
    out: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "-f", str(REPO / "mkdocs.yml"), "-d", str(out)],
        cwd=REPO, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    return out


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def test_every_page_of_the_nav_is_built(site: Path) -> None:
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    pages = _nav_pages(nav)
    assert len(pages) == len(set(pages)) >= 30
    missing = [p for p in pages if not (site / p).with_suffix(".html").is_file()]
    assert not missing, f"in the nav but not built: {missing}"


def test_every_page_loads_cleanly_in_chromium(site: Path) -> None:
    # 404.html is what a web server sends for a missing URL: its links are absolute
    # (from the site's root) by design, so it cannot load from a directory on disk.
    pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html")
    checks = open_pages(pages)
    assert len(checks) == len(pages) >= 30

    def problems(c: PageCheck) -> list[str]:
        return ([] if c.title else ["no title"]) + [f"console: {e}" for e in c.errors] + [
            f"request failed: {u}" for u in c.failed_requests] + [
            f"image missing: {u}" for u in c.broken_images]
    bad = {c.url: problems(c) for c in checks if problems(c)}
    assert not bad, bad
    by_page = {Path(c.url).name: c for c in checks}
    assert by_page["index.html"].images >= 1  # the demo's picture


def test_the_readme_picture_is_committed_and_shown_on_the_home_page(site: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert pictures and all((REPO / p).is_file() for p in pictures)
    index = (site / "index.html").read_text(encoding="utf-8")
    assert all(Path(p).name in index for p in pictures)


def test_reference_pages_are_generated_from_the_code(site: Path) -> None:
    from commands.cli import build_parser
    from commands.reproduce.kinds import KINDS
    from explorer.spec import SECTIONS
    from workloads.experiment import tables

    cli = _text(site / "reference/cli.html")
    parser = build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and a.choices)
    assert all(f"emu {name}" in cli for name in sub.choices)
    experiment = _text(site / "reference/experiment-file.html")
    for section, keys in (("fabric", tables.FABRIC), ("workload", tables.WORKLOAD),
                          ("transport.dblp", tables.DBLP)):
        assert all(f"{section}.{k}" in experiment for k in keys)
    assert "fail_busiest_uplink" in experiment and "microburst" in experiment
    claims = _text(site / "reference/claim-file.html")
    assert all(kind in claims for kind in KINDS)
    explore = _text(site / "reference/explore-file.html")
    assert all(f"[{section}]" in explore for section in SECTIONS)


def test_benchmarks_page_is_benchmarks_md(site: Path) -> None:
    """docs/benchmarks.md includes BENCHMARKS.md: one source, no second copy."""
    page = _text(site / "benchmarks.html")
    source = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    headings = [h.replace("`", "") for h in re.findall(r"^## (.+)$", source, re.MULTILINE)]
    assert len(headings) >= 12 and all(h in page for h in headings)
    assert "include:" not in page
