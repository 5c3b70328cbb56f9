"""Vectorized scheduling of the point chains of a `Graph` (DESIGN §5).

Along a track chain ``T_k = max(T_{k-1} + w_k, x_k)`` (w: chain lag, x: latest input over the
cross-track edges and the track's base time). With ``C = cumsum(w)`` a whole track is scheduled in
one pass: ``T = C + maximum.accumulate(x - C)``. Cross-track edges are resolved Gauss-Seidel style:
tracks are rescanned (from their first changed input onward) until no time moves; times only grow,
so this converges to the least schedule, the same one an event-by-event list scheduler finds.

Resource pools (`EventCosts.resource`): an event holding a pool of capacity c starts no earlier
than the c-th previous end among the pool's events ordered by ready time; the difference between
ready and start is queueing. Host events with children hold no pool (their children are the
work).

For every point the scheduler records what bound it: the chain (track predecessor), one edge
(by type and source point), the track's base time, or a resource.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
from dataclasses import dataclass

import numpy as np

from replay.graph import EDGE_CODE, Graph
from replay.groups import ranges, segment_cumsum

BOUND_NONE, BOUND_CHAIN, BOUND_RESOURCE = -1, -2, -3
_COLL = EDGE_CODE["collective"]
_TOL = 1e-7  # us; ties within this prefer staying on the track


@dataclass
class Schedule:
    T: np.ndarray          # per point id: replayed time (relative to Graph.t0)
    w: np.ndarray          # per position: chain lag used
    pos: np.ndarray        # per point id: position in Graph.order
    ready: np.ndarray      # per point id: time its own inputs were done (without peers/resources)
    bound: np.ndarray      # per point id (int8): BOUND_* or an edge type code (schema.EDGE_TYPES)
    bound_src: np.ndarray  # per point id: point id that bound it, -1 for none
    coll_wait: np.ndarray  # per event: start - ready for collective instances
    queue: np.ndarray      # per event: start - ready spent waiting for a resource
    passes: int
    peer_ready: np.ndarray | None = None  # per point: ready incl. waiting for peers
    own_bound: np.ndarray | None = None   # per point: binding of the own ready time
    own_src: np.ndarray | None = None


def chain_lags(g: Graph, dur: np.ndarray, gap: np.ndarray | None = None,
               ready_lag: np.ndarray | None = None) -> np.ndarray:
    """Chain lag per position: costed duration for leaf ends, ready lag before device starts,
    measured gaps elsewhere (host self time and gaps). ``dur`` per event, or (events x
    scenarios) with ``gap`` (positions x scenarios) and optionally ``ready_lag`` (events x
    scenarios, else ``g``'s for all): one column of lags per scenario."""
    ev = g.order // 2
    is_end = (g.order % 2) == 1
    w = (g.gap if gap is None else gap).copy()
    w[g.leaf_end] = dur[ev[g.leaf_end]]
    dev_pos = np.repeat(g.track_is_device, np.diff(g.track_ptr))
    w[dev_pos & is_end] = dur[ev[dev_pos & is_end]]
    lag = (g.ready_lag if ready_lag is None else ready_lag)[ev[dev_pos & ~is_end]]
    w[dev_pos & ~is_end] = lag if w.ndim == lag.ndim else lag[:, None]
    w[g.track_ptr[:-1][g.track_ptr[:-1] < len(w)]] = 0.0
    return w


def contention_lags(g: Graph, dur: np.ndarray) -> Graph:
    """``g`` with each ``contention`` edge's lag less the share of its source's duration ``dur``
    that the waiting kernel overlapped (`Graph.contention_tail`): it starts as the source's last
    blocks drain, and a shorter source drains sooner."""
    tail = g.contention_tail
    if tail is None or not tail.any():
        return g
    m = g.etype == EDGE_CODE["contention"]
    lag = g.lag.copy()
    lag[m] -= tail[g.dst_pt[m] // 2] * dur[g.src_pt[m] // 2]
    return dataclasses.replace(g, lag=lag)


#: segments longer than this take one running-maximum call each, the rest are scanned together
_LONG = 64
#: this many segments or fewer take one running-maximum call each, whatever their length
_FEW = 16


def _segment_cummax(m: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> None:
    """The running maximum of each segment ``m[starts_i:starts_i + lens_i]``, in place (the
    segments are back to back; a 2-D ``m`` runs down its rows, each column on its own). Short segments together: step d takes the maximum with the
    value d back in the same segment (d = 1, 2, 4, ...); each long one by itself."""
    if not len(m):
        return
    if len(lens) <= _FEW:  # few segments (often: a round that advances a track per rank)
        for a, n in zip(starts.tolist(), lens.tolist()):
            np.maximum.accumulate(m[a:a + n], axis=0, out=m[a:a + n])
        return
    r = np.arange(len(m)) - np.repeat(starts, lens)  # position within its segment
    top = int(min(lens.max(), _LONG))
    d = 1
    while d < top:
        ok = r[d:] >= d
        prev = m[:-d].copy()
        np.maximum(m[d:], prev, out=m[d:], where=ok if m.ndim == 1 else ok[:, None])
        d *= 2
    for i in np.flatnonzero(lens > _LONG).tolist():
        a = int(starts[i])
        np.maximum.accumulate(m[a:a + int(lens[i])], axis=0, out=m[a:a + int(lens[i])])


class _Solver:
    """Least schedule of the point chains plus cross-track edges.

    Per position k of a track: ``M_k = max(M_{k-1}, x_k - C_k)`` and ``T_k = C_k + M_k`` (C the
    track's running sum from its first point, x the latest input). M is carried instead of T, so
    every time is the same function of its track's inputs however the work is split (one process
    or many). Tracks advance as far as their inputs are final, all ready tracks in one vector
    step per round (a worklist: a blocked track waits for the track holding its missing input);
    instances of a collective, which wait for each other, are settled together once all of them
    are otherwise ready. Anything else left (a
    cycle through a track chain) falls back to repeated rescans, which reach the same fixpoint.
    """

    def __init__(self, g: Graph, w: np.ndarray | None, pos: np.ndarray) -> None:
        self.order, self.ptr = g.order, g.track_ptr
        self.ntr = len(self.ptr) - 1
        # each track's running sum from its first point (without lags: the structure only)
        self.C = segment_cumsum(w, self.ptr) if w is not None else np.zeros(0)
        ne = len(g.dst_pt)
        dpos = pos[g.dst_pt] if ne else np.zeros(0, dtype=np.int64)
        eo = np.argsort(dpos, kind="stable")
        self.eo = eo
        self.dpos = dpos[eo]
        self.src = g.src_pt[eo]
        self.spos = pos[self.src] if ne else np.zeros(0, dtype=np.int64)
        self.lag = g.lag[eo]
        trk = np.repeat(np.arange(self.ntr, dtype=np.int64), np.diff(self.ptr))
        self.strk = trk[self.spos] if ne else np.zeros(0, dtype=np.int64)
        self.ebounds = np.searchsorted(self.dpos, self.ptr)  # edges into track t: [eb[t], eb[t+1])
        self.base_pos = g.base[self.order]

    # -- the worklist -------------------------------------------------------------------------
    def run(self, xb: np.ndarray, npts: int, max_passes: int = 100_000,
            plan: SchedulePlan | None = None) -> tuple[np.ndarray, int]:
        """The least schedule with base times ``xb`` (per position). With ``plan``: its rounds
        when it holds them for this graph, else the worklist's rounds are recorded into it."""
        self.xb = xb
        self.T = np.full(npts, -np.inf)
        self.M = np.empty(len(self.order))
        if plan is not None and plan.steps is not None:
            if plan.rescan:
                return self._rescan(npts, max_passes)
            for step in plan.steps:
                step.apply(self)
            return self.T, 1
        self.steps: list[_Advance | _Settle] | None = [] if plan is not None else None
        T, passes = self._worklist(npts, max_passes)
        if plan is not None:
            plan.steps, plan.rescan = self.steps, self._rescanned
        return T, passes

    def _step(self, step: _Advance | _Settle) -> None:
        step.apply(self)
        if self.steps is not None:
            self.steps.append(step)

    def _worklist(self, npts: int, max_passes: int) -> tuple[np.ndarray, int]:
        ptr = self.ptr
        self._rescanned = False
        self.f = ptr[:-1].copy()
        self.ep = self.ebounds[:-1].copy()
        # per track: the track it waits for (-1: none) and the earliest point of it needed
        self.wait_on = np.full(self.ntr, -1, dtype=np.int64)
        self.wait_need = np.zeros(self.ntr, dtype=np.int64)
        end = ptr[1:]
        work = np.flatnonzero(ptr[1:] > ptr[:-1])
        while True:
            while len(work):
                work = self._advance(work)
            if not (self.f < end).any():
                return self.T, 1
            woke = self._settle_heads()
            if woke is None:
                self._rescanned = True
                return self._rescan(npts, max_passes)
            work = woke

    def _wake(self) -> np.ndarray:
        """The waiting tracks whose awaited point is final now (no longer waiting)."""
        w = np.flatnonzero(self.wait_on >= 0)
        w = w[self.wait_need[w] < self.f[self.wait_on[w]]]
        self.wait_on[w] = -1
        return w

    def _advance(self, ts: np.ndarray) -> np.ndarray:
        """Finalize every track of ``ts`` as far as its inputs were final when the round began
        (one step per track, all tracks at once); returns the tracks to advance next."""
        f, ep = self.f, self.ep
        e1 = self.ebounds[ts + 1]
        eb = self._first_blocked(ep[ts], e1)
        blocked = eb < e1
        k = self.ptr[ts + 1]
        k[blocked] = self.dpos[eb[blocked]]
        eend = np.searchsorted(self.dpos, k)  # edges sorted by destination: those before k
        moved = k > f[ts]
        if moved.any():
            self._step(_Advance(self, ts[moved], f[ts[moved]], k[moved], ep[ts[moved]],
                                eend[moved]))
        f[ts] = k
        ep[ts] = eend
        bt, be = ts[blocked], eb[blocked]
        s, need = self.strk[be], self.spos[be]
        final = need < f[s]  # e.g. its source is on its own track and now final
        self.wait_on[bt[~final]] = s[~final]  # a track blocks on one point at a time
        self.wait_need[bt[~final]] = need[~final]
        return np.concatenate([bt[final], self._wake()])  # disjoint: those were not waiting

    def _first_blocked(self, e0: np.ndarray, e1: np.ndarray) -> np.ndarray:
        """Per track: the first edge in ``[e0, e1)`` whose source is not final yet (``e1`` when
        none). Windows of the first few edges are checked, growing for tracks found clear."""
        out = e1.copy()
        todo = np.flatnonzero(e0 < e1)
        lo, width = e0[todo], 8
        while len(todo):
            hi = np.minimum(e1[todo], lo + width)
            idx, seg = ranges(lo, hi)
            bad = np.flatnonzero(self.spos[idx] >= self.f[self.strk[idx]])
            sb = seg[bad]
            lead = np.ones(len(sb), dtype=bool)  # the first blocked edge of each track
            lead[1:] = sb[1:] != sb[:-1]
            hit = np.zeros(len(todo), dtype=bool)
            hit[sb[lead]] = True
            out[todo[sb[lead]]] = idx[bad[lead]]
            more = ~hit & (hi < e1[todo])
            todo, lo, width = todo[more], hi[more], width * 4
        return out

    # -- collectives: heads waiting only for each other -------------------------------------
    def _settle_heads(self) -> np.ndarray | None:
        f, ptr = self.f, self.ptr
        U = np.flatnonzero(f < ptr[1:])
        h = f[U]
        e_lo = self.ep[U]
        e_hi = np.searchsorted(self.dpos, h, side="right")
        eidx, rows = ranges(e_lo, e_hi)
        sp, st = self.spos[eidx], self.strk[eidx]
        final = sp < f[st]
        at_head = sp == f[st]
        in_s = np.zeros(self.ntr, dtype=bool)
        in_s[U] = True
        bad_rows = rows[~final & ~at_head]
        in_s[U[bad_rows]] = False
        pend = ~final & at_head
        while True:  # drop heads waiting for a head that is not settled with them
            drop = pend & in_s[U[rows]] & ~in_s[st]
            if not drop.any():
                break
            in_s[U[rows[drop]]] = False
        sel = in_s[U]
        if not sel.any():
            return None
        Ss, hs = U[sel], h[sel]
        row_of = np.full(self.ntr, -1, dtype=np.int64)
        row_of[Ss] = np.arange(len(Ss))
        keep = in_s[U[rows]]
        r_e = row_of[U[rows[keep]]]
        e_k, fin_k = eidx[keep], final[keep]
        self._step(_Settle(self, Ss, hs, r_e, e_k, fin_k, row_of))
        f[Ss] = hs + 1
        self.ep[Ss] = e_hi[sel]
        self.wait_on[Ss] = -1  # advanced next anyway
        return np.concatenate([Ss, self._wake()])

    # -- fallback: rescan until nothing moves ------------------------------------------------
    def _rescan(self, npts: int, max_passes: int = 100_000) -> tuple[np.ndarray, int]:
        ptr, order, C = self.ptr, self.order, self.C
        T = np.full(npts, -np.inf)
        M = np.full(len(order), -np.inf)
        xcur = np.full(len(order), -np.inf)
        passes = 0
        while True:
            moved = False
            for t in range(self.ntr):
                a, b = int(ptr[t]), int(ptr[t + 1])
                if a == b:
                    continue
                lo, hi = int(self.ebounds[t]), int(self.ebounds[t + 1])
                xs = self.xb[a:b].copy()
                if lo < hi:
                    np.maximum.at(xs, self.dpos[lo:hi] - a, T[self.src[lo:hi]] + self.lag[lo:hi])
                grew = np.flatnonzero(xs > xcur[a:b])
                if not len(grew):
                    continue
                xcur[a:b] = xs
                k0 = a + int(grew[0])
                m = np.maximum.accumulate(xs[k0 - a:] - C[k0:b])
                if k0 > a:
                    np.maximum(m, M[k0 - 1], out=m)
                M[k0:b] = m
                new = C[k0:b] + m
                if not np.array_equal(new, T[order[k0:b]]):
                    moved = True
                T[order[k0:b]] = new
            passes += 1
            if not moved:
                self.T, self.M = T, M
                return T, passes
            assert passes < max_passes, "schedule does not converge: the dependency graph has a cycle"


class _Advance:
    """One round of the worklist: positions ``[a0, k)`` of tracks ``ts`` finalized from their
    inputs' final times (edges ``[e0, eend)``): ``M_j = max(M_{j-1}, x_j - C_j)``,
    ``T_j = C_j + M_j``. Holds only positions and edges, so it replays with other costs."""

    def __init__(self, sv: _Solver, ts: np.ndarray, a0: np.ndarray, k: np.ndarray,
                 e0: np.ndarray, eend: np.ndarray) -> None:
        self.P, _ = ranges(a0, k)
        self.lens = k - a0
        self.starts = np.cumsum(self.lens) - self.lens  # where each track's segment begins
        self.E, eseg = ranges(e0, eend)
        self.at = self.starts[eseg] + sv.dpos[self.E] - a0[eseg]
        self.esrc = sv.src[self.E]
        cont = a0 > sv.ptr[ts]  # the track's earlier points carry their running maximum
        self.cont_at, self.cont_prev = self.starts[cont], a0[cont] - 1

    def apply(self, sv: _Solver) -> None:
        x = sv.xb[self.P]
        if len(self.E):
            np.maximum.at(x, self.at, sv.T[self.esrc] + sv.lag[self.E])
        m = x
        C = sv.C[self.P]
        m -= C
        m[self.cont_at] = np.maximum(m[self.cont_at], sv.M[self.cont_prev])
        _segment_cummax(m, self.starts, self.lens)
        sv.M[self.P] = m
        sv.T[sv.order[self.P]] = C + m

    def apply_many(self, sv: _Batch) -> None:
        """`apply` on every scenario at once (one column each): the same operations per
        column, the scatter of the edges' maxima done per destination (a maximum is exact, so
        the order it is taken in does not matter)."""
        x = sv.rows(self.P)
        if len(self.E):
            if not hasattr(self, "_gm"):
                self._gm = _GroupMax(self.at)
            self._gm.apply(x, sv.T[self.esrc] + sv.lags(self.E))
        m = x
        C = sv.C[self.P]
        m -= C
        m[self.cont_at] = np.maximum(m[self.cont_at], sv.M[self.cont_prev])
        _segment_cummax(m, self.starts, self.lens)
        sv.M[self.P] = m
        sv.T[sv.order[self.P]] = C + m


class _Settle:
    """Heads ``hs`` of tracks ``Ss``, collective instances waiting only for each other,
    settled together: each head's own inputs (edges ``e_k`` whose source was final), then the
    instances' edges among themselves iterated to their fixed point."""

    def __init__(self, sv: _Solver, Ss: np.ndarray, hs: np.ndarray, r_e: np.ndarray,
                 e_k: np.ndarray, fin_k: np.ndarray, row_of: np.ndarray) -> None:
        self.hs, self.pts = hs, sv.order[hs]
        self.fin_r, self.fin_e = r_e[fin_k], e_k[fin_k]
        self.fin_src = sv.src[self.fin_e]
        self.r_p, self.pend_e = r_e[~fin_k], e_k[~fin_k]
        self.src_row = row_of[sv.strk[self.pend_e]]
        self.has_prev = hs > sv.ptr[Ss]
        self.prev = np.maximum(hs - 1, 0)

    def apply(self, sv: _Solver) -> None:
        hs = self.hs
        own = sv.xb[hs].copy()
        np.maximum.at(own, self.fin_r, sv.T[self.fin_src] + sv.lag[self.fin_e])
        lag_p = sv.lag[self.pend_e]
        Ch = sv.C[hs]
        Mprev = np.where(self.has_prev, sv.M[self.prev], -np.inf)
        Mh = np.maximum(Mprev, own - Ch)
        Th = Ch + Mh
        for _ in range(10_000):
            x = own.copy()
            np.maximum.at(x, self.r_p, Th[self.src_row] + lag_p)
            Mn = np.maximum(Mprev, x - Ch)
            if np.array_equal(Mn, Mh):
                break
            Mh, Th = Mn, Ch + Mn
        else:
            raise AssertionError("schedule does not converge: the dependency graph has a cycle")
        sv.M[hs] = Mh
        sv.T[self.pts] = Th

    def apply_many(self, sv: _Batch) -> None:
        """`apply` on every scenario at once: iterated until no column moves (a column that
        settled stays put, so each ends at its own fixed point)."""
        hs = self.hs
        if not hasattr(self, "_gm_fin"):
            self._gm_fin, self._gm_pend = _GroupMax(self.fin_r), _GroupMax(self.r_p)
        own = sv.rows(hs)
        if len(self.fin_r):
            self._gm_fin.apply(own, sv.T[self.fin_src] + sv.lags(self.fin_e))
        lag_p = sv.lags(self.pend_e)
        Ch = sv.C[hs]
        Mprev = np.where(self.has_prev[:, None], sv.M[self.prev], -np.inf)
        Mh = np.maximum(Mprev, own - Ch)
        Th = Ch + Mh
        for _ in range(10_000):
            x = own.copy()
            if len(self.r_p):
                self._gm_pend.apply(x, Th[self.src_row] + lag_p)
            Mn = np.maximum(Mprev, x - Ch)
            if np.array_equal(Mn, Mh):
                break
            Mh, Th = Mn, Ch + Mn
        else:
            raise AssertionError("schedule does not converge: the dependency graph has a cycle")
        sv.M[hs] = Mh
        sv.T[self.pts] = Th


class _GroupMax:
    """``np.maximum.at(x, idx, vals)`` over rows, as one sort and one ``reduceat`` (neither
    when ``idx`` is sorted already, or has no repeats)."""

    def __init__(self, idx: np.ndarray) -> None:
        ordered = len(idx) < 2 or bool((idx[1:] >= idx[:-1]).all())
        self.o = None if ordered else np.argsort(idx, kind="stable")
        si = idx if self.o is None else idx[self.o]
        new = np.ones(len(si), dtype=bool)
        new[1:] = si[1:] != si[:-1]
        self.first = np.flatnonzero(new)
        self.u = si[self.first]
        self.repeats = len(self.first) < len(si)

    def apply(self, x: np.ndarray, vals: np.ndarray) -> None:
        v = vals if self.o is None else vals[self.o]
        red = np.maximum.reduceat(v, self.first, axis=0) if self.repeats else v
        x[self.u] = np.maximum(x[self.u], red)


class _Batch:
    """The solver's state for several scenarios of one graph at once: a column per scenario
    in ``C`` (chain sums), ``M``, ``T`` and the base times ``xb`` (per position, or one column
    per scenario); edges, order and track bounds shared (`_Solver`'s)."""

    def __init__(self, sv: _Solver, C: np.ndarray, xb: np.ndarray, npts: int,
                 lag: np.ndarray | None = None) -> None:
        self.order, self.ptr = sv.order, sv.ptr
        self.lag = sv.lag if lag is None else lag  # per edge (solver order), or a column each
        self.C, self.xb = C, xb
        self.S = C.shape[1]
        self.T = np.full((npts, self.S), -np.inf)
        self.M = np.empty(C.shape)

    def lags(self, e: np.ndarray) -> np.ndarray:
        """The lags of edges ``e`` (solver order), one column per scenario or one for all."""
        return self.lag[e] if self.lag.ndim == 2 else self.lag[e][:, None]

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """The base times of positions ``idx``, one column per scenario (a new array)."""
        if self.xb.ndim == 2:
            return self.xb[idx]
        out = np.empty((len(idx), self.S))
        out[:] = self.xb[idx][:, None]
        return out


class SchedulePlan:
    """The worklist's rounds for one graph, recorded by its first schedule and replayed by the
    next: which tracks advance how far, and which collective heads settle together, depend on
    the graph's points and edges only, not on the costs. For callers that schedule one graph
    many times (the overlap correction, what-if predictions); a graph with other points or
    edges records its own."""

    def __init__(self) -> None:
        self.key: tuple[np.ndarray, ...] | None = None
        self.steps: list[_Advance | _Settle] | None = None
        self.rescan = False

    def for_graph(self, g: Graph) -> SchedulePlan:
        """This plan, emptied first when it was recorded for another graph's structure."""
        key = (g.order, g.track_ptr, g.src_pt, g.dst_pt)
        if self.key is None or any(a is not b for a, b in zip(self.key, key)):
            self.key, self.steps, self.rescan = key, None, False
        return self


def schedule(g: Graph, dur: np.ndarray, resource: np.ndarray | None = None,
             capacity: np.ndarray | None = None, *, max_passes: int = 100_000,
             plan: SchedulePlan | None = None) -> Schedule:
    """Least schedule of ``g`` with per-event durations ``dur`` (us); ``plan``: the rounds of an
    earlier schedule of ``g`` to replay, or to record into (`SchedulePlan`)."""
    npts = 2 * g.n
    order = g.order
    g = contention_lags(g, dur)
    w = chain_lags(g, dur)
    pos = np.empty(npts, dtype=np.int64)
    pos[order] = np.arange(len(order))
    solver = _Solver(g, w, pos)
    resource, capacity = _with_worker_pools(g, resource, capacity)
    if resource is not None and len(resource):
        # an event with children (a host collective op around the one that carries it, e.g.
        # nccl:all_to_all around record_param_comms) is timed by its children: holding a unit
        # of the pool they need, it would wait for itself
        resource = np.where(_containers(g), -1, resource)
    use_res = resource is not None and len(resource) > 0 and bool((resource >= 0).any())
    plan = plan.for_graph(g) if plan is not None else None
    T, passes = solver.run(solver.base_pos, npts, max_passes, plan)
    sched = _bindings(g, solver, T, w, pos, None)
    if not use_res:
        sched.passes = passes
        return sched
    pools = _Pools(g, dur, resource, capacity)  # type: ignore[arg-type]
    res_x = np.full(npts, -np.inf)
    current = False  # whether sched's bindings saw the latest res_x
    while True:
        delayed = pools.commit(sched, res_x)
        current = False
        if delayed:  # constraints that move something: schedule again with them
            T, p = solver.run(np.maximum(solver.base_pos, res_x[order]), npts, max_passes, plan)
            passes += p
            # times moved, so ready times did; otherwise commit's inputs (T and the ready
            # times, which do not depend on res_x) are unchanged and the pass is not redone
            sched = _bindings(g, solver, T, w, pos, res_x)
            current = True
        if pools.done():
            break
    if not current:  # the times are those of sched: only the waits for units are new
        sched = _queued(sched, res_x)
    pools.check(sched, res_x)
    sched.passes = passes
    return sched


def schedule_many(g: Graph, dur: np.ndarray, gap: np.ndarray,
                  resource: np.ndarray | None = None, capacity: np.ndarray | None = None, *,
                  plan: SchedulePlan, lag: np.ndarray | None = None,
                  ready_lag: np.ndarray | None = None) -> np.ndarray:
    """Times (points x scenarios) of ``g`` scheduled once per scenario: column j is what
    `schedule` gives, bit for bit, with durations ``dur[:, j]`` (events x scenarios) and chain
    gaps ``gap[:, j]`` (positions x scenarios) in place of ``g.gap``, and, when given, edge
    lags ``lag[:, j]`` (edges x scenarios) and ready lags ``ready_lag[:, j]`` (events x
    scenarios) in place of ``g.lag`` and ``g.ready_lag``. The rounds of ``plan``
    (recorded by an earlier `schedule` of ``g``) are replayed once for all columns, so their
    per-call cost is paid once; resource pools, settled by readiness, are settled per column
    with the columns that wait scheduled again together. Without a recorded plan (or when
    the graph needed rescans) each column is scheduled by itself."""
    T, _ = _schedule_many(g, dur, gap, resource, capacity, plan, lag, ready_lag, False)
    return T


def schedules_many(g: Graph, dur: np.ndarray, gap: np.ndarray,
                   resource: np.ndarray | None = None, capacity: np.ndarray | None = None, *,
                   plan: SchedulePlan, lag: np.ndarray | None = None,
                   ready_lag: np.ndarray | None = None) -> list[Schedule]:
    """`schedule_many` with each column's whole `Schedule` (ready times, bindings, waits), as
    `schedule` gives it."""
    _, out = _schedule_many(g, dur, gap, resource, capacity, plan, lag, ready_lag, True)
    return out  # type: ignore[return-value]


def _schedule_many(g: Graph, dur: np.ndarray, gap: np.ndarray, resource: np.ndarray | None,
                   capacity: np.ndarray | None, plan: SchedulePlan, lag: np.ndarray | None,
                   ready_lag: np.ndarray | None, full: bool
                   ) -> tuple[np.ndarray, list[Schedule] | None]:
    npts, S = 2 * g.n, dur.shape[1]
    g, lag = _contention_lags_many(g, dur, lag)
    plan = plan.for_graph(g)
    if plan.steps is None or plan.rescan:
        out = np.empty((npts, S))
        alone = []
        for j in range(S):
            sj = schedule(_column(g, j, gap, lag, ready_lag), np.ascontiguousarray(dur[:, j]),
                          resource, capacity, plan=plan)
            out[:, j] = sj.T
            if full:
                alone.append(sj)
        return out, alone if full else None
    order, ptr = g.order, g.track_ptr
    W = chain_lags(g, dur, gap, ready_lag)
    pos = np.empty(npts, dtype=np.int64)
    pos[order] = np.arange(len(order))
    sv = _Solver(g, None, pos)  # the shared structure
    lag_s = lag[sv.eo] if lag is not None else None  # in the solver's edge order
    C = W.copy()
    for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist()):
        if b > a:
            np.cumsum(W[a:b], axis=0, out=C[a:b])  # each column as segment_cumsum rounds it
    steps = plan.steps

    def run(cols: np.ndarray | slice, xb: np.ndarray) -> _Batch:
        bt = _Batch(sv, C[:, cols], xb, npts, lag_s[:, cols] if lag_s is not None else None)
        for step in steps:
            step.apply_many(bt)
        return bt

    resource, capacity = _with_worker_pools(g, resource, capacity)
    if resource is not None and len(resource):
        resource = np.where(_containers(g), -1, resource)
    use_res = resource is not None and len(resource) > 0 and bool((resource >= 0).any())
    bt = run(slice(None), sv.base_pos)
    out = bt.T
    if not use_res and not full:
        return out, None
    # per column: `schedule`'s bindings and, with resource pools, its rounds of settling them
    # (the columns that wait scheduled again together)
    cols: list[_Column] = []
    for j in range(S):
        svj = copy.copy(sv)
        svj.C, svj.M = np.ascontiguousarray(C[:, j]), np.ascontiguousarray(bt.M[:, j])
        if lag_s is not None:
            svj.lag = np.ascontiguousarray(lag_s[:, j])
        wj = np.ascontiguousarray(W[:, j])
        sched = _bindings(_column(g, j, gap, lag, ready_lag), svj,
                          np.ascontiguousarray(out[:, j]), wj, pos, None)
        sched.passes = 1
        pools = _Pools(g, np.ascontiguousarray(dur[:, j]), resource,  # type: ignore[arg-type]
                       capacity) if use_res else None  # type: ignore[arg-type]
        cols.append(_Column(svj, wj, sched, pools, np.full(npts, -np.inf), False))
    active = list(range(S)) if use_res else []
    while active:
        again = []
        for j in active:
            c = cols[j]
            c.current = False
            if c.pools.commit(c.sched, c.res_x):  # type: ignore[union-attr]
                again.append(j)
        if again:
            xb = np.maximum(sv.base_pos[:, None],
                            np.stack([cols[j].res_x[order] for j in again], axis=1))
            bt = run(np.asarray(again), xb)
            for i, j in enumerate(again):
                c = cols[j]
                c.sv.M = np.ascontiguousarray(bt.M[:, i])
                out[:, j] = bt.T[:, i]
                passes = c.sched.passes + 1
                c.sched = _bindings(_column(g, j, gap, lag, ready_lag), c.sv,
                                    np.ascontiguousarray(bt.T[:, i]), c.w, pos, c.res_x)
                c.sched.passes, c.current = passes, True
        for j in active:
            c = cols[j]
            if c.pools.done():  # type: ignore[union-attr]
                if not c.current:
                    c.sched = _queued(c.sched, c.res_x)
                c.pools.check(c.sched, c.res_x)  # type: ignore[union-attr]
        active = [j for j in active if not cols[j].pools.done()]  # type: ignore[union-attr]
    return out, [c.sched for c in cols] if full else None


def _contention_lags_many(g: Graph, dur: np.ndarray, lag: np.ndarray | None
                          ) -> tuple[Graph, np.ndarray | None]:
    """`contention_lags` per scenario (``dur``: events x scenarios): the edge lags (edges x
    scenarios) and ``g`` without its tails, so a column scheduled alone is not shifted twice."""
    tail = g.contention_tail
    if tail is None or not tail.any():
        return g, lag
    m = np.flatnonzero(g.etype == EDGE_CODE["contention"])
    out = (np.repeat(g.lag[:, None], dur.shape[1], axis=1) if lag is None
           else np.array(lag, dtype=np.float64, copy=True))
    out[m] -= tail[g.dst_pt[m] // 2][:, None] * dur[g.src_pt[m] // 2]
    return dataclasses.replace(g, contention_tail=None), out


def _column(g: Graph, j: int, gap: np.ndarray, lag: np.ndarray | None,
            ready_lag: np.ndarray | None) -> Graph:
    """``g`` with scenario j's chain gaps and lags (`schedule_many`'s columns)."""
    return dataclasses.replace(
        g, gap=np.ascontiguousarray(gap[:, j]),
        lag=g.lag if lag is None else np.ascontiguousarray(lag[:, j]),
        ready_lag=g.ready_lag if ready_lag is None else np.ascontiguousarray(ready_lag[:, j]))


@dataclass
class _Column:
    """One scenario of `schedule_many` while its resource pools settle."""

    sv: _Solver
    w: np.ndarray
    sched: Schedule
    pools: _Pools | None
    res_x: np.ndarray
    current: bool  # whether sched's bindings saw the latest res_x


def _with_worker_pools(g: Graph, resource: np.ndarray | None, capacity: np.ndarray | None
                       ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The cost model's pools plus the graph's worker-thread pools (`Graph.pool`) for the
    events the model gives none, numbered after the model's."""
    if g.pool is None or g.pool_capacity is None or not (g.pool >= 0).any():
        return resource, capacity
    res = np.asarray(resource, dtype=np.int64) if resource is not None and len(resource) \
        else np.full(g.n, -1, dtype=np.int64)
    cap = np.asarray(capacity, dtype=np.int64) if capacity is not None \
        else np.zeros(0, dtype=np.int64)
    off = max(len(cap), int(res.max(initial=-1)) + 1)
    cap = np.concatenate([cap, np.ones(off - len(cap), dtype=np.int64),
                          np.asarray(g.pool_capacity, dtype=np.int64)])
    res = np.where(res >= 0, res, np.where(g.pool >= 0, off + g.pool, -1))
    return res, cap


def _containers(g: Graph) -> np.ndarray:
    """Per event: a host event with children (its end does not follow its own start)."""
    leaf = np.zeros(g.n, dtype=bool)
    leaf[g.order[g.leaf_end] // 2] = True
    dev_pos = np.repeat(g.track_is_device, np.diff(g.track_ptr))
    leaf[g.order[dev_pos] // 2] = True  # stream-like tracks: every event is work
    return ~leaf


class _Pools:
    """FIFO resource pools settled in order of readiness (DESIGN §5, queueing).

    A pool event waits for the earliest free unit of its pool; units go to events in order of
    ready time (``peer_ready``: inputs done, peers arrived), ties by event id. Instances of one
    collective start together, so they are settled as one unit of work. Each round takes the
    schedule under the constraints settled so far and settles, pool by pool in FIFO order, the
    events whose ready time is final: those ready before ``min(ready_j + dur_j)`` over the unsettled
    events j (an event downstream of j is ready no earlier than j's end), and the first in line.
    A pool stops for the round at an event that must wait, as the ends after it move; the next
    round schedules with that wait. Every round settles at least one event, so this terminates;
    `check` verifies the result (capacity never exceeded, every wait the FIFO one).
    """

    def __init__(self, g: Graph, dur: np.ndarray, resource: np.ndarray,
                 capacity: np.ndarray) -> None:
        self.ev = np.flatnonzero(resource >= 0)
        self.pool = resource[self.ev].astype(np.int64)
        self.npool = int(self.pool.max()) + 1
        cap = np.ones(self.npool, dtype=np.int64)
        k = min(len(capacity), self.npool)
        cap[:k] = capacity[:k]
        assert (cap >= 1).all(), "resource pools need a capacity of at least 1"
        self.cap = cap.tolist()
        self.dur = dur[self.ev]
        grp = g.coll_group[self.ev]
        # unit of work: the pool events of one collective instance group, else the event alone
        key = np.where(grp >= 0, grp, int(grp.max(initial=-1)) + 1 + np.arange(len(self.ev)))
        _, self.unit = np.unique(key, return_inverse=True)
        uo = np.argsort(self.unit, kind="stable")
        self.unit_members = np.split(uo, np.flatnonzero(np.diff(self.unit[uo])) + 1)
        self.settled = np.zeros(len(self.ev), dtype=bool)
        self.fifo: list[list[int]] = [[] for _ in range(self.npool)]  # settled, in FIFO order
        self.rounds = 0
        self._kept: list[list[float]] | None = None  # the heaps after a round that moved nothing

    def done(self) -> bool:
        return bool(self.settled.all())

    def _heaps(self, end: np.ndarray) -> list[list[float]]:
        """Unit free times of each pool after its settled events (their current ends)."""
        heaps: list[list[float]] = []
        for p in range(self.npool):
            h: list[float] = []
            cap = self.cap[p]
            for j in self.fifo[p]:
                if len(h) >= cap:
                    heapq.heappushpop(h, float(end[j]))
                else:
                    heapq.heappush(h, float(end[j]))
            heaps.append(h)
        return heaps

    def commit(self, s: Schedule, res_x: np.ndarray) -> bool:
        """Settle what this schedule decides; True when a settled wait moves the schedule."""
        self.rounds += 1
        ev = self.ev
        ready = s.peer_ready[2 * ev]  # type: ignore[index]
        start, end = s.T[2 * ev], s.T[2 * ev + 1]
        # the units' free times: kept from the last round when it moved nothing (its pops and
        # pushes leave what `_heaps` builds from the same ends), else built again
        heaps = self._kept if self._kept is not None else self._heaps(end)
        U = np.flatnonzero(~self.settled)
        # the horizon: the earliest end among the events whose end may still move (unsettled,
        # or settled with a wait this round); one settled without a wait leaves it, so a round
        # that moves nothing settles every event in one pass
        reach = ready + self.dur
        by_reach = U[np.argsort(reach[U], kind="stable")].tolist()
        gone = np.zeros(len(ev), dtype=bool)
        hp = 0
        horizon = float(reach[by_reach[0]])
        o = U[np.lexsort((ev[U], ready[U]))]
        # per pool, the unsettled events in FIFO order; a pool's head is the next to settle
        by_pool = o[np.argsort(self.pool[o], kind="stable")]
        cut = np.searchsorted(self.pool[by_pool], np.arange(self.npool + 1)).tolist()
        by_pool_l = by_pool.tolist()
        heads = [by_pool_l[cut[p]:cut[p + 1]] for p in range(self.npool)]
        nxt = [0] * self.npool
        blocked = [False] * self.npool
        seen = np.zeros(len(ev), dtype=bool)
        first = True
        delayed = progress = False
        for j in o.tolist():
            if seen[j]:
                continue
            if not first and ready[j] >= horizon:
                break
            mem = self.unit_members[self.unit[j]].tolist()
            seen[mem] = True
            pools = [int(self.pool[m]) for m in mem]
            ok = not any(blocked[p] for p in pools)
            if ok:  # every member must be next in line in its pool
                want = dict(zip(pools, [nxt[p] for p in pools]))
                for m, p in zip(mem, pools):
                    if want[p] >= len(heads[p]) or heads[p][want[p]] != m:
                        ok = False
                        break
                    want[p] += 1
            first = False
            if not ok:
                for p in pools:
                    blocked[p] = True
                continue
            free = []
            for m, p in zip(mem, pools):
                h = heaps[p]
                free.append(heapq.heappop(h) if len(h) >= self.cap[p] else -np.inf)
            waits = max(free) > float(start[mem].max())
            for m, p, f in zip(mem, pools, free):
                res_x[2 * ev[m]] = f
                self.fifo[p].append(m)
                nxt[p] += 1
                if waits:
                    blocked[p] = True  # the ends behind this wait move: next round
                else:
                    heapq.heappush(heaps[p], float(end[m]))
            self.settled[mem] = True
            delayed |= waits
            progress = True
            if not waits:
                gone[mem] = True
                while hp < len(by_reach) and gone[by_reach[hp]]:
                    hp += 1
                horizon = float(reach[by_reach[hp]]) if hp < len(by_reach) else np.inf
        assert progress, ("resource pools do not converge: collectives wait for each other's "
                          "units in a cycle")
        self._kept = None if delayed else heaps
        return delayed

    def check(self, s: Schedule, res_x: np.ndarray) -> None:
        """The settled schedule: FIFO by ready time, each event no earlier than its unit's
        release, and never more events holding a pool than its capacity."""
        ev = self.ev
        ready = s.peer_ready[2 * ev]  # type: ignore[index]
        start, end = s.T[2 * ev], s.T[2 * ev + 1]
        tol = 1e-9 * max(1.0, float(np.abs(s.T[np.isfinite(s.T)]).max(initial=0.0)))
        for p in range(self.npool):
            f = np.asarray(self.fifo[p], dtype=np.int64)
            if not len(f):
                continue
            r = ready[f]
            assert (np.diff(r) >= -tol).all(), "resource pools do not converge: FIFO order moved"
            h: list[float] = []
            for m in f.tolist():
                fr = heapq.heappop(h) if len(h) >= self.cap[p] else -np.inf
                assert res_x[2 * ev[m]] == fr or abs(res_x[2 * ev[m]] - fr) <= tol, \
                    "resource pools do not converge: a unit's release moved"
                assert start[m] >= fr - tol
                heapq.heappush(h, float(end[m]))


def _bindings(g: Graph, solver: _Solver, T: np.ndarray, w: np.ndarray, pos: np.ndarray,
              res_x: np.ndarray | None) -> Schedule:
    """What bound each point, from the solver's edge arrays (sorted by destination position) and
    its carried times; worked per position (``Tpos = T[order]``), scattered at the end."""
    e_src, e_dpos, e_lag, eo, order = solver.src, solver.dpos, solver.lag, solver.eo, g.order
    Tpos = solver.C + solver.M
    npts, L = len(T), len(order)
    starts = g.track_ptr[:-1][g.track_ptr[:-1] < L]
    chain = np.empty(L)
    chain[:1] = -np.inf
    np.add(Tpos[:-1], w[1:], out=chain[1:])
    chain[starts] = -np.inf

    etype = g.etype[eo]
    val = T[e_src] + e_lag
    own_e = etype != _COLL
    best = np.full(L, -np.inf)
    np.maximum.at(best, e_dpos[own_e], val[own_e])

    ready_p = np.maximum(chain, best)
    np.maximum(ready_p, g.base[order], out=ready_p)
    bound_p = np.full(L, BOUND_NONE, dtype=np.int8)  # BOUND_* or an edge type code
    bsrc_p = np.full(L, -1, dtype=np.int64)
    thr = ready_p - _TOL
    hit = own_e & (val >= best[e_dpos])
    hit &= best[e_dpos] >= thr[e_dpos]  # the edge's destination is bound by an edge
    bound_p[e_dpos[hit]] = etype[hit]
    bsrc_p[e_dpos[hit]] = e_src[hit]
    k = np.flatnonzero(chain >= thr)
    del thr, chain, best
    bound_p[k] = BOUND_CHAIN
    bsrc_p[k] = order[k - 1]
    if len(k) and len(starts):
        bsrc_p[k[np.isin(k, starts)]] = -1

    def scatter(a: np.ndarray, fill: float) -> np.ndarray:
        out = np.full(npts, fill, dtype=a.dtype) if L != npts else np.empty(npts, dtype=a.dtype)
        out[order] = a
        return out

    ready = scatter(ready_p, -np.inf)
    if L != npts:
        missing = np.ones(npts, dtype=bool)
        missing[order] = False
        ready[missing] = g.base[missing]
    del ready_p
    bound = scatter(bound_p, BOUND_NONE)
    del bound_p
    bsrc = scatter(bsrc_p, -1)
    del bsrc_p

    own_bound, own_src = bound.copy(), bsrc.copy()
    # collectives: waiting past the own ready time for the last rank to arrive
    peer = ready.copy()
    n = len(T) // 2
    coll_wait = np.zeros(n)
    members = np.flatnonzero(g.coll_group >= 0)
    if len(members):
        grp = g.coll_group[members]
        gl = np.full(int(grp.max()) + 1, -np.inf)
        r_m = ready[2 * members]
        np.maximum.at(gl, grp, r_m)
        lp = np.full(len(gl), -1, dtype=np.int64)
        last = r_m >= gl[grp]
        lp[grp[last]] = 2 * members[last]
        peer[2 * members] = gl[grp]
        coll_wait[members] = (gl[grp] - r_m).clip(0)
        waited = gl[grp] > r_m + _TOL
        bound[2 * members[waited]] = _COLL
        bsrc[2 * members[waited]] = lp[grp[waited]]
    sched = Schedule(T=T, w=w, pos=pos, ready=ready, bound=bound, bound_src=bsrc,
                     coll_wait=coll_wait, queue=np.zeros(n), passes=0)
    sched.peer_ready = peer
    sched.own_bound, sched.own_src = own_bound, own_src
    return sched if res_x is None else _queued(sched, res_x)


def _queued(s: Schedule, res_x: np.ndarray) -> Schedule:
    """``s``, in place, with the waits for resource units ``res_x`` (per point: when its unit
    is free): queueing past the ready time and the resource bindings (``res_x`` only grows
    from one round to the next, so bindings set by an earlier call are set again)."""
    peer = s.peer_ready
    queued = np.flatnonzero(res_x > peer + _TOL)  # type: ignore[operator]
    s.bound[queued] = BOUND_RESOURCE
    s.bound_src[queued] = -1
    s.queue = (s.T[0::2] - peer[0::2]).clip(0)  # type: ignore[index]
    s.queue[res_x[0::2] <= peer[0::2] + _TOL] = 0.0  # type: ignore[index]
    return s
