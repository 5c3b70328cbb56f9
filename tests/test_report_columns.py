"""A report reads only the events columns it uses: the analyzers' (`analyzers.EVENT_COLUMNS`) for
them, its own (`event_columns.REPORT`) for the rest, and says the same as from the whole table.
The report command's process allocates Arrow memory from the system allocator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import report_sample
from runfixture import tiny_meta, tiny_tables

from analyzers import ANALYZERS, EVENT_COLUMNS
from analyzers.report import event_columns
from analyzers.report.build import build_report, report_dict
from analyzers.report.render_html import render_html
from analyzers.report.render_markdown import render_markdown
from analyzers.report.run_data import load_run
from mtia_trace import storage
from mtia_trace.runs import connect

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> storage.Run:
    return storage.write_run(tiny_tables(), tmp_path_factory.mktemp("runs") / "tiny", tiny_meta())


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return report_sample.write_run(report_sample.build_run(),
                                   tmp_path_factory.mktemp("runs") / "sample")


def _analyses(run: storage.Run, events: pa.Table) -> dict[str, pa.Table]:
    tables = {t: run.read(t) for t in storage.TABLES if t != "events"}
    con = connect([run], loaded=[{**tables, "events": events}])
    try:
        return {name: a.run(con) for name, a in ANALYZERS.items()}
    finally:
        con.close()


def test_the_analyzers_need_only_their_columns(tiny: storage.Run) -> None:
    # GIVEN the tiny run's events, whole and with the analyzers' columns only
    whole = _analyses(tiny, tiny.read("events"))
    # WHEN every analyzer runs over the columns it declares
    narrow = _analyses(tiny, tiny.read("events", EVENT_COLUMNS))
    # THEN each returns the same table
    for name, table in whole.items():
        assert table.num_rows > 0 and narrow[name].equals(table), name


@pytest.mark.parametrize("column", EVENT_COLUMNS)
def test_each_analyzer_column_is_read(tiny: storage.Run, column: str) -> None:
    # GIVEN the analyzers' columns but one  WHEN they run  THEN a query fails to bind: the
    # list names no column the analyzers do not read, and a missing one is an error
    events = tiny.read("events", [c for c in EVENT_COLUMNS if c != column])
    with pytest.raises(duckdb.BinderException):
        _analyses(tiny, events)


def test_a_report_holds_only_its_own_columns(sample: Path) -> None:
    run = load_run(sample, events_columns=event_columns.REPORT)
    assert run.events.column_names == list(event_columns.REPORT)
    assert "src_file" not in run.events.column_names and len(event_columns.REPORT) < 25
    assert set(run.analyses) == set(ANALYZERS)


def test_the_report_says_the_same_from_its_columns(sample: Path) -> None:
    # GIVEN the sample run read whole and with the report's columns only
    whole = load_run(sample)
    narrow = load_run(sample, events_columns=event_columns.REPORT)
    # THEN the analyses, the JSON and the HTML (figures, timeline) are identical
    assert narrow.analyses.keys() == whole.analyses.keys()
    for name, table in whole.analyses.items():
        assert narrow.analyses[name].equals(table), name
    assert report_dict(narrow) == report_dict(whole)
    for figures in (False, True):
        texts = [render_markdown(build_report(r, with_figures=figures)) if not figures
                 else render_html(build_report(r, with_figures=True), title="t")
                 for r in (whole, narrow)]
        assert texts[0] == texts[1]


def test_findings_read_only_declared_columns(sample: Path) -> None:
    from analyzers.report.headline import _critical

    run = load_run(sample, analyses=False, events_columns=event_columns.REPORT)
    assert _critical(run, ("name", "critical_us")).column_names == ["name", "critical_us"]
    with pytest.raises(AssertionError):
        _critical(run, ("name", "src_file"))


def _pool(env: dict[str, str]) -> str:
    code = ("from mtia_trace.cli import load_command; load_command('report'); "
            "import pyarrow as pa; print(pa.default_memory_pool().backend_name)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_the_report_command_allocates_from_the_system_allocator() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    assert _pool(env) == "system"
    # a pool the environment names is kept
    assert _pool({**env, "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}) == "mimalloc"
