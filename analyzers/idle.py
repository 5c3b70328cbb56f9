"""Gaps on each rank's work timelines by cause (what the event after the gap waited for)."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from analyzers._common import run_sql

NAME = "idle"
DESCRIPTION = "Gaps on each rank's work timelines by cause (what the event after the gap waited for)."


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return run_sql(con, NAME)
