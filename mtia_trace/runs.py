"""SQL over stored runs: an in-memory DuckDB with one view per table, locked to read-only.

Views: ``events``, ``edges``, ``steps``, ``collectives``, ``summary`` (one per Parquet file, with a
leading ``run`` column naming the run), ``runs`` (one row of metadata per run) and the views
derived from them (`mtia_trace.derived_views`, e.g. ``rank_collectives``). Several runs
are stacked in the same views. Queries may only read. DuckDB enforces it: the runs' Parquet files
are opened by Arrow and registered as datasets, so the engine runs with external access off and
can open no file at all (no COPY, EXPORT, ATTACH, INSTALL, secret or profile output), with its
configuration locked. A statement filter (SELECT, and EXPLAIN of a SELECT) is the second line.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

from mtia_trace.derived_views import DERIVED_VIEWS
from mtia_trace.errors import QueryError, RunNotFoundError
from mtia_trace.storage import TABLES, Run, find_runs, sql_literal, unreadable, views_sql

VIEWS: tuple[str, ...] = (*TABLES, "runs", *DERIVED_VIEWS)
#: ``EXPLAIN [ANALYZE]`` or ``EXPLAIN (options)`` before the statement it explains (and runs).
_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\b|\((?:[^()']|'[^']*')*\))?", re.IGNORECASE)

#: A statement that DuckDB runs as several (``MULTI``) but only reads: a PIVOT (or a SELECT over
#: one) whose columns are found by a query first.
_PIVOT = re.compile(r"^(?:\s|--[^\n]*\n|/\*.*?\*/)*\(*\s*(?:UN)?PIVOT\b|"
                    r"^(?:\s|--[^\n]*\n|/\*.*?\*/)*\(*\s*(?:SELECT|FROM)\b",
                    re.IGNORECASE | re.DOTALL)
#: Default limit of one `query` call, in seconds (``--timeout``).
QUERY_TIMEOUT_S = 600.0

#: Registered dataset name -> (run directory, table): a failed read names the run and file.
_DATASETS: dict[str, tuple[Path, str]] = {}
_serial = itertools.count()
#: How DuckDB reports a failed read of a registered Arrow dataset.
_READ_FAILED = re.compile(r"registered as '(_ds\d+)' failed: (?:\w+Error: )?(.*)")


def _register(con: duckdb.DuckDBPyConnection, run: Run, table: str,
              loaded: pa.Table | None = None) -> str:
    """Register ``run``'s ``table``: the Arrow table already read when given (DuckDB scans it in
    memory), else the run's file as a dataset that Arrow opens per statement."""
    name = f"_ds{next(_serial)}"
    con.register(name, loaded if loaded is not None else run.dataset(table))
    _DATASETS[name] = (run.path, table)
    return name


def read_error(exc: BaseException) -> RunNotFoundError | None:
    """The run error for a DuckDB error raised by a failed read of a run's file, else None."""
    found = _READ_FAILED.search(str(exc))
    if not isinstance(exc, duckdb.Error) or not found or found.group(1) not in _DATASETS:
        return None
    path, table = _DATASETS[found.group(1)]
    why = found.group(2).strip().splitlines()[0][:200]
    where = f"{table}/" if (path / table).is_dir() else f"{table}.parquet"
    return unreadable(path, f"{where}: {why}")


@contextmanager
def reading() -> Iterator[None]:
    """Turn a failed read of a run's Parquet (corrupt page, CRC mismatch) inside a DuckDB
    statement into the run's one-line `RunNotFoundError`; other errors pass unchanged."""
    try:
        yield
    except duckdb.Error as exc:
        err = read_error(exc)
        if err is None:
            raise
        raise err from None


def _engine_views_sql(runs: Sequence[Run], names: dict[tuple[str, int], str]) -> str:
    """The views over registered Arrow datasets (the engine itself opens no file)."""
    out = []
    for table in TABLES:
        parts = [f"SELECT {sql_literal(run.name)} AS run, * FROM {names[table, i]}"
                 for i, run in enumerate(runs)]
        out.append(f"CREATE OR REPLACE VIEW {table} AS\n  "
                   + "\n  UNION ALL BY NAME\n  ".join(parts) + ";")
    sql = views_sql(runs)
    return "\n".join(out) + "\n" + sql[sql.index("CREATE OR REPLACE VIEW runs"):]


def connect(runs: Sequence[Run] | Sequence[str | Path] | str | Path, *,
            loaded: Sequence[dict[str, pa.Table]] | None = None,
            threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the views over ``runs``, unable to touch any file.

    ``loaded`` (one dict per run, table name -> Arrow table) hands over tables the caller has
    already read, so statements scan them in memory instead of decoding the Parquet file again
    each time (a report runs every analyzer over the same run). ``threads`` caps the engine's
    threads (default: one per core); each thread holds its own working memory.

    The runs' Parquet files are opened read-only by Arrow and handed to DuckDB as datasets, so
    the engine needs no file access at all: external access is off, the configuration locked and
    extension autoloading disabled, which DuckDB enforces for every statement (COPY, EXPORT,
    ATTACH, INSTALL, secrets, pragmas) whatever the statement filter in `query` lets through.
    """
    if isinstance(runs, str | Path):
        runs = [runs]
    resolved: list[Run] = [r for r in runs if isinstance(r, Run)]
    if len(resolved) < len(runs):
        resolved = find_runs([r.path if isinstance(r, Run) else r for r in runs])
    con = duckdb.connect(":memory:", config={
        "autoinstall_known_extensions": False, "autoload_known_extensions": False})
    names = {(table, i): _register(con, run, table, loaded[i].get(table) if loaded else None)
             for i, run in enumerate(resolved) for table in TABLES}
    con.execute(_engine_views_sql(resolved, names))
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def to_arrow(rel: duckdb.DuckDBPyRelation) -> pa.Table:
    """A relation's rows as an Arrow table (works across DuckDB 1.x and 2.x)."""
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fetch()


def _one_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _refused(con: duckdb.DuckDBPyConnection, st: object) -> str | None:
    """Why the statement filter refuses ``st`` (its type's name), or None for a plain read.

    EXPLAIN ANALYZE runs what it explains, so an EXPLAIN passes only when the statement it
    explains parses on its own as a SELECT.
    """
    kind = st.type  # type: ignore[attr-defined]
    if kind is duckdb.StatementType.SELECT:
        return None
    if kind is duckdb.StatementType.MULTI and _PIVOT.match(st.query):  # type: ignore[attr-defined]
        return None  # a PIVOT finding its columns first: reads only
    if kind is not duckdb.StatementType.EXPLAIN:
        return kind.name
    text = st.query  # type: ignore[attr-defined]
    prefix = _EXPLAIN.match(text)
    try:
        inner = con.extract_statements(text[prefix.end():]) if prefix else []
    except duckdb.Error:
        inner = []
    if len(inner) == 1 and inner[0].type is duckdb.StatementType.SELECT:
        return None
    return f"EXPLAIN {inner[0].type.name}" if len(inner) == 1 else "unrecognised EXPLAIN"


#: Rows per batch of a streamed result.
BATCH_ROWS = 64 * 1024


def query(con: duckdb.DuckDBPyConnection, sql: str, *, source: str = "query") -> pa.Table:
    """Run ``sql`` (one or more read-only statements) and return the last result as Arrow."""
    return query_batches(con, sql, source=source).read_all()


def query_batches(con: duckdb.DuckDBPyConnection, sql: str, *, source: str = "query",
                  batch_rows: int = BATCH_ROWS, timeout_s: float | None = None,
                  binary_as_text: bool = False) -> pa.RecordBatchReader:
    """Run ``sql`` (one or more read-only statements); the last result as a stream of Arrow
    batches of ``batch_rows``, computed as they are read. An error while reading is the same
    one-line `QueryError` (or the run's read error) as one before. The statements before the
    last are bound (a mistake in them is reported) but not run: they can only read, and only the
    last result is returned. With ``timeout_s``, the query is interrupted that long after it
    starts, reading included (a one-line `QueryError`). BIT columns come as text ('101': Arrow
    would get DuckDB's internal bytes), BLOB columns too with ``binary_as_text`` (DuckDB's
    escaped form, for CSV and JSON)."""
    hint = f"available views: {', '.join(VIEWS)} (`mtia-trace query RUN --views` shows them)"
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"{source}: {_one_line(exc)}; {hint}") from None
    if not statements:
        raise QueryError(f"{source}: no SQL statement given; pass e.g. \"SELECT * FROM steps\"")
    for st in statements:
        refused = _refused(con, st)
        if refused:
            raise QueryError(
                f"{source}: {refused} statements are not allowed, runs are read-only; "
                "use SELECT (export results with --format/-o instead of COPY)")
    timer = _Deadline(con, timeout_s)

    def failed(exc: Exception) -> Exception:
        if timer.fired:
            return QueryError(f"{source}: stopped after {timeout_s:g} s (--timeout); narrow the "
                              "query (WHERE, LIMIT, fewer runs) or raise --timeout (0: none)")
        return read_error(exc) or QueryError(f"{source}: {_one_line(exc)}; {hint}")

    try:
        timer.start()
        for st in statements[:-1]:
            con.sql(st.query)  # bound, not run
        rel = _text_columns(con.sql(statements[-1].query), binary_as_text)
        stream = getattr(rel, "to_arrow_reader", None) or rel.fetch_arrow_reader
        reader = stream(batch_rows)
    except duckdb.Error as exc:
        timer.cancel()
        raise failed(exc) from None

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            yield from reader
        except (duckdb.Error, pa.ArrowException, OSError) as exc:
            raise failed(exc) from None
        finally:
            timer.cancel()

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def _text_columns(rel: duckdb.DuckDBPyRelation | None,
                  binary_as_text: bool) -> duckdb.DuckDBPyRelation:
    """``rel`` with its BIT (and with ``binary_as_text``, BLOB) columns cast to text."""
    if rel is None:
        raise QueryError("SQL: the last statement returns no rows; end with a SELECT")
    cast = {"BIT", "BLOB"} if binary_as_text else {"BIT"}
    types = [str(t) for t in rel.types]
    if not cast & set(types):
        return rel
    cols = [f"CAST(#{i + 1} AS VARCHAR) AS {_ident(c)}" if t in cast else f"#{i + 1} AS {_ident(c)}"
            for i, (c, t) in enumerate(zip(rel.columns, types))]
    return rel.project(", ".join(cols))


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Deadline:
    """Interrupts the connection's running query ``seconds`` after `start` (none: never)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, seconds: float | None) -> None:
        self.con, self.seconds, self.fired = con, seconds, False
        self._timer: threading.Timer | None = None

    def _fire(self) -> None:
        self.fired = True
        self.con.interrupt()

    def start(self) -> None:
        if self.seconds:
            self._timer = threading.Timer(self.seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
