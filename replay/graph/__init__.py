"""The dependency graph of a trace, built from the canonical events table.

Every event has a start point and an end point (point id ``2*i`` and ``2*i + 1``). Each track is a
chain of points in measured order; the chain carries what happens *on* the track:

- host thread: all start/end points sorted by measured time (nesting falls out of the order). A
  leaf's end follows its start by its costed duration; every other step along the chain keeps the
  measured gap (parent self time, Python overhead, data loading: host time). A parent therefore
  ends its trailing self time after its last child, so delaying or shrinking a child moves it.
- device stream: start_i, end_i, start_{i+1}, ... ; end = start + costed duration; a start
  follows the previous end by the event's *ready lag* (see below).

Cross-track edges (`src` end or start → `dst` start or end, plus a lag):

- ``launch``: launching runtime call's *start* → device event start (launch_id, else the runtime
  call with the same correlation id on the same rank);
- ``sync`` (device side): the recorded stream's last op before the event record → the waiting
  marker (``cuda_sync`` Wait Event, MTIA ``event_wait``), then the stream chain carries it;
- ``sync`` (device side, from the host): a stream wait call that launched no marker (older
  Kineto): the last op launched before its thread's last event record → the first op its
  thread launches after it, on another stream;
- ``sync`` (host side): for synchronize calls (stream / device / event synchronize, MTIA
  ``synchronizeStream``, blocking copies), the last op of each stream in scope launched before the
  call and finished before it returned → the call's *end*; the call's own duration becomes its
  return latency ``r`` (time from the device finishing to the call returning, at most its measured
  duration), so the wait itself comes out of the graph;
- ``queue``: a launch call blocked by its stream's full launch queue waits for the op that frees
  its slot (op end → call end, with the call's return latency, which is then all it costs);
  every other launch waits for the op a queue depth before it (`replay.graph.backpressure`);
- ``thread``: a host thread waiting (a long gap, inside an op or outside every op) while another
  thread of its process works, and resuming when that work ends: that end → the resuming point,
  with the return latency, which is all the gap keeps (`replay.graph.threads`);
- ``contention``: a kernel that waited for the compute units a kernel of another stream of its
  device held: that kernel's end → its start (with the ready lag; a kernel that started while
  the other's last blocks drained starts that share of the other's duration early)
  (`replay.graph.contention`);
- ``collective``: instances of one collective (same process group and sequence number) on
  different ranks start together when the last one is ready. The measured duration of a matched
  instance includes its wait for peers; its transfer part (own end − last arrival) is what gets
  costed.
- ``host`` / ``stream`` edges in the stored table document the track chains (consecutive top-level
  host ops, consecutive stream ops) with their lags.

An edge that runs backward in measured time and closes a cycle (flow events or correlation ids
inconsistent with the kernels) is dropped and counted (`replay.graph.cycles`).

Ready lag of a device event: measured start − the latest measured end (start, for launches) of
its inputs. It is kernel-launch / inter-kernel latency, and where it is longer, a wait on something
the trace does not record: kept by default, the part the launch latency does not explain counted
as *unexplained* (never silently re-timed); a strict replay drops it (`replay.pipeline`).
``max_ready_lag_us`` caps it instead (none by default); lags beyond `MAX_READY_LAG_US` are the
starts `replay.validation` reports as ones the graph does not explain.
CPU-only traces: leaf host ops are the work. With a CPU backend (gloo) the ``c10d::*`` op on
the calling thread only enqueues; the instance of the same collective on another host thread
(``gloo:*`` on ``pt_gloo_runloop``) is the transfer. The transfer instances are the ones matched
across ranks; ``launch`` edge enqueue start → transfer start; a thread holding only transfers is
scheduled like a stream (ready lag, no pinned gaps); ``sync`` edge transfer end → the point of
the enqueuing thread where it waits (``work.wait()`` returning; `replay.graph.waits`: right
after the transfer for a synchronous collective, where the work object is waited on for an
asynchronous one such as DDP's bucket all-reduces), whose measured gap keeps only the return
latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.graph.backpressure import queue_edges
from replay.graph.chains import (
    EDGE_CODE,
    Chains,
    Edges,
    _outside_events,
    chain_bases,
    cross_edges,
    edges_table,
    point_chains,
    ready_lags,
    stream_chains,
)
from replay.graph.collectives import Collectives, match_collectives, worker_pools
from replay.graph.contention import contention_edges
from replay.graph.cycles import cycle_edges
from replay.graph.events import EventArrays, _is_in, event_arrays, event_times, time_keys
from replay.graph.requests import find_requests, release_arrivals
from replay.graph.sync import (
    Launches,
    device_wait_edges,
    find_launches,
    host_sync_edges,
    host_wait_edges,
    order_streams,
)
from replay.graph.threads import MIN_WAIT_US, thread_waits
from replay.graph.waits import WAIT_CONSUMERS, WAIT_LEAD_IN, collective_waits

__all__ = ["EDGE_CODE", "MAX_READY_LAG_US", "Graph", "_is_in", "build_graph", "event_times",
           "time_keys"]

#: A device event's ready lag beyond this (us) is a wait the graph does not explain, not launch
#: latency (reported by `replay.validation`; a cap when passed as ``max_ready_lag_us``).
MAX_READY_LAG_US = 1000.0


@dataclass
class Graph:
    """Point chains per track plus cross-track edges; arrays indexed by event or point id."""

    n: int
    order: np.ndarray          # point ids, track by track, in chain order
    track_ptr: np.ndarray      # order[track_ptr[t]:track_ptr[t+1]] is track t
    track_is_device: np.ndarray
    gap: np.ndarray            # measured gap before each position in its chain (0 at track start)
    leaf_end: np.ndarray       # bool per position: an end point right after its own start
    base: np.ndarray           # per point: earliest time (host track first point, trace start)
    src_pt: np.ndarray         # cross-track edges, by point id
    dst_pt: np.ndarray
    lag: np.ndarray
    etype: np.ndarray          # int8 code into schema.EDGE_TYPES
    ready_lag: np.ndarray      # per event (device events), us
    sync_lag: np.ndarray       # per event: return latency of host sync calls, nan otherwise
    coll_group: np.ndarray     # per event: collective group id, -1 if unmatched
    transfer_us: np.ndarray    # per event: measured transfer part of matched collectives, nan else
    t0: float                  # trace start (min ts); internal times are relative to it
    edges: pa.Table = field(default=None)  # type: ignore[assignment]
    notes: dict[str, object] = field(default_factory=dict)
    # measured gaps (DESIGN §10): what a dependency or a modelled latency explains and what not
    via_launch: np.ndarray | None = None
    #   per event: its measured ready time is its launch (so its lag is launch latency)
    unexplained_lag: np.ndarray | None = None
    #   per event: part of its ready lag no modelled latency explains (us); replay.pipeline sets
    #   it from the models' launch latencies (none: the whole lag)
    unexplained_gap: np.ndarray | None = None
    wait_lag: np.ndarray | None = None
    #   per event that waited on another track (a launch blocked by its full queue, an op or
    #   annotation without children waiting on another thread): its return latency after the op
    #   it waited on ended (what it is costed at), nan otherwise (`replay.graph.backpressure`,
    #   `replay.graph.threads`)
    thread_started: np.ndarray | None = None
    #   positions whose thread was started (or restarted after idling) by another thread's
    #   ``thread`` edge: that edge's lag, the measured delay, is unexplained
    contention_tail: np.ndarray | None = None
    #   per event with a ``contention`` edge into its start: the share of the source kernel's
    #   duration it started before that kernel's end (0 otherwise); the scheduler starts it that
    #   share of the source's costed duration early (`replay.graph.contention`)
    pinned_us: np.ndarray | None = None
    #   per point: how far its base was moved to its measured start (a stream's first event with
    #   no input, e.g. no launching call in the trace: kept where it was measured, not re-timed
    #   to its rank's start, by a strict replay too, `replay.pipeline.modelled_lags`)
    unlaunched: np.ndarray | None = None
    #   per event: a stream-like event with no launching call (or enqueue) in the trace (launched
    #   before the capture window, or a sampled trace): nothing models its ready lag, so a strict
    #   replay keeps it as measured and counts it as unexplained (`replay.pipeline.modelled_lags`)
    pool: np.ndarray | None = None
    #   per event: the pool of a CPU backend's worker threads its transfer holds a unit of while
    #   it runs (-1 none; `replay.graph.collectives.worker_pools`); used where the cost model
    #   gives the event no pool of its own
    pool_capacity: np.ndarray | None = None
    #   per pool: how many worker threads it has
    requests: np.ndarray | None = None
    #   event ids of the requests of ranks without step annotations (`replay.graph.requests`):
    #   each one is a window of its own


def build_graph(events: pa.Table, *, max_ready_lag_us: float | None = None) -> Graph:
    """Build the point chains and cross-track edges of ``events`` (canonical schema).

    The stages, in order, each a function over one `EventArrays` (``events``: reading the
    table once) that returns what it produces: launches, stream order and the sync edges
    (``sync``), collectives (``collectives``), stream chains, ready lags, cross-track edges, point
    chains, CPU collective waits, chain bases and the stored edges table (``chains``)."""
    ev = event_arrays(events)
    lc, notes = find_launches(ev)
    st = order_streams(ev, lc)
    ds_src, ds_dst, n_ds = device_wait_edges(ev, st)
    hw_src, hw_dst, n_hw = host_wait_edges(ev, lc)
    ds_src, ds_dst = np.concatenate([ds_src, hw_src]), np.concatenate([ds_dst, hw_dst])
    n_ds |= n_hw
    hs_src, hs_dst, sync_lag, n_hs = host_sync_edges(ev, lc, st)
    q_src, q_dst, q_lag, wait_lag, n_q = queue_edges(ev, lc, st, sync_lag)
    coll, n_coll = match_collectives(ev)
    notes |= n_ds | n_hs | n_q | n_coll
    names = (events.column("track").take(pa.array(ev.runs[:-1])).to_pylist() if ev.n else [])
    pool, pool_cap, n_pool = worker_pools(ev, coll, names)
    if len(pool_cap):
        notes |= n_pool
    # events scheduled like stream work: device events and those on worker threads
    on_worker = coll.worker_tr[ev.tr_of] if ev.n else np.zeros(0, dtype=bool)
    streamlike = ev.is_dev | on_worker
    tr_chain = ev.tr_dev | coll.worker_tr
    chain_ids, prev = stream_chains(ev, tr_chain)
    ready_lag, _, _ = ready_lags(ev, lc, prev, (ds_src, ds_dst), coll, streamlike, None)
    c_src, c_dst, c_tail, n_c = contention_edges(ev, ready_lag, prev)
    ready_lag, via_launch, n_ready = ready_lags(ev, lc, prev, (ds_src, ds_dst), coll, streamlike,
                                                max_ready_lag_us, (c_src, c_dst, c_tail))
    notes |= n_ready | n_c
    cross = cross_edges(lc, (ds_src, ds_dst), (hs_src, hs_dst), coll, ready_lag, sync_lag,
                        (q_src, q_dst, q_lag), (c_src, c_dst))
    contention_tail = np.zeros(ev.n)
    if len(c_dst):
        # the share of the kernel waited for that the waiting one overlapped (as measured)
        contention_tail[c_dst] = c_tail / np.maximum(ev.end[c_src] - ev.ts[c_src], 1e-9)
    pooled = np.zeros(len(ev.runs) - 1, dtype=bool)
    pooled[np.unique(ev.tr_of[pool >= 0])] = True
    ch = point_chains(ev, tr_chain, chain_ids, pooled)
    # host gaps outside every event of their thread (annotations do not count: they mark time)
    unexplained_gap = _outside_events(ch.order, ch.track_ptr, ch.track_is_device, ev.passive)
    idle_before = unexplained_gap.copy()
    # an op's own duration (below: unless a wait no thread explains); a passive leaf (an
    # annotation with nothing in it) stays a gap
    unexplained_gap[ch.leaf_end & ~ev.passive[ch.order // 2]] = False
    if len(coll.enq_dst):
        step_mark = pc.starts_with(events.column("name"), "ProfilerStep#").fill_null(False)
        wsrc, wk, wlag, seen, n_cons = collective_waits(
            ev, coll, ch, _is_in(events, "name", WAIT_CONSUMERS),
            _is_in(events, "name", WAIT_LEAD_IN),
            events.column("parent_id").to_numpy().astype(np.int64),
            step_mark.to_numpy(zero_copy_only=False).astype(bool))
        np.minimum.at(ch.gap, wk[seen], wlag[seen])
        cross = Edges(np.concatenate([cross.src_pt, 2 * wsrc + 1]),
                      np.concatenate([cross.dst_pt, ch.order[wk]]),
                      np.concatenate([cross.lag, wlag]),
                      np.concatenate([cross.etype,
                                      np.full(len(wsrc), EDGE_CODE["sync"], dtype=np.int8)]))
        notes["collective_waits"] = len(wsrc)
        if n_cons:
            notes["collective_waits_at_consumers"] = n_cons
        unexplained_gap[wk[seen]] = False  # a collective wait's return latency
    req = find_requests(events, ev, ch.order, ch.gap, idle_before, MIN_WAIT_US)
    tsrc, tk, tlag, tunx, (sf, sto), n_thr = thread_waits(ev, names, ch.order, ch.track_ptr,
                                                         ch.track_is_device, ch.gap, ch.tpos,
                                                         req.spans)
    notes |= n_thr
    if len(tsrc):
        np.minimum.at(ch.gap, tk, tlag)
        leaf = ch.leaf_end[tk]  # a waiting op without children: its duration is the wait
        wait_lag[ch.order[tk[leaf]] // 2] = tlag[leaf]
        cross = Edges(np.concatenate([cross.src_pt, 2 * tsrc + 1]),
                      np.concatenate([cross.dst_pt, ch.order[tk]]),
                      np.concatenate([cross.lag, tlag]),
                      np.concatenate([cross.etype,
                                      np.full(len(tsrc), EDGE_CODE["thread"], dtype=np.int8)]))
        unexplained_gap[tk] = False  # the wait's return latency
    unexplained_gap[tunx] = True  # a wait no thread explains
    if len(sto):
        unexplained_gap[sto] = True  # its start lag: the critical path counts it unexplained
        ch.gap[sto] = 0.0  # a restarted worker's idle time: the wait that started it explains it
        cross = Edges(np.concatenate([cross.src_pt, ch.order[sf]]),
                      np.concatenate([cross.dst_pt, ch.order[sto]]),
                      np.concatenate([cross.lag, ch.tpos[sto] - ch.tpos[sf]]),
                      np.concatenate([cross.etype,
                                      np.full(len(sto), EDGE_CODE["thread"], dtype=np.int8)]))
    drop, n_cyc = cycle_edges(ch.order, ch.track_ptr, ch.ptime, cross.src_pt, cross.dst_pt,
                              cross.etype == EDGE_CODE["collective"])
    notes |= n_cyc
    if drop.any():
        k = ~drop
        cross = Edges(cross.src_pt[k], cross.dst_pt[k], cross.lag[k], cross.etype[k])
    base = chain_bases(ev, ch)
    base[ch.order[sto]] = -np.inf  # started by a thread edge, not pinned where measured
    if len(req.ids):
        notes["requests"] = {"windows": len(req.ids), "types": req.names,
                             "released": release_arrivals(req, ch.order, ch.gap, ch.ptime, base)}
    pinned = _pin_inputless_starts(ev, ch, base, cross)
    notes["device_starts_without_input"] = int((pinned > 0).sum())
    return Graph(n=ev.n, order=ch.order, track_ptr=ch.track_ptr, track_is_device=ch.track_is_device,
                 gap=ch.gap, leaf_end=ch.leaf_end, base=base, src_pt=cross.src_pt,
                 dst_pt=cross.dst_pt, lag=cross.lag, etype=cross.etype, ready_lag=ready_lag,
                 sync_lag=sync_lag, coll_group=coll.group, transfer_us=coll.transfer_us, t0=ev.t0,
                 edges=edges_table(ev, cross, np.where(pool >= 0, -1, prev), ready_lag),
                 notes=notes, pool=pool, pool_capacity=pool_cap,
                 via_launch=via_launch, unexplained_lag=ready_lag.copy(),
                 unexplained_gap=unexplained_gap, wait_lag=wait_lag, pinned_us=pinned,
                 unlaunched=_unlaunched(ev, lc, coll, streamlike), thread_started=sto,
                 contention_tail=contention_tail, requests=req.ids if len(req.ids) else None)


def _unlaunched(ev: EventArrays, lc: Launches, coll: Collectives, streamlike: np.ndarray
                ) -> np.ndarray:
    """Per event: stream-like work no launch or enqueue in the trace starts (markers aside)."""
    out = streamlike & ~lc.has_launch & ~ev.dev_marker
    out[coll.enq_dst] = False
    return out


def _pin_inputless_starts(ev: EventArrays, ch: Chains, base: np.ndarray, cross: Edges
                          ) -> np.ndarray:
    """In place: a stream-like track's first event with no incoming edge starts no earlier than
    measured (its base was its rank's start). Returns, per point, how far each base moved."""
    pinned = np.zeros(2 * ev.n)
    nonempty = np.flatnonzero(ch.track_ptr[1:] > ch.track_ptr[:-1])
    if not len(nonempty):
        return pinned
    fp = ch.order[ch.track_ptr[nonempty]]
    fp = fp[ch.track_is_device[nonempty] & (fp % 2 == 0)]
    fp = fp[~np.isin(fp, cross.dst_pt)]
    new = np.maximum(base[fp], ch.ptime[fp])
    pinned[fp] = new - base[fp]
    base[fp] = new
    return pinned
