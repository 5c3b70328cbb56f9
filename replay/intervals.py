"""Interval arithmetic over arrays: merge intervals, measure how much of a span they cover, and
the overlap of each device event with its rank's communication."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.schema import COMM_KINDS
from replay.groups import runs


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


def overlap_fraction(events: pa.Table, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per event: fraction of its span [start, end) overlapping communication device events
    (kinds collective, p2p) of its rank; 0 for communication and host events."""
    rank = events.column("rank").to_numpy()
    is_dev = events.column("is_device").to_numpy(zero_copy_only=False)
    comm = pc.is_in(events.column("kind"), value_set=pa.array(COMM_KINDS))
    comm = is_dev & comm.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    frac = np.zeros(len(rank))
    dev = np.flatnonzero(is_dev)
    rows, bounds, _ = runs(rank[dev])  # device rows of each rank as one slice: O(N) over ranks
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        mine = dev[rows[lo:hi]]
        c = comm[mine]
        if not c.any():
            continue
        seg_s, seg_e = union(start[mine[c]], end[mine[c]])
        sel = mine[~c]
        span = end[sel] - start[sel]
        ov = covered(seg_s, seg_e, start[sel], end[sel])
        frac[sel] = np.where(span > 0, ov / np.where(span > 0, span, 1), 0.0)
    return frac
