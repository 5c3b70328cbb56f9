"""The critical path of each step in order, consecutive events of one op collapsed."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from analyzers._common import run_sql

NAME = "critical_path"
DESCRIPTION = "The critical path of each step in order, consecutive events of one op collapsed."


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return run_sql(con, NAME)
