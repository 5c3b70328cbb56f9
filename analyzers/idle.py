"""Wall time each rank's work timelines stood idle within its steps, by cause.

A rank is idle when none of its device streams runs anything (host threads for ranks without
device events), so a rank's idle time never exceeds its step time. Each gap is attributed to what
bound the start of the work that ends it (`events.bound_by`); a gap after the step's last work
has cause ``step_end``.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from analyzers._common import work_events
from mtia_trace.runs import to_arrow
from mtia_trace.schema import DEVICE_KINDS
from replay.intervals import union

NAME = "idle"
DESCRIPTION = "Wall time each rank's work timelines stood idle within its steps, by cause."

SCHEMA = pa.schema([
    ("rank", pa.int32()),
    ("cause", pa.string()),          # bound_by of the work after the gap; step_end after the last
    ("gaps", pa.int64()),            # idle intervals, summed over the rank's steps
    ("idle_us", pa.float64()),       # wall time with no work running, summed over steps (us)
    ("max_gap_us", pa.float64()),    # longest single gap (us)
    ("pct_of_step", pa.float64()),   # idle_us / the rank's summed step time, percent
])


def _gaps(s: np.ndarray, e: np.ndarray, bound: np.ndarray, lo: float, hi: float
          ) -> tuple[np.ndarray, np.ndarray]:
    """(gap lengths, cause) of [lo, hi) not covered by the intervals, clipped to the window."""
    keep = (e > lo) & (s < hi)
    s, e, bound = np.clip(s[keep], lo, hi), np.clip(e[keep], lo, hi), bound[keep]
    seg_s, seg_e = union(s, e)
    starts = np.r_[lo, seg_e]
    ends = np.r_[seg_s, hi]
    gap = ends - starts
    # cause: the binding of the earliest-starting work at each gap's end
    order = np.lexsort((np.arange(len(s)), s))
    pos = np.searchsorted(s[order], ends[:-1], side="left")
    before = bound[order][np.minimum(pos, len(s) - 1)] if len(s) else np.empty(0, dtype=object)
    cause = np.concatenate([before.astype(object), np.array(["step_end"], dtype=object)])
    pos_gap = gap > 0
    return gap[pos_gap], cause[pos_gap]


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    work = work_events(con, "rank, start_us, end_us, coalesce(bound_by, 'none') AS bound_by",
                       DEVICE_KINDS)
    steps = to_arrow(con.sql("SELECT rank, start_us, end_us, total_us FROM steps ORDER BY rank, "
                             "step"))
    rank = work.column("rank").to_numpy()
    start = work.column("start_us").to_numpy()
    end = work.column("end_us").to_numpy()
    bound = np.asarray(work.column("bound_by").to_pylist(), dtype=object)
    acc: dict[tuple[int, str], list[float]] = {}
    step_total: dict[int, float] = {}
    for r, lo, hi, total in zip(*(steps.column(c).to_pylist() for c in steps.column_names),
                                strict=True):  # rank-steps: few
        step_total[r] = step_total.get(r, 0.0) + total
        a, b = np.searchsorted(rank, [r, r + 1])
        gap, cause = _gaps(start[a:b], end[a:b], bound[a:b], lo, hi)
        for g, c in zip(gap.tolist(), cause.tolist(), strict=True):
            row = acc.setdefault((r, str(c)), [0, 0.0, 0.0])
            row[0] += 1
            row[1] += g
            row[2] = max(row[2], g)
    keys = sorted(acc, key=lambda k: (k[0], -acc[k][1], k[1]))
    return pa.table({
        "rank": [k[0] for k in keys], "cause": [k[1] for k in keys],
        "gaps": [acc[k][0] for k in keys], "idle_us": [acc[k][1] for k in keys],
        "max_gap_us": [acc[k][2] for k in keys],
        "pct_of_step": [100 * acc[k][1] / step_total[k[0]] if step_total[k[0]] > 0 else None
                        for k in keys],
    }, schema=SCHEMA)
