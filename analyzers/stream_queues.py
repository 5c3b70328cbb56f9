"""Launch queue length per device stream over time, with a summary per stream (HTA's queue length).

A launched device event is *queued* from the start of the runtime call that launched it until it
starts on its stream (HTA's queue length: ``get_queue_length_time_series``), and *outstanding*
until it ends. `queue_series` gives both as step functions (the state after each time something changed; the
Perfetto export draws them as counter tracks); the analyzer
summarises each stream: its maximum and its time-weighted mean over the stream's span (first
launch to last end). At equal times an end or start is counted before a launch.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from analyzers.kernel_launches import launch_pairs_with_times

NAME = "stream_queues"
DESCRIPTION = ("Launch queue length per device stream (launched, not yet started / not yet "
               "finished): maximum and time-weighted mean (HTA's queue length).")

SERIES_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("stream", pa.string()), ("ts_us", pa.float64()),
    ("queued", pa.int64()), ("outstanding", pa.int64())])

SCHEMA = pa.schema([
    ("rank", pa.int32()),
    ("stream", pa.string()),            # device track 'dev:<device>:<stream>'
    ("launches", pa.int64()),           # launched device events on the stream
    ("span_us", pa.float64()),          # first launch start to last end on the stream (us)
    ("max_queued", pa.int64()),         # most events launched and not yet started at once
    ("mean_queued", pa.float64()),      # time-weighted mean of queued over span_us
    ("max_outstanding", pa.int64()),    # most events launched and not yet finished at once
    ("mean_outstanding", pa.float64()),  # time-weighted mean of outstanding over span_us
])


def _step(t: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, value after each change) of the running sum of changes ``d`` at times ``t``;
    at equal times decrements first."""
    order = np.lexsort((d, t))
    return t[order], np.cumsum(d[order])


def _weighted_mean(t: np.ndarray, v: np.ndarray) -> float:
    span = t[-1] - t[0] if len(t) else 0.0
    return float(np.dot(v[:-1], np.diff(t)) / span) if span > 0 else 0.0


def _streams(pairs: pa.Table):
    """Per (rank, stream) of `kernel_launches.launch_pairs_with_times` rows: launch start,
    event start and event end arrays."""
    rank = pairs.column("rank").to_numpy()
    stream = np.asarray(pairs.column("stream").to_pylist(), dtype=object)
    ls, ds, de = (pairs.column(c).to_numpy() for c in ("launch_start_us", "start_us", "end_us"))
    for r, s in sorted(set(zip(rank.tolist(), stream.tolist(), strict=True))):  # streams: few
        m = (rank == r) & (stream == s)
        yield r, s, ls[m], ds[m], de[m]


def queue_series(pairs: pa.Table) -> pa.Table:
    """Queued and outstanding counts per rank and stream of launch pairs
    (`kernel_launches.launch_pairs_with_times`): one row per time something changed, holding the
    counts after every change at that time (a step function, constant until the next row)."""
    out: dict[str, list] = {f.name: [] for f in SERIES_SCHEMA}
    for r, s, ls, ds, de in _streams(pairs):
        n = len(ls)
        ones = np.ones(n, dtype=np.int64)
        t = np.r_[ls, ds, de]
        order = np.argsort(t, kind="stable")
        q = np.cumsum(np.r_[ones, -ones, 0 * ones][order])
        o = np.cumsum(np.r_[ones, 0 * ones, -ones][order])
        t = t[order]
        last = np.r_[t[1:] != t[:-1], True]  # the state after every change at a time
        k = int(last.sum())
        out["rank"] += [r] * k
        out["stream"] += [s] * k
        out["ts_us"] += t[last].tolist()
        out["queued"] += q[last].tolist()
        out["outstanding"] += o[last].tolist()
    return pa.table(out, schema=SERIES_SCHEMA)


def summary(pairs: pa.Table) -> pa.Table:
    """Per rank and stream: launches, span, maximum and time-weighted mean of both counts."""
    out: dict[str, list] = {f.name: [] for f in SCHEMA}
    for r, s, ls, ds, de in _streams(pairs):
        n = len(ls)
        ones = np.ones(n, dtype=np.int64)
        tq, q = _step(np.r_[ls, ds], np.r_[ones, -ones])
        to, o = _step(np.r_[ls, de], np.r_[ones, -ones])
        lo, hi = float(ls.min()), float(max(de.max(), ds.max()))
        # both step functions over the same span: pad with the zero value at its end
        tq, q = np.r_[tq, hi], np.r_[q, 0]
        to, o = np.r_[to, hi], np.r_[o, 0]
        out["rank"].append(r)
        out["stream"].append(s)
        out["launches"].append(n)
        out["span_us"].append(hi - lo)
        out["max_queued"].append(int(q.max()))
        out["mean_queued"].append(_weighted_mean(tq, q))
        out["max_outstanding"].append(int(o.max()))
        out["mean_outstanding"].append(_weighted_mean(to, o))
    return pa.table(out, schema=SCHEMA)


#: What `summary` reads of the launch pairs (the kernel and launch names are most of the rest).
_PAIR_COLUMNS = "rank, stream, launch_start_us, start_us, end_us"


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return summary(launch_pairs_with_times(con, columns=_PAIR_COLUMNS))
