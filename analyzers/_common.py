"""Helpers shared by analyzers: loading their SQL and the interval arithmetic of overlap."""

from __future__ import annotations

from importlib import resources

import duckdb
import pyarrow as pa

from mtia_trace.runs import to_arrow

#: Kinds that count as computation when measuring overlap with communication (HTA's split:
#: every kernel that is neither communication nor a memory copy / set).
COMPUTE_KINDS = ("gemm", "conv", "attention", "embedding", "elementwise", "reduction",
                 "optimizer", "other")
COMM_KINDS = ("collective", "p2p")


def run_sql(con: duckdb.DuckDBPyConnection, name: str) -> pa.Table:
    """Run the analyzer SQL file ``analyzers/<name>.sql`` against the run's views."""
    sql = resources.files("analyzers").joinpath(f"{name}.sql").read_text()
    return to_arrow(con.sql(sql))


def work_events(con: duckdb.DuckDBPyConnection, columns: str) -> pa.Table:
    """Compute and communication events on each rank's work timelines, ordered by rank.

    Device events where the rank has any; otherwise (CPU-only traces) its host ops.
    """
    kinds = ", ".join(f"'{k}'" for k in COMPUTE_KINDS + COMM_KINDS)
    return to_arrow(con.sql(f"""
        SELECT {columns}, kind IN ('collective', 'p2p') AS is_comm
        FROM events
        WHERE ph = 'X' AND end_us > start_us AND kind IN ({kinds})
          AND (is_device OR rank NOT IN (SELECT DISTINCT rank FROM events WHERE is_device))
        ORDER BY rank, start_us, event_id"""))
