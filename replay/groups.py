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
