"""Per-rank collective time per operation and group size (own transfer + post, per rank-step)."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from analyzers._common import run_sql

NAME = "rank_collective_ops"
DESCRIPTION = ("Per-rank collective time per operation and group size (own transfer + post, "
               "per rank-step).")


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return run_sql(con, NAME)
