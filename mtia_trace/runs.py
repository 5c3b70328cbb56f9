"""SQL over stored runs: an in-memory DuckDB with one view per table, locked to read-only.

Views: ``events``, ``edges``, ``steps``, ``collectives``, ``summary`` (one per Parquet file, with a
leading ``run`` column naming the run) and ``runs`` (one row of metadata per run). Several runs
are stacked in the same views. Queries may only read: statements other than SELECT / EXPLAIN are
refused, and the connection can reach no file except the runs' Parquet files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from mtia_trace.errors import QueryError
from mtia_trace.storage import TABLES, Run, find_runs

VIEWS: tuple[str, ...] = (*TABLES, "runs")
_ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}

#: Columns of the ``runs`` view: (name, SQL type, getter over run.json).
_RUN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run", "VARCHAR"), ("path", "VARCHAR"), ("hardware", "VARCHAR"), ("mode", "VARCHAR"),
    ("seed", "BIGINT"), ("loss_rate", "DOUBLE"), ("traces", "VARCHAR"), ("events", "BIGINT"),
    ("tool_version", "VARCHAR"), ("schema_version", "VARCHAR"), ("created_unix", "DOUBLE"),
)


def _lit(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _run_row(run: Run, path: str) -> dict[str, object]:
    m = run.meta
    opts = m.get("options") or {}
    traces = ", ".join(str(t.get("path", "")) for t in m.get("traces") or [])
    return {
        "run": run.name, "path": path, "hardware": m.get("hardware"),
        "mode": opts.get("mode"), "seed": m.get("seed"), "loss_rate": opts.get("loss_rate"),
        "traces": traces, "events": (m.get("rows") or {}).get("events"),
        "tool_version": m.get("tool_version"), "schema_version": m.get("schema_version"),
        "created_unix": m.get("created_unix"),
    }


def views_sql(runs: Sequence[Run], *, relative: bool = False) -> str:
    """``CREATE VIEW`` statements over ``runs``; ``relative`` names files relative to the run."""
    out = []
    for table in TABLES:
        parts = []
        for run in runs:
            fs = [str(f.relative_to(run.path)) if relative else str(f)
                  for f in run.table_files(table)]
            src = _lit(fs[0]) if len(fs) == 1 else "[" + ", ".join(map(_lit, fs)) + "]"
            parts.append(f"SELECT {_lit(run.name)} AS run, * FROM read_parquet({src})")
        out.append(f"CREATE OR REPLACE VIEW {table} AS\n  "
                   + "\n  UNION ALL BY NAME\n  ".join(parts) + ";")
    rows = []
    for run in runs:
        row = _run_row(run, "." if relative else str(run.path))
        rows.append("(" + ", ".join(f"CAST({_lit(row[c])} AS {t})" for c, t in _RUN_COLUMNS)
                    + ")")
    names = ", ".join(c for c, _ in _RUN_COLUMNS)
    out.append("CREATE OR REPLACE VIEW runs AS\n  SELECT * FROM (VALUES\n    "
               + ",\n    ".join(rows) + f"\n  ) AS t({names});")
    return "\n".join(out) + "\n"


def connect(runs: Sequence[Run] | Sequence[str | Path] | str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the views over ``runs``, unable to touch any other file."""
    if isinstance(runs, str | Path):
        runs = [runs]
    resolved = [r if isinstance(r, Run) else None for r in runs]
    if any(r is None for r in resolved):
        resolved = find_runs([r.path if isinstance(r, Run) else r for r in runs])
    con = duckdb.connect(":memory:")
    con.execute(views_sql(resolved))  # type: ignore[arg-type]
    files = [str(f) for r in resolved for t in TABLES  # type: ignore[union-attr]
             for f in r.table_files(t)]
    con.execute("SET allowed_paths = " + "[" + ", ".join(_lit(f) for f in files) + "]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def to_arrow(rel: duckdb.DuckDBPyRelation) -> pa.Table:
    """A relation's rows as an Arrow table (works across DuckDB 1.x and 2.x)."""
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fetch()


def _one_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def query(con: duckdb.DuckDBPyConnection, sql: str, *, source: str = "query") -> pa.Table:
    """Run ``sql`` (one or more read-only statements) and return the last result as Arrow."""
    hint = f"available views: {', '.join(VIEWS)} (`mtia-trace query RUN --views` shows them)"
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"{source}: {_one_line(exc)}; {hint}") from None
    if not statements:
        raise QueryError(f"{source}: no SQL statement given; pass e.g. \"SELECT * FROM steps\"")
    for st in statements:
        if st.type not in _ALLOWED:
            raise QueryError(
                f"{source}: {st.type.name} statements are not allowed, runs are read-only; "
                "use SELECT (export results with --format/-o instead of COPY)")
    try:
        for st in statements[:-1]:
            con.execute(st.query)
        return to_arrow(con.sql(statements[-1].query))
    except duckdb.Error as exc:
        raise QueryError(f"{source}: {_one_line(exc)}; {hint}") from None
