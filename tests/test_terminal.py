"""What a person sees: tables and progress on a terminal (captured in a pseudo-terminal), one
number format, and names from a trace made inert for terminals, Markdown and HTML."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pyarrow as pa
import pytest
from runfixture import tiny_meta, tiny_tables

from analyzers.report.document import Heading, Paragraph, Table, Timeline
from analyzers.report.render_html import _TIMELINE_JS, render_html
from analyzers.report.render_markdown import render_markdown as render_report_md
from mtia_trace.cli.output import render_markdown, render_table
from mtia_trace.escape import md_code, script_json, terminal
from mtia_trace.storage import write_run

ROOT = Path(__file__).resolve().parent.parent
SGR_BOLD = "\x1b[1m"
#: A name that attacks a terminal: OSC 52 (write the clipboard), CSI 2K (clear the line), a
#: carriage return that overwrites the line, a bidi override.
HOSTILE_SQL = ("chr(27) || ']52;c;aGk=' || chr(7) || 'op' || chr(27) || '[2K' || chr(13) "
               "|| 'PASS' || chr(8238) || 'txt'")


def run_in_pty(argv: list[str], env: dict[str, str] | None = None, cols: int = 100
               ) -> tuple[int, str]:
    """(exit code, everything written) of ``argv`` with stdin, stdout and stderr on a pty."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    full = {**os.environ, "COLUMNS": str(cols), "TERM": "xterm-256color",
            "PYTHONPATH": str(ROOT), **(env or {})}
    full.pop("NO_COLOR", None) if "NO_COLOR" not in (env or {}) else None
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=full,
                            close_fds=True, cwd=ROOT)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), out.decode(errors="replace")


def _cli(*args: object) -> list[str]:
    return [sys.executable, "-c", "import sys; from mtia_trace.cli import main; "
            "sys.exit(main())", *map(str, args)]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("runs") / "tiny"
    write_run(tiny_tables(), d, tiny_meta())
    return d


# ---- colour on a terminal, plain elsewhere --------------------------------------------------

def test_table_is_coloured_on_a_terminal_and_plain_when_piped(run_dir: Path, cli) -> None:
    sql = "SELECT rank, avg(total_us) AS total_us FROM steps GROUP BY rank ORDER BY rank"
    code, out = run_in_pty(_cli("query", run_dir, sql))
    assert code == 0 and SGR_BOLD in out and "total_us" in out
    code, piped, _ = cli("query", run_dir, sql)
    assert code == 0 and "\x1b" not in piped


def test_no_color_is_honoured(run_dir: Path) -> None:
    sql = "SELECT rank FROM steps"
    code, out = run_in_pty(_cli("query", run_dir, sql), env={"NO_COLOR": "1"})
    assert code == 0 and "\x1b[1m" not in out and "rank" in out, out


# ---- progress -------------------------------------------------------------------------------

PROGRESS_SCRIPT = """
import sys, time
from mtia_trace.progress import Progress
with Progress("replay") as p:
    p("ingesting trace.json")
    time.sleep(1.3)
    sys.stderr.write("mtia-trace: warning: something odd\\n")
    p("scheduling")
    time.sleep(0.3)
print("done")
"""


def test_progress_ticks_and_prints_warnings_above_the_line() -> None:
    code, out = run_in_pty([sys.executable, "-c", PROGRESS_SCRIPT])
    assert code == 0
    # the elapsed time keeps ticking inside one stage (rich re-renders with a new time)
    assert "0:00:01" in out and "ingesting trace.json" in out
    # the warning starts a line of its own (not glued to the progress line)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    lines = re.split(r"[\r\n]+", plain)
    assert any(line.startswith("mtia-trace: warning: something odd") for line in lines), lines
    assert plain.rstrip().endswith("done")


def test_no_progress_when_stderr_is_not_a_terminal() -> None:
    proc = subprocess.run([sys.executable, "-c", PROGRESS_SCRIPT], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.stderr == "mtia-trace: warning: something odd\n"


# ---- names from a trace on a terminal -------------------------------------------------------

@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_escape_sequences_in_names_reach_the_terminal_escaped(run_dir: Path, fmt: str) -> None:
    code, out = run_in_pty(_cli("query", run_dir, f"SELECT {HOSTILE_SQL} AS name",
                                "--format", fmt))
    assert code == 0
    assert "\x1b]52" not in out and "\x1b[2K" not in out.split("name")[-1]
    assert "\u202e" not in out and "\x07" not in out and "\rPASS" not in out
    shown = out.replace("\\\\", "\\")
    assert ("\\u001b]52" if fmt == "json" else "\\x1b]52") in shown and "\\u202e" in shown


def test_terminal_escapes_controls_and_bidi() -> None:
    assert terminal("a\x1b[2Kb\x9b\x7f\u202e\u2066\tc\n") == "a\\x1b[2Kb\\x9b\\x7f\\u202e\\u2066\tc\n"
    assert terminal("a\tb\nc", cells=True) == "a\\x09b\\x0ac"


# ---- one number format ----------------------------------------------------------------------

def test_durations_bytes_and_noise_in_one_format() -> None:
    t = pa.table({"name": ["a", "b"], "step_us": [13_320_000.0, 13_340_000.5],
                  "bytes": [1.07e7, 106_496.0], "gain_us": [2.794e-09, 355.5]})
    out = render_table(t, width=None, styled=False)
    assert "step_s" in out and "13.32" in out and "13,320,000" not in out
    assert "10.7 MB" in out and "106.5 kB" in out and "e+07" not in out
    assert "e-09" not in out and "2.794" not in out
    # one column, one number of decimals: the decimal points line up
    rows = out.splitlines()[2:]
    assert len({r.index(".", r.index("13.3")) for r in rows}) == 1


def test_a_wide_table_fits_the_terminal() -> None:
    t = pa.table({"step": ["1", "2"], **{f"col_{i:02d}_us": [1.5 * i, 2.5 * i]
                                          for i in range(20)}})
    out = render_table(t, width=80, styled=False)
    assert max(map(len, out.splitlines())) <= 80
    assert out.count("step") >= 2  # the key column repeats in every part
    assert all(f"col_{i:02d}" in out for i in range(20))


# ---- Markdown -------------------------------------------------------------------------------

HOSTILE = ["x\n## injected", "y\r# injected", "<img src=x onerror=alert(1)>",
           "<details><summary>s</summary>", "[click](https://evil.example)", "a|b", "`tick`",
           "k" * 300]


def test_markdown_tables_keep_hostile_names_inert() -> None:
    md = render_markdown(pa.table({"name": HOSTILE, "busy_us": [1.0] * len(HOSTILE)}))
    lines = md.splitlines()
    assert len(lines) == 2 + len(HOSTILE)
    assert all(line.startswith("|") and line.endswith("|") for line in lines)
    raw = re.sub(r"\\.", "", md)  # what is left once backslash escapes are taken out
    assert "<" not in raw and ">" not in raw and "](" not in raw
    assert all(line.count(" | ") == 1 for line in lines[2:])  # two cells each


def test_report_markdown_headings_paragraphs_and_cells_are_inert() -> None:
    md = render_report_md([Heading(1, "report: run\n## injected <b>x</b>"),
                           Paragraph("op " + md_code("a`b\r# x")),
                           Table(["op"], [["<img src=x>"], ["k" * 500]])])
    assert not any(line.startswith("## injected") or line.startswith("# x")
                   for line in md.splitlines())
    raw = re.sub(r"\\.", "", md)
    assert "<" not in raw and ">" not in raw
    assert max(map(len, md.splitlines())) < 120  # long names clipped in tables


def test_md_code_holds_any_backticks() -> None:
    assert md_code("a`b") == "``a`b``"
    assert md_code("`x`") == "`` `x` ``"


# ---- HTML -----------------------------------------------------------------------------------

def test_embedded_json_cannot_end_the_script() -> None:
    name = "<!--<script>&amp;</script>"
    data = {"rows": [name], "name": [name], "start": [0.0], "dur": [1.0], "row": [0],
            "kind": ["host"], "critical": [False], "colors": {}, "span": 1.0, "scale": 1.0,
            "unit": "us", "step": 1}
    page = render_html([Heading(1, "r"), Timeline("t", data), Heading(2, "after")], title="t")
    body = re.search(r'<script type="application/json">(.*?)</script>', page, re.S)
    assert body is not None
    assert not set("<>&") & set(body.group(1))
    assert json.loads(body.group(1))["name"] == [name]
    assert "<h2>after</h2>" in page
    assert json.loads(script_json(json.dumps({"a": "<&>"}))) == {"a": "<&>"}


def test_timeline_zoom_moves_rectangles_instead_of_rebuilding_them() -> None:
    draw = _TIMELINE_JS[_TIMELINE_JS.index("function draw()"):]
    draw = draw[:draw.index("function at(")]
    assert "createElementNS" not in draw and "textContent=''" not in draw
    assert "requestAnimationFrame" in _TIMELINE_JS
