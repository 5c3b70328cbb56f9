"""Parent and depth of events on host tracks, vectorized by pointer jumping.

Rows are sorted by (track, ts, -dur). The parent of an event is the nearest earlier event on
the same track whose end is not before the event's end — what a stack of open intervals
would give. Each round replaces an unresolved candidate by the candidate's own candidate;
everything skipped ends before the event does, so the answer is exact and the number of
rounds grows with the log of the nesting run length; depths come by pointer jumping too.
"""

from __future__ import annotations

import numpy as np

#: Timestamps are float µs at ~1e12; their ulp is ~1e-3 µs, so ends within 1 ns are equal.
END_TOLERANCE_US = 1e-3


def parents(track_start: np.ndarray, ts: np.ndarray, dur: np.ndarray,
            can_parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent_id, depth) for rows sorted by (track, ts, -dur).

    track_start[i] is the row index where row i's track begins; rows where can_parent is
    false (instants, device rows) never enclose others.
    """
    n = len(ts)
    end = ts + dur
    end_cmp = end + END_TOLERANCE_US
    # the chain runs only through rows that can enclose others
    last_capable = np.maximum.accumulate(np.where(can_parent, np.arange(n, dtype=np.int64), -1))
    cand = np.empty(n, dtype=np.int64)
    cand[0:1] = -1
    cand[1:] = last_capable[:-1]
    cand[cand < track_start] = -1
    done = cand < 0
    ok = np.zeros(n, dtype=bool)
    idx = np.flatnonzero(~done)
    ok[idx] = end_cmp[cand[idx]] >= end[idx]
    pending = idx[~ok[idx]]
    while len(pending):
        c = cand[pending]
        nxt = cand[c]  # the candidate's candidate (its parent once resolved)
        nxt[nxt < track_start[pending]] = -1
        cand[pending] = nxt
        alive = nxt >= 0
        pend_alive = pending[alive]
        good = end_cmp[cand[pend_alive]] >= end[pend_alive]
        pending = pend_alive[~good]
    parent = cand
    return parent, depths(parent)


def depths(parent: np.ndarray) -> np.ndarray:
    """Each row's number of ancestors, by pointer jumping: each round adds the distance to the
    current ancestor and jumps to that ancestor's, so a chain of any length takes log2(length)
    rounds (a walk one level per round is quadratic on 100k nested events)."""
    up = parent.copy()
    dist = (up >= 0).astype(np.int64)
    active = np.flatnonzero(up >= 0)
    while len(active):
        a = up[active]
        dist[active] += dist[a]  # old values: the distance on to a's ancestor
        up[active] = up[a]
        active = active[up[active] >= 0]
    return dist.astype(np.int32)
