"""Critical paths, walked backward from a point along the bindings the scheduler recorded.

Each point's time is reached by a *segment* from the point that bound it. A segment carries one
attribution category (schema.ATTRIBUTION) or, for an event's own duration, the event's cost split:

- an event's own duration (leaf end after its start): its cost components;
- a host chain gap (parent self time, Python overhead, data loading) and a launch edge's lag
  (launch → kernel latency) and a sync call's return latency: ``host``;
- a device ready lag after its stream predecessor or a cross-stream wait: ``idle``;
- waiting for the last rank of a collective: ``peer_wait``;
- waiting for a busy resource pool: ``queue``;
- before a host track's first point (no binding): ``idle``.

Unexplained time (DESIGN §10) is an overlay on these segments, not a category: the part of a
device ready lag no modelled latency explains (`Graph.unexplained_lag`), host gaps outside
every event of their thread (`Graph.unexplained_gap`, every gap of a thread holding only
annotations), and the time before a track's first point held where it was measured (a thread
starting with no input, a device stream whose first op has none) where the path ends there,
summed along the path like the categories.

Runs of points bound by their track predecessor are summed with per-track prefix sums, so the
Python loop only runs once per cross-track hop on the path. Per-rank walks stay on the rank: at a
collective they account the wait and continue from the rank's own arrival.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mtia_trace import schema
from replay.costs import COMPONENTS
from replay.graph import EDGE_CODE, Graph
from replay.scheduler import BOUND_CHAIN, BOUND_RESOURCE, Schedule

CAT = {c: i for i, c in enumerate(schema.ATTRIBUTION)}
NCAT = len(schema.ATTRIBUTION)


@dataclass
class PathTables:
    """Per-position segment contributions and their prefix sums, for the active categories only
    (``act``: category ids with any time; the others are zero everywhere)."""

    act: np.ndarray         # (nact,) category ids of the rows below
    cum: np.ndarray         # (nact, npos + 1): cum[:, k + 1] = the sum of the chain segments
    #                         (`contrib_at`) at positions a..k, a the first position of k's
    #                         track (sums restart per track)
    frac: np.ndarray        # (nact, n): per-event cost split (fractions summing to 1)
    run_start: np.ndarray   # per position: the last position <= it that is not chain-bound
    tpos: np.ndarray        # per position: time
    dev_pos: np.ndarray     # per position: on a stream-like (device / worker) track
    own: np.ndarray         # per position: an end point reached by its event's own duration
    unx_w: np.ndarray       # per position: unexplained part of the chain lag into it (us)
    ucum: np.ndarray        # (npos + 1,): per-track prefix sums of the unexplained overlay
    ev: np.ndarray          # per position: its event
    rows: tuple[int, int]   # the rows of ``host`` and ``idle`` in the tables
    seg: np.ndarray         # per position: its chain segment (0 where not chain-bound)
    pinned: np.ndarray      # per position: a track's first point whose earliest time is its
    #                         measured one (a host thread's, or a device start with no input)

    def contrib_at(self, k: int, seg: float) -> np.ndarray:
        """(nact,): the chain segment of length ``seg`` ending at pure position ``k``, split
        into the categories (as summed into ``cum``): an end reached by its event's own
        duration by the event's cost split, a device start's lag idle, other host steps host."""
        if self.own[k]:
            return self.frac[:, self.ev[k]] * seg
        out = np.zeros(len(self.act))
        out[self.rows[1] if self.dev_pos[k] else self.rows[0]] = seg
        return out


def path_tables(g: Graph, s: Schedule, comps: dict[str, np.ndarray]) -> PathTables:
    order = g.order
    npos = len(order)
    cats = [c for c in COMPONENTS if c == "host" or comps[c].any()]
    act = np.array(sorted({CAT[c] for c in cats} | {CAT["host"], CAT["idle"]}), dtype=np.int64)
    row = {int(c): i for i, c in enumerate(act.tolist())}
    # per-event fractions of the active cost categories
    frac = np.zeros((len(act), g.n))
    total = np.zeros(g.n)
    for c in cats:
        frac[row[CAT[c]]] = comps[c]
        total += comps[c]
    nz = total > 0
    if len(cats) > 1:
        np.divide(frac, total, out=frac, where=nz)
    else:
        frac[row[CAT["host"]], nz] = 1.0
    frac[row[CAT["host"]], ~nz] = 1.0  # zero-length: any category, the segment is empty
    tpos = s.T[order]
    seg = np.zeros(npos)
    seg[1:] = tpos[1:] - tpos[:-1]
    pure = s.bound[order] == BOUND_CHAIN
    seg[~pure] = 0.0
    dev_pos = np.repeat(g.track_is_device, np.diff(g.track_ptr))
    is_end = (order % 2) == 1
    own = (g.leaf_end | (dev_pos & is_end))
    cum = np.zeros((len(act), npos + 1))
    contrib = cum[:, 1:]  # each segment in place, then summed in place per track
    ev = order // 2
    ko = np.flatnonzero(own)
    contrib[:, ko] = frac[:, ev[ko]] * seg[ko]
    di = dev_pos & ~is_end
    contrib[row[CAT["idle"]], di] = seg[di]
    hi = ~dev_pos & ~own
    contrib[row[CAT["host"]], hi] = seg[hi]
    del contrib, ko
    _track_cumsum(cum, g.track_ptr)
    idx = np.where(~pure, np.arange(npos), 0)
    run_start = np.maximum.accumulate(idx) if npos else idx
    unx_w = np.zeros(npos)
    if g.unexplained_lag is not None:
        unx_w[di] = g.unexplained_lag[ev[di]]
    if g.unexplained_gap is not None:
        gp = g.unexplained_gap & ~dev_pos  # gaps, and waits no dependency explains
        unx_w[gp] = s.w[gp]
    if g.thread_started is not None:
        # a thread started (or restarted) by another (`thread` edge into its first point after
        # idling): its start lag, the measured delay from the point that started it, is
        # unexplained
        unx_w[g.thread_started] = np.inf
    # a track's first point held at its measured time: when the path ends there, nothing in
    # the trace explains why the track started that long after the window began
    pinned = np.zeros(npos, dtype=bool)
    first = g.track_ptr[:-1][g.track_ptr[:-1] < npos]
    pinned[first] = ~dev_pos[first] & np.isfinite(g.base[order[first]])
    if g.pinned_us is not None:
        pinned[first] |= dev_pos[first] & (g.pinned_us[order[first]] > 0)
    ucum = np.zeros((1, npos + 1))
    ucum[0, 1:] = np.minimum(np.maximum(unx_w, 0.0), seg)
    _track_cumsum(ucum, g.track_ptr)
    return PathTables(act=act, cum=cum, frac=frac, run_start=run_start, tpos=tpos,
                      dev_pos=dev_pos, own=own, unx_w=unx_w, ucum=ucum[0], ev=ev,
                      rows=(row[CAT["host"]], row[CAT["idle"]]), seg=seg, pinned=pinned)


def _track_cumsum(cum: np.ndarray, ptr: np.ndarray) -> None:
    """In place: ``cum[:, k + 1]`` (holding position k's value) becomes the sum of the values
    from the first position of k's track to k. Walks only take differences within a track;
    restarting per track makes every sum depend on its track alone (not on how many other
    tracks the table holds), so a shard replays bit for bit what the whole run does."""
    ln = np.diff(ptr)
    two = ptr[:-1][ln == 2]
    cum[:, two + 2] += cum[:, two + 1]
    for t in np.flatnonzero(ln > 2).tolist():  # loop over tracks (few)
        a, b = int(ptr[t]), int(ptr[t + 1])
        np.cumsum(cum[:, a + 1:b + 1], axis=1, out=cum[:, a + 1:b + 1])


def _edge_category(bound: int, on_device: bool) -> int:
    """Launch latency and a host wait's return latency (sync, queue, thread) are host; a
    device-side wait's lag idle."""
    if bound == EDGE_CODE["launch"]:
        return CAT["host"]
    if bound in (EDGE_CODE["sync"], EDGE_CODE["contention"]):
        return CAT["idle"] if on_device else CAT["host"]
    if bound in (EDGE_CODE["queue"], EDGE_CODE["thread"]):
        return CAT["host"]  # the call's return after the op it waited on
    return CAT["idle"]


_LAGGED_EDGES = (EDGE_CODE["launch"], EDGE_CODE["sync"], EDGE_CODE["contention"])


@dataclass
class Walk:
    parts: np.ndarray        # (NCAT,) time per category
    coll_wait: float
    late_wait: dict[int, float]  # late event id -> wait it caused
    ranges: list[tuple[int, int]]  # position ranges [lo, hi] on the path
    points: list[int]         # end points whose own duration the path crosses outside ranges
    unexplained: float = 0.0  # path time that is unexplained (within host / idle parts)
    #: (position, us) chain time on the path outside ``ranges`` (a single chain segment into
    #: a point that waited), and minus the part of a range's first segment before the window
    pieces: list[tuple[int, float]] = field(default_factory=list)


def walk(g: Graph, s: Schedule, pt: PathTables, p: int, ws: float) -> Walk:
    """Walk back from point ``p`` to time ``ws``; every us of [ws, T[p]] lands in one category."""
    parts = np.zeros(NCAT)
    late: dict[int, float] = {}
    ranges: list[tuple[int, int]] = []
    points: list[int] = []
    pieces: list[tuple[int, float]] = []
    cw = 0.0
    unx = 0.0
    T = s.T
    own_bound, own_src, peer = s.own_bound, s.own_src, s.peer_ready
    assert own_bound is not None and own_src is not None and peer is not None
    guard = 0
    while p >= 0 and T[p] > ws:
        guard += 1
        assert guard < 10 * len(T) + 10, "critical-path walk does not terminate"
        k = int(s.pos[p])
        b = int(s.bound[p])
        if b == BOUND_CHAIN:
            q = int(pt.run_start[k])
            tq = pt.tpos[q]
            if tq >= ws:
                parts[pt.act] += pt.cum[:, k + 1] - pt.cum[:, q + 1]
                unx += pt.ucum[k + 1] - pt.ucum[q + 1]
                ranges.append((q + 1, k))
                p = int(g.order[q])
                continue
            # the window starts inside this run: clip the straddling segment
            j = q + 1 + int(np.searchsorted(pt.tpos[q + 1:k + 1], ws, side="right"))
            parts[pt.act] += pt.cum[:, k + 1] - pt.cum[:, j + 1]
            unx += pt.ucum[k + 1] - pt.ucum[j + 1]
            seg = pt.tpos[j] - pt.tpos[j - 1]
            if seg > 0:
                parts[pt.act] += pt.contrib_at(j, seg) * ((pt.tpos[j] - ws) / seg)
                unx += (pt.ucum[j + 1] - pt.ucum[j]) * ((pt.tpos[j] - ws) / seg)
                pieces.append((j, -(ws - pt.tpos[j - 1])))  # the range counts j's whole segment
            ranges.append((j, k))
            break
        t = T[p]
        # queueing for a resource, then waiting for peers, then the own binding
        if b == BOUND_RESOURCE or t > peer[p]:
            q_start = max(peer[p], ws)
            parts[CAT["queue"]] += max(t - q_start, 0.0)
            t = peer[p]
            if t <= ws:
                break
        if peer[p] > s.ready[p]:
            lo = max(s.ready[p], ws)
            wait = t - lo
            parts[CAT["peer_wait"]] += wait
            cw += wait
            src = int(s.bound_src[p])
            if src >= 0:
                late[src // 2] = late.get(src // 2, 0.0) + wait
            t = s.ready[p]
            if t <= ws:
                break
        ob = int(own_bound[p])
        src = int(own_src[p])
        if ob == BOUND_CHAIN:
            # a single chain segment into p (p itself is not pure because it waited)
            prev_t = pt.tpos[k - 1]
            lo = max(prev_t, ws)
            ev = p // 2
            dev = bool(pt.dev_pos[k])
            if pt.own[k]:
                parts[pt.act] += pt.frac[:, ev] * (t - lo)
                points.append(p)
            else:
                parts[CAT["idle"] if dev else CAT["host"]] += t - lo
                unx += min(max(pt.unx_w[k], 0.0), t - lo)
            pieces.append((k, t - lo))
            p = int(g.order[k - 1])
            continue
        if src < 0:
            parts[CAT["idle"]] += t - ws
            if pt.pinned[k]:  # a track's first point kept where it was measured
                unx += t - ws
            break
        if ob == EDGE_CODE["contention"] and T[src] > t:
            # a kernel that started while the one it waited for drained (``contention``): the
            # path goes on through that kernel's run, less the part after this start
            over = T[src] - t
            parts[pt.act] -= pt.frac[:, src // 2] * over
            pieces.append((int(s.pos[src]), -over))
            p = src
            continue
        lo = max(T[src], ws)
        parts[_edge_category(ob, bool(pt.dev_pos[k]))] += t - lo
        if pt.dev_pos[k] and p % 2 == 0 and ob in _LAGGED_EDGES:  # a device start's lag
            unx += min(max(pt.unx_w[k], 0.0), t - lo)
        elif ob == EDGE_CODE["thread"] and p % 2 == 0 and pt.unx_w[k] > 0:  # a thread's start
            unx += min(pt.unx_w[k], t - lo)
        p = src
    return Walk(parts=parts, coll_wait=cw, late_wait=late, ranges=ranges, points=points,
                unexplained=unx, pieces=pieces)


def segment_owners(g: Graph, pt: PathTables, parent: np.ndarray, passive: np.ndarray
                   ) -> np.ndarray:
    """Per position: the event whose own work the chain segment into it is, -1 for none.

    An end reached by its event's own duration (a leaf, device work) is that event's; on a host
    thread any other segment is the self time of the innermost op open over it (annotations
    mark time and own none: the op outside them does); a gap outside every op, and a device
    ready lag, is no op's."""
    npos = len(g.order)
    prev = np.empty(npos, dtype=np.int64)
    prev[1:] = g.order[:-1]
    prev[:1] = 0
    # innermost event open over the gap before each position: the previous point's event if
    # that point is a start, else that event's parent
    owner = np.where(prev % 2 == 0, prev // 2, parent[prev // 2])
    owner[g.track_ptr[:-1][g.track_ptr[:-1] < npos]] = -1
    for _ in range(npos + 1):  # climb out of annotations (their nesting depth: few rounds)
        up = (owner >= 0) & passive[np.maximum(owner, 0)]
        if not up.any():
            break
        owner[up] = parent[owner[up]]
    owner[pt.dev_pos] = -1
    owner[pt.own] = pt.ev[pt.own]
    return owner


def critical_time(g: Graph, pt: PathTables, walks: list[Walk], owner: np.ndarray) -> np.ndarray:
    """Per event: microseconds of its own work (a leaf's or device event's duration, an op's
    self time) that the walked paths cross, summed over the walks (`segment_owners`)."""
    npos = len(g.order)
    diff = np.zeros(npos + 1, dtype=np.int64)
    w = np.zeros(npos)
    for wk in walks:
        for lo, hi in wk.ranges:
            diff[lo] += 1
            diff[hi + 1] -= 1
        for k, us in wk.pieces:
            w[k] += us
    w += np.cumsum(diff[:-1]) * pt.seg
    has = (owner >= 0) & (w != 0)
    out = np.bincount(owner[has], weights=w[has], minlength=g.n)
    return np.maximum(out, 0.0)


def mark_critical(g: Graph, walks: list[Walk], passive: np.ndarray | None = None) -> np.ndarray:
    """Per event: true when a walked path crosses the event's own duration (its end point is on
    the path and reached from its start). Containers and ``passive`` events (annotations,
    instants) are never critical."""
    npos = len(g.order)
    diff = np.zeros(npos + 1, dtype=np.int64)
    for w in walks:
        for lo, hi in w.ranges:
            diff[lo] += 1
            diff[hi + 1] -= 1
    dev_pos = np.repeat(g.track_is_device, np.diff(g.track_ptr))
    own = g.leaf_end | (dev_pos & (g.order % 2 == 1))
    on = (np.cumsum(diff[:-1]) > 0) & own
    crit = np.zeros(g.n, dtype=bool)
    crit[g.order[on] // 2] = True
    for w in walks:
        if w.points:
            crit[np.asarray(w.points) // 2] = True
    if passive is not None:
        crit &= ~passive
    return crit
