"""Cross-thread waits (``thread`` edges): a host thread that sits idle or inside an op while
another thread of its process works, and resumes when that thread's work ends, was waiting on it
(the autograd engine's thread during ``backward``, DDP's reducer, c10d work objects waited on,
``record_param_comms`` on worker threads, data-loader threads).

The rule, per gap of a process's main thread (its tid is its pid; else the thread with the
most events: the thread that runs the training loop and waits for the others) (the time between two consecutive points of the
thread, inside an op's self time or outside every op) of at least `MIN_WAIT_US`: if another
thread of the same process (same pid in ``host:<pid>:<tid>``) ran work (non-passive ops) for at
least `BUSY_FRACTION` of the gap, and its last work in the gap ended within the gap's last
`RESUME_FRACTION`, that work's end → the resuming point is a ``thread`` edge (when the other thread's first work
lies inside the gap, only if it began within the gap's first `RESUME_FRACTION`: it was started
by the waiting thread, and a later start is a delay nothing explains) whose lag is the
time from that end to the resume (the return latency), and the chain keeps only that latency.
A gap that long with another thread that busy but no such end is *unexplained* (counted, not
host work). A worker thread that was idle when the wait began and took up work within the gap's
first `RESUME_FRACTION` (the engine thread running the next ``backward``, not only its first)
was started by it: the waiting thread's point before the gap → the worker's first point after
its idle time began is a ``thread`` edge with the measured delay (counted as unexplained), and
the worker's idle gap is dropped, so a faster main thread (or faster device work it waits on)
starts it earlier. A thread holding requests (`replay.graph.requests`: a trace without steps) waits the same way
inside its requests, on the threads of its process that hold none. The edge to a started thread
runs to its first point in the gap (marks before it stay where measured). Limits: a wait on a
thread the trace does not record, or on several threads
at once, is not inferred; a worker's idle gap that no wait of the main thread starts is kept
as measured; the thresholds are assumed.
"""

from __future__ import annotations

import numpy as np

from replay.graph.events import EventArrays

#: Shortest gap taken as a possible wait, us (assumed: well above a launch or Python dispatch).
MIN_WAIT_US = 100.0
#: Share of the gap the other thread must be working (assumed).
BUSY_FRACTION = 0.5
#: The other thread's work must end within this last share of the gap (assumed).
RESUME_FRACTION = 0.1


def _pid(track: str) -> str | None:
    parts = track.split(":")
    return parts[1] if len(parts) == 3 and parts[0] == "host" else None


def _main_thread(threads: list[int], names: list[str], runs: np.ndarray) -> int:
    """The process's main thread: its tid is the pid (Linux), else the thread with most events."""
    for t in threads:
        parts = names[t].split(":")
        if parts[1] == parts[2]:
            return t
    return max(threads, key=lambda t: int(runs[t + 1] - runs[t]))


def _blocks(ids: np.ndarray, ts: np.ndarray, end: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union of the intervals of ``ids`` as blocks: (start, end, the op ending each block)."""
    o = ids[np.argsort(ts[ids], kind="stable")]
    e = end[o]
    run = np.maximum.accumulate(e)
    new = np.ones(len(o), dtype=bool)
    new[1:] = ts[o[1:]] > run[:-1]
    b0 = np.flatnonzero(new)
    b1 = np.append(b0[1:], len(o)) - 1
    k = np.arange(len(o))
    arg = np.maximum.accumulate(np.where(e >= run, k, 0))
    return ts[o[b0]], run[b1], o[arg[b1]]


def thread_waits(ev: EventArrays, track_names: list[str], order: np.ndarray,
                 track_ptr: np.ndarray, chain: np.ndarray, gap: np.ndarray, tpos: np.ndarray,
                 requests: dict[int, tuple[np.ndarray, np.ndarray]] | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                            tuple[np.ndarray, np.ndarray], dict[str, object]]:
    """(source event ids, waiting positions, lags) of the ``thread`` edges, the positions of
    unexplained waits, (waiting position before the wait, first position of the thread it
    started or restarted) pairs, and notes. ``track_names``: each track's name; the chain arrays are
    `replay.graph.chains.Chains`'. ``requests``: per thread holding requests
    (`replay.graph.requests`), their measured (starts, ends): such a thread waits like a main
    thread inside its requests, on the threads of its process that hold none."""
    src: list[int] = []
    pos: list[int] = []
    lag: list[float] = []
    unexplained: list[int] = []
    started: dict[int, int] = {}  # first position of work started inside a wait -> the wait's
    work = ~ev.passive & ~ev.is_dev
    by_proc: dict[tuple[int, str], list[int]] = {}
    for t in range(len(track_names)):
        if chain[t] or t >= len(ev.runs) - 1:
            continue
        p = _pid(track_names[t])
        if p is not None:
            by_proc.setdefault((int(ev.rank[ev.runs[t]]), p), []).append(t)
    waited_us = 0.0
    requests = requests or {}
    in_requests = 0
    for threads in by_proc.values():  # processes: few
        if len(threads) < 2:
            continue
        blocks = {}
        for t in threads:
            ids = np.arange(ev.runs[t], ev.runs[t + 1])
            ids = ids[work[ids]]
            if len(ids):
                blocks[t] = _blocks(ids, ev.ts, ev.end)
        main = _main_thread(threads, track_names, ev.runs)
        waiters = [(main, None)] + [(t, requests[t]) for t in threads
                                    if t in requests and t != main]
        for a, spans in waiters:
            lo, hi = int(track_ptr[a]) + 1, int(track_ptr[a + 1])
            k = lo + np.flatnonzero(gap[lo:hi] >= MIN_WAIT_US)
            if spans is not None and len(k):
                # a request thread: only gaps inside one of its requests
                j = np.searchsorted(spans[0], tpos[k - 1], side="right") - 1
                k = k[(j >= 0) & (tpos[k] <= spans[1][np.maximum(j, 0)])]
            if not len(k):
                continue
            w0, w1 = tpos[k - 1], tpos[k]
            best_end = np.full(len(k), -np.inf)
            best_src = np.full(len(k), -1, dtype=np.int64)
            best_thr = np.full(len(k), -1, dtype=np.int64)
            busy_any = np.zeros(len(k), dtype=bool)
            for b, (bs, be, bop) in blocks.items():
                if b == a or (spans is not None and b in requests):
                    continue
                # busy time of b inside each window, from the blocks' running sum
                cum = np.concatenate([[0.0], np.cumsum(be - bs)])

                def busy_before(x: np.ndarray, bs=bs, be=be, cum=cum) -> np.ndarray:
                    j = np.searchsorted(bs, x, side="right")  # blocks starting by x
                    jj = np.maximum(j - 1, 0)
                    part = np.where(j > 0, np.clip(x - bs[jj], 0.0, be[jj] - bs[jj]), 0.0)
                    return cum[jj] + part

                busy = busy_before(w1) - busy_before(w0)
                j = np.searchsorted(be, w1, side="right") - 1
                ok = (j >= 0) & (busy >= BUSY_FRACTION * (w1 - w0))
                busy_any |= ok
                jc = np.maximum(j, 0)
                e = np.where(ok, be[jc], -np.inf)
                ok &= e >= w1 - RESUME_FRACTION * (w1 - w0)
                # a thread whose first work falls inside the gap was started by the waiting
                # one: only if it started right away (its start is pinned where measured, so a
                # later start is a delay no dependency explains)
                ok &= (bs[0] <= w0) | (bs[0] - w0 <= RESUME_FRACTION * (w1 - w0))
                better = ok & (e > best_end)
                best_end[better] = e[better]
                best_src[better] = bop[jc[better]]
                best_thr[better] = b
            hit = best_src >= 0
            for i in np.flatnonzero(hit).tolist():
                b = int(best_thr[i])
                bs, be = blocks[b][0], blocks[b][1]
                if bs[0] > w0[i]:  # the thread's first work: started by this wait
                    # its first point in the gap (marks before the gap stay where measured)
                    ta, tz = int(track_ptr[b]), int(track_ptr[b + 1])
                    at = ta + int(np.searchsorted(tpos[ta:tz], w0[i], side="left"))
                    started.setdefault(min(at, tz - 1), int(k[i] - 1))
                    continue
                # the thread idle when the wait began and taking up work right after it (the
                # engine thread running the next ``backward``): restarted by this wait
                nb = int(np.searchsorted(bs, w0[i], side="left"))
                if (0 < nb < len(bs) and be[nb - 1] <= w0[i] and bs[nb] < w1[i]
                        and bs[nb] - w0[i] <= RESUME_FRACTION * (w1[i] - w0[i])):
                    ta, tz = int(track_ptr[b]), int(track_ptr[b + 1])
                    # its first point after the idle time began (a point at the last work's
                    # end is that work's)
                    at = ta + int(np.searchsorted(tpos[ta:tz], max(w0[i], be[nb - 1]),
                                                  side="right" if be[nb - 1] >= w0[i]
                                                  else "left"))
                    if at < tz:
                        started.setdefault(at, int(k[i] - 1))
            if spans is not None:
                in_requests += int(hit.sum())
            src.extend(best_src[hit].tolist())
            pos.extend(k[hit].tolist())
            lag.extend((w1[hit] - best_end[hit]).tolist())
            waited_us += float((best_end[hit] - w0[hit]).sum())
            unexplained.extend(k[busy_any & ~hit].tolist())
    # a thread started inside a wait starts after the waiting thread's point before the wait (by
    # its measured lag), not pinned where it was measured: a delay before it moves it
    st_from = np.asarray(list(started.values()), dtype=np.int64)
    st_to = np.asarray(list(started), dtype=np.int64)
    notes: dict[str, object] = {"thread_waits": len(src), "thread_waited_us": waited_us,
                                "thread_waits_unexplained": len(unexplained),
                                "threads_started": len(st_to)}
    if requests:
        notes["thread_waits_in_requests"] = in_requests
    return (np.asarray(src, dtype=np.int64), np.asarray(pos, dtype=np.int64),
            np.asarray(lag, dtype=np.float64), np.asarray(unexplained, dtype=np.int64),
            (st_from, st_to), notes)
