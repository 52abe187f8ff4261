"""The reproduction report seen in a browser: the committed example and a fresh report
load in headless Chromium with no console error, every image present."""

from __future__ import annotations

from pathlib import Path

from browser import open_pages

REPO = Path(__file__).resolve().parents[3]


def test_the_example_report_renders_cleanly():
    (page,) = open_pages([REPO / "results/reproduce-example/report.html"])
    assert page.title == "Reproducing the papers' claims"
    assert page.errors == () and page.failed_requests == ()
    assert page.images >= 4 and page.broken_images == ()


def test_a_fresh_report_renders_cleanly(tmp_path):
    from test_reproduce_report import _run

    out, _, _ = _run(tmp_path)
    (page,) = open_pages([out / "report.html"])
    # three claims with a plot; the one whose plot file is missing shows none, not a hole
    assert page.errors == () and page.images == 3
    assert page.broken_images == () and page.failed_requests == ()
