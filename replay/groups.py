"""Group-by over sorted keys: each key's rows as one contiguous slice, O(N) for all keys together.

Per-key work then touches only that key's rows (``rows[lo:hi]``) instead of building a full-length
mask per key, which made per-rank passes O(N·R).
"""

from __future__ import annotations

import numpy as np


def runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, bounds, values): ``rows[bounds[i]:bounds[i + 1]]`` are the rows whose key is
    ``values[i]``, in row order; ``values`` ascending. Already-sorted keys (the events table's
    ``rank``) cost one pass; others one stable argsort."""
    keys = np.asarray(keys)
    n = len(keys)
    if n and not (keys[1:] >= keys[:-1]).all():
        rows = np.argsort(keys, kind="stable")
    else:
        rows = np.arange(n)
    k = keys[rows]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if n else np.empty(0, dtype=np.int64)
    return rows, np.r_[starts, n], k[starts]


def ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The integers of every range ``[lo_i, hi_i)`` one after another, and the range each
    belongs to (``i``)."""
    cnt = hi - lo
    seg = np.repeat(np.arange(len(lo)), cnt)
    return np.arange(len(seg)) - np.repeat(np.cumsum(cnt) - cnt - lo, cnt), seg


def segment_cumsum(x: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Running sum of each segment ``x[bounds[i]:bounds[i + 1]]`` (segments back to back), with
    the rounding of `np.cumsum` over that segment alone. Segments of like length share one
    2-D cumsum (lengths within 2x of each other, so the padding at most doubles the work).
    Positions outside every segment keep their value."""
    out = np.array(x, dtype=np.float64)
    starts = np.asarray(bounds[:-1])
    lengths = np.diff(bounds)
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    if not len(starts):
        return out
    size_class = np.ceil(np.log2(lengths)).astype(np.int64)
    for c in np.unique(size_class).tolist():
        rows = np.flatnonzero(size_class == c)
        col = np.arange(int(lengths[rows].max()))
        valid = col[None, :] < lengths[rows][:, None]
        idx = starts[rows][:, None] + col[None, :]
        m = np.where(valid, x[np.minimum(idx, len(x) - 1)], 0.0)
        out[idx[valid]] = np.cumsum(m, axis=1)[valid]
    return out
