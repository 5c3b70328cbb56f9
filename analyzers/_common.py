"""Helpers shared by analyzers: loading their SQL and the interval arithmetic of overlap."""

from __future__ import annotations

from importlib import resources

import duckdb
import numpy as np
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


def work_events(con: duckdb.DuckDBPyConnection, columns: str) -> pa.Table:
    """Compute and communication events on each rank's work timelines, ordered by rank.

    Device events where the rank has any; otherwise (CPU-only traces) its host ops.
    """
    kinds = ", ".join(f"'{k}'" for k in COMPUTE_KINDS + COMM_KINDS)
    return to_arrow(con.sql(f"""
        SELECT {columns}, kind IN ('collective', 'p2p') AS is_comm
        FROM events
        WHERE ph = 'X' AND end_us > start_us AND kind IN ({kinds})
          AND (is_device OR rank NOT IN (SELECT DISTINCT rank FROM events WHERE is_device))
        ORDER BY rank, start_us, event_id"""))


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals [start, end) into disjoint sorted segments."""
    if len(starts) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:], len(s)] - 1
    return s[first], reach[last]


def covered(seg_s: np.ndarray, seg_e: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of [lo, hi) covered by the disjoint sorted segments, per query interval."""
    if len(seg_s) == 0:
        return np.zeros(len(lo))
    before = np.r_[0.0, np.cumsum(seg_e - seg_s)]

    def upto(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(seg_s, x, side="right") - 1
        j = np.maximum(i, 0)
        inside = np.clip(x - seg_s[j], 0.0, seg_e[j] - seg_s[j])
        return np.where(i >= 0, before[j] + inside, 0.0)

    return upto(hi) - upto(lo)
