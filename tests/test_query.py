"""`mtia-trace query` and `analyze` through the CLI entry point: formats, views, read-only, errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import orjson
import pyarrow.parquet as pq
import pytest
from runfixture import tiny_meta, tiny_tables

from analyzers import ANALYZERS
from mtia_trace.errors import QueryError
from mtia_trace.runs import VIEWS, connect, query
from mtia_trace.storage import write_run


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("runs")
    for name in ("a", "b"):
        write_run(tiny_tables(), d / name, {**tiny_meta(), "seed": ord(name)})
    return d




def test_query_prints_an_aligned_table(runs_dir: Path, cli) -> None:
    code, out, err = cli("query", runs_dir / "a",
                         "SELECT step, count(*) AS ranks, avg(total_us) AS total_us FROM steps "
                         "GROUP BY step ORDER BY step")
    assert (code, err) == (0, "")
    assert out == ("step  ranks  total_us\n"
                   "----  -----  --------\n"
                   "   0      2       860\n"
                   "   1      2       880\n")


@pytest.mark.parametrize("fmt", ["csv", "json", "markdown"])
def test_query_formats(runs_dir: Path, cli, fmt: str) -> None:
    sql = "SELECT rank, sum(peer_wait_us) AS peer_wait_us FROM steps GROUP BY rank ORDER BY rank"
    code, out, _ = cli("query", runs_dir / "a", sql, "--format", fmt)
    assert code == 0
    expected = {
        "csv": '"rank","peer_wait_us"\n0,200\n1,0\n',
        "json": json.dumps([{"rank": 0, "peer_wait_us": 200.0}, {"rank": 1, "peer_wait_us": 0.0}],
                           separators=(",", ":")) + "\n",
        "markdown": "| rank | peer_wait_us |\n|---:|---:|\n| 0 | 200 |\n| 1 | 0 |\n",
    }[fmt]
    assert out == expected


def test_query_parquet_and_sql_file(runs_dir: Path, tmp_path: Path, cli) -> None:
    sql = tmp_path / "q.sql"
    sql.write_text("-- events per rank\nSELECT rank, count(*) AS n FROM events GROUP BY 1 ORDER BY 1;\n")
    code, out, _ = cli("query", runs_dir / "a", "-f", sql, "--format", "parquet",
                       "-o", tmp_path / "r.parquet")
    assert (code, out) == (0, "")
    assert pq.read_table(tmp_path / "r.parquet").to_pylist() == [{"rank": 0, "n": 22},
                                                                 {"rank": 1, "n": 22}]
    code, _, err = cli("query", runs_dir / "a", "SELECT 1", "--format", "parquet")
    assert code == 2 and "needs an output file; add -o" in err


def test_several_runs_stack_with_a_run_column(runs_dir: Path, cli) -> None:
    _code, out, _ = cli("query", runs_dir, "SELECT run, seed, events FROM runs ORDER BY run",
                       "--format", "csv")
    assert out == '"run","seed","events"\n"a",97,44\n"b",98,44\n'
    con = connect([runs_dir / "a", runs_dir / "b"])
    got = query(con, "SELECT run, count(*) AS n FROM events GROUP BY run ORDER BY run")
    assert got.to_pylist() == [{"run": "a", "n": 44}, {"run": "b", "n": 44}]


def test_views_statements_attach_a_run_in_any_duckdb(runs_dir: Path, cli) -> None:
    code, out, _ = cli("query", runs_dir / "a", "--views")
    assert code == 0 and out.count("CREATE OR REPLACE VIEW") == len(VIEWS)
    con = duckdb.connect()
    con.execute(out)
    assert con.sql("SELECT count(*) FROM events").fetchall() == [(44,)]
    assert con.sql("SELECT hardware FROM runs").fetchall() == [("as-measured",)]


def test_stored_views_file_works_from_the_run_directory(runs_dir: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(runs_dir / "a")
    con = duckdb.connect()
    con.execute(Path("views.sql").read_text())
    assert con.sql("SELECT count(*) FROM edges").fetchall() == [(32,)]


def tree(root: Path) -> dict[str, str]:
    """Every file and directory under ``root``, with a hash of each file's bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


#: Every way found for SQL to write a file, change the engine's configuration or load code.
#: ``{run}`` is a run directory, ``{new}`` a path that does not exist yet.
WRITES = [
    "COPY events TO '{run}/events.parquet' (FORMAT parquet)",
    "COPY (SELECT 1 AS x) TO '{run}/steps.parquet' (FORMAT csv, USE_TMP_FILE false)",
    "COPY (SELECT 1 AS x) TO '{run}/events.parquet' (FORMAT parquet, USE_TMP_FILE false)",
    "COPY (SELECT 1 AS x) TO '{new}.csv'",
    "COPY (SELECT 1 AS x) TO 'relative.csv'",
    "COPY steps TO '{new}' (FORMAT parquet, PARTITION_BY (rank))",
    ("EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{run}/events.parquet' "
    "(FORMAT parquet, USE_TMP_FILE false)"),
    "EXPLAIN ANALYZE COPY steps TO '{new}.parquet'",
    "EXPLAIN (FORMAT json) COPY steps TO '{new}.parquet'",
    "EXPORT DATABASE '{new}'",
    "EXPORT DATABASE '{run}' (FORMAT parquet)",
    "ATTACH '{run}/x.duckdb' AS x",
    "ATTACH '{new}.duckdb' AS x; CREATE TABLE x.t AS SELECT 1",
    "INSTALL httpfs",
    "FORCE INSTALL json",
    "LOAD httpfs",
    "LOAD '{new}.duckdb_extension'",
    "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'k', SECRET 'v')",
    "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 'v')",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "SET allowed_directories = ['/']",
    "SET allowed_paths = ['{run}/events.parquet']",
    "SET profile_output = '{new}.json'",
    "SET temp_directory = '{new}'",
    "SET secret_directory = '{new}'",
    "PRAGMA enable_profiling = 'json'",
    "PRAGMA profile_output = '{new}.json'",
    "PRAGMA threads = 1",
    "RESET lock_configuration",
    "CALL enable_logging(storage_path := '{new}')",
]


@pytest.mark.parametrize("sql", WRITES)
def test_the_engine_itself_refuses_every_write(runs_dir: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, sql: str) -> None:
    """Straight on the connection, bypassing the statement filter: DuckDB refuses the write."""
    monkeypatch.chdir(tmp_path)
    run = runs_dir / "a"
    before, cwd_before = tree(runs_dir), tree(tmp_path)
    con = connect([run])
    with pytest.raises(duckdb.Error):
        for st in con.extract_statements(sql.format(run=run, new=tmp_path / "new")):
            con.execute(st.query)
    assert con.sql("SELECT count(*) FROM steps").fetchall() == [(4,)]  # still usable, unchanged
    assert tree(runs_dir) == before and tree(tmp_path) == cwd_before


@pytest.mark.parametrize("sql", [*WRITES, "SELECT 1; COPY (SELECT 1) TO '{run}/x.csv'"])
def test_queries_cannot_modify_a_run(runs_dir: Path, tmp_path: Path, cli,
                                     monkeypatch: pytest.MonkeyPatch, sql: str) -> None:
    monkeypatch.chdir(tmp_path)
    run = runs_dir / "a"
    before = tree(runs_dir)
    code, out, err = cli("query", run, sql.format(run=run, new=tmp_path / "new"))
    assert code == 2 and out == ""
    assert err.startswith("mtia-trace: error: SQL: ") and err.count("\n") == 1
    assert "not allowed" in err
    assert tree(runs_dir) == before and tree(tmp_path) == {}


@pytest.mark.parametrize("sql", ["EXPLAIN SELECT * FROM steps", "EXPLAIN ANALYZE SELECT 1",
                                 "explain (format json) SELECT * FROM events", "DESCRIBE steps",
                                 "SUMMARIZE steps", "FROM steps LIMIT 1"])
def test_reads_and_explain_of_reads_are_allowed(runs_dir: Path, cli, sql: str) -> None:
    code, _, err = cli("query", runs_dir / "a", sql)
    assert (code, err) == (0, "")


def test_queries_cannot_read_other_files(runs_dir: Path, cli) -> None:
    code, _, err = cli("query", runs_dir / "a", "SELECT * FROM read_csv('/etc/passwd')")
    assert code == 2 and "disabled by configuration" in err and err.count("\n") == 1


def test_sql_error_is_one_line_with_the_views(runs_dir: Path, cli) -> None:
    code, out, err = cli("query", runs_dir / "a", "SELECT nope FROM steps")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert 'Referenced column "nope" not found' in err
    assert "available views: events, edges, steps, collectives, summary, runs, rank_collective_ops, rank_collectives" in err
    with pytest.raises(QueryError, match="no SQL statement"):
        query(connect([runs_dir / "a"]), "-- only a comment")


@pytest.mark.parametrize("args,message", [
    (("query", "{tmp}/missing", "SELECT 1"), "missing: does not exist; pass a directory"),
    (("query", "{tmp}", "SELECT 1"), "neither a run nor a folder of runs"),
    (("query", "{runs}/a"), "no SQL given"),
    (("analyze", "{tmp}/missing"), "missing: does not exist"),
    (("analyze", "{runs}/a", "nope"), "nope: unknown analyzer; choose from"),
])
def test_bad_input_is_one_line_exit_2(runs_dir: Path, tmp_path: Path, cli, args, message) -> None:
    code, _, err = cli(*(a.format(tmp=tmp_path, runs=runs_dir) for a in args))
    assert code == 2 and message in err and err.count("\n") == 1


def test_newer_schema_is_refused_by_query(runs_dir: Path, tmp_path: Path, cli) -> None:
    run = write_run(tiny_tables(), tmp_path / "new", tiny_meta())
    meta = orjson.loads((run.path / "run.json").read_bytes())
    (run.path / "run.json").write_bytes(orjson.dumps({**meta, "schema_version": "2.0"}))
    code, _, err = cli("query", run.path, "SELECT 1")
    assert code == 2 and "written with schema 2.0, newer than this mtia-trace" in err


def test_analyze_prints_every_analyzer(runs_dir: Path, cli) -> None:
    code, out, _ = cli("analyze", runs_dir / "a")
    assert code == 0
    for name, a in ANALYZERS.items():
        assert f"== {name}: {a.DESCRIPTION}" in out
    code, out, _ = cli("analyze", runs_dir / "a", "stragglers", "--format", "csv")
    assert out.splitlines()[0].startswith('"step","pg","coll_op"') and len(out.splitlines()) == 3
    code, out, _ = cli("analyze", runs_dir / "a", "overlap", "idle", "--format", "json")
    assert set(orjson.loads(out)) == {"overlap", "idle"}


def test_analyze_parquet_writes_one_file_per_analyzer(runs_dir: Path, tmp_path: Path, cli) -> None:
    code, _, _ = cli("analyze", runs_dir / "a", "--format", "parquet", "-o", tmp_path / "out")
    assert code == 0
    assert sorted(p.stem for p in (tmp_path / "out").iterdir()) == sorted(ANALYZERS)


def test_analyze_help_lists_every_analyzer(cli) -> None:
    code, out, _ = cli("analyze", "--help")
    assert code == 0
    for name in ANALYZERS:
        assert name in out


@pytest.mark.parametrize("sql,want", [
    ("SELECT 1 AS a; SELECT count(*) AS n FROM steps", "n\n-\n4\n"),
    ("-- the number of steps\nSELECT count(*) AS n FROM steps", "n\n-\n4\n"),
    ("PIVOT steps ON rank USING count(*) GROUP BY step ORDER BY step",
     "step  0  1\n----  -  -\n   0  1  1\n   1  1  1\n"),
])
def test_legitimate_reads_are_not_refused(runs_dir: Path, cli, sql: str, want: str) -> None:
    """Several statements (the last one's rows), PIVOT (DuckDB runs it as several), SQL that
    starts with a `--` comment."""
    code, out, err = cli("query", runs_dir / "a", sql)
    assert (code, err, out) == (0, "", want)


def test_an_unknown_option_is_still_refused(runs_dir: Path, cli) -> None:
    code, _, err = cli("query", runs_dir / "a", "--fromat", "csv", "SELECT 1")
    assert code == 2 and "No such option: --fromat" in err


def test_a_query_past_its_timeout_stops_in_one_line(runs_dir: Path, cli) -> None:
    code, _, err = cli("query", runs_dir / "a", "SELECT count(*) FROM range(100000000000000)",
                       "--timeout", "1")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--timeout" in lines[0]


@pytest.mark.parametrize("fmt", ["csv", "json", "table"])
def test_blob_and_bit_columns_print_as_text(runs_dir: Path, cli, fmt: str) -> None:
    code, out, err = cli("query", runs_dir / "a",
                         "SELECT 'ab'::BLOB AS b, '101'::BIT AS t, '\\xFF'::BLOB AS c",
                         "--format", fmt)
    assert (code, err) == (0, "")
    assert "101" in out and "ab" in out and "\\xFF" in out.replace("\\\\", "\\")
