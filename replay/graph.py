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
- ``sync`` (host side): for synchronize calls (stream / device / event synchronize, MTIA
  ``synchronizeStream``, blocking copies), the last op of each stream in scope launched before the
  call and finished before it returned → the call's *end*; the call's own duration becomes its
  return latency ``r`` (time from the device finishing to the call returning, at most its measured
  duration), so the wait itself comes out of the graph;
- ``collective``: instances of one collective (same process group and sequence number) on
  different ranks start together when the last one is ready. The measured duration of a matched
  instance includes its wait for peers; its transfer part (own end − last arrival) is what gets
  costed.
- ``host`` / ``stream`` edges in the stored table document the track chains (consecutive top-level
  host ops, consecutive stream ops) with their lags.

Ready lag of a device event: measured start − the latest measured end (start, for launches) of
its inputs. It is kernel-launch / inter-kernel latency; it is capped at ``max_ready_lag_us`` so a
start delayed by a dependency the graph lacks is *not* absorbed (that shows up as replay error).
CPU-only traces: leaf host ops are the work. With a CPU backend (gloo) the ``c10d::*`` op on
the calling thread only enqueues; the instance of the same collective on another host thread
(``gloo:*`` on ``pt_gloo_runloop``) is the transfer. The transfer instances are the ones matched
across ranks; ``launch`` edge enqueue start → transfer start; a thread holding only transfers is
scheduled like a stream (ready lag, no pinned gaps); ``sync`` edge transfer end → the first
non-leaf-end point of the enqueuing thread at or after it (``work.wait()`` returning), whose
measured gap keeps only the return latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace import keys, schema

#: Names of runtime calls that block the host until device work finishes (scope: whole device
#: unless the event carries ``sync_stream``).
HOST_SYNC_NAMES = ("Synchronize", "synchronizeStream", "synchronizeDevice", "synchronizeEvent")
#: Device-side markers that are a host wait, not a stream wait (Kineto ``cuda_sync`` kinds).
HOST_WAIT_MARKERS = ("Stream Sync", "Context Sync", "Event Sync")
#: Default cap on a device event's ready lag (launch latency / inter-kernel gap), in us.
MAX_READY_LAG_US = 1000.0
#: Resolution of event times in the graph: Kineto writes microseconds with three decimals.
NS_PER_US = 1000

EDGE_CODE = {t: i for i, t in enumerate(schema.EDGE_TYPES)}


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
    #   per position: a host gap outside every (non-annotation) event of its thread


def event_times(events: pa.Table) -> tuple[float, np.ndarray, np.ndarray]:
    """(t0, start, end): the trace start and each event's measured start and end in us after it
    (floats; an as-measured replay reproduces them)."""
    if not events.num_rows:
        return 0.0, np.zeros(0), np.zeros(0)
    ts = _col(events, "ts_us").astype(np.float64)
    t0 = float(ts.min())
    start = ts - t0
    return t0, start, start + np.nan_to_num(_col(events, "dur_us").astype(np.float64))


def time_keys(events: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Integer nanosecond keys of each event's measured start and end, for ordering.

    ``ts_us`` and ``dur_us`` are each rounded once to integer ns and the end key is their sum, so
    an event that ends where the next one starts ties exactly; float ``ts - t0 + dur`` can land
    either side of the next ``ts - t0``, and a tie broken the wrong way changes the host chain's
    nesting (the next call stops being a leaf and keeps its measured duration).
    """
    if not events.num_rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ts = np.rint(_col(events, "ts_us").astype(np.float64) * NS_PER_US).astype(np.int64)
    dur = np.rint(np.nan_to_num(_col(events, "dur_us").astype(np.float64)) * NS_PER_US)
    ts -= ts.min()
    return ts, ts + dur.astype(np.int64)


def _col(events: pa.Table, name: str) -> np.ndarray:
    c = events.column(name)
    if c.null_count and pa.types.is_integer(c.type):
        c = c.fill_null(-1)
    return c.to_numpy(zero_copy_only=False)


def _is_in(events: pa.Table, name: str, values: tuple[str, ...] | list[str]) -> np.ndarray:
    m = pc.is_in(events.column(name), value_set=pa.array(list(values), type=pa.string()))
    return m.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)


def _contains(events: pa.Table, name: str, sub: str) -> np.ndarray:
    m = pc.match_substring(events.column(name), sub)
    return m.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)


def _codes(events: pa.Table, name: str) -> np.ndarray:
    col = events.column(name).combine_chunks() if events.num_rows else pa.array([], pa.string())
    enc = pc.dictionary_encode(col)
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _track_runs(rank: np.ndarray, track: np.ndarray) -> np.ndarray:
    """Start offsets of each contiguous (rank, track) run; asserts tracks are contiguous."""
    n = len(rank)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    change = np.ones(n, dtype=bool)
    change[1:] = (rank[1:] != rank[:-1]) | (track[1:] != track[:-1])
    starts = np.flatnonzero(change)
    keys = list(zip(rank[starts].tolist(), track[starts].tolist()))
    assert len(set(keys)) == len(keys), "events must be sorted by (rank, track, ts_us)"
    return np.append(starts, n).astype(np.int64)


def _last_before(key_ts: np.ndarray, group_sorted_ts: np.ndarray, group_ids: np.ndarray,
                 group_end: np.ndarray, q_ts: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """For queries (ts, end): the last group member with key_ts <= ts whose end <= q_end.

    Members are in stream order (key_ts non-decreasing); times are integer keys (`time_keys`).
    Returns event ids or -1.
    """
    idx = np.searchsorted(group_sorted_ts, q_ts, side="right") - 1
    out = np.full(len(q_ts), -1, dtype=np.int64)
    ok = idx >= 0
    # walk back over members that had not finished when the call returned (few; vectorized steps)
    for _ in range(64):
        if not ok.any():
            break
        cand = np.where(ok, idx, 0)
        good = ok & (group_end[cand] <= q_end)
        out[good] = group_ids[cand[good]]
        ok = ok & ~good
        idx = idx - 1
        ok &= idx >= 0
    return out


def build_graph(events: pa.Table, *, max_ready_lag_us: float | None = MAX_READY_LAG_US) -> Graph:
    """Build the point chains and cross-track edges of ``events`` (canonical schema)."""
    n = events.num_rows
    rank = _col(events, "rank").astype(np.int64)
    track = _codes(events, "track")
    is_dev = _col(events, "is_device").astype(bool)
    t0, ts, end = event_times(events)
    ts_k, end_k = time_keys(events)  # orders and ties; the float times carry the values
    dur = _col(events, "dur_us").astype(np.float64)
    depth = _col(events, "depth").astype(np.int64)
    is_sync_kind = _is_in(events, "kind", ["sync"])
    is_memcpy = _is_in(events, "kind", ["memcpy"])
    is_comm = _is_in(events, "kind", ["collective", "p2p"])
    # device-side annotations (gpu_user_annotation) span kernels; they are not stream work
    dev_marker = is_dev & _is_in(events, "kind", ["annotation", "instant"])
    host_marker = _is_in(events, "name", HOST_WAIT_MARKERS)
    corr = _col(events, "correlation").astype(np.int64)
    launch = _col(events, "launch_id").astype(np.int64).copy()
    sync_stream = _col(events, "sync_stream").astype(np.int64)
    sync_corr = _col(events, "sync_corr").astype(np.int64)
    stream = _col(events, "stream").astype(np.int64)
    device = _col(events, "device").astype(np.int64)
    notes: dict[str, object] = {}

    runs = _track_runs(rank, track)
    ntr = len(runs) - 1
    tr_of = np.repeat(np.arange(ntr), np.diff(runs)) if n else np.zeros(0, dtype=np.int64)
    tr_dev = is_dev[runs[:-1]] if ntr else np.zeros(0, dtype=bool)

    # ---- launch edges: launch_id, else the runtime call with the same correlation id ---------
    host_rt = (~is_dev) & (corr >= 0)
    miss = is_dev & (launch < 0) & (corr >= 0)
    if miss.any() and host_rt.any():
        hid, mi = np.flatnonzero(host_rt), np.flatnonzero(miss)
        hk, qk = keys.joint_codes((rank[hid], corr[hid]), (rank[mi], corr[mi]))
        pos = keys.lookup(hk, qk)
        hit = pos >= 0
        launch[mi[hit]] = hid[pos[hit]]
    has_launch = is_dev & (launch >= 0)
    notes["device_events"] = int(is_dev.sum())
    notes["device_events_without_launch"] = int((is_dev & (launch < 0)).sum())
    launch_k = np.where(launch >= 0, ts_k[np.maximum(launch, 0)], ts_k)

    # ---- per-stream order by launch time (for "last op before call") ----------------------------
    # streams are (rank, device, stream) tuples, factorized together with the streams that
    # device-side waits name, so any two distinct ids get distinct streams
    waits = np.flatnonzero(is_dev & is_sync_kind & ((sync_corr >= 0) | (sync_stream >= 0))
                           & ~host_marker)
    dev_ids = np.flatnonzero(is_dev)
    sk, wait_sk = keys.joint_codes((rank[dev_ids], device[dev_ids], stream[dev_ids]),
                                   (rank[waits], device[waits], sync_stream[waits]))
    o = np.lexsort((launch_k[dev_ids], sk))
    dev_ids, sk = dev_ids[o], sk[o]
    ustreams, sstart = np.unique(sk, return_index=True)
    sbounds = np.append(sstart, len(sk))
    never = np.iinfo(np.int64).max  # a query end no member passes

    def last_on_stream(key: int, q_ts: np.ndarray, q_end: np.ndarray) -> np.ndarray:
        j = np.searchsorted(ustreams, key)
        if j >= len(ustreams) or ustreams[j] != key:
            return np.full(len(q_ts), -1, dtype=np.int64)
        ids = dev_ids[sbounds[j]:sbounds[j + 1]]
        return _last_before(launch_k[ids], launch_k[ids], ids, end_k[ids], q_ts, q_end)

    src_l: list[np.ndarray] = []
    dst_l: list[np.ndarray] = []
    lag_l: list[np.ndarray] = []
    typ_l: list[np.ndarray] = []
    # edges into device starts get their lag (the ready lag) filled in below
    src_pt_launch = 2 * launch[has_launch]
    dst_launch = np.flatnonzero(has_launch)

    # ---- device-side waits: Wait Event / event_wait -----------------------------------------
    dsync_src: list[int] = []
    dsync_dst: list[int] = []
    if len(waits):
        cid = np.flatnonzero(corr >= 0)
        ck, wck = keys.joint_codes((rank[cid], corr[cid]), (rank[waits], sync_corr[waits]))
        oc = np.argsort(ck, kind="stable")
        cid = cid[oc]
        cks = ck[oc]
        for i, w in enumerate(waits.tolist()):  # waits are few (hundreds at most)
            src = -1
            if sync_corr[w] >= 0:
                key = wck[i]
                lo, hi = np.searchsorted(cks, key), np.searchsorted(cks, key, side="right")
                recs = cid[lo:hi]
                recs = recs[recs != w]
                dev_rec = recs[is_dev[recs]]
                if len(dev_rec):
                    src = int(dev_rec[0])
                elif len(recs) and sync_stream[w] >= 0:
                    r = int(recs[0])
                    src = int(last_on_stream(wait_sk[i], ts_k[[r]], np.array([never]))[0])
            elif sync_stream[w] >= 0:
                src = int(last_on_stream(wait_sk[i], launch_k[[w]], np.array([never]))[0])
            if src >= 0 and src != w:
                dsync_src.append(src)
                dsync_dst.append(w)
    dsync_src_a = np.asarray(dsync_src, dtype=np.int64)
    dsync_dst_a = np.asarray(dsync_dst, dtype=np.int64)
    notes["device_waits"] = len(waits)
    notes["device_waits_resolved"] = len(dsync_src_a)

    # ---- host-side synchronization -----------------------------------------------------------
    host_sync = (~is_dev) & (sync_stream != -1)
    rt = np.flatnonzero(~is_dev & _is_in(events, "kind", ["runtime", "sync", "other"]))
    if len(rt):
        # names repeat: match each distinct name once
        names = pc.dictionary_encode(events.column("name").take(pa.array(rt)).combine_chunks())
        hit_v = pc.match_substring_regex(names.dictionary, "|".join(HOST_SYNC_NAMES))
        hit_v = hit_v.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
        idx = names.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        hit = np.append(hit_v, False)[idx]  # null names (-1) do not match
        host_sync[rt[hit]] = True
    # a host call that launched a host-wait marker (cuda_sync Stream/Context/Event Sync)
    marker = is_dev & has_launch & host_marker
    host_sync[launch[marker]] = True
    # blocking copies: the launching call returned only after the copy finished
    cp = is_dev & has_launch & is_memcpy
    cpl = launch[cp]
    blocking = end_k[cp] <= end_k[cpl]
    blk_dev, blk_host = np.flatnonzero(cp)[blocking], cpl[blocking]
    hs_src: list[np.ndarray] = [blk_dev]
    hs_dst: list[np.ndarray] = [blk_host]
    hs_ids = np.flatnonzero(host_sync)
    if len(hs_ids) and len(ustreams):
        s_rank = rank[dev_ids[sstart]]
        s_str = stream[dev_ids[sstart]]
        for j, key in enumerate(ustreams.tolist()):  # loop over streams (few)
            scope = hs_ids[rank[hs_ids] == s_rank[j]]
            ss = sync_stream[scope]
            scope = scope[(ss < 0) | (ss == s_str[j])]
            if not len(scope):
                continue
            src = last_on_stream(key, ts_k[scope], end_k[scope])
            ok = src >= 0
            hs_src.append(src[ok])
            hs_dst.append(scope[ok])
    hsrc = np.concatenate(hs_src).astype(np.int64)
    hdst = np.concatenate(hs_dst).astype(np.int64)
    sync_lag = np.full(n, np.nan)
    if len(hdst):
        dep_end = np.full(n, -np.inf)
        np.maximum.at(dep_end, hdst, end[hsrc])
        u = np.unique(hdst)
        sync_lag[u] = np.clip(np.minimum(dur[u], end[u] - dep_end[u]), 0.0, None)
    notes["host_syncs"] = len(np.unique(hdst))

    # ---- collectives across ranks ------------------------------------------------------------
    coll_group = np.full(n, -1, dtype=np.int64)
    transfer = np.full(n, np.nan)
    coll_src = np.zeros(0, dtype=np.int64)
    coll_dst = np.zeros(0, dtype=np.int64)
    pg = events.column("pg").to_numpy(zero_copy_only=False)
    seq = _col(events, "coll_seq").astype(np.int64)
    cand = np.flatnonzero((seq >= 0) & is_comm
                          & events.column("pg").is_valid().to_numpy(zero_copy_only=False))
    enq_src = np.zeros(0, dtype=np.int64)   # host enqueue (c10d::*) -> its transfer instance
    enq_dst = np.zeros(0, dtype=np.int64)
    worker_tr = np.zeros(ntr, dtype=bool)
    if len(cand):
        import pandas as pd

        df = pd.DataFrame({"id": cand, "pg": pg[cand].astype(str), "seq": seq[cand],
                           "rank": rank[cand], "dev": is_dev[cand], "ts": ts[cand],
                           "tr": tr_of[cand]})
        # CPU backends (gloo): the op on the calling thread only enqueues; the instance of the
        # same (pg, seq, rank) on another host thread, starting no earlier, is the transfer
        h = df[~df["dev"]].sort_values(["pg", "seq", "rank", "ts"])
        first = h.groupby(["pg", "seq", "rank"], sort=False)
        h = h.assign(enq=first["id"].transform("first"), enq_tr=first["tr"].transform("first"))
        xfer = h[h["tr"] != h["enq_tr"]].drop_duplicates(["pg", "seq", "rank"], keep="first")
        df["xfer"] = df["id"].isin(xfer["id"])
        if len(xfer):
            enq_src = xfer["enq"].to_numpy().astype(np.int64)
            enq_dst = xfer["id"].to_numpy().astype(np.int64)
            # a thread holding nothing but transfer instances is a worker: scheduled like a stream
            is_x = np.zeros(n, dtype=bool)
            is_x[enq_dst] = True
            cnt = np.bincount(tr_of, minlength=ntr)
            xc = np.bincount(tr_of[enq_dst], minlength=ntr)
            worker_tr = (xc == cnt) & (cnt > 0) & ~tr_dev
        # per (collective, rank): device instances when there are any, then transfer instances,
        # else host ones; the first
        df = df.sort_values(["pg", "seq", "rank", "dev", "xfer", "ts"],
                            ascending=[True, True, True, False, False, True])
        df = df.drop_duplicates(["pg", "seq", "rank"], keep="first")
        gb = df.groupby(["pg", "seq"], sort=False)
        df["n"] = gb["rank"].transform("size")
        df = df[df["n"] >= 2]
        if len(df):
            df["gid"] = df.groupby(["pg", "seq"], sort=False).ngroup()
            ids = df["id"].to_numpy()
            gid = df["gid"].to_numpy()
            coll_group[ids] = gid
            last = np.full(gid.max() + 1, -np.inf)
            np.maximum.at(last, gid, ts[ids])
            transfer[ids] = np.clip(end[ids] - last[gid], 0.0, None)
            first_id = df.groupby("gid")["id"].transform("first").to_numpy()
            other = ids != first_id
            coll_src = np.concatenate([ids[other], first_id[other]])
            coll_dst = np.concatenate([first_id[other], ids[other]])
    notes["collective_enqueues"] = len(enq_src)
    # events scheduled like stream work: device events and those on worker threads
    on_worker = worker_tr[tr_of] if n else np.zeros(0, dtype=bool)
    streamlike = is_dev | on_worker
    tr_chain = tr_dev | worker_tr
    notes["collectives_matched"] = len(np.unique(coll_group[coll_group >= 0]))

    # ---- ready lag of device events ----------------------------------------------------------
    prev_dev = np.full(n, -1, dtype=np.int64)
    # stream order: by start, and at equal starts the shorter first (a zero-length wait marker
    # starting with a kernel ran before it; the table sorts longer first, for host nesting)
    chain_ids: dict[int, np.ndarray] = {}
    for t in range(ntr):
        if tr_chain[t]:
            ids = np.arange(runs[t], runs[t + 1])
            ids = ids[~dev_marker[ids]]
            ids = ids[np.lexsort((end_k[ids] - ts_k[ids], ts_k[ids]))]
            chain_ids[t] = ids
            prev_dev[ids[1:]] = ids[:-1]
    hp = prev_dev >= 0
    # Device sync markers (Stream Wait Event, event_wait / event_record, host-wait markers) are
    # not work: they are costed zero (replay.run), so a marker ends where it starts, at
    # max(measured start, its inputs' ends), whatever its measured duration (CUDA: the host API
    # call; MTIA event_wait: the wait itself). Later events measure their ready lag from that end,
    # so a wait is neither lost nor counted twice. Runs of consecutive markers resolve in turn.
    dsync_ev = is_dev & is_sync_kind & ~dev_marker
    cap = np.inf if max_ready_lag_us is None else max_ready_lag_us
    launch_ts_l = ts[launch[has_launch]]
    end_in = end
    for _ in range(n + 1):
        ready = np.full(n, -np.inf)
        ready[hp] = end_in[prev_dev[hp]]
        # one launch per device event: no repeated destinations
        ready[dst_launch] = np.maximum(ready[dst_launch], launch_ts_l)
        if len(enq_dst):
            np.maximum.at(ready, enq_dst, ts[enq_src])
        if len(dsync_dst_a):
            np.maximum.at(ready, dsync_dst_a, end_in[dsync_src_a])
        fin = np.isfinite(ready)
        mend = np.where(fin, ready + np.clip(ts - np.where(fin, ready, 0.0), 0.0, cap), ts)
        nxt = np.where(dsync_ev, mend, end)
        if np.array_equal(nxt, end_in):
            break
        end_in = nxt
    ready_lag = np.where(np.isfinite(ready), ts - ready, 0.0)
    ready_lag[~streamlike] = 0.0
    ready_lag[dev_marker] = 0.0
    via_launch = np.zeros(n, dtype=bool)
    via_launch[dst_launch] = launch_ts_l >= ready[dst_launch]
    if len(enq_dst):
        via_launch[enq_dst] |= ts[enq_src] >= ready[enq_dst]
    via_launch &= streamlike & ~dev_marker
    # a start before its inputs ended (overlapping ops on one stream) is a trace anomaly; it is
    # counted and replayed without the overlap (a wait marker starts before its input by design)
    notes["device_starts_before_inputs"] = int(((ready_lag < -1e-6) & ~dsync_ev).sum())
    ready_lag = np.maximum(ready_lag, 0.0)
    if max_ready_lag_us is not None:
        capped = streamlike & (ready_lag > max_ready_lag_us)
        notes["device_starts_unexplained"] = int(capped.sum())
        ready_lag = np.minimum(ready_lag, max_ready_lag_us)

    # ---- assemble cross-track edges ----------------------------------------------------------
    def add(src_pt: np.ndarray, dst_pt: np.ndarray, lag: np.ndarray, code: str) -> None:
        src_l.append(src_pt.astype(np.int64))
        dst_l.append(dst_pt.astype(np.int64))
        lag_l.append(np.asarray(lag, dtype=np.float64))
        typ_l.append(np.full(len(src_pt), EDGE_CODE[code], dtype=np.int8))

    add(src_pt_launch, 2 * dst_launch, ready_lag[dst_launch], "launch")
    add(2 * enq_src, 2 * enq_dst, ready_lag[enq_dst], "launch")
    add(2 * dsync_src_a + 1, 2 * dsync_dst_a, ready_lag[dsync_dst_a], "sync")
    add(2 * hsrc + 1, 2 * hdst + 1, sync_lag[hdst], "sync")
    add(2 * coll_src, 2 * coll_dst, np.zeros(len(coll_src)), "collective")
    src_pt = np.concatenate(src_l)
    dst_pt = np.concatenate(dst_l)
    lag = np.concatenate(lag_l)
    etype = np.concatenate(typ_l)

    # ---- point chains ------------------------------------------------------------------------
    order_parts: list[np.ndarray] = []
    ptr = [0]
    chain_dev: list[bool] = []
    for t in range(ntr):  # loop over tracks (few)
        a, b = int(runs[t]), int(runs[t + 1])
        ids = np.arange(a, b)
        chain_dev.append(bool(tr_chain[t]))
        if tr_chain[t]:
            ids = chain_ids[t]
            pts = np.empty(2 * len(ids), dtype=np.int64)
            pts[0::2] = 2 * ids
            pts[1::2] = 2 * ids + 1
        else:
            zero = end_k[a:b] <= ts_k[a:b]
            # sort key: time (integer keys: exact ties), then ends before starts, deeper ends
            # first, shallower starts first; a zero-length event's end sits right after its start
            tkey = np.concatenate([ts_k[a:b], end_k[a:b]])
            cls = np.concatenate([np.ones(b - a), np.where(zero, 1.0, 0.0)])
            dkey = np.concatenate([depth[a:b] * 2.0, np.where(zero, depth[a:b] * 2.0 + 1, -depth[a:b])])
            seq_key = np.concatenate([ids * 2, ids * 2 + 1])
            oo = np.lexsort((seq_key, dkey, cls, tkey))
            pts = np.concatenate([2 * ids, 2 * ids + 1])[oo]
        order_parts.append(pts)
        ptr.append(ptr[-1] + len(pts))
    # device annotations: one passive track each, kept at their measured place
    marks = np.flatnonzero(dev_marker)
    order_parts.append(np.stack([2 * marks, 2 * marks + 1], axis=1).reshape(-1))
    ptr_a = np.concatenate([np.asarray(ptr, dtype=np.int64), ptr[-1] + 2 * np.arange(1, len(marks) + 1)])
    tr_dev = np.concatenate([np.asarray(chain_dev, dtype=bool), np.zeros(len(marks), dtype=bool)])
    ntr = len(tr_dev)
    order = np.concatenate(order_parts).astype(np.int64)
    track_ptr = ptr_a
    ptime = np.empty(2 * n)
    ptime[0::2] = ts
    ptime[1::2] = end
    tpos = ptime[order]
    pkey = np.empty(2 * n, dtype=np.int64)
    pkey[0::2] = ts_k
    pkey[1::2] = end_k
    gap = np.zeros(len(order))
    gap[1:] = tpos[1:] - tpos[:-1]
    gap[track_ptr[:-1][track_ptr[:-1] < len(order)]] = 0.0
    leaf_end = np.zeros(len(order), dtype=bool)
    leaf_end[1:] = (order[1:] % 2 == 1) & (order[:-1] == order[1:] - 1)
    leaf_end[track_ptr[:-1][track_ptr[:-1] < len(order)]] = False

    # ---- CPU collectives: the enqueuing thread waits (work.wait()) for the transfer ------------
    # The wait is not an event: it is the gap before the first point of the enqueuing thread at or
    # after the transfer's end that is not a leaf's end. That gap keeps only the return latency.
    if len(enq_dst):
        pos_of = np.empty(2 * n, dtype=np.int64)
        pos_of[order] = np.arange(len(order))
        etr = tr_of[enq_src]
        w_src: list[np.ndarray] = []
        w_k: list[np.ndarray] = []
        for t in np.unique(etr).tolist():  # enqueuing threads: one per rank
            a, b = int(track_ptr[t]), int(track_ptr[t + 1])
            ks = a + 1 + np.flatnonzero(~leaf_end[a + 1:b])
            sel = np.flatnonzero(etr == t)
            j = np.searchsorted(pkey[order[ks]], end_k[enq_dst[sel]], side="left")
            j = np.maximum(j, np.searchsorted(ks, pos_of[2 * enq_src[sel]], side="right"))
            ok = j < len(ks)
            w_src.append(enq_dst[sel[ok]])
            w_k.append(ks[j[ok]])
        wsrc = np.concatenate(w_src)
        wk = np.concatenate(w_k)
        wlag = np.clip(tpos[wk] - end[wsrc], 0.0, None)
        np.minimum.at(gap, wk, wlag)
        src_pt = np.concatenate([src_pt, 2 * wsrc + 1])
        dst_pt = np.concatenate([dst_pt, order[wk]])
        lag = np.concatenate([lag, wlag])
        etype = np.concatenate([etype, np.full(len(wsrc), EDGE_CODE["sync"], dtype=np.int8)])
        notes["collective_waits"] = len(wsrc)

    # host gaps outside every event of their thread (annotations do not count: they mark time)
    unexplained_gap = _outside_events(order, track_ptr, tr_dev,
                                      _is_in(events, "kind", ["annotation", "instant"]))
    if len(enq_dst):
        unexplained_gap[wk] = False  # a collective wait's return latency

    base = np.full(2 * n, -np.inf)
    if n:
        ur, rinv = np.unique(rank, return_inverse=True)
        rank_t0 = np.full(len(ur), np.inf)
        np.minimum.at(rank_t0, rinv, ts)
        nonempty = np.flatnonzero(track_ptr[1:] > track_ptr[:-1])
        fp = order[track_ptr[nonempty]]
        base[fp] = np.where(tr_dev[nonempty], rank_t0[rinv[fp // 2]], ptime[fp])

    # ---- the stored edges table --------------------------------------------------------------
    tab_src = [src_pt // 2]
    tab_dst = [dst_pt // 2]
    tab_typ = [etype]
    tab_lag = [lag]
    dev_next = np.flatnonzero(hp)
    tab_src.append(prev_dev[dev_next])
    tab_dst.append(dev_next)
    tab_typ.append(np.full(len(dev_next), EDGE_CODE["stream"], dtype=np.int8))
    tab_lag.append(ready_lag[dev_next])
    top = np.flatnonzero((~is_dev) & (depth == 0))
    same = tr_of[top[1:]] == tr_of[top[:-1]]
    hs, hd = top[:-1][same], top[1:][same]
    tab_src.append(hs)
    tab_dst.append(hd)
    tab_typ.append(np.full(len(hs), EDGE_CODE["host"], dtype=np.int8))
    tab_lag.append(ts[hd] - end[hs])
    edges = schema.from_columns({
        "src": np.concatenate(tab_src), "dst": np.concatenate(tab_dst),
        "type": pc.take(pa.array(schema.EDGE_TYPES, type=pa.string()),
                        pa.array(np.concatenate(tab_typ))),
        "lag_us": np.concatenate(tab_lag),
    }, schema.EDGES_SCHEMA)

    return Graph(n=n, order=order, track_ptr=track_ptr, track_is_device=tr_dev, gap=gap,
                 leaf_end=leaf_end, base=base, src_pt=src_pt, dst_pt=dst_pt, lag=lag,
                 etype=etype, ready_lag=ready_lag, sync_lag=sync_lag, coll_group=coll_group,
                 transfer_us=transfer, t0=t0, edges=edges, notes=notes, via_launch=via_launch,
                 unexplained_lag=ready_lag.copy(), unexplained_gap=unexplained_gap)


def _outside_events(order: np.ndarray, track_ptr: np.ndarray, chain: np.ndarray,
                    passive: np.ndarray) -> np.ndarray:
    """Per position of a host track holding work: the gap before it lies outside every
    non-passive event of the track (no open event at that time)."""
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
    out = (open_before == 0) & live[pos_tr] & ~chain[pos_tr]
    out[track_ptr[:-1][track_ptr[:-1] < L]] = False
    return out
