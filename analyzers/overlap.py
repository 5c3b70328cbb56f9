"""Share of each rank's communication time overlapped by computation (HTA's comm/comp overlap)."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from analyzers._common import work_events
from replay.intervals import covered, union

NAME = "overlap"
DESCRIPTION = "Share of each rank's communication time overlapped by computation, as HTA reports it."

SCHEMA = pa.schema([
    ("rank", pa.int32()),
    ("kernel_us", pa.float64()),    # time any non-communication work ran (union, us)
    ("collective_us", pa.float64()),  # time any communication ran (union of intervals, us)
    ("overlap_us", pa.float64()),   # time both ran (us)
    ("overlap_pct", pa.float64()),  # overlap_us / collective_us, percent (HTA's comp_comm_overlap_pctg)
])


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    work = work_events(con, "rank, start_us, end_us")
    rank = work.column("rank").to_numpy()
    start = work.column("start_us").to_numpy()
    end = work.column("end_us").to_numpy()
    comm = work.column("is_comm").to_numpy(zero_copy_only=False)
    out: dict[str, list] = {f.name: [] for f in SCHEMA}
    bounds = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1], True])
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=False):  # one pass per rank
        s, e, c = start[lo:hi], end[lo:hi], comm[lo:hi]
        comp_s, comp_e = union(s[~c], e[~c])
        comm_s, comm_e = union(s[c], e[c])
        both = float(covered(comp_s, comp_e, comm_s, comm_e).sum())
        comm_us = float((comm_e - comm_s).sum())
        out["rank"].append(int(rank[lo]))
        out["kernel_us"].append(float((comp_e - comp_s).sum()))
        out["collective_us"].append(comm_us)
        out["overlap_us"].append(both)
        out["overlap_pct"].append(100 * both / comm_us if comm_us > 0 else None)
    return pa.table(out, schema=SCHEMA)
