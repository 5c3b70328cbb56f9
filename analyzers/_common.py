"""Helpers shared by analyzers: loading their SQL and the interval arithmetic of overlap."""

from __future__ import annotations

from importlib import resources

import duckdb
import pyarrow as pa

from mtia_trace.runs import to_arrow
from mtia_trace.schema import COMM_KINDS, COMPUTE_KINDS


def run_sql(con: duckdb.DuckDBPyConnection, name: str) -> pa.Table:
    """Run the analyzer SQL file ``analyzers/<name>.sql`` against the run's views."""
    sql = resources.files("analyzers").joinpath(f"{name}.sql").read_text()
    return to_arrow(con.sql(sql))



def sql_list(values: tuple[str, ...]) -> str:
    """A SQL ``IN`` list of string literals (kind groups from `mtia_trace.schema`)."""
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def work_events(con: duckdb.DuckDBPyConnection, columns: str,
                kinds: tuple[str, ...] = COMPUTE_KINDS + COMM_KINDS) -> pa.Table:
    """Events of ``kinds`` on each rank's work timelines, ordered by rank (compute and
    communication by default).

    Device events where the rank has any; otherwise (CPU-only traces) its host ops.
    """
    return to_arrow(con.sql(f"""
        SELECT {columns}, kind IN ({sql_list(COMM_KINDS)}) AS is_comm
        FROM events
        WHERE ph = 'X' AND end_us > start_us AND kind IN ({sql_list(kinds)})
          AND (is_device OR rank NOT IN (SELECT DISTINCT rank FROM events WHERE is_device))
        ORDER BY rank, start_us, event_id"""))
