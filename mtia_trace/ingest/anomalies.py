"""Timestamp anomalies: events whose recorded times cannot be right, named before any replay.

A single corrupt timestamp (a flipped digit, a zero in a Unix-epoch trace) puts an event in the
wrong place on its track and can tie the dependency graph into a cycle. These checks run on the
ingested events table and refuse such a trace in one line naming the event:

* an **outlier**: an event starting or ending more than ``OUTLIER_SPANS`` times the span of its
  rank's middle 98 % of starts (at least one event trimmed from each end), and at least
  ``OUTLIER_MIN_US``, away from them;
* a device event starting more than ``LAUNCH_SLACK_US`` **before the runtime call that launched
  it** (host and device clocks agree to about a millisecond in Kineto exports).

Fully duplicated complete events (same rank, track, name, start, duration, correlation and External id)
are kept but reported as a warning: they usually mean a trace was merged or exported twice.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace import keys
from mtia_trace.errors import TraceFormatError

#: An outlier lies this many spans of its rank's middle starts outside them ...
OUTLIER_SPANS = 100.0
#: ... and at least this far (us): one minute, longer than any profiling window's gaps.
OUTLIER_MIN_US = 60e6
#: A device event may appear to start this long before its launch: clock conversion jitter is
#: microseconds on GPUs and up to ~1.2 ms on MTIA exports; an event moved seconds earlier than
#: its launch ties the graph into a cycle (a sync between the launches waits on it).
LAUNCH_SLACK_US = 10_000.0

_FIX = "fix or drop the event, or re-export the trace"


def _describe(events: pa.Table, i: int) -> str:
    row = events.slice(i, 1).select(["name", "rank", "src_file", "ts_us", "dur_us"]).to_pylist()[0]
    return (f"{row['src_file']}: event {str(row['name'])[:60]!r} (rank {row['rank']}, "
            f"ts {row['ts_us']:.17g} us, dur {row['dur_us']:.6g} us)")


def _outliers(rank: np.ndarray, ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows lying far outside their rank's bulk of starts, and how far (us). The events table
    is in rank order, so each rank's rows are a slice (views, no copies); other input is put
    in rank order first."""
    order = None
    if len(rank) > 1 and (rank[1:] < rank[:-1]).any():
        order = np.argsort(rank, kind="stable")
        rank, ts, end = rank[order], ts[order], end[order]
    cuts = np.r_[0, np.flatnonzero(rank[1:] != rank[:-1]) + 1, len(rank)].tolist()
    bad, dist = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        if b - a < 4:
            continue
        k = max(1, (b - a) // 100)  # trim 1 % (at least one event) from each end
        t = np.partition(ts[a:b], (k, b - a - 1 - k))  # those two in place: no full sort
        lo, hi = t[k], t[b - a - 1 - k]
        del t
        margin = max(OUTLIER_SPANS * (hi - lo), OUTLIER_MIN_US)
        far = lo - ts[a:b]  # before the bulk, or (below) after it
        np.maximum(far, end[a:b] - hi, out=far)
        hit = np.flatnonzero(far > margin)
        bad.append(hit + a if order is None else order[hit + a])
        dist.append(far[hit])
    if not bad:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    return np.concatenate(bad), np.concatenate(dist)


def check(events: pa.Table) -> list[str]:
    """Raise `TraceFormatError` on corrupt timestamps; return warnings for suspicious ones."""
    if events.num_rows == 0:
        return []
    rank = events.column("rank").to_numpy()
    ts = events.column("ts_us").to_numpy()
    end = ts + events.column("dur_us").to_numpy()
    bad, far = _outliers(rank, ts, end)
    if len(bad):
        k = int(np.argmax(far))
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise TraceFormatError(
            f"{_describe(events, int(bad[k]))}: lies {far[k] / 1e6:.6g} s away from the rank's "
            f"other events{more}; its timestamp is corrupt, {_FIX}")
    launch = events.column("launch_id").to_numpy()
    dev = np.flatnonzero(launch >= 0)
    if len(dev):
        early = ts[launch[dev]] - ts[dev]
        hit = early > LAUNCH_SLACK_US
        if hit.any():
            k = int(np.argmax(np.where(hit, early, -np.inf)))
            n = int(hit.sum())
            more = f" (and {n - 1} more)" if n > 1 else ""
            raise TraceFormatError(
                f"{_describe(events, int(dev[k]))}: starts {early[k]:.6g} us before the runtime "
                f"call that launches it{more}; its timestamp is corrupt, {_FIX}")
    return _duplicates(events)


def _is_text(column: pa.ChunkedArray) -> bool:
    return pa.types.is_string(column.type) or pa.types.is_dictionary(column.type)


def _codes_of(column: pa.ChunkedArray) -> np.ndarray:
    """A column as numbers that are equal exactly where its values are (strings: their
    dictionary indices), so rows compare without copying their text."""
    if _is_text(column):
        column = pc.dictionary_encode(column).combine_chunks().indices
    return column.to_numpy()


def _fold_hash(h: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``h`` (a 64-bit hash per row, updated in place) with one more numeric column folded in:
    rows equal in every column folded get equal hashes (floats compare by value: -0.0 hashes as
    0.0)."""
    bits = (c + 0.0).view(np.uint64) if c.dtype.kind == "f" else c.astype(np.uint64)
    h ^= bits  # in place: one row-length temporary per column, not three
    del bits
    h *= np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(31)
    return h


def _duplicates(events: pa.Table) -> list[str]:
    complete = np.flatnonzero(pc.equal(events.column("ph"), "X").to_numpy(zero_copy_only=False))
    if not len(complete):  # instants repeat legitimately
        return []
    # only rows sharing a hash of the numeric keys can be duplicates: the exact grouping, with
    # the text keys, runs on those few. The hash takes one column at a time, so no copy of all
    # the key columns is ever held
    h = np.zeros(len(complete), dtype=np.uint64)
    for c in _DUPLICATE_KEYS:
        if not _is_text(events.column(c)):
            h = _fold_hash(h, _codes_of(events.column(c))[complete])
    # hashes that occur twice or more, from the sorted hashes (a sort of random 64-bit values
    # is ~3x faster than a hash table of them)
    s = np.sort(h)
    shared = s[1:][s[1:] == s[:-1]]
    del s
    if not len(shared):
        return []
    complete = complete[np.isin(h, shared)]
    del h
    at = pa.array(complete)
    group = keys.codes(*(_codes_of(events.column(c).take(at)) if _is_text(events.column(c))
                         else _codes_of(events.column(c))[complete] for c in _DUPLICATE_KEYS))
    counts = np.bincount(group)
    dup = np.flatnonzero(counts > 1)
    if not len(dup):
        return []
    extra = int(counts[dup].sum()) - len(dup)
    # codes number the groups in order of first appearance: the first duplicated group's row
    row = int(complete[np.argmax(group == dup[0])])
    first = events.slice(row, 1).select(["name", "rank", "ts_us"]).to_pylist()[0]
    return [f"{extra} events are exact duplicates of another (same rank, track, name, start, "
            f"duration and ids; first: {str(first['name'])[:60]!r} on rank {first['rank']} at "
            f"{first['ts_us']:.17g} us): was the trace merged or exported twice? They are "
            "replayed as recorded"]


_DUPLICATE_KEYS = ("rank", "track", "name", "ts_us", "dur_us", "correlation", "external_id")
