"""Opening pages in headless Chromium (Debian's, installed by scripts/setup.sh) through
Playwright: what loaded, what the console said, which images are missing."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
# No sandbox as root; no background traffic (this machine's network is closed).
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@dataclass(frozen=True)
class PageCheck:
    """What a page did when opened: its title, console errors and uncaught exceptions,
    requests that failed, and the images that did not load."""

    url: str
    title: str
    errors: tuple[str, ...]
    failed_requests: tuple[str, ...]
    broken_images: tuple[str, ...]
    images: int


def chromium() -> str:
    """The browser's path; AssertionError (not a skip) if set-up did not install it."""
    path = shutil.which(CHROMIUM) or shutil.which("chromium")
    assert path, ("Chromium is missing: `sudo make setup` installs Debian's chromium "
                  "for the browser tests")
    return path


def open_pages(paths: list[Path]) -> list[PageCheck]:
    """Open each file in one headless Chromium and report what each page did."""
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=ARGS)
        try:
            for path in paths:
                page = browser.new_page()
                errors: list[str] = []
                failed: list[str] = []
                page.on("console", lambda m, e=errors: e.append(m.text)
                        if m.type == "error" else None)
                page.on("pageerror", lambda exc, e=errors: e.append(str(exc)))
                page.on("requestfailed", lambda r, f=failed: f.append(r.url))
                url = path.resolve().as_uri()
                page.goto(url, wait_until="load")
                broken = page.evaluate(
                    "[...document.images].filter(i => !(i.complete && i.naturalWidth > 0))"
                    ".map(i => i.src)")
                images = page.evaluate("document.images.length")
                out.append(PageCheck(url, page.title(), tuple(errors), tuple(failed),
                                     tuple(broken), int(images)))
                page.close()
        finally:
            browser.close()
    return out
