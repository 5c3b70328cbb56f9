"""Requests: the windows of a trace that has no step annotations and serves work as it arrives
(an inference server).

The rule, per rank with no ``ProfilerStep#`` annotation: a *request* is a top-level user
annotation of a host thread (depth 0, kind ``annotation``) with work inside it (a non-passive
event nested under it), whose name occurs at least `MIN_REQUESTS` times among such annotations
of the rank (a served request type, e.g. ``Stage::PyTorchMRSGIFTask::run``). Each request is a
window (`replay.attribution.window_spans`), so a replay's step figures are per-request latency,
not the length of the recording, which the arrivals set. A request whose thread was idle before
it (a gap of at least `replay.graph.threads.MIN_WAIT_US` outside every op of the thread) was
*released* by its arrival: its start is held at its measured time and the idle gap is not
carried (a previous request that ends later delays it; one that ends sooner does not start it
sooner). A thread holding requests waits on the other threads of its process inside a request
the way a main thread does (`replay.graph.threads`), on threads that hold no requests.

Limits: a request type seen once on a rank is not recognised; a request that began before the
recording is a window from where the trace has it; the time a request waits for its thread
after it arrives (a slower replay) is not part of its latency (the window starts when the
request does); requests are independent of one another unless an edge joins them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.graph.events import EventArrays, _col

#: Fewest annotations of one name on a rank that make it a request type (assumed: a type served
#: once is indistinguishable from a one-off phase of a script).
MIN_REQUESTS = 2


@dataclass
class Requests:
    """The requests of a trace, ascending by (rank, measured start)."""

    ids: np.ndarray                                   # event ids of the request annotations
    spans: dict[int, tuple[np.ndarray, np.ndarray]]   # track -> measured (starts, ends), sorted
    names: dict[str, int]                             # request type -> how many


def find_requests(events: pa.Table, ev: EventArrays) -> Requests:
    """The requests of ``events`` (`Requests`; none on ranks with ``ProfilerStep#`` marks)."""
    n = ev.n
    none = Requests(np.zeros(0, dtype=np.int64), {}, {})
    if not n:
        return none
    name = events.column("name")
    host = ~ev.is_dev
    marks = pc.starts_with(name, "ProfilerStep#").fill_null(False).to_numpy(
        zero_copy_only=False).astype(bool) & host
    stepped = np.zeros(int(ev.rank.max()) + 1, dtype=bool)
    stepped[ev.rank[marks]] = True
    cand = host & (ev.depth == 0) & ~stepped[ev.rank]
    cand &= pc.equal(events.column("kind"), "annotation").fill_null(False).to_numpy(
        zero_copy_only=False).astype(bool)
    if not cand.any():
        return none
    # annotations with work nested under them: climb from every host work event (depth: few)
    parent = _col(events, "parent_id").astype(np.int64)
    has_work = np.zeros(n, dtype=bool)
    cur = parent[host & ~ev.passive]
    for _ in range(int(ev.depth.max()) + 1 if n else 0):
        cur = cur[(cur >= 0) & (cur < n)]
        if not len(cur):
            break
        cur = np.unique(cur)
        has_work[cur] = True
        cur = parent[cur]
    ids = np.flatnonzero(cand & has_work)
    if not len(ids):
        return none
    names = np.asarray(name.take(pa.array(ids)).to_pylist(), dtype=object)
    key = np.char.add(ev.rank[ids].astype(str), np.char.add("\x00", names.astype(str)))
    _, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
    keep = cnt[inv] >= MIN_REQUESTS
    ids, names = ids[keep], names[keep]
    if not len(ids):
        return none
    o = np.lexsort((ev.ts[ids], ev.rank[ids]))
    ids, names = ids[o], names[o]
    spans: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    tr = ev.tr_of[ids]
    for t in np.unique(tr).tolist():  # request threads: few
        mine = ids[tr == t]
        mine = mine[np.argsort(ev.ts[mine], kind="stable")]
        spans[int(t)] = (ev.ts[mine], ev.end[mine])
    counts: dict[str, int] = {}
    for s in names.tolist():
        counts[s] = counts.get(s, 0) + 1
    return Requests(ids, spans, counts)


def release_arrivals(req: Requests, order: np.ndarray, gap: np.ndarray, outside: np.ndarray,
                     ptime: np.ndarray, base: np.ndarray, min_idle_us: float) -> int:
    """In place: each request start after an idle gap of at least ``min_idle_us`` outside every
    op of its thread (``outside``, per position) is held at its measured time (``base``) and the
    gap is not carried (``gap`` 0). Returns how many starts were released."""
    if not len(req.ids):
        return 0
    pos = np.empty(len(order) and int(order.max()) + 1, dtype=np.int64)
    pos[order] = np.arange(len(order))
    k = pos[2 * req.ids]
    hit = (gap[k] >= min_idle_us) & outside[k]
    k = k[hit]
    pts = 2 * req.ids[hit]
    base[pts] = np.maximum(base[pts], ptime[pts])
    gap[k] = 0.0
    return int(hit.sum())
