"""The HTML report is one self-contained file that headless Chromium renders without errors."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import report_sample
from PIL import Image

from analyzers.report.build import build_report
from analyzers.report.render_html import render_html
from analyzers.report.run_data import load_run

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
requires_browser = pytest.mark.skipif(
    BROWSER is None, reason="no headless Chromium on PATH (install the Debian package `chromium`)")


@pytest.fixture(scope="module")
def html(tmp_path_factory: pytest.TempPathFactory) -> str:
    run_dir = report_sample.write_run(report_sample.build_run(),
                                      tmp_path_factory.mktemp("runs") / "sample")
    run = load_run(run_dir)
    return render_html(build_report(run), title="mtia-trace report: sample")


def _render(page: Path, tmp: Path) -> tuple[np.ndarray, list[str]]:
    """Screenshot of ``page`` and the browser's console messages."""
    shot = tmp / f"{page.stem}.png"
    proc = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr", "--v=0",
         f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()],
        capture_output=True, text=True, timeout=300)
    assert shot.is_file(), f"no screenshot; chromium said: {proc.stderr[-2000:]}"
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return np.asarray(Image.open(shot).convert("RGB")), console


def test_self_contained(html: str) -> None:
    # no external resources of any kind: every src/href is a data: URI or an in-page anchor
    refs = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert refs and all(r.startswith("data:") or r.startswith("#") for r in refs)
    # scripts only inline (the interactive timeline), never loaded from anywhere
    assert "<script src" not in html and "@import" not in html and "url(" not in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html
    figures = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    # attribution bars, busy vs exposed; the step itself once, as the interactive timeline
    assert len(figures) == 2 and html.count('<script type="application/json">') == 1
    for data in figures:
        img = Image.open(io.BytesIO(base64.b64decode(data)))
        assert img.format == "PNG" and img.width > 300 and img.height > 150


@requires_browser
def test_chromium_renders_it_without_console_errors(html: str, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(html)
    pixels, console = _render(page, tmp_path)
    assert console == []
    # not blank: a real share of the page is ink, in many colours (text, tables, figures)
    ink = (pixels < 200).any(axis=2).mean()
    colours = len(np.unique(pixels.reshape(-1, 3)[::7], axis=0))
    assert ink > 0.03, f"screenshot looks blank ({ink:.1%} non-white)"
    assert colours > 50


@requires_browser
def test_console_check_catches_a_broken_page(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>no_such_function()</script>")
    _, console = _render(page, tmp_path)
    assert any("no_such_function" in line for line in console)


@requires_browser
def test_interactive_timeline_draws_in_the_browser(html: str, tmp_path: Path) -> None:
    """After its script ran, the embedded timeline has one rectangle per embedded event."""
    page = tmp_path / "report.html"
    page.write_text(html)
    proc = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=300)
    dom = proc.stdout
    data = re.search(r'<script type="application/json">(.*?)</script>', html, re.S)
    assert data is not None
    events = len(__import__("json").loads(data.group(1))["start"])
    assert 'data-ready="1"' in dom  # the script ran to the end and bound its handlers
    assert dom.count("<rect") == events > 0
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
