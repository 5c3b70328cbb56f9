"""Where each step's time went: attribution per step (mean over ranks) with each component's share."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from analyzers._common import run_sql

NAME = "step_breakdown"
DESCRIPTION = "Where each step's time went: attribution per step (mean over ranks) with each component's share."


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return run_sql(con, NAME)
