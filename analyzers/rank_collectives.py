"""Per-rank collective time per step (own transfer + post) with its exposed part, per rank."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from analyzers._common import run_sql

NAME = "rank_collectives"
DESCRIPTION = ("Per-rank collective time per step (own transfer + post) with its exposed "
               "(critical-path) part, per rank.")

#: Columns `means` averages over every rank-step.
MEAN_COLUMNS = ("busy_us", "critical_us", "queue_us", "peer_wait_us", "transfer_us",
                "post_us", "retry_us", "step_us")


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return run_sql(con, NAME)


def means(table: pa.Table | None) -> dict[str, float] | None:
    """Mean over ranks and steps (every rank-step weighs the same) of `MEAN_COLUMNS`, from this
    analyzer's table; None without rows. The headline of reports and `compare`."""
    if table is None or table.num_rows == 0:
        return None
    w = table.column("steps").to_numpy().astype(float)
    if w.sum() <= 0:
        return None
    return {c: float(np.dot(w, table.column(c).to_numpy(zero_copy_only=False)) / w.sum())
            for c in MEAN_COLUMNS}
