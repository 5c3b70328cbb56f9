"""Where and when events waited for busy engines or links, per rank, step and timeline."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from analyzers._common import run_sql

NAME = "queueing"
DESCRIPTION = "Where and when events waited for busy engines or links, per rank, step and timeline."


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return run_sql(con, NAME)
