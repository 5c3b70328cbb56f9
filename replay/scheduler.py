"""Vectorized scheduling of the point chains of a `Graph` (DESIGN §5).

Along a track chain ``T_k = max(T_{k-1} + w_k, x_k)`` (w: chain lag, x: latest input over the
cross-track edges and the track's base time). With ``C = cumsum(w)`` a whole track is scheduled in
one pass: ``T = C + maximum.accumulate(x - C)``. Cross-track edges are resolved Gauss-Seidel style:
tracks are rescanned (from their first changed input onward) until no time moves; times only grow,
so this converges to the least schedule, the same one an event-by-event list scheduler finds.

Resource pools (`EventCosts.resource`): an event holding a pool of capacity c starts no earlier
than the c-th previous end among the pool's events ordered by ready time; the difference between
ready and start is queueing.

For every point the scheduler records what bound it: the chain (track predecessor), one edge
(by type and source point), the track's base time, or a resource.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from replay.graph import EDGE_CODE, Graph

BOUND_NONE, BOUND_CHAIN, BOUND_RESOURCE = -1, -2, -3
_COLL = EDGE_CODE["collective"]
_TOL = 1e-7  # us; ties within this prefer staying on the track


@dataclass
class Schedule:
    T: np.ndarray          # per point id: replayed time (relative to Graph.t0)
    w: np.ndarray          # per position: chain lag used
    pos: np.ndarray        # per point id: position in Graph.order
    ready: np.ndarray      # per point id: time its own inputs were done (without peers/resources)
    bound: np.ndarray      # per point id: BOUND_* or an edge type code (schema.EDGE_TYPES)
    bound_src: np.ndarray  # per point id: point id that bound it, -1 for none
    coll_wait: np.ndarray  # per event: start - ready for collective instances
    queue: np.ndarray      # per event: start - ready spent waiting for a resource
    passes: int
    peer_ready: np.ndarray | None = None  # per point: ready incl. waiting for peers
    own_bound: np.ndarray | None = None   # per point: binding of the own ready time
    own_src: np.ndarray | None = None


def chain_lags(g: Graph, dur: np.ndarray) -> np.ndarray:
    """Chain lag per position: costed duration for leaf ends, ready lag before device starts,
    measured gaps elsewhere (host self time and gaps)."""
    ev = g.order // 2
    is_end = (g.order % 2) == 1
    w = g.gap.copy()
    w[g.leaf_end] = dur[ev[g.leaf_end]]
    dev_pos = np.repeat(g.track_is_device, np.diff(g.track_ptr))
    w[dev_pos & is_end] = dur[ev[dev_pos & is_end]]
    w[dev_pos & ~is_end] = g.ready_lag[ev[dev_pos & ~is_end]]
    w[g.track_ptr[:-1][g.track_ptr[:-1] < len(w)]] = 0.0
    return w


def _scan(T: np.ndarray, order: np.ndarray, w: np.ndarray, x: np.ndarray, a: int, k0: int,
          b: int) -> None:
    """Schedule positions k0..b-1 of the track starting at a, in place (T per point id)."""
    v0 = T[order[k0 - 1]] if k0 > a else -np.inf
    c = np.cumsum(w[k0:b])
    m = np.maximum.accumulate(x[k0:b] - c)
    T[order[k0:b]] = c + np.maximum(m, v0)


def schedule(g: Graph, dur: np.ndarray, resource: np.ndarray | None = None,
             capacity: np.ndarray | None = None, *, max_passes: int = 100_000) -> Schedule:
    """Least schedule of ``g`` with per-event durations ``dur`` (us)."""
    npts = 2 * g.n
    order = g.order
    w = chain_lags(g, dur)
    pos = np.empty(npts, dtype=np.int64)
    pos[order] = np.arange(len(order))
    ntr = len(g.track_ptr) - 1
    ptr = g.track_ptr
    T = np.full(npts, -np.inf)
    xpos = g.base[order].copy()  # inputs per position; grows as sources move

    # edges grouped by destination track, positions sorted
    dpos = pos[g.dst_pt] if len(g.dst_pt) else np.zeros(0, dtype=np.int64)
    dtrack = np.searchsorted(ptr, dpos, side="right") - 1
    eo = np.argsort(dtrack, kind="stable")
    ebounds = np.searchsorted(dtrack[eo], np.arange(ntr + 1))
    e_src, e_dpos, e_lag = g.src_pt[eo], dpos[eo], g.lag[eo]

    use_res = resource is not None and len(resource) > 0 and bool((resource >= 0).any())
    res_x = np.full(npts, -np.inf)
    base_pos = g.base[order].copy()

    # initial pass: base times only
    for t in range(ntr):
        if ptr[t] < ptr[t + 1]:
            _scan(T, order, w, xpos, ptr[t], ptr[t], ptr[t + 1])
    passes = 1
    for _outer in range(1000):
        while True:
            moved = False
            for t in range(ntr):  # loop over tracks (few)
                a, b = ptr[t], ptr[t + 1]
                lo, hi = ebounds[t], ebounds[t + 1]
                if lo == hi and not use_res:
                    continue
                xs = np.maximum(base_pos[a:b], res_x[order[a:b]]) if use_res else base_pos[a:b].copy()
                if lo < hi:
                    np.maximum.at(xs, e_dpos[lo:hi] - a, T[e_src[lo:hi]] + e_lag[lo:hi])
                grew = np.flatnonzero(xs > xpos[a:b])
                if not len(grew):
                    continue
                xpos[a:b] = xs
                k0 = a + int(grew[0])
                before = T[order[k0:b]].copy()
                _scan(T, order, w, xpos, a, k0, b)
                if not np.array_equal(before, T[order[k0:b]]):
                    moved = True
            passes += 1
            if not moved:
                break
            assert passes < max_passes, "schedule does not converge: the dependency graph has a cycle"
        if not use_res:
            break
        sched = _bindings(g, T, w, pos, e_src, e_dpos, e_lag, eo, order, res_x)
        new_res = _resource_starts(sched.peer_ready, dur, resource, capacity)  # type: ignore[arg-type]
        if np.array_equal(new_res, res_x):
            break
        res_x = np.maximum(res_x, new_res)
    sched = _bindings(g, T, w, pos, e_src, e_dpos, e_lag, eo, order, res_x)
    sched.passes = passes
    return sched


def _resource_starts(ready: np.ndarray, dur: np.ndarray, resource: np.ndarray,
                     capacity: np.ndarray) -> np.ndarray:
    """Earliest start per start point imposed by busy pools (loops over pool events)."""
    out = np.full(len(ready), -np.inf)
    for r in np.unique(resource[resource >= 0]).tolist():
        ids = np.flatnonzero(resource == r)
        cap = int(capacity[r]) if r < len(capacity) else 1
        rd = ready[2 * ids]
        o = np.argsort(rd, kind="stable")
        ends: list[float] = []
        for i in ids[o].tolist():  # pool events: collectives / DMAs, few
            s = ready[2 * i]
            if len(ends) >= cap:
                free = heapq.heappop(ends)
                if free > s:
                    out[2 * i] = free
                    s = free
            heapq.heappush(ends, s + dur[i])
    return out


def _bindings(g: Graph, T: np.ndarray, w: np.ndarray, pos: np.ndarray, e_src: np.ndarray,
              e_dpos: np.ndarray, e_lag: np.ndarray, eo: np.ndarray, order: np.ndarray, res_x: np.ndarray) -> Schedule:
    npts = len(T)
    chain = np.full(npts, -np.inf)
    first = np.zeros(len(order), dtype=bool)
    first[g.track_ptr[:-1][g.track_ptr[:-1] < len(order)]] = True
    prevT = np.empty(len(order))
    prevT[0:1] = -np.inf
    prevT[1:] = T[order[:-1]]
    cv = np.where(first, -np.inf, prevT + w)
    chain[order] = cv
    prev_pt = np.full(npts, -1, dtype=np.int64)
    pp = np.full(len(order), -1, dtype=np.int64)
    pp[1:] = order[:-1]
    pp[first] = -1
    prev_pt[order] = pp

    etype = g.etype[eo]
    dst_pt = order[e_dpos] if len(e_dpos) else np.zeros(0, dtype=np.int64)
    val = T[e_src] + e_lag
    own_e = etype != _COLL
    best = np.full(npts, -np.inf)
    np.maximum.at(best, dst_pt[own_e], val[own_e])
    best_src = np.full(npts, -1, dtype=np.int64)
    best_typ = np.full(npts, BOUND_NONE, dtype=np.int64)
    hit = own_e & (val >= best[dst_pt])
    best_src[dst_pt[hit]] = e_src[hit]
    best_typ[dst_pt[hit]] = etype[hit]

    ready = np.maximum(np.maximum(chain, best), g.base)
    bound = np.full(npts, BOUND_NONE, dtype=np.int64)
    bsrc = np.full(npts, -1, dtype=np.int64)
    is_edge = best >= ready - _TOL
    bound[is_edge] = best_typ[is_edge]
    bsrc[is_edge] = best_src[is_edge]
    is_chain = chain >= ready - _TOL
    bound[is_chain] = BOUND_CHAIN
    bsrc[is_chain] = prev_pt[is_chain]

    own_bound, own_src = bound.copy(), bsrc.copy()
    # collectives: waiting past the own ready time for the last rank to arrive
    peer = ready.copy()
    bound_late = np.full(npts, -1, dtype=np.int64)
    members = np.flatnonzero(g.coll_group >= 0)
    if len(members):
        grp = g.coll_group[members]
        gl = np.full(int(grp.max()) + 1, -np.inf)
        np.maximum.at(gl, grp, ready[2 * members])
        lp = np.full(len(gl), -1, dtype=np.int64)
        last = ready[2 * members] >= gl[grp]
        lp[grp[last]] = 2 * members[last]
        peer[2 * members] = gl[grp]
        bound_late[2 * members] = lp[grp]
    coll_wait = (peer[0::2] - ready[0::2]).clip(0)
    waited = np.flatnonzero(peer > ready + _TOL)
    bound[waited] = _COLL
    bsrc[waited] = bound_late[waited]
    queued = np.flatnonzero(res_x > peer + _TOL)
    bound[queued] = BOUND_RESOURCE
    bsrc[queued] = -1
    queue = (T[0::2] - peer[0::2]).clip(0)
    queue[res_x[0::2] <= peer[0::2] + _TOL] = 0.0
    sched = Schedule(T=T, w=w, pos=pos, ready=ready, bound=bound, bound_src=bsrc,
                     coll_wait=coll_wait, queue=queue, passes=0)
    sched.peer_ready = peer
    sched.own_bound, sched.own_src = own_bound, own_src
    return sched
