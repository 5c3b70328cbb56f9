"""Ops ranked by time on the critical path (exposed) and by total run time (busy)."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from analyzers._common import run_sql

NAME = "top_ops"
DESCRIPTION = "Ops ranked by time on the critical path (critical) and by total run time (busy)."


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return run_sql(con, NAME)
