"""Launches, per-stream launch order and the ``sync`` edges (device-side waits, host
synchronize calls and blocking copies).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mtia_trace import keys
from replay.graph.events import EventArrays
from replay.groups import ranges

#: members a query walks back over, at most, past those that had not ended by its end key
_WALK_BACK = 64


def _walk_back(idx: np.ndarray, first: np.ndarray, member_end: np.ndarray,
               member_ids: np.ndarray, q_end: np.ndarray, steps: int = _WALK_BACK,
               passable: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
               ) -> np.ndarray:
    """From member ``idx`` (-1: none) back to ``first`` (the query's group's first member): the
    first member that ended by ``q_end``, at most `_WALK_BACK` steps (members that had not
    finished when the call returned are few), and only past members where ``passable`` (per
    query and member position) allows. Returns member ids or -1."""
    out = np.full(len(idx), -1, dtype=np.int64)
    q = np.flatnonzero(idx >= first)  # queries still looking
    cur = idx[q]
    for _ in range(steps):
        if not len(q):
            break
        good = member_end[cur] <= q_end[q]
        out[q[good]] = member_ids[cur[good]]
        go = ~good
        if passable is not None:
            go &= passable(q, cur)
        cur = cur[go] - 1
        q = q[go]
        alive = cur >= first[q]
        q, cur = q[alive], cur[alive]
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
    early = _before_capture(ev, launch, host_rt)
    if early.any():
        # launched before the trace begins: before every launch in it, in correlation order
        notes["device_events_launched_before_trace"] = int(early.sum())
        r0 = np.full(int(ev.rank.max()) + 1, np.iinfo(np.int64).max)
        np.minimum.at(r0, ev.rank, ev.ts_k)
        launch_k[early] = r0[ev.rank[early]]
    return Launches(launch, ev.is_dev & (launch >= 0), launch_k), notes


def _before_capture(ev: EventArrays, launch: np.ndarray, host_rt: np.ndarray) -> np.ndarray:
    """Per event: a device event with no launch whose correlation id is below every runtime
    call's on its rank (ids grow with each call, so it was launched before the trace began:
    work queued before the profiler started, running on into the trace)."""
    out = np.zeros(ev.n, dtype=bool)
    cand = ev.is_dev & (launch < 0) & (ev.corr >= 0)
    if not cand.any() or not host_rt.any():
        return out
    lo = np.full(int(ev.rank.max()) + 1, np.iinfo(np.int64).max)
    np.minimum.at(lo, ev.rank[host_rt], ev.corr[host_rt])
    out[cand] = ev.corr[cand] < lo[ev.rank[cand]]
    return out

#: a query end no stream member passes
_NEVER = np.iinfo(np.int64).max
#: `Streams.last` shifts keys into one array while the shifted keys stay below this (int64)
_FLAT_LIMIT = 2.0 ** 62


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
    #: per event: when its launch call returned (None: at its launch key)
    launch_end_k: np.ndarray | None = None

    def index(self, keys_: np.ndarray) -> np.ndarray:
        """Position in ``keys`` of each stream key, -1 for a stream with no member."""
        j = np.searchsorted(self.keys, keys_)
        jc = np.minimum(j, max(len(self.keys) - 1, 0))
        hit = (j < len(self.keys)) & (self.keys[jc] == keys_) if len(self.keys) else False
        return np.where(hit, jc, -1).astype(np.int64)

    def last(self, j: np.ndarray, q_ts: np.ndarray, q_end: np.ndarray,
             settled: bool = False) -> np.ndarray:
        """Per query: the last member of stream ``j`` (an `index`; -1: none) launched at or
        before ``q_ts`` that ended by ``q_end``; event ids or -1. With ``settled`` it looks back
        only past members whose launch had not returned by ``q_ts`` (launched about when the
        query was made, by another thread: their order against it is not settled); a member
        launched and returned before it that had not ended by ``q_end`` ends the search (the
        query did not wait on that stream).

        One search over all streams at once: each member's launch key is shifted by its
        stream's offset so the keys of all streams make one ascending array."""
        out = np.full(len(j), -1, dtype=np.int64)
        ok = np.flatnonzero(j >= 0)
        if not len(ok) or not len(self.ids):
            return out
        lk = self.launch_k[self.ids]
        lo, hi = lk[self.starts], lk[self.bounds[1:] - 1]
        lend = (self.launch_end_k if self.launch_end_k is not None else self.launch_k)[self.ids]

        def passable_of(base: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
            """Per (query, member) of queries ``base[qi]``: its launch had not returned yet."""
            if not settled:
                return None
            return lambda qi, cur: lend[cur] > q_ts[base[qi]]
        span = hi - lo + 1
        mend = self.end_k[self.ids]
        if float(span.astype(np.float64).sum()) >= _FLAT_LIMIT:  # would overflow: one by one
            for s in np.unique(j[ok]).tolist():
                q = ok[j[ok] == s]
                a, b = int(self.bounds[s]), int(self.bounds[s + 1])
                pos = a + np.searchsorted(lk[a:b], q_ts[q], side="right") - 1
                out[q] = _walk_back(pos, np.full(len(q), a), mend, self.ids, q_end[q],
                                    passable=passable_of(q))
            return out
        off = np.concatenate([[0], np.cumsum(span)[:-1]]) - lo
        per_member = np.repeat(off, np.diff(self.bounds))
        flat = lk + per_member
        js = j[ok]
        before = q_ts[ok] < lo[js]  # launched before the stream's first member: none
        qk = np.minimum(q_ts[ok], hi[js]) + off[js]
        pos = np.searchsorted(flat, qk, side="right") - 1
        pos[before] = -1
        out[ok] = _walk_back(pos, self.starts[js], mend, self.ids, q_end[ok],
                             passable=passable_of(ok))
        return out


def order_streams(ev: EventArrays, lc: Launches) -> Streams:
    """The per-stream launch order of device events and the device-side waits to resolve.
    Device-side markers of a host wait (``HOST_WAIT_MARKERS``: the synchronize call itself drawn
    on the stream) are not members: no synchronize waits on its own marker."""
    waits = np.flatnonzero(ev.is_dev & ev.is_sync_kind
                           & ((ev.sync_corr >= 0) | (ev.sync_stream >= 0)) & ~ev.host_marker)
    dev_ids = np.flatnonzero(ev.is_dev & ~ev.host_marker)
    sk, wait_sk = keys.joint_codes((ev.rank[dev_ids], ev.device[dev_ids], ev.stream[dev_ids]),
                                   (ev.rank[waits], ev.device[waits], ev.sync_stream[waits]))
    o = np.lexsort((lc.launch_k[dev_ids], sk))
    dev_ids, sk = dev_ids[o], sk[o]
    ustreams, sstart = np.unique(sk, return_index=True)
    return Streams(ids=dev_ids, keys=ustreams, starts=sstart, bounds=np.append(sstart, len(sk)),
                   waits=waits, wait_keys=wait_sk, launch_k=lc.launch_k, end_k=ev.end_k,
                   launch_end_k=np.where(lc.launch >= 0, ev.end_k[np.maximum(lc.launch, 0)],
                                         lc.launch_k))


def device_wait_edges(ev: EventArrays, st: Streams
                      ) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """``sync`` edges (device side), as (src, dst) event ids: the recorded stream's last op before
    the event record (``Wait Event``, MTIA ``event_wait``) → the waiting marker. Notes: waits
    seen and resolved.

    A wait naming a record (``sync_corr``) takes the first device event with that correlation id
    on its rank; without one, the last op of the named stream launched before the first host
    event with it. A wait naming only a stream takes that stream's last op launched before it."""
    waits = st.waits
    src = np.full(len(waits), -1, dtype=np.int64)
    if len(waits):
        by_rec = ev.sync_corr[waits] >= 0
        q_ts = np.where(by_rec, -1, st.launch_k[waits])  # -1: no stream query
        if by_rec.any():
            dev_rec, first_rec = _records(ev, waits)
            src = np.where(by_rec, dev_rec, -1)
            ask = by_rec & (dev_rec < 0) & (first_rec >= 0)
            q_ts[ask] = ev.ts_k[first_rec[ask]]
        ask = (q_ts >= 0) & (ev.sync_stream[waits] >= 0)
        if ask.any():
            j = np.where(ask, st.index(st.wait_keys), -1)
            src = np.where(ask, st.last(j, q_ts, np.full(len(waits), _NEVER)), src)
    keep = (src >= 0) & (src != waits)
    return src[keep], waits[keep], {"device_waits": len(waits),
                                    "device_waits_resolved": int(keep.sum())}


def _records(ev: EventArrays, waits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per wait naming a record: the first device event (by id) other than the wait with its rank
    and ``sync_corr`` as correlation id, and the first event of any kind; -1 where none."""
    cid = np.flatnonzero(ev.corr >= 0)
    ck, wck = keys.joint_codes((ev.rank[cid], ev.corr[cid]),
                               (ev.rank[waits], ev.sync_corr[waits]))
    oc = np.argsort(ck, kind="stable")
    cid, cks = cid[oc], ck[oc]  # by key, then by event id
    lo, hi = np.searchsorted(cks, wck), np.searchsorted(cks, wck, side="right")
    lo = np.where(ev.sync_corr[waits] >= 0, lo, hi)  # only waits naming a record
    cid_x = np.append(cid, -1)  # position len(cid): none

    def skip_wait(p: np.ndarray, after: np.ndarray) -> np.ndarray:
        """``p``, or ``after[p]`` where ``p`` is the wait itself (it is in its range once)."""
        return np.where((p < hi) & (cid_x[p] == waits), after[np.minimum(p + 1, len(cid))], p)

    # the next device record at or after each position
    nd = np.where(ev.is_dev[cid], np.arange(len(cid)), len(cid))
    nxt_dev = np.append(np.minimum.accumulate(nd[::-1])[::-1], len(cid))
    p = skip_wait(nxt_dev[lo], nxt_dev)
    dev_rec = np.where(p < hi, cid_x[p], -1)
    q = skip_wait(lo, np.arange(len(cid) + 1))
    first_rec = np.where(q < hi, cid_x[q], -1)
    return dev_rec, first_rec


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
    # blocking copies: the launching call returned only after the copy finished (a copy from or
    # to pinned memory, or device to device, is asynchronous: its call returning after it is
    # a coincidence of timing, not a wait)
    cp = ev.is_dev & lc.has_launch & ev.is_memcpy & ~ev.async_copy
    cpl = lc.launch[cp]
    blocking = ev.end_k[cp] <= ev.end_k[cpl]
    hs_src: list[np.ndarray] = [np.flatnonzero(cp)[blocking]]
    hs_dst: list[np.ndarray] = [cpl[blocking]]
    hs_ids = np.flatnonzero(host_sync)
    if len(hs_ids) and len(st.keys):
        j, scope = _sync_scopes(ev, st, hs_ids)
        src = st.last(j, ev.ts_k[scope], ev.end_k[scope], settled=True)
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


def _sync_scopes(ev: EventArrays, st: Streams, hs_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stream index, synchronize call) pairs, stream by stream, calls in id order: every stream
    of the call's rank, or only the one it names (``sync_stream``)."""
    o = np.argsort(ev.rank[hs_ids], kind="stable")
    hs, hs_rank = hs_ids[o], ev.rank[hs_ids[o]]
    s_rank = ev.rank[st.ids[st.starts]]
    s_str = ev.stream[st.ids[st.starts]]
    lo = np.searchsorted(hs_rank, s_rank)
    idx, j = ranges(lo, np.searchsorted(hs_rank, s_rank, side="right"))
    scope = hs[idx]
    ss = ev.sync_stream[scope]
    keep = (ss < 0) | (ss == s_str[j])
    return j[keep], scope[keep]


def host_wait_edges(ev: EventArrays, lc: Launches) -> tuple[np.ndarray, np.ndarray,
                                                                dict[str, object]]:
    """``sync`` edges (device side) for stream waits the trace records only on the host: a
    ``cudaStreamWaitEvent`` call that launched no device-side wait marker (older Kineto writes
    none). The waiting op is the first op its thread launches after the call (its stream is the
    one made to wait); the event waited on was recorded at the thread's last event-record call
    before the wait (the wait call itself when the trace has none): the source is the last op the
    rank launched before that on another stream. A pair the measured times contradict (the
    waiting op started before the source ended) is dropped. Returns (src, dst) event ids and
    notes."""
    empty = np.zeros(0, dtype=np.int64)
    marked = np.zeros(ev.n, dtype=bool)
    marked[lc.launch[lc.has_launch]] = True
    waits = np.flatnonzero(ev.wait_call & ~marked)
    if not len(waits):
        return empty, empty, {"host_stream_waits": 0}
    ops = np.flatnonzero(lc.has_launch & ~ev.dev_marker & ~ev.is_sync_kind)
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    for t in np.unique(ev.tr_of[waits]).tolist():  # threads making waits: few
        w = waits[ev.tr_of[waits] == t]
        rec = np.flatnonzero(ev.record_call & (ev.tr_of == t))
        j = np.searchsorted(ev.ts[rec], ev.ts[w], side="left") - 1
        ref = np.where(j >= 0, ev.ts[rec[np.maximum(j, 0)]] if len(rec) else 0.0, ev.ts[w])
        mine = ops[ev.rank[ops] == ev.rank[w[0]]]
        mine = mine[np.argsort(ev.ts[lc.launch[mine]], kind="stable")]
        ml = ev.ts[lc.launch[mine]]
        own = mine[ev.tr_of[lc.launch[mine]] == t]
        d = np.searchsorted(ev.ts[lc.launch[own]], ev.end[w], side="left")
        ok = d < len(own)
        di, ref = own[d[ok]], ref[ok]
        s = np.searchsorted(ml, ref, side="left") - 1  # launched before the record
        found = np.full(len(di), -1, dtype=np.int64)
        for _ in range(_WALK_BACK):  # back over ops of the waiting stream itself
            look = (found < 0) & (s >= 0)
            if not look.any():
                break
            other = look & (ev.stream[mine[np.maximum(s, 0)]] != ev.stream[di])
            found[other] = mine[s[other]]
            s = np.where(look & ~other, s - 1, s)
        keep = found >= 0
        keep[keep] = ev.end_k[found[keep]] <= ev.ts_k[di[keep]]  # the wait held as measured
        src.append(found[keep])
        dst.append(di[keep])
    s_ = np.concatenate(src) if src else empty
    d_ = np.concatenate(dst) if dst else empty
    return s_, d_, {"host_stream_waits": int(len(s_))}
