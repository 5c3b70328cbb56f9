"""Per rank and step, every microsecond of the step's replayed wall time in exactly one category.

A step's window is its ``ProfilerStep#N`` annotation on that rank (replayed start to end); without
one, the span of the step's events; a trace without steps is one step per rank, unless the rank
serves requests (`replay.graph.requests`): then each request is a window (step = its number on
the rank, by measured start), and a step's figures are that request's latency. The window is
attributed by walking the critical path back from the window's end (`critical_path.walk`).
`check_attribution` verifies the invariant; `replay_events` runs it on every replay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mtia_trace import schema
from replay.critical_path import CAT, NCAT, PathTables, Walk, walk
from replay.graph import EDGE_CODE, Graph, _is_in, event_times
from replay.groups import ranges
from replay.scheduler import Schedule

REL_TOL = 1e-6


class AttributionError(AssertionError):
    """The attribution parts of a step do not add up to its wall time (a bug)."""


def check_attribution(steps: pa.Table, rel_tol: float = REL_TOL) -> None:
    """Raise when any (rank, step)'s categories do not sum to its total_us."""
    if steps.num_rows == 0:
        return
    total = steps.column("total_us").to_numpy()
    parts = sum(steps.column(f"{a}_us").to_numpy() for a in schema.ATTRIBUTION)
    neg = np.zeros(len(total), dtype=bool)
    for a in schema.ATTRIBUTION:
        neg |= steps.column(f"{a}_us").to_numpy() < -rel_tol * np.maximum(np.abs(total), 1.0)
    bad = (np.abs(parts - total) > rel_tol * np.maximum(np.abs(total), 1.0)) | neg
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        rank = steps.column("rank")[i].as_py()
        step = steps.column("step")[i].as_py()
        detail = ", ".join(f"{a}={steps.column(f'{a}_us')[i].as_py():.6f}"
                           for a in schema.ATTRIBUTION)
        raise AttributionError(
            f"rank {rank} step {step}: parts sum to {parts[i]:.6f} us but the step took "
            f"{total[i]:.6f} us ({detail})")


@dataclass
class StepWindows:
    """The (rank, step) windows of a trace, sorted by (rank, step); which events bound each
    one does not depend on the schedule, only where they land does (`spans`)."""

    rank: np.ndarray
    step: np.ndarray
    mark: np.ndarray      # the ProfilerStep# event that is the window, -1: the span of ``rows``
    measured: np.ndarray  # the window's measured us
    rows: np.ndarray      # the events of the span windows, window by window, ascending in each
    first: np.ndarray     # per span window (in window order): where its events begin in ``rows``

    def spans(self, T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Replayed (start, end) per window with point times ``T`` (points, or points x
        scenarios: a column per scenario)."""
        start, end = T[0::2], T[1::2]
        ws = np.empty((len(self.mark),) + T.shape[1:])
        we = np.empty_like(ws)
        marked = self.mark >= 0
        ws[marked], we[marked] = start[self.mark[marked]], end[self.mark[marked]]
        if len(self.first):
            ws[~marked] = np.minimum.reduceat(start[self.rows], self.first, axis=0)
            we[~marked] = np.maximum.reduceat(end[self.rows], self.first, axis=0)
        return ws, we


def window_spans(events: pa.Table, g: Graph) -> StepWindows:
    """The windows of `step_windows`, before any schedule."""
    rank = events.column("rank").to_numpy()
    step = events.column("step").to_numpy()
    is_dev = events.column("is_device").to_numpy(zero_copy_only=False)
    _t0, ts, ts_end = event_times(events)
    dur = ts_end - ts
    import pyarrow.compute as pc

    starts = pc.starts_with(events.column("name"), "ProfilerStep#").fill_null(False)
    marks = np.flatnonzero(~is_dev & starts.to_numpy(zero_copy_only=False))
    name = events.column("name").take(pa.array(marks)).to_pylist()
    name_of = dict(zip(marks.tolist(), name))
    seen: dict[tuple[int, int], tuple[int, float]] = {}  # (rank, step) -> (mark, measured)
    for i in marks.tolist():  # steps: few
        try:
            n = int(name_of[i].split("#", 1)[1])
        except ValueError:
            continue
        key = (int(rank[i]), n)
        if key not in seen:
            seen[key] = (i, float(dur[i]))
    # without a step annotation the window spans the step's work: the profiler's own spans
    # and annotations (``PyTorch Profiler (0)``, ``[param|...]``) do not stretch it. One
    # group-by over (rank, step) instead of a mask per rank and step.
    passive = passive_events(events)
    n = len(rank)
    rows = np.arange(n)
    # a rank whose events are all passive keeps them all
    has_work = np.bincount(rank, weights=~passive, minlength=int(rank.max()) + 1 if n else 0) > 0
    keep = ~passive | ~has_work[rank] if n else np.zeros(0, dtype=bool)
    rows = rows[keep]
    rows = rows[np.lexsort((rows, step[rows], rank[rows]))]  # (rank, step, row) order
    r_s, st_s = rank[rows], step[rows]
    first = np.flatnonzero(np.r_[True, (r_s[1:] != r_s[:-1]) | (st_s[1:] != st_s[:-1])]) \
        if len(rows) else np.empty(0, dtype=np.int64)
    spans: dict[tuple[int, int], tuple[int, float]] = {}  # (rank, step) -> (group, measured)
    if len(first):
        g_rank, g_step = r_s[first], st_s[first]
        g_ts = np.minimum.reduceat(ts[rows], first)
        g_te = np.maximum.reduceat(ts_end[rows], first)
        # a rank with numbered steps drops its unnumbered (-1) events
        stepped = np.zeros(len(has_work), dtype=bool)
        stepped[g_rank[g_step >= 0]] = True
        ok = ~(stepped[g_rank] & (g_step < 0))
        for i in np.flatnonzero(ok).tolist():  # (rank, step) pairs
            key = (int(g_rank[i]), int(g_step[i]))
            if key not in seen:
                spans[key] = (i, float(g_te[i] - g_ts[i]))
    # a rank serving requests (`replay.graph.requests`): each request is a window
    req = g.requests if g.requests is not None else np.zeros(0, dtype=np.int64)
    for r in np.unique(rank[req]).tolist():  # ranks: few
        mine = req[rank[req] == r]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        spans = {k: v for k, v in spans.items() if k[0] != r}
        seen |= {(int(r), i): (int(e), float(dur[e])) for i, e in enumerate(mine.tolist())}
    keys = sorted([*seen, *spans])
    mark = np.array([seen[k][0] if k in seen else -1 for k in keys], dtype=np.int64)
    meas = np.array([seen[k][1] if k in seen else spans[k][1] for k in keys], dtype=np.float64)
    grp = [spans[k][0] for k in keys if k not in seen]
    bounds = np.append(first, len(rows))
    lo = bounds[np.asarray(grp, dtype=np.int64)] if grp else np.zeros(0, dtype=np.int64)
    hi = bounds[np.asarray(grp, dtype=np.int64) + 1] if grp else np.zeros(0, dtype=np.int64)
    sel, _ = ranges(lo, hi)
    return StepWindows(rank=np.array([k[0] for k in keys], dtype=np.int64),
                       step=np.array([k[1] for k in keys], dtype=np.int64), mark=mark,
                       measured=meas, rows=rows[sel], first=np.cumsum(hi - lo) - (hi - lo))


def step_windows(events: pa.Table, g: Graph, s: Schedule) -> list[tuple[int, int, float, float, int, float]]:
    """(rank, step, window start, window end, end point id, measured us) per rank and step; a
    span window ends at its last-ending event (the lowest row among ties)."""
    w = window_spans(events, g)
    ws, we = w.spans(s.T)
    last = w.mark.copy()
    if len(w.first):
        end = s.T[1::2][w.rows]
        top = np.repeat(we[w.mark < 0], np.diff(np.append(w.first, len(w.rows))))
        cand = np.where(end == top, w.rows, len(s.T))
        last[w.mark < 0] = np.minimum.reduceat(cand, w.first)
    return [(r, st, a, b, 2 * li + 1, m) for r, st, a, b, li, m in zip(
        w.rank.tolist(), w.step.tolist(), ws.tolist(), we.tolist(), last.tolist(),
        w.measured.tolist())]


def unexplained_summary(steps: pa.Table) -> dict[str, float]:
    """run.json's ``unexplained``: mean per step over ranks and steps of ``unexplained_us`` and
    its share of the replayed step time (DESIGN §10)."""
    if steps.num_rows == 0:
        return {"mean_step_us": 0.0, "fraction_of_step": 0.0}
    unx = steps.column("unexplained_us").to_numpy()
    total = steps.column("total_us").to_numpy()
    return {"mean_step_us": float(unx.mean()),
            "fraction_of_step": float(unx.sum() / total.sum()) if total.sum() > 0 else 0.0}


def passive_events(events: pa.Table) -> np.ndarray:
    """Annotations and instants: they mark time, they are not work."""
    return _is_in(events, "kind", schema.PASSIVE_KINDS)


def attribute_steps(events: pa.Table, g: Graph, s: Schedule, pt: PathTables
                    ) -> tuple[pa.Table, list[Walk]]:
    """The steps table (schema.STEPS_SCHEMA) and the walks behind it."""
    rank_of = events.column("rank").to_numpy()
    rows: dict[str, list[object]] = {f.name: [] for f in schema.STEPS_SCHEMA}
    walks: list[Walk] = []
    for r, st, ws, we, p, meas in step_windows(events, g, s):
        wk = walk(g, s, pt, p, ws)
        walks.append(wk)
        parts = wk.parts.copy()
        total = we - ws
        rows["rank"].append(r)
        rows["step"].append(st)
        rows["start_us"].append(ws + g.t0)
        rows["end_us"].append(we + g.t0)
        rows["total_us"].append(total)
        rows["measured_us"].append(meas)
        for a in schema.ATTRIBUTION:
            rows[f"{a}_us"].append(float(parts[CAT[a]]))
        rows["unexplained_us"].append(wk.unexplained)
        strag = -1
        if wk.late_wait:
            by_rank: dict[int, float] = {}
            for e, wt in wk.late_wait.items():
                rr = int(rank_of[e])
                by_rank[rr] = by_rank.get(rr, 0.0) + wt
            strag = max(by_rank, key=lambda k: by_rank[k])
            if strag == r or by_rank[strag] <= 0:
                strag = -1
        rows["straggler_rank"].append(strag)
    return pa.Table.from_pydict(rows, schema=schema.STEPS_SCHEMA), walks


def summarize(events: pa.Table, g: Graph, s: Schedule, comps: dict[str, np.ndarray],
              steps: pa.Table) -> pa.Table:
    """Busy (overlapped or not) vs exposed (critical-path) time per rank and component.

    Busy counts what the walk can expose: leaf work by component, plus for ``host`` the host
    threads' measured gaps and self time (chain lags off leaves) and the launch latencies of the
    rank's device events; ``peer_wait`` the waits for peers; ``queue`` the time spent waiting
    for pools; ``idle`` is not busy.
    """
    rank = events.column("rank").to_numpy()
    is_dev = events.column("is_device").to_numpy(zero_copy_only=False)
    passive = passive_events(events)
    # tracks holding only annotations / instants (the profiler's own spans) are not work
    ntr = len(g.track_ptr) - 1
    tr_pos = np.repeat(np.arange(ntr), np.diff(g.track_ptr))
    act = np.bincount(tr_pos, weights=~passive[g.order // 2], minlength=ntr) > 0
    live = act[tr_pos]
    leaf = np.zeros(g.n, dtype=bool)
    leaf[g.order[g.leaf_end & live] // 2] = True
    leaf |= is_dev & ~passive
    dev_pos = np.repeat(g.track_is_device, np.diff(g.track_ptr))
    gaps = (~dev_pos) & ~g.leaf_end & live
    nr = int(rank.max()) + 1 if len(rank) else 0
    host_gap = np.bincount(rank[g.order[gaps] // 2], weights=s.w[gaps], minlength=nr)
    launched = (g.etype == EDGE_CODE["launch"])
    lr = rank[g.dst_pt[launched] // 2]
    launch_lag = np.bincount(lr, weights=g.lag[launched], minlength=nr) if len(lr) else np.zeros(nr)
    srank = steps.column("rank").to_numpy()
    ranks = np.unique(rank)

    def per_rank(values: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
        if where is None:
            return np.bincount(rank, weights=values, minlength=nr)[ranks]
        return np.bincount(rank[where], weights=values[where], minlength=nr)[ranks]

    n_steps = np.bincount(srank, minlength=nr)[ranks] if len(srank) else np.zeros(len(ranks), int)
    busy: dict[str, np.ndarray] = {}
    critical: dict[str, np.ndarray] = {}
    for a in schema.ATTRIBUTION:
        if a in comps:
            busy[a] = per_rank(np.asarray(comps[a], dtype=np.float64), leaf)
            if a == "host":
                busy[a] = busy[a] + (host_gap + launch_lag)[ranks]
        elif a == "peer_wait":
            busy[a] = per_rank(s.coll_wait)
        elif a == "queue":
            busy[a] = per_rank(s.queue)
        else:
            busy[a] = np.zeros(len(ranks))
        ex = steps.column(f"{a}_us").to_numpy()
        critical[a] = (np.bincount(srank, weights=ex, minlength=nr)[ranks] if len(srank)
                       else np.zeros(len(ranks)))
    na = len(schema.ATTRIBUTION)
    rows: dict[str, object] = {
        "rank": np.repeat(ranks, na),
        "component": np.tile(np.array(schema.ATTRIBUTION, dtype=object), len(ranks)),
        "busy_us": np.stack([busy[a] for a in schema.ATTRIBUTION], axis=1).ravel(),
        "critical_us": np.stack([critical[a] for a in schema.ATTRIBUTION], axis=1).ravel(),
        "steps": np.repeat(n_steps, na),
    }
    return pa.Table.from_pydict(rows, schema=schema.SUMMARY_SCHEMA)  # type: ignore[arg-type]


__all__ = [
    "unexplained_summary",
    "NCAT",
    "AttributionError",
    "attribute_steps",
    "check_attribution",
    "passive_events",
    "step_windows",
    "window_spans",
    "StepWindows",
    "summarize",
]
