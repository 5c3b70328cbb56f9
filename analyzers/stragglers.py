"""Per collective, the rank that arrived last and how far it lagged the first one."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from analyzers._common import run_sql

NAME = "stragglers"
DESCRIPTION = "Per collective, the rank that arrived last and how far it lagged the first one."


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return run_sql(con, NAME)
