"""Benchmark: wheel zoom in the HTML report's interactive timeline, in a real browser.

    python benchmarks/bench_html_zoom.py [REPORT.html] [--chromium /usr/bin/chromium] [--wheels 30]

Without REPORT.html it replays the MTIA training trace under ../shared/traces/real/hta (when
present, else the bundled 2-rank sample) on mtia300 and writes its HTML report first. In headless
Chromium (driven by Playwright; neither is a project dependency: `pip install playwright` and a
system Chromium, else the script says so and exits 0) it measures, for each of ``--wheels`` wheel
events over the timeline, the time from the event to the second animation frame after it (the
zoom's redraw is painted by then), and the same two-frame wait with no event (the reference,
measured in the same page). Printed: rectangles in the timeline, median and worst zoom frame, the
median idle frame, and their ratio. A zoom that rebuilds the SVG costs many frames on a large
trace; one that moves the rectangles it made costs about one idle frame.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MTIA = ROOT.parent / "shared" / "traces" / "real" / "hta" / "mtia_trace_single_rank"
SAMPLE = ROOT / "sample_traces" / "synth" / "dcnv2_train_2rank"

_FRAME_JS = """(dy) => new Promise(res => {
    const svg = document.querySelector("svg[data-ready='1']");
    const r = svg.getBoundingClientRect();
    const t0 = performance.now();
    if (dy !== 0) svg.dispatchEvent(new WheelEvent('wheel', {deltaY: dy, bubbles: true,
        cancelable: true, clientX: r.left + r.width * 0.6, clientY: r.top + 20}));
    requestAnimationFrame(() => requestAnimationFrame(() => res(performance.now() - t0)));
})"""


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-c", "import sys; from mtia_trace.cli import main; "
                    "sys.exit(main())", *args], check=True, stdout=subprocess.DEVNULL)


def _report(tmp: Path) -> Path:
    trace = MTIA if MTIA.is_dir() else SAMPLE
    print(f"replaying {trace.name} on mtia300 and writing its HTML report", file=sys.stderr)
    _cli("replay", str(trace), "--hw", "mtia300", "-o", str(tmp / "runs"), "-q")
    out = tmp / "report.html"
    _cli("report", str(tmp / "runs"), "--format", "html", "-o", str(out), "-q")
    return out


def measure(html: Path, chromium: str, wheels: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(html.resolve().as_uri())
        page.wait_for_selector("svg[data-ready='1']", timeout=60_000)
        rects = page.evaluate("document.querySelector(\"svg[data-ready='1']\")"
                              ".querySelectorAll('rect').length")
        idle, zoom = [], []
        for k in range(wheels):  # interleaved: an idle frame pair, then a zoom
            idle.append(page.evaluate(_FRAME_JS, 0))
            zoom.append(page.evaluate(_FRAME_JS, -100 if k < wheels // 2 else 100))
        browser.close()
    return {"rects": rects, "zoom_median_ms": statistics.median(zoom), "zoom_max_ms": max(zoom),
            "idle_median_ms": statistics.median(idle)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", nargs="?", type=Path)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--wheels", type=int, default=30)
    a = ap.parse_args(argv)
    try:
        import playwright  # noqa: F401
    except ImportError:
        print("skipped: Playwright is not installed (pip install playwright)")
        return 0
    if not Path(a.chromium).is_file():
        print(f"skipped: no Chromium at {a.chromium} (pass --chromium PATH)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        html = a.report or _report(Path(tmp))
        m = measure(html, a.chromium, a.wheels)
    print(f"timeline rectangles: {m['rects']:,}")
    print(f"wheel zoom to painted frame: median {m['zoom_median_ms']:.1f} ms, "
          f"worst {m['zoom_max_ms']:.1f} ms")
    print(f"idle two-frame wait (reference): median {m['idle_median_ms']:.1f} ms")
    print(f"zoom / idle: {m['zoom_median_ms'] / m['idle_median_ms']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
