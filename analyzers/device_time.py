"""Device busy and idle time per stream and per rank within the steps (HTA's temporal breakdown).

Per rank, for each device stream and for all streams together (``stream = 'all'``): the wall time
of the rank's step windows split into kernels (every device kernel that is neither a collective
nor a copy: embedding gathers are kernels here, though much of their cost is ``fetch``),
collectives, copies (memcpy, memset) and idle, as interval unions, so the shares of a row sum to
100 % and overlapping kernels are not counted twice. In the ``all`` row a moment where kinds
overlap counts once, in the first of kernel, collective, copy (HTA counts compute first as
well). Ranks without device events are left out.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from mtia_trace.runs import to_arrow
from mtia_trace.schema import COMM_KINDS, COMPUTE_KINDS, MEMORY_KINDS
from replay.intervals import covered, union

NAME = "device_time"
DESCRIPTION = "Device busy and idle time per stream and per rank within the steps (HTA's temporal breakdown)."

SCHEMA = pa.schema([
    ("rank", pa.int32()),
    ("stream", pa.string()),        # device track ('dev:<device>:<stream>') or 'all'
    ("window_us", pa.float64()),    # the rank's step wall time (us): its windows' union
    ("busy_us", pa.float64()),      # time any work ran on the stream(s) (us)
    ("kernel_us", pa.float64()),    # of busy: kernels other than collectives and copies (us)
    ("collective_us", pa.float64()),  # of busy: collectives / p2p, when no kernel ran (us)
    ("copy_us", pa.float64()),      # of busy: copies / memsets, when nothing else ran (us)
    ("idle_us", pa.float64()),      # window_us - busy_us (us)
    ("busy_pct", pa.float64()),     # busy_us / window_us, percent
    ("kernel_pct", pa.float64()),
    ("collective_pct", pa.float64()),
    ("copy_pct", pa.float64()),
    ("idle_pct", pa.float64()),
])

_GROUPS = (("kernel", COMPUTE_KINDS), ("collective", COMM_KINDS), ("copy", MEMORY_KINDS))


def _clip(s: np.ndarray, e: np.ndarray, ws: np.ndarray, we: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """Intervals clipped to the union of the windows [ws, we) (windows are disjoint per rank)."""
    out_s, out_e = [], []
    for lo, hi in zip(ws.tolist(), we.tolist(), strict=True):
        keep = (e > lo) & (s < hi)
        out_s.append(np.clip(s[keep], lo, hi))
        out_e.append(np.clip(e[keep], lo, hi))
    return (np.concatenate(out_s), np.concatenate(out_e)) if out_s else (s[:0], e[:0])


def breakdown(s: np.ndarray, e: np.ndarray, group: np.ndarray, window_us: float
              ) -> dict[str, float]:
    """Busy/kernel/collective/copy/idle microseconds of intervals (already clipped to the windows);
    ``group`` holds each interval's group index in `_GROUPS`."""
    seg_s, seg_e = union(s, e)
    busy = float((seg_e - seg_s).sum())
    out: dict[str, float] = {"busy_us": busy}
    taken_s, taken_e = np.empty(0), np.empty(0)
    for i, (name, _) in enumerate(_GROUPS):
        gs, ge = union(s[group == i], e[group == i])
        mine = float((ge - gs).sum()) - float(covered(taken_s, taken_e, gs, ge).sum())
        out[f"{name}_us"] = max(mine, 0.0)
        taken_s, taken_e = union(np.r_[taken_s, gs], np.r_[taken_e, ge])
    out["idle_us"] = max(window_us - busy, 0.0)
    return out


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    kinds = {k: i for i, (_, ks) in enumerate(_GROUPS) for k in ks}
    kinds_sql = ", ".join(f"'{k}'" for k in kinds)
    ev = to_arrow(con.sql(f"""
        SELECT rank, track, kind, start_us, end_us FROM events
        WHERE is_device AND ph = 'X' AND end_us > start_us AND kind IN ({kinds_sql})
        ORDER BY rank, track, start_us"""))
    steps = to_arrow(con.sql("SELECT rank, start_us, end_us FROM steps ORDER BY rank, start_us"))
    rank = ev.column("rank").to_numpy()
    track = np.asarray(ev.column("track").to_pylist(), dtype=object)
    group = np.array([kinds[k] for k in ev.column("kind").to_pylist()], dtype=np.int64)
    start, end = ev.column("start_us").to_numpy(), ev.column("end_us").to_numpy()
    srank = steps.column("rank").to_numpy()
    sws, swe = steps.column("start_us").to_numpy(), steps.column("end_us").to_numpy()
    out: dict[str, list] = {f.name: [] for f in SCHEMA}
    for r in np.unique(rank).tolist():  # ranks: few
        # windows of one rank may overlap (concurrent requests): their union
        ws, we = union(sws[srank == r], swe[srank == r])
        window = float((we - ws).sum())
        a, b = np.searchsorted(rank, [r, r + 1])
        rows: list[tuple[str, slice]] = [("all", slice(a, b))]
        tr = track[a:b]
        cuts = np.flatnonzero(np.r_[True, tr[1:] != tr[:-1], True])
        rows += [(str(tr[lo]), slice(a + lo, a + hi)) for lo, hi in zip(cuts[:-1], cuts[1:],
                                                                        strict=True)]
        for name, sl in rows:
            g = group[sl]
            s, e = start[sl], end[sl]
            cs, ce, cg = [], [], []
            for i in range(len(_GROUPS)):
                x, y = _clip(s[g == i], e[g == i], ws, we)
                cs.append(x)
                ce.append(y)
                cg.append(np.full(len(x), i))
            parts = breakdown(np.concatenate(cs), np.concatenate(ce), np.concatenate(cg), window)
            out["rank"].append(r)
            out["stream"].append(name)
            out["window_us"].append(window)
            for k in ("busy", "kernel", "collective", "copy", "idle"):
                out[f"{k}_us"].append(parts[f"{k}_us"])
                out[f"{k}_pct"].append(100 * parts[f"{k}_us"] / window if window > 0 else None)
    return pa.table(out, schema=SCHEMA)
