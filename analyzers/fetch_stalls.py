"""Embedding lookups and DMA copies: time on the critical path, bytes and achieved bandwidth."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from analyzers._common import run_sql

NAME = "fetch_stalls"
DESCRIPTION = "Embedding lookups and DMA copies: time on the critical path, bytes and achieved bandwidth."


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return run_sql(con, NAME)
