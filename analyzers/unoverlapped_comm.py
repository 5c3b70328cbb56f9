"""Communication not hidden by compute, per collective type and process group."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzers._common import work_events
from replay.intervals import covered, union

NAME = "unoverlapped_comm"
DESCRIPTION = "Communication not hidden by compute, per collective type and process group."

_COLUMNS = "rank, start_us, end_us, coll_op, pg, kind, coll_bytes_in, critical"
SCHEMA = pa.schema([
    ("coll_op", pa.string()),      # collective operation (the kind for unnamed p2p/collectives)
    ("pg", pa.string()),           # process group ('' when unknown)
    ("count", pa.int64()),         # instances over all ranks
    ("bytes", pa.float64()),       # bytes contributed, summed over instances (B)
    ("busy_us", pa.float64()),     # total run time of the instances (us)
    ("unoverlapped_us", pa.float64()),  # part of busy_us with no compute running on the same rank (us)
    ("unoverlapped_pct", pa.float64()),  # unoverlapped share of busy, percent
    ("critical_us", pa.float64()), # run time of instances on the critical path (us)
])


def exposure(work: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(row indices of comm events, their time not overlapped by the rank's compute)."""
    rank = work.column("rank").to_numpy()
    start = work.column("start_us").to_numpy()
    end = work.column("end_us").to_numpy()
    comm = work.column("is_comm").to_numpy(zero_copy_only=False)
    rows, exposed = [], []
    bounds = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1], True])
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=False):  # one pass per rank
        sl = slice(lo, hi)
        c = comm[sl]
        seg_s, seg_e = union(start[sl][~c], end[sl][~c])
        idx = np.flatnonzero(c) + lo
        rows.append(idx)
        exposed.append((end[idx] - start[idx]) - covered(seg_s, seg_e, start[idx], end[idx]))
    if not rows:
        return np.empty(0, dtype=np.int64), np.empty(0)
    return np.concatenate(rows), np.concatenate(exposed)


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    work = work_events(con, _COLUMNS)
    idx, exposed = exposure(work)
    comm = work.take(pa.array(idx, type=pa.int64()))
    dur = pc.subtract(comm.column("end_us"), comm.column("start_us"))
    crit = pc.if_else(comm.column("critical"), dur, 0.0)
    op = pc.coalesce(comm.column("coll_op"), comm.column("kind"))
    pg = pc.coalesce(comm.column("pg"), pa.scalar(""))
    t = pa.table({"coll_op": op, "pg": pg, "bytes": comm.column("coll_bytes_in"), "busy": dur,
                  "exposed": pa.array(exposed, type=pa.float64()), "critical": crit})
    g = t.group_by(["coll_op", "pg"]).aggregate(
        [("busy", "count"), ("bytes", "sum"), ("busy", "sum"), ("exposed", "sum"),
         ("critical", "sum")])
    busy = g.column("busy_sum").to_numpy()
    exp = g.column("exposed_sum").to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = np.where(busy > 0, 100 * exp / busy, np.nan)
    out = pa.table({
        "coll_op": g.column("coll_op"), "pg": g.column("pg"), "count": g.column("busy_count"),
        "bytes": g.column("bytes_sum"), "busy_us": g.column("busy_sum"),
        "unoverlapped_us": g.column("exposed_sum"),
        "unoverlapped_pct": pa.array(pct, from_pandas=True),
        "critical_us": g.column("critical_sum"),
    }).cast(SCHEMA)
    return out.sort_by([("unoverlapped_us", "descending"), ("coll_op", "ascending"),
                        ("pg", "ascending")])
