"""Injected faults, shared by tests/test_stall_faults.py (a few traces) and benchmarks/stall_campaign.py
(every real trace and sample): a stall the trace's dependencies do not explain is inserted into
a canonical events table, and `seen` asserts that `validate` (the strict error) or
``unexplained_us`` shows it in every replay: the default one, the strict one and a target one.

Two faults, each of ``STALL_US`` on one rank:

- ``kernel``: a device event that a host synchronize waits for (a ``sync`` edge from its end)
  starts later, and so does everything that waits on it, as far as it waits: the trace's own
  dependencies carry the delay (the as-measured replay of the trace, which reproduces it, with
  that event held back: the rest of its stream, the synchronize's return and what its thread
  does after it, the work other threads resume on, the peers of a collective it is part of),
  and a wait with slack absorbs it (a synchronize called late on a stream already done, an
  instance of a collective that was waiting for a later peer anyway). Threads and streams that
  wait on none of it run as measured (a stall on one request's device work does not stop an
  inference server's other threads). The measured times of every event move by the change
  that replay shows. On a CPU trace the device event is a collective transfer on a worker
  thread and the synchronize is ``work.wait()``. The fault is placed where the whole stall
  reaches the end of its window (the measured window grows by it), else where most of it does.
- ``host``: the host process stops between two host ops: at a moment inside a window where no
  host op of the rank runs (annotations aside), everything later on the rank moves and what
  spans that moment (annotations, device work already running is not stopped) gets longer.

A fault is judged on a window of the replay (`replay.attribution.window_spans`: a step, or on an
inference server without steps a request) of its rank that spans the moment the stall begins:
the one the stall lengthens most, the latest-starting among ties (requests overlap).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from replay.attribution import StepWindows, window_spans
from replay.graph import EDGE_CODE, Graph, build_graph

STALL_US = 600.0
#: A fault counts as seen when a replay shows at least this share of it.
SEEN_SHARE = 0.5
FAULTS = ("kernel", "host")
#: A synchronize blocked on a device event returns within this of its end (us).
RETURN_US = 100.0


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    step: int        # the replay's window (`replay.attribution.window_spans`) it is judged on
    at_us: float     # measured time the stall starts
    what: str        # the event it delays / the gap it sits in
    mark: int = -1   # the event that is that window (a step annotation, a request), -1: a span


def _np(t: pa.Table, c: str) -> np.ndarray:
    return t.column(c).to_numpy(zero_copy_only=False)


def _shifted(events: pa.Table, move: np.ndarray, grow: np.ndarray, d: float) -> pa.Table:
    ts = _np(events, "ts_us").astype(np.float64) + np.where(move, d, 0.0)
    dur = _np(events, "dur_us").astype(np.float64) + np.where(grow & ~move, d, 0.0)
    out = events.set_column(events.schema.get_field_index("ts_us"), "ts_us",
                            pa.array(ts, events.schema.field("ts_us").type))
    return out.set_column(out.schema.get_field_index("dur_us"), "dur_us",
                          pa.array(dur, events.schema.field("dur_us").type))


def _middle(cands: np.ndarray, times: np.ndarray) -> int | None:
    """The candidate nearest the median time (a fault in the thick of the trace)."""
    if len(cands) == 0:
        return None
    mid = np.median(times[cands])
    return int(cands[np.argmin(np.abs(times[cands] - mid))])


def kernel_fault(events: pa.Table, g: Graph, d: float = STALL_US) -> tuple[pa.Table, Fault] | None:
    """The ``kernel`` fault (module docstring); where no candidate (`kernel_candidates`)
    delays the end of its window at all, `rank_shift_fault`. Of the candidates nearest the
    middle of the trace, the first whose whole stall reaches its window's end, else the one that
    reaches it most (the rest absorbed by slack on the way)."""
    cands = kernel_candidates(events, g)
    if not len(cands):
        return None
    rank = _np(events, "rank")
    ts, dur = _np(events, "ts_us").astype(float), _np(events, "dur_us").astype(float)
    w, t0 = window_spans(events, g), _points(events)
    base = _replayed(events, g, None, 0.0)
    mid = np.median(ts[cands])
    best: tuple[float, int, np.ndarray, int] | None = None
    for k in cands[np.argsort(np.abs(ts[cands] - mid), kind="stable")][:TRIES].tolist():
        # to the trace's resolution (ns): ties stay ties
        shift = np.round(_replayed(events, g, k, d) - base, 3)
        at = _place(w, t0, t0 + shift, int(rank[k]), float(ts[k]))
        if at is None:
            continue
        if best is None or at[1] > best[0] + 1e-6:
            best = (at[1], k, shift, at[0])
        if at[1] >= d - 1e-6 * max(1.0, d):
            break  # the whole stall reaches the end of its window
    if best is None or best[0] <= 1e-6:
        return rank_shift_fault(events, g, d)
    _, k, shift, i = best
    s0, s1 = shift[0::2], shift[1::2]
    out = _with_times(events, ts + s0, dur + (s1 - s0))
    return out, Fault("kernel", int(rank[k]), int(w.step[i]), float(ts[k]),
                      str(_np(events, "name")[k]), int(w.mark[i]))


def rank_shift_fault(events: pa.Table, g: Graph,
                     d: float = STALL_US) -> tuple[pa.Table, Fault] | None:
    """The ``kernel`` fault where no candidate's delay reaches its window's end through the
    trace's dependencies (a synchronize whose later work has slack everywhere): the rank
    itself stops, everything of the rank on the event's stream from it on and everything of
    the rank after the synchronize returns moves by ``d`` (what spans that return grows). None
    when no synchronize inside a step is blocked on a device event (or collective transfer), or
    no window spans the event's start."""
    sync = (g.etype == EDGE_CODE["sync"]) & (g.src_pt % 2 == 1)
    if not sync.any():
        return None
    src, dst_pt = g.src_pt[sync] // 2, g.dst_pt[sync]
    dst = dst_pt // 2
    is_dev = _np(events, "is_device").astype(bool)
    step = _np(events, "step")
    ts, dur = _np(events, "ts_us").astype(float), _np(events, "dur_us").astype(float)
    end = ts + dur
    t_ret = np.where(dst_pt % 2 == 1, end[dst], ts[dst])
    # the synchronize is blocked on it: called before it ends, returns right after it
    blocked = np.where(dst_pt % 2 == 1, ts[dst] < end[src], True)
    work = ~np.isin(_np(events, "kind").astype(str), ["sync", "annotation", "instant"])
    ok = (~is_dev[dst] & work[src] & (step[src] >= 0) & (step[dst] >= 0) & (t_ret >= end[src])
          & (t_ret - end[src] <= RETURN_US) & blocked)
    cands = np.flatnonzero(ok)
    i = _middle(cands, ts[src])
    if i is None:
        return None
    k, t_s = int(src[i]), float(t_ret[i])
    rank = _np(events, "rank")
    mine = rank == rank[k]
    track = _np(events, "track").astype(str)
    move = mine & (((track == track[k]) & (ts >= ts[k])) | (ts >= t_s))
    # host ops and device sync markers (the device side of a synchronize) spanning the return
    marker = is_dev & (_np(events, "kind").astype(str) == "sync")
    grow = mine & (~is_dev | marker) & (ts < t_s) & (end >= t_s)
    out = _shifted(events, move, grow, d)
    w = window_spans(events, g)
    at = _place(w, _points(events), _points(out), int(rank[k]), float(ts[k]))
    if at is None:
        return None
    return out, Fault("kernel", int(rank[k]), int(w.step[at[0]]), float(ts[k]),
                      str(_np(events, "name")[k]), int(w.mark[at[0]]))


def kernel_candidates(events: pa.Table, g: Graph) -> np.ndarray:
    """Device events (or collective transfers) a synchronize inside a step is blocked on:
    called before the event ends and returning within `RETURN_US` of its end (event ids)."""
    sync = (g.etype == EDGE_CODE["sync"]) & (g.src_pt % 2 == 1)
    src, dst_pt = g.src_pt[sync] // 2, g.dst_pt[sync]
    dst = dst_pt // 2
    is_dev = _np(events, "is_device").astype(bool)
    step = _np(events, "step")
    end = _np(events, "ts_us").astype(float) + _np(events, "dur_us").astype(float)
    ts = _np(events, "ts_us").astype(float)
    t_ret = np.where(dst_pt % 2 == 1, end[dst], ts[dst])
    # the synchronize is blocked on it: called before it ends, returns right after it
    blocked = np.where(dst_pt % 2 == 1, ts[dst] < end[src], True)
    work = ~np.isin(_np(events, "kind").astype(str), ["sync", "annotation", "instant"])
    ok = (~is_dev[dst] & work[src] & (step[src] >= 0) & (step[dst] >= 0) & (t_ret >= end[src])
          & (t_ret - end[src] <= RETURN_US) & blocked)
    return np.unique(src[ok])


#: candidates (nearest the middle of the trace first) tried for a kernel fault
TRIES = 200


def _replayed(events: pa.Table, g: Graph, k: int | None, d: float) -> np.ndarray:
    """Per point: its time in the as-measured replay of ``events`` (which reproduces the
    trace), with event ``k``'s start held back by ``d`` after its inputs (None: none)."""
    import dataclasses

    from replay.run import replay_events

    if k is not None:
        lag, ready = g.ready_lag.copy(), g.lag.copy()
        lag[k] += d
        ready[(g.dst_pt == 2 * k) & (g.etype != EDGE_CODE["collective"])] += d
        g = dataclasses.replace(g, ready_lag=lag, lag=ready)
    r = replay_events(events, graph=g).events
    t = np.empty(2 * events.num_rows)
    t[0::2] = _np(r, "start_us")
    t[1::2] = _np(r, "end_us")
    return t


def _with_times(events: pa.Table, ts: np.ndarray, dur: np.ndarray) -> pa.Table:
    out = events.set_column(events.schema.get_field_index("ts_us"), "ts_us",
                            pa.array(ts, events.schema.field("ts_us").type))
    return out.set_column(out.schema.get_field_index("dur_us"), "dur_us",
                          pa.array(dur, events.schema.field("dur_us").type))


def _points(events: pa.Table) -> np.ndarray:
    """Per point (start, end of each event), its measured time."""
    ts = _np(events, "ts_us").astype(np.float64)
    t = np.empty(2 * events.num_rows)
    t[0::2], t[1::2] = ts, ts + _np(events, "dur_us").astype(np.float64)
    return t


def _place(w: StepWindows, before: np.ndarray, after: np.ndarray, rank: int,
           at_us: float) -> tuple[int, float] | None:
    """The window of ``w`` a stall of ``rank`` at measured time ``at_us`` is judged on, and how
    much longer it is with point times ``after`` than with ``before``: of the rank's windows
    spanning that moment, the one that grows most, the latest-starting among ties (the
    innermost request of a server whose requests overlap). None: no window spans it."""
    s0, e0 = w.spans(before)
    s1, e1 = w.spans(after)
    inside = np.flatnonzero((w.rank == rank) & (s0 <= at_us) & (at_us < e0))
    if not len(inside):
        return None
    grow = np.round((e1 - s1) - (e0 - s0), 3)[inside]
    i = int(inside[np.lexsort((s0[inside], grow))[-1]])
    return i, float(grow[np.flatnonzero(inside == i)[0]])


def _spanned(w: StepWindows, times: np.ndarray, rank: int, at: np.ndarray) -> np.ndarray:
    """Whether a window of ``rank`` spans each moment ``at`` (measured point ``times``)."""
    s0, e0 = w.spans(times)
    mine = w.rank == rank
    o = np.argsort(s0[mine], kind="stable")
    s, e = s0[mine][o], np.maximum.accumulate(e0[mine][o]) if mine.any() else e0[mine]
    j = np.searchsorted(s, at, side="right") - 1
    return (j >= 0) & (at < e[np.maximum(j, 0)]) if len(s) else np.zeros(len(at), dtype=bool)


def host_fault(events: pa.Table, g: Graph | None = None,
               d: float = STALL_US) -> tuple[pa.Table, Fault] | None:
    """The ``host`` fault (module docstring), or None when no host op ends inside a window
    (``g``: the trace's graph, None: built here) at a moment no other host op of its rank
    covers."""
    from mtia_trace.schema import PASSIVE_KINDS

    w = window_spans(events, g if g is not None else build_graph(events))
    t0 = _points(events)
    is_dev = _np(events, "is_device").astype(bool)
    kind = _np(events, "kind").astype(str)
    rank = _np(events, "rank")
    ts, dur = _np(events, "ts_us").astype(float), _np(events, "dur_us").astype(float)
    end = ts + dur
    op = ~is_dev & ~np.isin(kind, list(PASSIVE_KINDS))
    best: tuple[int, int] | None = None
    for r in np.unique(rank):
        ids = np.flatnonzero(op & (rank == r))
        if len(ids) == 0:
            continue
        # host ops' union on the rank: a moment right after an op ends that no op covers
        o = np.argsort(ts[ids], kind="stable")
        s_, e_ = ts[ids][o], end[ids][o]
        cover = np.maximum.accumulate(e_)
        # gap between cover[j] and s_[j+1]: nothing runs in (cover[j], s_[j+1])
        gap_at = np.flatnonzero(s_[1:] > cover[:-1])
        cands = gap_at[_spanned(w, t0, int(r), cover[gap_at])]
        if len(cands) == 0:
            continue
        j = _middle(cands, cover)
        assert j is not None
        if best is None or len(cands) > best[1]:
            best = (int(r), len(cands))
            t_best = float(cover[j])
    if best is None:
        return None
    r = best[0]
    mine = rank == r
    move = mine & (ts >= t_best + 1e-9)
    grow = mine & ~is_dev & (ts < t_best + 1e-9) & (end > t_best + 1e-9)
    out = _shifted(events, move, grow, d)
    at = _place(w, t0, _points(out), r, t_best)
    assert at is not None  # a window spans every candidate moment
    return out, Fault("host", r, int(w.step[at[0]]), t_best, "host gap", int(w.mark[at[0]]))


@dataclass(frozen=True)
class Shown:
    """What one replay of the faulted trace shows of the fault, in us of the faulted window."""

    carried_us: float       # growth of the replayed window
    unexplained_us: float   # growth of its unexplained_us

    def seen(self, measured_us: float) -> bool:
        """As error (the replay does not carry it) or as unexplained time: at least
        `SEEN_SHARE` of what the measured window shows of it (the whole stall, unless slack
        absorbed part of it before the window's end)."""
        need = SEEN_SHARE * min(measured_us, STALL_US)
        return measured_us > 0 and (measured_us - self.carried_us >= need
                                    or self.unexplained_us >= need)


@dataclass(frozen=True)
class Seen:
    """How each replay of the faulted trace shows the fault."""

    fault: Fault
    measured_us: float            # growth of the measured window (the stall as recorded)
    replays: dict[str, Shown]     # "default", "strict", and the target's name

    def missed(self) -> list[str]:
        return [k for k, v in self.replays.items() if not v.seen(self.measured_us)]

    @property
    def all(self) -> bool:
        return not self.missed()


def _row(steps: pa.Table, rank: int, step: int, col: str) -> float:
    r, s = _np(steps, "rank"), _np(steps, "step")
    m = (r == rank) & (s == step)
    return float(_np(steps, col)[m].sum())


def _step_in(faulted: pa.Table, g: Graph, fault: Fault) -> int:
    """The fault's window in the faulted trace: the window of the same event (a step
    annotation, a request: its number can change where the stall moves one request past
    another), else the same (rank, step)."""
    if fault.mark < 0:
        return fault.step
    w = window_spans(faulted, g)
    hit = np.flatnonzero(w.mark == fault.mark)
    assert len(hit) == 1, f"{fault}: its window is not a window of the faulted trace"
    return int(w.step[hit[0]])


def seen(events: pa.Table, faulted: pa.Table, fault: Fault, launch_latency_us: float | None,
         target: object | None = None) -> Seen:
    """Replay ``events`` and ``faulted`` by default, strictly and on ``target`` (a cost model;
    None: no target replay) and measure what each shows of the fault."""
    from replay.costs import AsMeasured
    from replay.run import replay_events

    model = AsMeasured(source_launch_us=launch_latency_us)
    runs: list[tuple[str, dict, object]] = [("default", {}, model),
                                            ("strict", {"strict": True}, model)]
    if target is not None:
        runs.append((str(getattr(target, "name", "target")), {}, target))
    ga, gb = build_graph(events), build_graph(faulted)
    step_b = _step_in(faulted, gb, fault)
    shown: dict[str, Shown] = {}
    measured = 0.0
    for key, kw, m in runs:
        a = replay_events(events, m, graph=ga, **kw).steps  # type: ignore[arg-type]
        b = replay_events(faulted, m, graph=gb, **kw).steps  # type: ignore[arg-type]

        def grow(col: str, a: pa.Table = a, b: pa.Table = b) -> float:
            return _row(b, fault.rank, step_b, col) - _row(a, fault.rank, fault.step, col)

        shown[key] = Shown(grow("total_us"), grow("unexplained_us"))
        if key == "default":
            measured = grow("measured_us")
    return Seen(fault, measured, shown)


def inject(kind: str, events: pa.Table, g: Graph) -> tuple[pa.Table, Fault] | None:
    return kernel_fault(events, g) if kind == "kernel" else host_fault(events, g)
