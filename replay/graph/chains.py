"""Stream chains and ready lags, the cross-track edges, each track's point chain with its
measured gaps, chain bases and the stored edges table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace import schema
from replay.graph.collectives import Collectives
from replay.graph.events import EventArrays
from replay.graph.sync import Launches

EDGE_CODE = {t: i for i, t in enumerate(schema.EDGE_TYPES)}


def stream_chains(ev: EventArrays, tr_chain: np.ndarray
                  ) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """(event ids of each stream-like track in chain order, each event's predecessor on its chain
    or -1). Order: by start, and at equal starts the shorter first (a zero-length wait marker
    starting with a kernel ran before it; the table sorts longer first, for host nesting);
    device annotations are left out (passive tracks of their own)."""
    prev = np.full(ev.n, -1, dtype=np.int64)
    chain_ids: dict[int, np.ndarray] = {}
    for t in range(len(ev.runs) - 1):
        if tr_chain[t]:
            ids = np.arange(ev.runs[t], ev.runs[t + 1])
            ids = ids[~ev.dev_marker[ids]]
            ids = ids[np.lexsort((ev.end_k[ids] - ev.ts_k[ids], ev.ts_k[ids]))]
            chain_ids[t] = ids
            prev[ids[1:]] = ids[:-1]
    return chain_ids, prev


def ready_lags(ev: EventArrays, lc: Launches, prev: np.ndarray,
               dsync: tuple[np.ndarray, np.ndarray], coll: Collectives, streamlike: np.ndarray,
               max_ready_lag_us: float | None,
               contention: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
               ) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """(``ready_lag``, ``via_launch``) per event, and notes.

    Ready lag of a stream-like event: measured start − the latest measured end (start, for
    launches and enqueues) of its inputs (chain predecessor, launch, device wait source, and the
    kernel it waited for on another stream, ``contention`` (src, dst, tail): its end minus the
    tail), capped at ``max_ready_lag_us``. ``via_launch``: its latest input is its launch (or enqueue).
    Device sync markers (Stream Wait Event, event_wait / event_record, host-wait markers) are not
    work: they are costed zero (replay.run), so a marker ends where it starts, at
    max(measured start, its inputs' ends), whatever its measured duration (CUDA: the host API
    call; MTIA event_wait: the wait itself). Later events measure their ready lag from that end,
    so a wait is neither lost nor counted twice. Runs of consecutive markers resolve in turn.
    Notes: starts before their inputs ended (a trace anomaly, replayed without the overlap), and
    starts beyond the cap."""
    n, ts = ev.n, ev.ts
    dsync_src, dsync_dst = dsync
    enq_src, enq_dst = coll.enq_src, coll.enq_dst
    hp = prev >= 0
    dst_launch = np.flatnonzero(lc.has_launch)
    dsync_ev = ev.is_dev & ev.is_sync_kind & ~ev.dev_marker
    cap = np.inf if max_ready_lag_us is None else max_ready_lag_us
    launch_ts_l = ts[lc.launch[lc.has_launch]]
    end_in = ev.end
    for _ in range(n + 1):
        ready = np.full(n, -np.inf)
        ready[hp] = end_in[prev[hp]]
        # one launch per device event: no repeated destinations
        ready[dst_launch] = np.maximum(ready[dst_launch], launch_ts_l)
        if len(enq_dst):
            np.maximum.at(ready, enq_dst, ts[enq_src])
        if len(dsync_dst):
            np.maximum.at(ready, dsync_dst, end_in[dsync_src])
        if contention is not None and len(contention[1]):
            np.maximum.at(ready, contention[1], end_in[contention[0]] - contention[2])
        fin = np.isfinite(ready)
        mend = np.where(fin, ready + np.clip(ts - np.where(fin, ready, 0.0), 0.0, cap), ts)
        nxt = np.where(dsync_ev, mend, ev.end)
        if np.array_equal(nxt, end_in):
            break
        end_in = nxt
    ready_lag = np.where(np.isfinite(ready), ts - ready, 0.0)
    ready_lag[~streamlike] = 0.0
    ready_lag[ev.dev_marker] = 0.0
    via_launch = np.zeros(n, dtype=bool)
    via_launch[dst_launch] = launch_ts_l >= ready[dst_launch]
    if len(enq_dst):
        via_launch[enq_dst] |= ts[enq_src] >= ready[enq_dst]
    via_launch &= streamlike & ~ev.dev_marker
    notes: dict[str, object] = {
        "device_starts_before_inputs": int(((ready_lag < -1e-6) & ~dsync_ev).sum())}
    ready_lag = np.maximum(ready_lag, 0.0)
    if max_ready_lag_us is not None:
        # a CPU backend's worker thread taking up enqueued work late is host scheduling the
        # trace measured (its dispatch latency), not a device dependency the graph lacks: kept
        # whole (and counted as unexplained)
        worker = coll.worker_tr[ev.tr_of] if n else np.zeros(0, dtype=bool)
        capped = streamlike & ~worker & (ready_lag > max_ready_lag_us)
        notes["device_starts_unexplained"] = int(capped.sum())
        ready_lag = np.where(worker, ready_lag, np.minimum(ready_lag, max_ready_lag_us))
    return ready_lag, via_launch, notes


@dataclass
class Edges:
    """Cross-track edges by point id (start 2i, end 2i+1), with lag (us) and type code."""

    src_pt: np.ndarray
    dst_pt: np.ndarray
    lag: np.ndarray
    etype: np.ndarray

    @staticmethod
    def of(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, str]]) -> Edges:
        return Edges(np.concatenate([s.astype(np.int64) for s, _, _, _ in parts]),
                     np.concatenate([d.astype(np.int64) for _, d, _, _ in parts]),
                     np.concatenate([np.asarray(lg, dtype=np.float64) for _, _, lg, _ in parts]),
                     np.concatenate([np.full(len(s), EDGE_CODE[c], dtype=np.int8)
                                     for s, _, _, c in parts]))


def cross_edges(lc: Launches, dsync: tuple[np.ndarray, np.ndarray],
                hsync: tuple[np.ndarray, np.ndarray], coll: Collectives, ready_lag: np.ndarray,
                sync_lag: np.ndarray, qwait: tuple[np.ndarray, np.ndarray, np.ndarray],
                cwait: tuple[np.ndarray, np.ndarray]) -> Edges:
    """The cross-track edges: ``launch`` (launch start → device start; enqueue start → transfer
    start), ``sync`` (device wait: source end → marker start; host: source end → call end),
    ``collective`` (instance start ↔ its group's first instance start), ``queue`` (the op
    freeing a launch's queue slot: its end → the call's end) and ``contention`` (the kernel of
    another stream a kernel waited for: its end → the kernel's start); edges into device starts
    carry the ready lag, host syncs and blocked launches the return latency."""
    dst_launch = np.flatnonzero(lc.has_launch)
    (ds, dd), (hs, hd), (qs, qd, ql), (cs, cd) = dsync, hsync, qwait, cwait
    return Edges.of([
        (2 * lc.launch[lc.has_launch], 2 * dst_launch, ready_lag[dst_launch], "launch"),
        (2 * coll.enq_src, 2 * coll.enq_dst, ready_lag[coll.enq_dst], "launch"),
        (2 * ds + 1, 2 * dd, ready_lag[dd], "sync"),
        (2 * hs + 1, 2 * hd + 1, sync_lag[hd], "sync"),
        (2 * coll.src, 2 * coll.dst, np.zeros(len(coll.src)), "collective"),
        (2 * qs + 1, 2 * qd + 1, ql, "queue"),
        (2 * cs + 1, 2 * cd, ready_lag[cd], "contention"),
    ])


@dataclass
class Chains:
    """Point chains per track (the Graph's ``order``, ``track_ptr``, ``track_is_device``, ``gap``,
    ``leaf_end``) and each position's measured time and integer key."""

    order: np.ndarray
    track_ptr: np.ndarray
    track_is_device: np.ndarray
    gap: np.ndarray
    leaf_end: np.ndarray
    tpos: np.ndarray           # per position: measured time of its point (us after t0)
    pkey: np.ndarray           # per point id: integer time key
    ptime: np.ndarray          # per point id: measured time (us after t0)


def point_chains(ev: EventArrays, tr_chain: np.ndarray, chain_ids: dict[int, np.ndarray],
                 split: np.ndarray | None = None) -> Chains:
    """Each track's chain of points: stream-like tracks start_i, end_i, start_{i+1}, ...;
    host threads all points by measured time (ends before starts at a tie, deeper ends first,
    shallower starts first; a zero-length event's end right after its start); each device
    annotation a passive track of its own. A stream-like track in ``split`` (per track: a
    worker thread of a pool, `replay.graph.collectives.worker_pools`) is left empty and each of
    its events is a stream-like track of its own (the pool, not the thread, orders them).
    ``gap``: the measured time since the previous position (0 at a track's start);
    ``leaf_end``: an end point right after its own start."""
    n, ts_k, end_k, depth = ev.n, ev.ts_k, ev.end_k, ev.depth
    order_parts: list[np.ndarray] = []
    ptr = [0]
    chain_dev: list[bool] = []
    alone: list[np.ndarray] = []
    for t in range(len(ev.runs) - 1):  # loop over tracks (few)
        a, b = int(ev.runs[t]), int(ev.runs[t + 1])
        ids = np.arange(a, b)
        chain_dev.append(bool(tr_chain[t]))
        if split is not None and split[t]:
            alone.append(chain_ids[t])
            pts = np.zeros(0, dtype=np.int64)
        elif tr_chain[t]:
            ids = chain_ids[t]
            pts = np.empty(2 * len(ids), dtype=np.int64)
            pts[0::2] = 2 * ids
            pts[1::2] = 2 * ids + 1
        else:
            zero = end_k[a:b] <= ts_k[a:b]
            tkey = np.concatenate([ts_k[a:b], end_k[a:b]])
            cls = np.concatenate([np.ones(b - a), np.where(zero, 1.0, 0.0)])
            dkey = np.concatenate([depth[a:b] * 2.0,
                                   np.where(zero, depth[a:b] * 2.0 + 1, -depth[a:b])])
            seq_key = np.concatenate([ids * 2, ids * 2 + 1])
            oo = np.lexsort((seq_key, dkey, cls, tkey))
            pts = np.concatenate([2 * ids, 2 * ids + 1])[oo]
        order_parts.append(pts)
        ptr.append(ptr[-1] + len(pts))
    for e in (np.concatenate(alone) if alone else np.zeros(0, dtype=np.int64)).tolist():
        order_parts.append(np.array([2 * e, 2 * e + 1], dtype=np.int64))
        ptr.append(ptr[-1] + 2)
        chain_dev.append(True)
    marks = np.flatnonzero(ev.dev_marker)
    order_parts.append(np.stack([2 * marks, 2 * marks + 1], axis=1).reshape(-1))
    track_ptr = np.concatenate([np.asarray(ptr, dtype=np.int64),
                                ptr[-1] + 2 * np.arange(1, len(marks) + 1)])
    tr_dev = np.concatenate([np.asarray(chain_dev, dtype=bool), np.zeros(len(marks), dtype=bool)])
    order = np.concatenate(order_parts).astype(np.int64)
    ptime = np.empty(2 * n)
    ptime[0::2] = ev.ts
    ptime[1::2] = ev.end
    tpos = ptime[order]
    pkey = np.empty(2 * n, dtype=np.int64)
    pkey[0::2] = ts_k
    pkey[1::2] = end_k
    firsts = track_ptr[:-1][track_ptr[:-1] < len(order)]
    gap = np.zeros(len(order))
    gap[1:] = tpos[1:] - tpos[:-1]
    gap[firsts] = 0.0
    leaf_end = np.zeros(len(order), dtype=bool)
    leaf_end[1:] = (order[1:] % 2 == 1) & (order[:-1] == order[1:] - 1)
    leaf_end[firsts] = False
    return Chains(order, track_ptr, tr_dev, gap, leaf_end, tpos, pkey, ptime)


def chain_bases(ev: EventArrays, ch: Chains) -> np.ndarray:
    """Per point: the earliest time it may take (-inf except each track's first point: a host
    track's first point at its measured time, a stream-like track's at its rank's start)."""
    base = np.full(2 * ev.n, -np.inf)
    if ev.n:
        ur, rinv = np.unique(ev.rank, return_inverse=True)
        rank_t0 = np.full(len(ur), np.inf)
        np.minimum.at(rank_t0, rinv, ev.ts)
        nonempty = np.flatnonzero(ch.track_ptr[1:] > ch.track_ptr[:-1])
        fp = ch.order[ch.track_ptr[nonempty]]
        base[fp] = np.where(ch.track_is_device[nonempty], rank_t0[rinv[fp // 2]], ch.ptime[fp])
    return base


def edges_table(ev: EventArrays, cross: Edges, prev: np.ndarray, ready_lag: np.ndarray) -> pa.Table:
    """The stored edges table (event ids): the cross-track edges, then ``stream`` edges
    (consecutive ops of a stream-like chain, with the ready lag) and ``host`` edges (consecutive
    top-level host ops of a track, with the measured gap)."""
    dev_next = np.flatnonzero(prev >= 0)
    top = np.flatnonzero((~ev.is_dev) & (ev.depth == 0))
    same = ev.tr_of[top[1:]] == ev.tr_of[top[:-1]]
    hs, hd = top[:-1][same], top[1:][same]
    src = [cross.src_pt // 2, prev[dev_next], hs]
    dst = [cross.dst_pt // 2, dev_next, hd]
    typ = [cross.etype, np.full(len(dev_next), EDGE_CODE["stream"], dtype=np.int8),
           np.full(len(hs), EDGE_CODE["host"], dtype=np.int8)]
    lag = [cross.lag, ready_lag[dev_next], ev.ts[hd] - ev.end[hs]]
    return schema.from_columns({
        "src": np.concatenate(src), "dst": np.concatenate(dst),
        "type": pc.take(pa.array(schema.EDGE_TYPES, type=pa.string()),
                        pa.array(np.concatenate(typ))),
        "lag_us": np.concatenate(lag),
    }, schema.EDGES_SCHEMA)


def _outside_events(order: np.ndarray, track_ptr: np.ndarray, chain: np.ndarray,
                    passive: np.ndarray) -> np.ndarray:
    """Per position of a host track: the gap before it lies outside every non-passive event of
    the track (no open event at that time). On a track holding only annotations (a step marked
    on a thread with no ops) every gap is: nothing on the track explains the time its marks
    span."""
    L = len(order)
    out = np.zeros(L, dtype=bool)
    if not L:
        return out
    ntr = len(track_ptr) - 1
    pos_tr = np.repeat(np.arange(ntr), np.diff(track_ptr))
    work = ~passive[order // 2]
    delta = np.where(work, np.where(order % 2 == 0, 1, -1), 0)
    # every event's two points are on its track: open counts return to 0 at each track's end
    open_before = np.concatenate([[0], np.cumsum(delta)[:-1]])
    live = np.bincount(pos_tr, weights=work, minlength=ntr) > 0
    out = ((open_before == 0) | ~live[pos_tr]) & ~chain[pos_tr]
    out[track_ptr[:-1][track_ptr[:-1] < L]] = False
    return out
