"""Launches, per-stream launch order and the ``sync`` edges (device-side waits, host
synchronize calls and blocking copies).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mtia_trace import keys
from replay.graph.events import EventArrays


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
