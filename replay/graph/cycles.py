"""Edges that close a cycle (a trace whose flow events or correlation ids disagree with its
kernels: a kernel "launched" by a call made after it ran, behind a synchronize that waited for
it). Every track chain runs forward in measured time, so only an edge running backward in time
(its source point measured after its destination) can close a cycle; each such edge is checked
(can its destination reach its source through points no later than the source?) and dropped
when it does. The graph's notes count what was dropped; `inspect`, `validate` and `replay` warn.
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: An edge runs backward when its source point is measured this much after its destination, us
#: (Kineto times have 1 ns resolution; launches a few ns after their kernel are clock noise).
BACKWARD_TOL_US = 1e-3

#: Points one check may visit; an edge whose check runs out is dropped as well (and counted).
VISIT_BUDGET = 200_000


def cycle_edges(order: np.ndarray, track_ptr: np.ndarray, ptime: np.ndarray,
                src_pt: np.ndarray, dst_pt: np.ndarray, mutual: np.ndarray
                ) -> tuple[np.ndarray, dict[str, int]]:
    """(a mask of the cross edges that close a cycle, notes). ``ptime``: measured time per
    point id; chain order per track as in `replay.graph.chains.Chains`; ``mutual``: edges that
    come in pairs by design (collective instances start together), never dropped."""
    drop = np.zeros(len(src_pt), dtype=bool)
    back = np.flatnonzero((ptime[src_pt] > ptime[dst_pt] + BACKWARD_TOL_US) & ~mutual)
    notes = {"backward_edges": int(len(back)), "cycle_edges_dropped": 0,
             "cycle_checks_out_of_budget": 0}
    if not len(back):
        return drop, notes
    npts = len(ptime)
    nxt = np.full(npts, -1, dtype=np.int64)  # chain successor of each point
    same = np.ones(len(order), dtype=bool)
    same[track_ptr[1:-1][track_ptr[1:-1] < len(order)] - 1] = False  # a track's last point
    same[-1:] = False
    nxt[order[:-1][same[:-1]]] = order[1:][same[:-1]]
    eo = np.argsort(src_pt, kind="stable")
    s_sorted = src_pt[eo]
    alive = np.ones(len(src_pt), dtype=bool)
    for e in back.tolist():  # backward edges: few in a sane trace
        alive[e] = False  # does the destination reach the source without this edge?
        target, limit = int(src_pt[e]), float(ptime[src_pt[e]]) + BACKWARD_TOL_US
        seen = {int(dst_pt[e])}
        todo = deque(seen)
        found = False
        visits = 0
        while todo and not found:
            p = todo.popleft()
            visits += 1
            if visits > VISIT_BUDGET:
                notes["cycle_checks_out_of_budget"] += 1
                found = True
                break
            lo, hi = np.searchsorted(s_sorted, [p, p + 1])
            outs = [int(dst_pt[k]) for k in eo[lo:hi].tolist() if alive[k]]
            if nxt[p] >= 0:
                outs.append(int(nxt[p]))
            for q in outs:
                if q == target:
                    found = True
                    break
                if q not in seen and ptime[q] <= limit:
                    seen.add(q)
                    todo.append(q)
        if found:
            drop[e] = True
        else:
            alive[e] = True
    notes["cycle_edges_dropped"] = int(drop.sum())
    return drop, notes


def cycle_warning(notes: dict[str, object]) -> str | None:
    """The one-line warning for a graph's notes when edges closing a cycle were dropped."""
    n = int(notes.get("cycle_edges_dropped", 0) or 0)  # type: ignore[call-overload]
    if not n:
        return None
    return (f"{n} dependency edge(s) ran backward in time and closed a cycle (flow events or "
            "correlation ids inconsistent with their kernels); dropped, so those kernels start "
            "from their stream and other inputs only")
