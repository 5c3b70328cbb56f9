"""Launch back-pressure (``queue`` edges): a launch call that finds its device queue full
returns only when a queued op ends and frees a slot.

A queue is a device stream (HTA's queue length: the ops launched on a stream and not finished
yet; its documentation says a CUDA stream takes 1024 before the CPU stalls). Per stream, in
launch order, a launch call's *outstanding* count is the number of ops launched before it that
had not ended when it started. The stream's depth is ``max outstanding + 1`` where the trace
shows the queue full, else `DEFAULT_LAUNCH_QUEUE_DEPTH` (or more, if the trace held more
without blocking).

A launch is *blocked* when its queue was full (outstanding at least `FULL_FRACTION` of the
stream's maximum, which is at least `MIN_FULL_DEPTH`), it took more than `SLOW_FACTOR` times
the median launch call of its stream made with the queue below that, and an op launched before it ended while it ran; the op that freed its slot is the last of those, and only the part of the call after
that end (its return latency) is host cost: ``queue`` edge freeing op end → call end with that
latency, the call costed at it. Every other launch ``i`` on a stream of depth ``D`` gets the
edge from op ``i - D`` (its slot) with no latency: it holds in the measured trace (that op had
ended), and binds on a target where the device falls behind the host.

Ops on a stream end in launch order (one queue, FIFO); a blocking copy or synchronize call is
already a ``sync`` wait and is left out. Ops without a launch link (e.g. a CUDA graph's kernels)
are not counted: their place in launch order is unknown.
"""

from __future__ import annotations

import numpy as np

from replay.graph.events import EventArrays
from replay.graph.sync import Launches, Streams

#: Pending launches a stream takes before the launching call blocks, where the trace does not
#: show it. Published: HTA's documentation (Augmented Counters, "Queue Length": "When the queue
#: length on a stream is 1024 or larger new events cannot be scheduled on that stream and the
#: CPU will stall", https://hta.readthedocs.io/en/latest/source/features/augmented_counters.html).
DEFAULT_LAUNCH_QUEUE_DEPTH = 1024

#: A launch found its queue full when its outstanding count is at least this fraction of the
#: stream's maximum (assumed: the runtime's limit is in bytes of commands, so the count it
#: blocks at varies with the ops' arguments; measured spread on a real A100 trace: 926-994).
FULL_FRACTION = 0.9

#: A blocked call takes longer than this many times the median launch call of its stream made
#: below the full count (assumed): a call of usual length during which an op happened to end did not wait.
SLOW_FACTOR = 2.0

#: A stream whose outstanding count never reached this is not taken to have filled (assumed;
#: a sixteenth of the published 1024): a slow launch on a shallow queue is host work.
MIN_FULL_DEPTH = 64


def queue_edges(ev: EventArrays, lc: Launches, st: Streams, sync_lag: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, object]]:
    """(src, dst, lag) of the ``queue`` edges (event ids: op end → launch call end), each
    event's ``queue_lag`` (a blocked launch's return latency, nan otherwise), and notes."""
    n = ev.n
    queue_lag = np.full(n, np.nan)
    srcs: list[np.ndarray] = []
    dsts: list[np.ndarray] = []
    lags: list[np.ndarray] = []
    depths: list[int] = []
    tops: list[int] = []
    full: list[int] = []
    for s in range(len(st.keys)):  # streams: few
        a, b = int(st.bounds[s]), int(st.bounds[s + 1])
        ids = st.ids[a:b]  # by launch key
        # ops without a launch link cannot be placed in launch order; device annotations span
        # ops: neither is counted
        ids = ids[lc.has_launch[ids] & ~ev.dev_marker[ids]]
        if not len(ids):
            continue
        own = ev.end[ids]
        ends = np.maximum.accumulate(own)  # FIFO: an op ends no earlier than the last
        k = np.arange(len(ids))
        last = np.maximum.accumulate(np.where(own >= ends, k, 0))  # the op holding ``ends``
        p = np.arange(len(ids))
        L = lc.launch[ids]
        done = np.minimum(np.searchsorted(ends, ev.ts[L], side="right"), p)
        out = p - done  # launched before, not ended when the call started
        top = int(out.max())
        # the last op launched before the call that ended by its return
        f = np.minimum(np.searchsorted(ends, ev.end[L], side="right") - 1, p - 1)
        at_cap = out >= FULL_FRACTION * top
        usual = ev.dur[L[~at_cap]] if (~at_cap).any() else ev.dur[L]
        slow = ev.dur[L] > SLOW_FACTOR * (np.median(usual) if (~at_cap).any() else usual.min())
        blocked = (at_cap & (top >= MIN_FULL_DEPTH) & (out > 0)
                   & (f >= done) & slow & ~np.isfinite(sync_lag[L]))
        depth = top + 1 if blocked.any() else max(DEFAULT_LAUNCH_QUEUE_DEPTH, top + 1)
        if blocked.any():
            full.append(depth)
        depths.append(depth)
        tops.append(top + 1)
        bi = np.flatnonzero(blocked)
        if len(bi):
            fr = ids[last[f[bi]]]
            r = np.clip(ev.end[L[bi]] - ends[f[bi]], 0.0, None)
            srcs.append(fr)
            dsts.append(L[bi])
            lags.append(r)
            cur = np.where(np.isfinite(queue_lag[L[bi]]), queue_lag[L[bi]], np.inf)
            queue_lag[L[bi]] = np.minimum(cur, r)
        slot = ~blocked & (p >= depth)
        if slot.any():
            srcs.append(ids[p[slot] - depth])
            dsts.append(L[slot])
            lags.append(np.zeros(int(slot.sum())))
    src = np.concatenate(srcs).astype(np.int64) if srcs else np.zeros(0, dtype=np.int64)
    dst = np.concatenate(dsts).astype(np.int64) if dsts else np.zeros(0, dtype=np.int64)
    lag = np.concatenate(lags) if lags else np.zeros(0)
    blk = np.isfinite(queue_lag)
    notes: dict[str, object] = {
        "launch_queue": {
            "streams": len(depths), "streams_full": len(full),
            # most launches a stream held (the launching call included), and the depth taken:
            # measured where it filled, else the published default
            "outstanding_max": max(tops) if tops else 0,
            "depth_measured": max(full) if full else None,
            "depth_default": DEFAULT_LAUNCH_QUEUE_DEPTH,
            "blocked_launches": int(blk.sum()),
            "blocked_us": float((ev.dur[blk] - queue_lag[blk]).sum()),
        }}
    return src, dst, lag, queue_lag, notes
