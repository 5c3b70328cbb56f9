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


@dataclass
class EventArrays:
    """The columns of the events table the graph reads, one entry per event (event id = row), and
    the track layout. Built once (`event_arrays`); every stage of `build_graph` only reads it."""

    n: int
    t0: float                  # trace start (min ts_us)
    rank: np.ndarray
    is_dev: np.ndarray
    ts: np.ndarray             # measured start / end, us after t0 (floats: the values)
    end: np.ndarray
    ts_k: np.ndarray           # integer ns keys of start / end (`time_keys`: orders and ties)
    end_k: np.ndarray
    dur: np.ndarray            # dur_us as stored
    depth: np.ndarray
    corr: np.ndarray           # correlation id, -1 none
    launch_id: np.ndarray      # as ingested, -1 none
    sync_stream: np.ndarray
    sync_corr: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    pg: np.ndarray             # process group (object; None when absent)
    pg_valid: np.ndarray
    coll_seq: np.ndarray
    is_sync_kind: np.ndarray
    is_memcpy: np.ndarray
    is_comm: np.ndarray
    passive: np.ndarray        # annotations and instants: they mark time, they are not work
    dev_marker: np.ndarray     # device-side annotations (gpu_user_annotation): not stream work
    host_marker: np.ndarray    # device-side markers of a host wait (HOST_WAIT_MARKERS)
    sync_named: np.ndarray     # host runtime/sync/other calls named like a synchronize call
    runs: np.ndarray           # start offset of each (rank, track) run, then n
    tr_of: np.ndarray          # per event: its track
    tr_dev: np.ndarray         # per track: a device track


def event_arrays(events: pa.Table) -> EventArrays:
    """The graph's view of ``events`` (canonical schema, sorted by rank, track, ts_us)."""
    n = events.num_rows
    rank = _col(events, "rank").astype(np.int64)
    is_dev = _col(events, "is_device").astype(bool)
    t0, ts, end = event_times(events)
    ts_k, end_k = time_keys(events)
    passive = _is_in(events, "kind", schema.PASSIVE_KINDS)
    runs = _track_runs(rank, _codes(events, "track"))
    ntr = len(runs) - 1
    return EventArrays(
        n=n, t0=t0, rank=rank, is_dev=is_dev, ts=ts, end=end, ts_k=ts_k, end_k=end_k,
        dur=_col(events, "dur_us").astype(np.float64),
        depth=_col(events, "depth").astype(np.int64),
        corr=_col(events, "correlation").astype(np.int64),
        launch_id=_col(events, "launch_id").astype(np.int64),
        sync_stream=_col(events, "sync_stream").astype(np.int64),
        sync_corr=_col(events, "sync_corr").astype(np.int64),
        stream=_col(events, "stream").astype(np.int64),
        device=_col(events, "device").astype(np.int64),
        pg=events.column("pg").to_numpy(zero_copy_only=False),
        pg_valid=events.column("pg").is_valid().to_numpy(zero_copy_only=False),
        coll_seq=_col(events, "coll_seq").astype(np.int64),
        is_sync_kind=_is_in(events, "kind", ["sync"]),
        is_memcpy=_is_in(events, "kind", ["memcpy"]),
        is_comm=_is_in(events, "kind", schema.COMM_KINDS),
        passive=passive,
        dev_marker=is_dev & passive,
        host_marker=_is_in(events, "name", HOST_WAIT_MARKERS),
        # host calls that may be synchronize calls: runtime calls, sync markers, unrecognised
        sync_named=_sync_named(events, ~is_dev & _is_in(events, "kind",
                                                        (*schema.CONTROL_KINDS, "other"))),
        runs=runs,
        tr_of=np.repeat(np.arange(ntr), np.diff(runs)) if n else np.zeros(0, dtype=np.int64),
        tr_dev=is_dev[runs[:-1]] if ntr else np.zeros(0, dtype=bool),
    )


def _sync_named(events: pa.Table, among: np.ndarray) -> np.ndarray:
    """Per event: one of ``among`` whose name matches a HOST_SYNC_NAMES entry."""
    out = np.zeros(events.num_rows, dtype=bool)
    rt = np.flatnonzero(among)
    if len(rt):
        # names repeat: match each distinct name once
        names = pc.dictionary_encode(events.column("name").take(pa.array(rt)).combine_chunks())
        hit_v = pc.match_substring_regex(names.dictionary, "|".join(HOST_SYNC_NAMES))
        hit_v = hit_v.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
        idx = names.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        hit = np.append(hit_v, False)[idx]  # null names (-1) do not match
        out[rt[hit]] = True
    return out


@dataclass
class Launches:
    """Per event: the host runtime call that launched it (``launch`` edges' sources)."""

    launch: np.ndarray         # launching event id, -1 none
    has_launch: np.ndarray     # a device event with a launch
    launch_k: np.ndarray       # its launch's start key (its own start when none)


def find_launches(ev: EventArrays) -> tuple[Launches, dict[str, object]]:
    """Each device event's launch: ``launch_id``, else the host runtime call with the same
    correlation id on the same rank. Notes: device events, and those left without a launch."""
    launch = ev.launch_id.copy()
    host_rt = (~ev.is_dev) & (ev.corr >= 0)
    miss = ev.is_dev & (launch < 0) & (ev.corr >= 0)
    if miss.any() and host_rt.any():
        hid, mi = np.flatnonzero(host_rt), np.flatnonzero(miss)
        hk, qk = keys.joint_codes((ev.rank[hid], ev.corr[hid]), (ev.rank[mi], ev.corr[mi]))
        pos = keys.lookup(hk, qk)
        hit = pos >= 0
        launch[mi[hit]] = hid[pos[hit]]
    notes: dict[str, object] = {
        "device_events": int(ev.is_dev.sum()),
        "device_events_without_launch": int((ev.is_dev & (launch < 0)).sum())}
    launch_k = np.where(launch >= 0, ev.ts_k[np.maximum(launch, 0)], ev.ts_k)
    return Launches(launch, ev.is_dev & (launch >= 0), launch_k), notes


#: a query end no stream member passes
_NEVER = np.iinfo(np.int64).max


@dataclass
class Streams:
    """Device events stream by stream in launch order, for "the last op launched before".

    Streams are (rank, device, stream) tuples, factorized together with the streams that
    device-side waits name, so any two distinct ids get distinct streams."""

    ids: np.ndarray            # device event ids, stream by stream, by launch key
    keys: np.ndarray           # each stream's key, ascending
    starts: np.ndarray         # offset of each stream's first member in ``ids``
    bounds: np.ndarray         # ``starts`` then len(ids)
    waits: np.ndarray          # device-side waits (sync kind naming a record or a stream)
    wait_keys: np.ndarray      # the key of the stream each wait names
    launch_k: np.ndarray
    end_k: np.ndarray

    def last(self, key: int, q_ts: np.ndarray, q_end: np.ndarray) -> np.ndarray:
        """Per query: the last member of stream ``key`` launched at or before ``q_ts`` that
        ended by ``q_end``; event ids or -1."""
        j = np.searchsorted(self.keys, key)
        if j >= len(self.keys) or self.keys[j] != key:
            return np.full(len(q_ts), -1, dtype=np.int64)
        ids = self.ids[self.bounds[j]:self.bounds[j + 1]]
        return _last_before(self.launch_k[ids], self.launch_k[ids], ids, self.end_k[ids],
                            q_ts, q_end)


def order_streams(ev: EventArrays, lc: Launches) -> Streams:
    """The per-stream launch order of device events and the device-side waits to resolve."""
    waits = np.flatnonzero(ev.is_dev & ev.is_sync_kind
                           & ((ev.sync_corr >= 0) | (ev.sync_stream >= 0)) & ~ev.host_marker)
    dev_ids = np.flatnonzero(ev.is_dev)
    sk, wait_sk = keys.joint_codes((ev.rank[dev_ids], ev.device[dev_ids], ev.stream[dev_ids]),
                                   (ev.rank[waits], ev.device[waits], ev.sync_stream[waits]))
    o = np.lexsort((lc.launch_k[dev_ids], sk))
    dev_ids, sk = dev_ids[o], sk[o]
    ustreams, sstart = np.unique(sk, return_index=True)
    return Streams(ids=dev_ids, keys=ustreams, starts=sstart, bounds=np.append(sstart, len(sk)),
                   waits=waits, wait_keys=wait_sk, launch_k=lc.launch_k, end_k=ev.end_k)


def device_wait_edges(ev: EventArrays, st: Streams
                      ) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """``sync`` edges (device side), as (src, dst) event ids: the recorded stream's last op before
    the event record (``Wait Event``, MTIA ``event_wait``) → the waiting marker. Notes: waits
    seen and resolved."""
    ev_src: list[int] = []
    ev_dst: list[int] = []
    waits = st.waits
    if len(waits):
        cid = np.flatnonzero(ev.corr >= 0)
        ck, wck = keys.joint_codes((ev.rank[cid], ev.corr[cid]),
                                   (ev.rank[waits], ev.sync_corr[waits]))
        oc = np.argsort(ck, kind="stable")
        cid = cid[oc]
        cks = ck[oc]
        for i, w in enumerate(waits.tolist()):  # waits are few (hundreds at most)
            src = -1
            if ev.sync_corr[w] >= 0:
                key = wck[i]
                lo, hi = np.searchsorted(cks, key), np.searchsorted(cks, key, side="right")
                recs = cid[lo:hi]
                recs = recs[recs != w]
                dev_rec = recs[ev.is_dev[recs]]
                if len(dev_rec):
                    src = int(dev_rec[0])
                elif len(recs) and ev.sync_stream[w] >= 0:
                    r = int(recs[0])
                    src = int(st.last(st.wait_keys[i], ev.ts_k[[r]], np.array([_NEVER]))[0])
            elif ev.sync_stream[w] >= 0:
                src = int(st.last(st.wait_keys[i], st.launch_k[[w]], np.array([_NEVER]))[0])
            if src >= 0 and src != w:
                ev_src.append(src)
                ev_dst.append(w)
    src_a = np.asarray(ev_src, dtype=np.int64)
    dst_a = np.asarray(ev_dst, dtype=np.int64)
    return src_a, dst_a, {"device_waits": len(waits), "device_waits_resolved": len(src_a)}


def host_sync_edges(ev: EventArrays, lc: Launches, st: Streams
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, object]]:
    """``sync`` edges (host side), as (src, dst) event ids, and each event's ``sync_lag``.

    Synchronize calls (``sync_stream`` set, named like HOST_SYNC_NAMES, or launching a host-wait
    marker): the last op of each stream in scope launched before the call and finished before it
    returned → the call; blocking copies → their launching call. ``sync_lag``: the call's return
    latency (at most its measured duration), nan for other events. Notes: host syncs."""
    n = ev.n
    host_sync = ((~ev.is_dev) & (ev.sync_stream != -1)) | ev.sync_named
    # a host call that launched a host-wait marker (cuda_sync Stream/Context/Event Sync)
    marker = ev.is_dev & lc.has_launch & ev.host_marker
    host_sync[lc.launch[marker]] = True
    # blocking copies: the launching call returned only after the copy finished
    cp = ev.is_dev & lc.has_launch & ev.is_memcpy
    cpl = lc.launch[cp]
    blocking = ev.end_k[cp] <= ev.end_k[cpl]
    hs_src: list[np.ndarray] = [np.flatnonzero(cp)[blocking]]
    hs_dst: list[np.ndarray] = [cpl[blocking]]
    hs_ids = np.flatnonzero(host_sync)
    if len(hs_ids) and len(st.keys):
        s_rank = ev.rank[st.ids[st.starts]]
        s_str = ev.stream[st.ids[st.starts]]
        for j, key in enumerate(st.keys.tolist()):  # loop over streams (few)
            scope = hs_ids[ev.rank[hs_ids] == s_rank[j]]
            ss = ev.sync_stream[scope]
            scope = scope[(ss < 0) | (ss == s_str[j])]
            if not len(scope):
                continue
            src = st.last(key, ev.ts_k[scope], ev.end_k[scope])
            ok = src >= 0
            hs_src.append(src[ok])
            hs_dst.append(scope[ok])
    hsrc = np.concatenate(hs_src).astype(np.int64)
    hdst = np.concatenate(hs_dst).astype(np.int64)
    sync_lag = np.full(n, np.nan)
    if len(hdst):
        dep_end = np.full(n, -np.inf)
        np.maximum.at(dep_end, hdst, ev.end[hsrc])
        u = np.unique(hdst)
        sync_lag[u] = np.clip(np.minimum(ev.dur[u], ev.end[u] - dep_end[u]), 0.0, None)
    return hsrc, hdst, sync_lag, {"host_syncs": len(np.unique(hdst))}


@dataclass
class Collectives:
    """Collective instances matched across ranks, and CPU-backend enqueues."""

    group: np.ndarray          # per event: collective group id, -1 unmatched
    transfer_us: np.ndarray    # per event: measured transfer part of a matched instance, nan else
    src: np.ndarray            # ``collective`` edges (event ids): instance ↔ its group's first
    dst: np.ndarray
    enq_src: np.ndarray        # host enqueue (c10d::*) → its transfer instance (``launch`` edges)
    enq_dst: np.ndarray
    worker_tr: np.ndarray      # per track: a thread holding nothing but transfer instances


def match_collectives(ev: EventArrays) -> tuple[Collectives, dict[str, object]]:
    """Instances of one collective (same process group and sequence number) on different ranks,
    one per rank: device instances when there are any, then transfer instances, else host ones.
    The transfer part of a matched instance is its end − the group's last arrival. With a CPU
    backend (gloo) the op on the calling thread only enqueues; the instance of the same
    (pg, seq, rank) on another host thread, starting no earlier, is the transfer.
    Notes: enqueues, collectives matched."""
    n = ev.n
    ntr = len(ev.runs) - 1
    group = np.full(n, -1, dtype=np.int64)
    transfer = np.full(n, np.nan)
    coll_src = np.zeros(0, dtype=np.int64)
    coll_dst = np.zeros(0, dtype=np.int64)
    cand = np.flatnonzero((ev.coll_seq >= 0) & ev.is_comm & ev.pg_valid)
    enq_src = np.zeros(0, dtype=np.int64)
    enq_dst = np.zeros(0, dtype=np.int64)
    worker_tr = np.zeros(ntr, dtype=bool)
    if len(cand):
        import pandas as pd

        df = pd.DataFrame({"id": cand, "pg": ev.pg[cand].astype(str), "seq": ev.coll_seq[cand],
                           "rank": ev.rank[cand], "dev": ev.is_dev[cand], "ts": ev.ts[cand],
                           "tr": ev.tr_of[cand]})
        h = df[~df["dev"]].sort_values(["pg", "seq", "rank", "ts"])
        first = h.groupby(["pg", "seq", "rank"], sort=False)
        h = h.assign(enq=first["id"].transform("first"), enq_tr=first["tr"].transform("first"))
        xfer = h[h["tr"] != h["enq_tr"]].drop_duplicates(["pg", "seq", "rank"], keep="first")
        df["xfer"] = df["id"].isin(xfer["id"])
        if len(xfer):
            enq_src = xfer["enq"].to_numpy().astype(np.int64)
            enq_dst = xfer["id"].to_numpy().astype(np.int64)
            cnt = np.bincount(ev.tr_of, minlength=ntr)
            xc = np.bincount(ev.tr_of[enq_dst], minlength=ntr)
            worker_tr = (xc == cnt) & (cnt > 0) & ~ev.tr_dev
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
            group[ids] = gid
            last = np.full(gid.max() + 1, -np.inf)
            np.maximum.at(last, gid, ev.ts[ids])
            transfer[ids] = np.clip(ev.end[ids] - last[gid], 0.0, None)
            first_id = df.groupby("gid")["id"].transform("first").to_numpy()
            other = ids != first_id
            coll_src = np.concatenate([ids[other], first_id[other]])
            coll_dst = np.concatenate([first_id[other], ids[other]])
    notes: dict[str, object] = {"collective_enqueues": len(enq_src),
                                "collectives_matched": len(np.unique(group[group >= 0]))}
    return Collectives(group, transfer, coll_src, coll_dst, enq_src, enq_dst, worker_tr), notes


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
               max_ready_lag_us: float | None
               ) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """(``ready_lag``, ``via_launch``) per event, and notes.

    Ready lag of a stream-like event: measured start − the latest measured end (start, for
    launches and enqueues) of its inputs (chain predecessor, launch, device wait source), capped
    at ``max_ready_lag_us``. ``via_launch``: its latest input is its launch (or enqueue).
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
        capped = streamlike & (ready_lag > max_ready_lag_us)
        notes["device_starts_unexplained"] = int(capped.sum())
        ready_lag = np.minimum(ready_lag, max_ready_lag_us)
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
                sync_lag: np.ndarray) -> Edges:
    """The cross-track edges: ``launch`` (launch start → device start; enqueue start → transfer
    start), ``sync`` (device wait: source end → marker start; host: source end → call end) and
    ``collective`` (instance start ↔ its group's first instance start); edges into device starts
    carry the ready lag, host syncs the return latency."""
    dst_launch = np.flatnonzero(lc.has_launch)
    (ds, dd), (hs, hd) = dsync, hsync
    return Edges.of([
        (2 * lc.launch[lc.has_launch], 2 * dst_launch, ready_lag[dst_launch], "launch"),
        (2 * coll.enq_src, 2 * coll.enq_dst, ready_lag[coll.enq_dst], "launch"),
        (2 * ds + 1, 2 * dd, ready_lag[dd], "sync"),
        (2 * hs + 1, 2 * hd + 1, sync_lag[hd], "sync"),
        (2 * coll.src, 2 * coll.dst, np.zeros(len(coll.src)), "collective"),
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


def point_chains(ev: EventArrays, tr_chain: np.ndarray, chain_ids: dict[int, np.ndarray]) -> Chains:
    """Each track's chain of points: stream-like tracks start_i, end_i, start_{i+1}, ...;
    host threads all points by measured time (ends before starts at a tie, deeper ends first,
    shallower starts first; a zero-length event's end right after its start); each device
    annotation a passive track of its own. ``gap``: the measured time since the previous position
    (0 at a track's start); ``leaf_end``: an end point right after its own start."""
    n, ts_k, end_k, depth = ev.n, ev.ts_k, ev.end_k, ev.depth
    order_parts: list[np.ndarray] = []
    ptr = [0]
    chain_dev: list[bool] = []
    for t in range(len(ev.runs) - 1):  # loop over tracks (few)
        a, b = int(ev.runs[t]), int(ev.runs[t + 1])
        ids = np.arange(a, b)
        chain_dev.append(bool(tr_chain[t]))
        if tr_chain[t]:
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


def collective_waits(ev: EventArrays, coll: Collectives, ch: Chains
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CPU collectives: the enqueuing thread waits (``work.wait()``) for the transfer. The wait is
    not an event: it is the gap before the first point of the enqueuing thread at or after the
    transfer's end that is not a leaf's end; that gap keeps only the return latency.
    Returns (transfer event ids, the waiting positions, their return latencies, us)."""
    enq_src, enq_dst = coll.enq_src, coll.enq_dst
    pos_of = np.empty(2 * ev.n, dtype=np.int64)
    pos_of[ch.order] = np.arange(len(ch.order))
    etr = ev.tr_of[enq_src]
    w_src: list[np.ndarray] = []
    w_k: list[np.ndarray] = []
    for t in np.unique(etr).tolist():  # enqueuing threads: one per rank
        a, b = int(ch.track_ptr[t]), int(ch.track_ptr[t + 1])
        ks = a + 1 + np.flatnonzero(~ch.leaf_end[a + 1:b])
        sel = np.flatnonzero(etr == t)
        j = np.searchsorted(ch.pkey[ch.order[ks]], ev.end_k[enq_dst[sel]], side="left")
        j = np.maximum(j, np.searchsorted(ks, pos_of[2 * enq_src[sel]], side="right"))
        ok = j < len(ks)
        w_src.append(enq_dst[sel[ok]])
        w_k.append(ks[j[ok]])
    wsrc = np.concatenate(w_src)
    wk = np.concatenate(w_k)
    return wsrc, wk, np.clip(ch.tpos[wk] - ev.end[wsrc], 0.0, None)


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


def build_graph(events: pa.Table, *, max_ready_lag_us: float | None = MAX_READY_LAG_US) -> Graph:
    """Build the point chains and cross-track edges of ``events`` (canonical schema).

    The stages, in order (each a function above, over one `EventArrays`): launches, stream
    order, device waits, host syncs, collectives, stream chains, ready lags, cross-track edges,
    point chains, CPU collective waits, chain bases, the stored edges table."""
    ev = event_arrays(events)
    lc, notes = find_launches(ev)
    st = order_streams(ev, lc)
    ds_src, ds_dst, n_ds = device_wait_edges(ev, st)
    hs_src, hs_dst, sync_lag, n_hs = host_sync_edges(ev, lc, st)
    coll, n_coll = match_collectives(ev)
    notes |= n_ds | n_hs | n_coll
    # events scheduled like stream work: device events and those on worker threads
    on_worker = coll.worker_tr[ev.tr_of] if ev.n else np.zeros(0, dtype=bool)
    streamlike = ev.is_dev | on_worker
    tr_chain = ev.tr_dev | coll.worker_tr
    chain_ids, prev = stream_chains(ev, tr_chain)
    ready_lag, via_launch, n_ready = ready_lags(ev, lc, prev, (ds_src, ds_dst), coll, streamlike,
                                                max_ready_lag_us)
    notes |= n_ready
    cross = cross_edges(lc, (ds_src, ds_dst), (hs_src, hs_dst), coll, ready_lag, sync_lag)
    ch = point_chains(ev, tr_chain, chain_ids)
    # host gaps outside every event of their thread (annotations do not count: they mark time)
    unexplained_gap = _outside_events(ch.order, ch.track_ptr, ch.track_is_device, ev.passive)
    if len(coll.enq_dst):
        wsrc, wk, wlag = collective_waits(ev, coll, ch)
        np.minimum.at(ch.gap, wk, wlag)
        cross = Edges(np.concatenate([cross.src_pt, 2 * wsrc + 1]),
                      np.concatenate([cross.dst_pt, ch.order[wk]]),
                      np.concatenate([cross.lag, wlag]),
                      np.concatenate([cross.etype,
                                      np.full(len(wsrc), EDGE_CODE["sync"], dtype=np.int8)]))
        notes["collective_waits"] = len(wsrc)
        unexplained_gap[wk] = False  # a collective wait's return latency
    return Graph(n=ev.n, order=ch.order, track_ptr=ch.track_ptr, track_is_device=ch.track_is_device,
                 gap=ch.gap, leaf_end=ch.leaf_end, base=chain_bases(ev, ch), src_pt=cross.src_pt,
                 dst_pt=cross.dst_pt, lag=cross.lag, etype=cross.etype, ready_lag=ready_lag,
                 sync_lag=sync_lag, coll_group=coll.group, transfer_us=coll.transfer_us, t0=ev.t0,
                 edges=edges_table(ev, cross, prev, ready_lag), notes=notes,
                 via_launch=via_launch, unexplained_lag=ready_lag.copy(),
                 unexplained_gap=unexplained_gap)


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
