"""User-annotation breakdown: busy and critical-path time per record_function / NVTX range name.

A range is an ``annotation`` event other than ``ProfilerStep#N`` (host ``record_function`` /
NVTX ranges, and their ``gpu_user_annotation`` copies on device tracks). Per range name and side:
``busy_us`` sums the instances' replayed durations; ``critical_us`` is the critical-path time
inside them: the part of each instance's window covered by its rank's innermost critical work
events (the ones the critical_path analyzer lists), so overlapping work counts once. Nested
ranges each count their own instances.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from mtia_trace.runs import to_arrow
from replay.intervals import covered, union

NAME = "user_annotations"
DESCRIPTION = ("User-annotation breakdown: busy and critical-path time per record_function / "
               "NVTX range name.")

#: Rows kept, by critical time then busy time.
LIMIT = 50

SCHEMA = pa.schema([
    ("name", pa.string()),           # range name as recorded
    ("side", pa.string()),           # 'host' (record_function / NVTX) or 'device' (its GPU copy)
    ("count", pa.int64()),           # instances over all ranks
    ("ranks", pa.int64()),           # ranks that recorded it
    ("busy_us", pa.float64()),       # summed replayed duration of the instances (us)
    ("critical_us", pa.float64()),   # critical-path time inside the instances (us)
    ("critical_pct", pa.float64()),  # critical_us / busy_us, percent
    ("mean_us", pa.float64()),       # busy_us / count (us)
])


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    ranges = to_arrow(con.sql("""
        SELECT rank, name, is_device, start_us, end_us FROM events
        WHERE kind = 'annotation' AND ph = 'X' AND name NOT LIKE 'ProfilerStep#%'
          AND end_us >= start_us
        ORDER BY rank, start_us"""))
    crit = to_arrow(con.sql("""
        SELECT rank, start_us, end_us FROM events
        WHERE critical AND ph = 'X' AND kind NOT IN ('annotation', 'instant')
          AND end_us > start_us
          AND NOT EXISTS (SELECT 1 FROM events AS inner_ev
                          WHERE inner_ev.critical AND inner_ev.parent_id = events.event_id)
        ORDER BY rank, start_us"""))
    rr = ranges.column("rank").to_numpy()
    rs, re_ = ranges.column("start_us").to_numpy(), ranges.column("end_us").to_numpy()
    cr = crit.column("rank").to_numpy()
    cs, ce = crit.column("start_us").to_numpy(), crit.column("end_us").to_numpy()
    inside = np.zeros(len(rr))
    for r in np.unique(rr).tolist():  # ranks: few
        m = rr == r
        seg_s, seg_e = union(cs[cr == r], ce[cr == r])
        inside[m] = covered(seg_s, seg_e, rs[m], re_[m])
    t = pa.table({"name": ranges.column("name"),
                  "side": pa.array(np.where(ranges.column("is_device").to_numpy(
                      zero_copy_only=False), "device", "host")),
                  "rank": ranges.column("rank"), "busy": pa.array(re_ - rs),
                  "critical": pa.array(inside)})
    g = t.group_by(["name", "side"]).aggregate(
        [("busy", "count"), ("rank", "count_distinct"), ("busy", "sum"), ("critical", "sum")])
    busy = g.column("busy_sum").to_numpy()
    crit_us = g.column("critical_sum").to_numpy()
    n = g.column("busy_count").to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = np.where(busy > 0, 100 * crit_us / busy, np.nan)
    out = pa.table({
        "name": g.column("name"), "side": g.column("side"), "count": g.column("busy_count"),
        "ranks": g.column("rank_count_distinct"), "busy_us": g.column("busy_sum"),
        "critical_us": g.column("critical_sum"),
        "critical_pct": pa.array(pct, from_pandas=True),
        "mean_us": pa.array(busy / np.maximum(n, 1)),
    }).cast(SCHEMA)
    out = out.sort_by([("critical_us", "descending"), ("busy_us", "descending"),
                       ("name", "ascending"), ("side", "ascending")])
    return out.slice(0, LIMIT)
