"""Requests: the windows of a trace that has no step annotations and serves work as it arrives (an
inference server).

The rule, per rank with no ``ProfilerStep#`` annotation: a *request* is a top-level user annotation
of a host thread (depth 0, kind ``annotation``) with work inside it (a non-passive event nested
under it), whose name is that of at least `MIN_REQUESTS` such annotations of the rank that
*arrived*: their thread sat idle, outside every op, for at least `replay.graph.threads.MIN_WAIT_US`
before they began (a served request type, e.g. ``Stage::PyTorchMRSGIFTask::run``; a phase of a loop
follows other work, not idle time). Each request is a window (`replay.attribution.window_spans`),
so a replay's step figures are per-request latency, not the length of the recording, which the
arrivals set. A request that arrived is *released* by its arrival: its start is held at its
measured time and the idle gap is not carried (a previous request that ends later delays it; one
that ends sooner does not start it sooner). A thread holding requests waits on the other threads of
its process inside a request the way a main thread does (`replay.graph.threads`), on threads that
hold no requests.

Limits: requests are recognised from user annotations only (a server whose requests carry none
stays one window: a top-level op that recurs after idle time is as often one op of a loop); a
request type with fewer than `MIN_REQUESTS` arrivals on a rank is not recognised (the
whole recording stays one window); a request that began before the recording is a window from
where the trace has it; the time a request waits for its thread after it arrives (a slower replay)
is not part of its latency (the window starts when the request does); a request waiting on another
request's thread is not inferred; the thresholds are assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.graph.events import EventArrays

#: Fewest annotations of one name on a rank that make it a request type (assumed: a type served
#: once is indistinguishable from a one-off phase of a script).
MIN_REQUESTS = 2


@dataclass
class Requests:
    """The requests of a trace, ascending by (rank, measured start)."""

    ids: np.ndarray                                   # event ids of the request annotations
    arrived: np.ndarray                               # of those, the ones after an idle gap
    spans: dict[int, tuple[np.ndarray, np.ndarray]]   # track -> measured (starts, ends), sorted
    names: dict[str, int]                             # request type -> how many


def find_requests(events: pa.Table, ev: EventArrays, order: np.ndarray, gap: np.ndarray,
                  idle: np.ndarray, min_idle_us: float) -> Requests:
    """The requests of ``events`` (`Requests`; none on ranks with ``ProfilerStep#`` marks).
    ``order``, ``gap``: the point chains (`replay.graph.chains.Chains`); ``idle``: per position,
    the gap before it lies outside every op of its thread."""
    n = ev.n
    none = Requests(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), {}, {})
    if not n:
        return none
    name = events.column("name")
    host = ~ev.is_dev
    marks = pc.starts_with(name, "ProfilerStep#").fill_null(False).to_numpy(
        zero_copy_only=False).astype(bool) & host
    cand = host & (ev.depth == 0) & ~np.isin(ev.rank, np.unique(ev.rank[marks]))
    cand &= pc.equal(events.column("kind"), "annotation").fill_null(False).to_numpy(
        zero_copy_only=False).astype(bool)
    if not cand.any():
        return none
    # annotations with work nested under them: on its track (rows sorted by start), the events
    # starting inside a top-level annotation are nested in it
    work = np.concatenate([[0], np.cumsum(host & ~ev.passive)])
    ids = np.flatnonzero(cand)
    span = int(max(ev.end_k.max(), ev.ts_k.max())) + 1
    flat = ev.tr_of.astype(np.int64) * span + ev.ts_k  # ascending: by track, then start
    inside = np.searchsorted(flat, ev.tr_of[ids].astype(np.int64) * span + ev.end_k[ids],
                             side="left")
    has_work = np.zeros(n, dtype=bool)
    has_work[ids] = work[inside] - work[ids + 1] > 0
    ids = np.flatnonzero(cand & has_work)
    if not len(ids):
        return none
    # arrivals: its thread sat idle (outside every op) at least min_idle_us before it began (a
    # thread's first point has no measured past: not an arrival)
    pos = np.zeros(2 * n, dtype=np.int64)
    pos[order] = np.arange(len(order))
    k = pos[2 * ids]
    arrived = (gap[k] >= min_idle_us) & idle[k]
    names = np.asarray(name.take(pa.array(ids)).to_pylist(), dtype=object).astype(str)
    key = np.char.add(ev.rank[ids].astype(str), np.char.add("\x00", names))
    _, inv = np.unique(key, return_inverse=True)
    keep = np.bincount(inv, weights=arrived)[inv] >= MIN_REQUESTS
    ids, names, arrived = ids[keep], names[keep], arrived[keep]
    if not len(ids):
        return none
    o = np.lexsort((ev.ts[ids], ev.rank[ids]))
    ids, names, arrived = ids[o], names[o], arrived[o]
    spans: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    tr = ev.tr_of[ids]
    for t in np.unique(tr).tolist():  # request threads: few
        mine = ids[tr == t]
        mine = mine[np.argsort(ev.ts[mine], kind="stable")]
        spans[int(t)] = (ev.ts[mine], ev.end[mine])
    counts: dict[str, int] = {}
    for s in names.tolist():
        counts[s] = counts.get(s, 0) + 1
    return Requests(ids, ids[arrived], spans, counts)


def release_arrivals(req: Requests, order: np.ndarray, gap: np.ndarray, ptime: np.ndarray,
                     base: np.ndarray) -> int:
    """In place: each request that arrived (`Requests.arrived`) starts at its measured time at
    the earliest (``base``) and its thread's idle gap before it is not carried (``gap`` 0).
    Returns how many starts were released."""
    if not len(req.arrived):
        return 0
    pos = np.zeros(len(ptime), dtype=np.int64)
    pos[order] = np.arange(len(order))
    pts = 2 * req.arrived
    base[pts] = np.maximum(base[pts], ptime[pts])
    gap[pos[pts]] = 0.0
    return len(pts)
