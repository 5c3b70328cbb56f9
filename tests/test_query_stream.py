"""`query` streams its result: batches are written as DuckDB computes them (never the whole
result in memory), and a terminal table shows a capped number of rows and counts the rest."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from runfixture import tiny_meta, tiny_tables

from mtia_trace.cli.output import Format, emit_batches
from mtia_trace.errors import QueryError
from mtia_trace.runs import connect, query_batches
from mtia_trace.storage import write_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tiny_tables(), tmp_path_factory.mktemp("q") / "r", tiny_meta()).path


class _Sink(io.StringIO):
    """stdout that records how much had been written when each batch was asked for."""


def _lazy_reader(n: int, rows: int, sink: _Sink, seen: list[int]) -> pa.RecordBatchReader:
    def gen():  # noqa: ANN202
        for i in range(n):
            seen.append(len(sink.getvalue()))
            yield pa.record_batch([pa.array(range(i * rows, (i + 1) * rows))], names=["x"])
    return pa.RecordBatchReader.from_batches(pa.schema([("x", pa.int64())]), gen())


@pytest.mark.parametrize("fmt", [Format.csv, Format.json])
def test_each_batch_is_written_before_the_next_is_computed(monkeypatch: pytest.MonkeyPatch,
                                                           fmt: Format) -> None:
    sink, seen = _Sink(), []
    monkeypatch.setattr(sys, "stdout", sink)
    emit_batches(_lazy_reader(4, 10, sink, seen), fmt, None)
    # each batch's rows were out before the next batch was computed
    assert len(seen) == 4 and all(b > a for a, b in zip(seen, seen[1:], strict=False)), seen
    if fmt is Format.csv:
        assert sink.getvalue().splitlines() == ['"x"'] + [str(i) for i in range(40)]
    else:
        assert json.loads(sink.getvalue()) == [{"x": i} for i in range(40)]


def test_a_terminal_table_is_capped_and_counts_the_rest(run: Path, cli) -> None:
    code, out, _ = cli("query", run, "SELECT range AS x FROM range(100000)", "--max-rows", "5")
    assert code == 0
    assert out.splitlines()[-1] == "... 99,995 more rows (use --format csv or -o to get them all)"
    assert len(out.splitlines()) == 2 + 5 + 1
    code, out, _ = cli("query", run, "SELECT range AS x FROM range(300)", "--max-rows", "0")
    assert code == 0 and len(out.splitlines()) == 2 + 300


def test_files_get_every_row_in_batches(run: Path, cli, tmp_path: Path) -> None:
    con = connect([run])
    reader = query_batches(con, "SELECT range AS x FROM range(200000)", batch_rows=50_000)
    assert sum(1 for _ in reader) >= 2
    code, _, err = cli("query", run, "SELECT range AS x, 'a' AS y FROM range(200000)",
                       "--format", "csv", "-o", tmp_path / "r.csv")
    assert (code, err) == (0, "")
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert len(lines) == 200_001 and lines[0] == '"x","y"' and lines[-1] == '199999,"a"'
    code, _, _ = cli("query", run, "SELECT range AS x FROM range(200000)", "--format",
                     "parquet", "-o", tmp_path / "r.parquet")
    import pyarrow.parquet as pq
    assert code == 0 and pq.read_table(tmp_path / "r.parquet").num_rows == 200_000


def test_an_error_while_streaming_is_one_line(run: Path, cli, tmp_path: Path) -> None:
    con = connect([run])
    reader = query_batches(con, "SELECT CAST(CASE WHEN range < 150000 THEN '1' ELSE 'x' END "
                                "AS INT) AS v FROM range(200000)", batch_rows=10_000)
    with pytest.raises(QueryError, match="Could not convert string 'x'"):
        for _ in reader:
            pass
    code, _, err = cli("query", run, "SELECT CAST(CASE WHEN range < 150000 THEN '1' ELSE 'x' "
                       "END AS INT) AS v FROM range(200000)", "--format", "csv", "-o",
                       tmp_path / "bad.csv")
    assert code == 2 and err.count("\n") == 1 and "Could not convert" in err
    assert not list(tmp_path.iterdir())  # the partial file is gone
