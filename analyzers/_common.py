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


#: Kinds that move memory (HTA's "memory" share of device time).
MEMORY_KINDS = ("memcpy", "memset")


def work_events(con: duckdb.DuckDBPyConnection, columns: str,
                kinds: tuple[str, ...] = COMPUTE_KINDS + COMM_KINDS) -> pa.Table:
    """Events of ``kinds`` on each rank's work timelines, ordered by rank (compute and
    communication by default).

    Device events where the rank has any; otherwise (CPU-only traces) its host ops.
    """
    kinds_sql = ", ".join(f"'{k}'" for k in kinds)
    return to_arrow(con.sql(f"""
        SELECT {columns}, kind IN ('collective', 'p2p') AS is_comm
        FROM events
        WHERE ph = 'X' AND end_us > start_us AND kind IN ({kinds_sql})
          AND (is_device OR rank NOT IN (SELECT DISTINCT rank FROM events WHERE is_device))
        ORDER BY rank, start_us, event_id"""))
