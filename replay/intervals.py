"""Interval arithmetic over arrays: merge intervals, measure how much of a span they cover."""

from __future__ import annotations

import numpy as np


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
