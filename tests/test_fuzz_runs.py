"""Stored runs that cannot be trusted: a flipped bit inside any table's Parquet pages, and runs
written by an older or unknown schema version. Every reader (query, analyze, report, export,
compare) must refuse them in one line, exit 2, naming the run and what to do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fuzzcases import flip_byte, page_spans
from runfixture import tiny_meta, tiny_tables

from mtia_trace import schema
from mtia_trace.storage import TABLES, open_run, write_run


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tiny_tables(), tmp_path_factory.mktemp("runs") / "base", tiny_meta()).path


def readers(run: Path, base: Path, table: str, tmp: Path) -> list[list[object]]:
    return [["query", run, f"SELECT * FROM {table}"], ["analyze", run], ["report", run],
            ["export", run, "--perfetto", tmp / "p.json"], ["compare", base, run]]


def one_error(code: int, err: str) -> bool:
    lines = [x for x in err.splitlines() if x.strip()]
    return code == 2 and len(lines) == 1 and lines[0].startswith("mtia-trace: error: ")


def test_pages_carry_checksums(base: Path) -> None:
    # the CRC is what turns a flipped data bit into an error instead of another number
    for table in TABLES:
        f = base / f"{table}.parquet"
        start, size = page_spans(f)[0]
        shutil.copy(f, copy := f.parent.parent / f"{table}-copy.parquet")
        flip_byte(copy, start + size - 1)
        with pytest.raises(OSError, match="CRC"):
            pq.read_table(copy, page_checksum_verification=True)


@pytest.mark.parametrize("table", list(TABLES))
def test_a_flipped_page_bit_is_one_line_for_every_reader(base: Path, tmp_path: Path, cli,
                                                         table: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(base, run)
    f = run / f"{table}.parquet"
    start, size = page_spans(f)[0]
    flip_byte(f, start + size - 1, 3)  # the last byte of the first column's last page
    open_run(run)  # footer and columns still look right: only reading the pages can tell
    for argv in readers(run, base, table, tmp_path):
        code, out, err = cli(*argv)
        if argv[0] == "analyze" and table not in ("events", "steps") and code == 0:
            continue  # the analyzers read events and steps; a page nobody reads is harmless
        assert one_error(code, err), (argv[0], code, err)
        assert f"{run}: not a readable mtia-trace run ({table}" in err, (argv[0], err)
        assert "re-run" in err
    assert not (tmp_path / "p.json").exists()


def _with_schema_version(base: Path, tmp_path: Path, version: str) -> Path:
    """A copy of the base run whose run.json claims ``version``."""
    run = tmp_path / "run"
    shutil.copytree(base, run)
    meta = json.loads((run / "run.json").read_text())
    meta["schema_version"] = version
    (run / "run.json").write_text(json.dumps(meta))
    return run


@pytest.mark.parametrize("version", ["1.0", "0", "0.9"])
def test_an_older_schema_is_refused_by_every_reader(base: Path, tmp_path: Path, cli,
                                                    version: str) -> None:
    run = _with_schema_version(base, tmp_path, version)
    for argv in readers(run, base, "steps", tmp_path):
        code, _, err = cli(*argv)
        assert one_error(code, err), (argv[0], err)
        assert (f"run.json was written by schema {version}, this mtia-trace" in err
                and f"reads schema {schema.SCHEMA_VERSION}; re-run" in err), err


def test_an_older_parquet_file_in_a_current_run_is_refused(base: Path, tmp_path: Path,
                                                           cli) -> None:
    # e.g. a steps.parquet from a 1.0 run copied into a new one (before unexplained_us)
    run = tmp_path / "run"
    shutil.copytree(base, run)
    steps = pq.read_table(run / "steps.parquet")
    old = steps.replace_schema_metadata({**steps.schema.metadata,
                                         b"mtia_trace.schema_version": b"1.0"})
    pq.write_table(old, run / "steps.parquet")
    code, _, err = cli("query", run, "SELECT * FROM steps")
    assert one_error(code, err)
    assert "steps.parquet was written by schema 1.0" in err


@pytest.mark.parametrize("version", ["abc", "1.x", "", "9" * 30])
def test_a_version_that_is_not_one_is_unreadable(base: Path, tmp_path: Path, cli,
                                                 version: str) -> None:
    run = _with_schema_version(base, tmp_path, version)
    code, _, err = cli("report", run)
    assert one_error(code, err) and "is not a MAJOR.MINOR version" in err, err


def test_a_parquet_file_without_a_schema_version_is_foreign(base: Path, tmp_path: Path,
                                                            cli) -> None:
    run = tmp_path / "run"
    shutil.copytree(base, run)
    pq.write_table(pq.read_table(run / "summary.parquet").replace_schema_metadata(None),
                   run / "summary.parquet")
    code, _, err = cli("analyze", run)
    assert one_error(code, err) and "summary.parquet has no mtia-trace schema version" in err


def test_a_flipped_byte_in_a_column_name_is_one_line(base: Path, tmp_path: Path, cli) -> None:
    # found by the campaign: invalid UTF-8 in the footer was a UnicodeDecodeError traceback
    run = tmp_path / "run"
    shutil.copytree(base, run)
    f = run / "events.parquet"
    data = f.read_bytes()
    # the footer's schema element names ts_us (length-prefixed); 'u' (0x75) -> 0xf5
    flip_byte(f, data.index(b"\x05ts_us") + 4, 7)
    code, _, err = cli("report", run)
    assert one_error(code, err) and "not a readable mtia-trace run (events.parquet" in err, err
