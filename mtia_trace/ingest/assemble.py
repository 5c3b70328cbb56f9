"""Raw per-file columns -> the canonical events table (schema.EVENTS_SCHEMA).

All steps are array operations over every rank at once; Python loops run over ranks, distinct
(cat, name) pairs, or the few events that carry shapes. `build` lists the steps in order: each
reads the sorted `Rows` and the columns earlier steps derived, and returns what it derives.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from mtia_trace import keys, schema
from mtia_trace.ingest import collectives, heap
from mtia_trace.ingest.classify import classify
from mtia_trace.ingest.decode import RawLists
from mtia_trace.ingest.kineto import CODED, RawFile
from mtia_trace.ingest.nesting import END_TOLERANCE_US, parents
from mtia_trace.ingest.rows import Rows
from mtia_trace.ingest.shapes import op_cost, parse_size, table_bytes

_DEVICE_SYNC = re.compile(r"^(cuda|hip)DeviceSynchronize$")
_STREAM_SYNC = re.compile(r"^((cuda|hip)StreamSynchronize|synchronizeStream|synchronize|"
                          r"(cuda|hip)StreamWaitEvent|(cuda|hip)EventSynchronize|"
                          r"enqueueCommand waitOnEvent)$")
_MTIA_DTYPE = re.compile(r"-dtype_([A-Za-z0-9]+)")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _join_values(raws: list[RawFile]) -> tuple[dict[str, list[Any]], dict[str, list[np.ndarray]]]:
    """The distinct values of every coded column over all files (`kineto.CODED`), and per file
    the map of its codes onto them (ending in -1, so an absent value's code -1 maps to -1)."""
    values: dict[str, list[Any]] = {}
    remaps: dict[str, list[np.ndarray]] = {}
    for key in raws[0].values:
        index: dict[Any, int] = {}
        code = index.setdefault
        remaps[key] = [np.array([code(v, len(index)) for v in r.values[key]] + [-1],
                                dtype=np.int32) for r in raws]
        values[key] = list(index)
    for r in raws:
        r.values = {}
    return values, remaps


def _concat(raws: list[RawFile]) -> tuple[dict[str, Any], np.ndarray, dict[str, list[Any]]]:
    """All files' columns end to end, and the distinct values the coded columns index; each
    file's own columns and args are released once copied, so the per-file and the joined
    copies are not alive together."""
    n = sum(r.info.n_events for r in raws)
    values, remaps = _join_values(raws)
    cols: dict[str, Any] = {}
    for key in list(raws[0].cols):
        parts = [r.cols[key] for r in raws]
        if key in CODED:
            parts = [m[p] for m, p in zip(remaps[CODED[key]], parts)]
        cols[key] = np.concatenate(parts)
        del parts
        for r in raws:
            del r.cols[key]
    cols["rank"] = np.concatenate([np.full(r.info.n_events, r.info.rank, dtype=np.int32) for r in raws])
    # file index per row; the path strings are made once per file at the end
    cols["file"] = np.repeat(np.arange(len(raws), dtype=np.int32), [r.info.n_events for r in raws])
    args = np.empty(n, dtype=object)
    pos = 0
    for r in raws:
        args[pos:pos + r.info.n_events] = r.args
        pos += r.info.n_events
        r.args = []
    return cols, args, values


def _sort(cols: dict[str, Any], args: np.ndarray, values: dict[str, list[Any]]
          ) -> tuple[Rows, np.ndarray]:
    """The rows in events-table order (rank, track, ts_us, longer first), and their args."""
    labels = values["track"]
    rank_of_name = np.argsort(np.argsort(np.asarray(labels, dtype=str), kind="stable"))
    track_uniq = np.empty(len(labels), dtype=object)
    track_uniq[rank_of_name] = labels
    tcode = rank_of_name[cols.pop("track")]
    order = _order(cols["rank"], tcode, cols["ts_us"], cols["dur_us"], cols["file"])
    tcode = tcode[order]
    for k in list(cols):  # one column at a time: the unsorted copy is freed as we go
        cols[k] = cols[k][order]
    name_uniq, cat_uniq, ph_uniq = (np.array(values[k], dtype=object) for k in ("name", "cat", "ph"))
    ncode, ccode, pcode = cols.pop("name"), cols.pop("cat"), cols.pop("ph")
    rows = Rows(**cols, name=name_uniq[ncode], cat=cat_uniq[ccode], ph=ph_uniq[pcode],
                track=track_uniq[tcode], tcode=tcode, track_uniq=track_uniq, name_codes=ncode,
                name_uniq=name_uniq, cat_codes=ccode, cat_uniq=cat_uniq, ph_codes=pcode,
                ph_uniq=ph_uniq, raw=values["raw"])
    cols.clear()
    return rows, args[order]


def _track_time_order(tcode: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``np.lexsort((-dur, ts, tcode))``, in three cheaper sorts: a trace's rows come nearly in
    time order, which a stable sort by ``ts`` alone takes fast; rows starting at the same time
    are ordered longer first among themselves; then a stable sort by track (16-bit where the
    tracks fit: a radix sort)."""
    o = np.argsort(ts, kind="stable")
    s = ts[o]
    tie = s[1:] == s[:-1]
    if tie.any():  # the rows of each run of equal starts, longer first
        at = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])
        run = np.cumsum(np.r_[True, ~tie])[at]
        o[at] = o[at][np.lexsort((-dur[o[at]], run))]
    t = tcode[o]
    if len(t) and 0 <= t.min() and t.max() < 2**15:
        t = t.astype(np.int16)
    return o[np.argsort(t, kind="stable")]


def _order(rank: np.ndarray, tcode: np.ndarray, ts: np.ndarray, dur: np.ndarray,
           file: np.ndarray) -> np.ndarray:
    """The stable sort by (rank, track, ts, longer first) of rows laid out file by file: each
    file holds one rank (`ingest.load` refuses two files of one rank), so each file's rows are
    sorted on their own, files in rank order (several small sorts, not one over every row)."""
    starts = np.flatnonzero(np.r_[True, file[1:] != file[:-1]])
    if len(np.unique(rank[starts])) < len(starts):  # not one rank per file: sort everything
        return np.lexsort((-dur, ts, tcode, rank))
    ends = np.r_[starts[1:], len(file)]
    parts = [lo + _track_time_order(tcode[lo:hi], ts[lo:hi], dur[lo:hi])
             for lo, hi in zip(starts.tolist(), ends.tolist())]
    return np.concatenate([parts[f] for f in np.argsort(rank[starts], kind="stable").tolist()])


def _text(codes: np.ndarray, uniq: np.ndarray) -> pa.Array:
    """A string column from codes into its distinct values: each value's text converted once."""
    return pa.array(uniq, type=pa.string()).take(pa.array(codes))


class KindIn:
    """Which rows' kind is one of some kinds: the rows' kinds are coded once (`_kinds`), so a
    test is a lookup per row, not a hash of each row's string."""

    def __init__(self, codes: np.ndarray, names: list[str]) -> None:
        self.codes, self.names = codes, names

    def __call__(self, choices: tuple[str, ...]) -> np.ndarray:
        return np.array([k in choices for k in self.names], dtype=bool)[self.codes]


def _kinds(rows: Rows) -> tuple[np.ndarray, KindIn]:
    """``kind`` per row: `classify` once per distinct (cat, name); instants by their phase."""
    ccode = rows.cat_codes.astype(np.int64)
    cuniq = [c if isinstance(c, str) else "" for c in rows.cat_uniq.tolist()]
    ncode, nuniq = rows.name_codes, rows.name_uniq
    pair, puniq = pd.factorize(ccode * (len(nuniq) + 1) + ncode)
    kinds = np.array([classify(cuniq[p // (len(nuniq) + 1)], nuniq[p % (len(nuniq) + 1)])
                      for p in puniq.tolist()], dtype=object)
    kind = kinds[pair]
    instant = rows.ph == "i"
    kind[instant] = "instant"
    names = list(dict.fromkeys([*kinds.tolist(), "instant"]))
    code = np.array([names.index(k) for k in kinds.tolist()], dtype=np.int64)[pair]
    code[instant] = names.index("instant")
    return kind, KindIn(code, names)


def _nesting(rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """(parent_id, depth): host nesting on each track (`nesting.parents`); device rows -1, 0."""
    n = len(rows)
    tcode, rank = rows.tcode, rows.rank
    new_track = np.r_[True, (tcode[1:] != tcode[:-1]) | (rank[1:] != rank[:-1])]
    track_start = np.maximum.accumulate(np.where(new_track, np.arange(n), 0))
    host_x = ~rows.is_device & (rows.ph == "X")
    parent, depth = parents(track_start, rows.ts_us, rows.dur_us, host_x)
    dev = rows.is_device
    parent[dev], depth[dev] = -1, 0
    return parent, depth


def _steps(rows: Rows) -> np.ndarray:
    """Host events: the ProfilerStep interval of their rank containing their start."""
    name, rank, ts, dur = rows.name, rows.rank, rows.ts_us, rows.dur_us
    step = np.full(len(ts), -1, dtype=np.int32)
    is_step = rows.name_mask(lambda s: s.startswith("ProfilerStep#")) & ~rows.is_device
    # rows are sorted by rank (`_sort`): each rank is one slice
    cut = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1], True])
    for lo, hi in zip(cut[:-1].tolist(), cut[1:].tolist()):
        ids = np.arange(lo, hi)
        srows = ids[is_step[lo:hi]]
        if not len(srows):
            step[ids] = 0
            continue
        srows = srows[np.argsort(ts[srows], kind="stable")]
        nums = np.array([int(_STEP.match(name[i]).group(1)) if _STEP.match(name[i]) else -1
                         for i in srows.tolist()], dtype=np.int32)
        starts, ends = ts[srows], ts[srows] + dur[srows]
        k = np.searchsorted(starts, ts[ids], side="right") - 1
        inside = (k >= 0) & (ts[ids] < ends[np.maximum(k, 0)] + END_TOLERANCE_US)
        step[ids[inside]] = nums[k[inside]]
    return step


def _launches(rows: Rows, kind_in: KindIn) -> np.ndarray:
    """Device event -> event_id of the runtime call with the same (rank, correlation)."""
    is_dev, corr, rank = rows.is_device, rows.correlation, rows.rank
    n = len(rows)
    launch = np.full(n, -1, dtype=np.int64)
    host = np.flatnonzero(kind_in(("runtime",)) & ~is_dev & (corr >= 0))
    dev = np.flatnonzero(is_dev & ~kind_in(("annotation",)) & (corr >= 0))
    if not len(host) or not len(dev):
        return launch
    hkey, dkey = keys.joint_keys((rank[host], corr[host]), (rank[dev], corr[dev]))
    pos = keys.lookup(hkey, dkey)
    hit = pos >= 0
    launch[dev[hit]] = host[pos[hit]]
    return launch


def _link_job_dmas(rows: Rows, args: np.ndarray, launch: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """MTIA: link the job-descriptor DMA requests to the runtime call that launched their job.
    Returns (launch_id, correlation) with those links added.

    MTIA `dma_request` events carry no correlation id. On each queue, the firmware fetches a
    job's descriptors as a burst of host-to-device DMA requests sharing one `packet_ptr`
    immediately before the job's kernel; those take the kernel's launch and correlation.
    Other DMA requests (bulk data copies between jobs, the DMA_REQUEST queue) record nothing
    that names a host call — `k_work_ptr` is a recycled ring-buffer slot — and stay unlinked.
    """
    corr = rows.correlation
    ccp = np.flatnonzero(rows.is_device & (rows.cat == "mtia_ccp_events"))
    if not len(ccp):
        return launch, corr
    is_dma = rows.name[ccp] == "dma_request"
    if not is_dma.any():
        return launch, corr
    pk = np.array([-1 if a is None or a.packet_ptr is None else a.packet_ptr
                   for a in args[ccp].tolist()], dtype=np.int64)
    tcode, rank = rows.tcode[ccp], rows.rank[ccp]
    same_next = np.r_[(tcode[1:] == tcode[:-1]) & (rank[1:] == rank[:-1]), False]
    owner = np.full(len(ccp), -1, dtype=np.int64)   # row position of the kernel a DMA feeds
    for j in range(len(ccp) - 2, -1, -1):
        if not is_dma[j] or pk[j] < 0 or not same_next[j]:
            continue
        if not is_dma[j + 1]:
            owner[j] = j + 1
        elif owner[j + 1] >= 0 and pk[j + 1] == pk[j]:
            owner[j] = owner[j + 1]
    dma = np.flatnonzero(owner >= 0)
    kern = ccp[owner[dma]]
    dma = ccp[dma]
    ok = (launch[kern] >= 0) & (launch[dma] < 0)
    if not ok.any():
        return launch, corr
    launch, corr = launch.copy(), corr.copy()
    launch[dma[ok]] = launch[kern[ok]]
    corr[dma[ok]] = corr[kern[ok]]
    return launch, corr


def _mtia_wait_corr(rows: Rows, args: np.ndarray, corr: np.ndarray, launch: np.ndarray,
                    sync_corr: np.ndarray) -> np.ndarray:
    """MTIA `event_wait` -> the `event_record` it waits for: same `seq_num` on `wait_on_stream`.

    Returns ``sync_corr`` where each such wait (and its launching call) has the record's
    correlation id (records without one stay unlinked).
    """
    is_dev, rank, device = rows.is_device, rows.rank, rows.device
    recs = np.flatnonzero(is_dev & (rows.name == "event_record") & (corr >= 0))
    waits = np.flatnonzero(is_dev & (rows.name == "event_wait") & (sync_corr < 0))
    if not len(recs) or not len(waits):
        return sync_corr
    sync_corr = sync_corr.copy()
    by_key = {}
    for i in recs.tolist():
        a = args[i]
        if a is not None and a.seq_num is not None:
            by_key[(int(rank[i]), int(device[i]), int(rows.stream[i]), a.seq_num)] = corr[i]
    for i in waits.tolist():
        a = args[i]
        if a is not None and a.seq_num is not None and a.wait_on_stream is not None:
            c = by_key.get((int(rank[i]), int(device[i]), a.wait_on_stream, a.seq_num))
            if c is not None:
                sync_corr[i] = c
                h = launch[i]
                if h >= 0:
                    sync_corr[h] = c
    return sync_corr


def _syncs(rows: Rows, args: np.ndarray, kind: np.ndarray, launch: np.ndarray,
           corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sync_stream, sync_corr): what each wait marker and synchronize call waits for (-2: the
    whole device), copied onto the runtime call that launched a marker."""
    is_dev = rows.is_device
    n = len(kind)
    sync_stream = np.full(n, -1, dtype=np.int64)
    sync_corr = np.full(n, -1, dtype=np.int64)
    for i in np.flatnonzero(is_dev & (kind == "sync")).tolist():
        a = args[i]
        if a is None:
            continue
        sk = a.sync_kind or ""
        if sk == "Context Sync" or sk == "Device Sync":
            s = -2
        elif a.wait_on_stream is not None and a.wait_on_stream >= 0:
            s = a.wait_on_stream
        elif sk == "Stream Sync":
            s = int(rows.stream[i])
        else:
            s = -1
        sync_stream[i] = s
        if a.wait_corr is not None and a.wait_corr >= 0:
            sync_corr[i] = a.wait_corr
        h = launch[i]
        if h >= 0:
            sync_stream[h], sync_corr[h] = sync_stream[i], sync_corr[i]
    sync_corr = _mtia_wait_corr(rows, args, corr, launch, sync_corr)
    host_rt = (kind == "runtime") & ~is_dev
    sync_stream[host_rt & rows.name_mask(_DEVICE_SYNC.match)] = -2
    stream_sync = rows.name_mask(lambda s: bool(_STREAM_SYNC.match(s))
                                 and not s.startswith("enqueueCommand"))
    for i in np.flatnonzero(host_rt & stream_sync & (sync_stream == -1)).tolist():
        a = args[i]
        if a is not None:
            for v in (a.stream_id, a.stream):
                try:
                    s = int(v, 0) if isinstance(v, str) else v
                except ValueError:
                    s = None
                if isinstance(s, int) and s >= 0:
                    sync_stream[i] = s
                    break
    return sync_stream, sync_corr


def _first_of_each(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense codes, position of each code's first row)."""
    codes, uniq = pd.factorize(key)
    first = np.full(len(uniq), len(key), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(key)))
    return codes, first


def _arg_floats(present: list[Any], attr: str) -> np.ndarray:
    """One numeric arg of the rows that have args, NaN where absent."""
    return np.array(list(map(attrgetter(attr), present)), dtype=np.float64)


@dataclass(frozen=True)
class Costs:
    """Per-row work estimates, and each rank's embedding shard (bytes of the tables its lookups
    read; empty when no lookup records shapes)."""

    flops: np.ndarray
    bytes_read: np.ndarray
    bytes_written: np.ndarray
    dtype: np.ndarray          # object
    table_bytes: dict[int, float]


def _costs(rows: Rows, args: np.ndarray, kind: np.ndarray, kind_in: KindIn) -> Costs:
    """flops, bytes_read, bytes_written and dtype from shapes and the trace's own args.

    A recorded ``flops`` arg wins over the shape formula. A recorded ``bytes`` arg is the op's
    total memory traffic: the shape-derived output bytes (capped at the total) are written,
    the rest is read; with no output estimate it is all read. Copies and DMA take their size.
    """
    name, is_dev, cat = rows.name, rows.is_device, rows.cat
    n = len(kind)
    flops, rd, wr = np.zeros(n), np.zeros(n), np.zeros(n)
    shard: dict[int, float] = {}
    dtype = np.full(n, None, dtype=object)
    arg_rows = np.flatnonzero(pd.Series(args, dtype=object, copy=False).notna().to_numpy())
    with_args = np.zeros(n, dtype=bool)
    with_args[arg_rows] = True
    shape_kind = kind_in(schema.SHAPE_KINDS)
    memory_kind = kind_in(schema.MEMORY_KINDS)
    dims, types, conc = rows.input_dims, rows.input_type, rows.concrete
    host_shape = np.flatnonzero((dims >= 0) & ~is_dev & shape_kind)
    lists = RawLists()
    raw = rows.raw_arg
    if len(host_shape):
        key = keys.codes(rows.name_codes[host_shape], kind[host_shape], dims[host_shape],
                         types[host_shape], conc[host_shape])
        codes, first = _first_of_each(key)
        got = [op_cost(kind[i], name[i], lists(raw(dims, i)), lists(raw(types, i)),
                       lists(raw(conc, i))) for i in host_shape[first].tolist()]
        fl, r, w, dt = (np.array(c, dtype=object if j == 3 else np.float64)
                        for j, c in enumerate(zip(*got)))
        flops[host_shape], rd[host_shape], wr[host_shape] = fl[codes], r[codes], w[codes]
        dtype[host_shape] = dt[codes]
        # each rank's embedding shard: the tables its distinct lookups (name + shapes) read
        tb = np.array([table_bytes(kind[i], name[i], lists(raw(dims, i)), lists(raw(types, i)))
                       for i in host_shape[first].tolist()])
        for u in np.flatnonzero(tb > 0).tolist():
            ranks = np.unique(rows.rank[host_shape[codes == u]]).tolist()
            for rk in ranks:
                shard[int(rk)] = shard.get(int(rk), 0.0) + float(tb[u])
    plain = np.flatnonzero((types >= 0) & (cat == "cpu_op") & ~shape_kind)
    if len(plain):
        codes, first = _first_of_each(types[plain])
        firsts = [next((x for x in lists(raw(types, i)) or [] if isinstance(x, str)
                        and x not in ("", "Scalar", "ScalarList")), None)
                  for i in plain[first].tolist()]
        dtype[plain] = np.array(firsts + [None], dtype=object)[:-1][codes]
    if len(arg_rows):
        present = args[arg_rows].tolist()
        own_flops, own_bytes = _arg_floats(present, "flops"), _arg_floats(present, "bytes")
        has = ~np.isnan(own_flops)
        flops[arg_rows[has]] = own_flops[has]
        copy = memory_kind[arg_rows]
        has = ~np.isnan(own_bytes) & ~(copy & is_dev[arg_rows])
        sized, total = arg_rows[has], own_bytes[has]
        wr[sized] = np.minimum(wr[sized], total)
        rd[sized] = total - wr[sized]
    copies = np.flatnonzero(with_args & is_dev & memory_kind)
    for i in copies.tolist():
        a = args[i]
        b = parse_size(a.bytes if a.bytes is not None else a.size if a.size is not None else a.mem_size)
        wr[i] = b
        if kind[i] == "memcpy":
            rd[i] = b
    dev_dtype = rows.name_mask(lambda s: _MTIA_DTYPE.search(s) is not None)
    for i in np.flatnonzero(is_dev & dev_dtype).tolist():
        if dtype[i] is None:
            dtype[i] = _MTIA_DTYPE.search(name[i]).group(1)
    return Costs(flops, rd, wr, dtype, shard)


def _count_once(costs: Costs, parent: np.ndarray, is_dev: np.ndarray) -> Costs:
    """Host work is counted once: an op whose descendant carries flops/bytes gives them up."""
    work = np.flatnonzero(~is_dev & ((costs.flops > 0) | (costs.bytes_read > 0)))
    has_desc = np.zeros(len(parent), dtype=bool)
    cur = parent[work]
    cur = cur[cur >= 0]
    while len(cur):
        cur = np.unique(cur)
        cur = cur[~has_desc[cur]]
        has_desc[cur] = True
        cur = parent[cur]
        cur = cur[cur >= 0]
    if not has_desc.any():
        return costs
    return replace(costs, **{c: np.where(has_desc, 0.0, getattr(costs, c))
                             for c in ("flops", "bytes_read", "bytes_written")})


def _inherit(rows: Rows, costs: Costs, kind: np.ndarray, kind_in: KindIn, launch: np.ndarray,
             parent: np.ndarray) -> Costs:
    """Device events take flops/bytes/dtype from their launching op, split among its kernels."""
    is_dev, rank, ext, cat = rows.is_device, rows.rank, rows.external_id, rows.cat
    flops, rd, wr, dtype = costs.flops, costs.bytes_read, costs.bytes_written, costs.dtype
    dev = np.flatnonzero(is_dev & ~kind_in((*schema.MEMORY_KINDS, "sync", "annotation"))
                         & (flops == 0) & (rd == 0))
    if not len(dev):
        return costs
    op = np.full(len(dev), -1, dtype=np.int64)
    ops = np.flatnonzero((cat == "cpu_op") & (ext >= 0))
    if len(ops):
        src_ext = np.where(ext[dev] >= 0, ext[dev], np.where(launch[dev] >= 0, ext[np.maximum(launch[dev], 0)], -1))
        okey, dkey = keys.joint_keys((rank[ops], ext[ops]), (rank[dev], src_ext))
        o = np.argsort(okey, kind="stable")
        okey_s, ops_s = okey[o], ops[o]
        # several cpu_ops may share an id: keep the innermost (the last one with that key)
        last = np.r_[okey_s[1:] != okey_s[:-1], True]
        okey_s, ops_s = okey_s[last], ops_s[last]
        pos = np.minimum(np.searchsorted(okey_s, dkey), len(okey_s) - 1)
        hit = (okey_s[pos] == dkey) & (src_ext >= 0)
        op[hit] = ops_s[pos[hit]]
    miss = (op < 0) & (launch[dev] >= 0)
    op[miss] = parent[launch[dev[miss]]]
    ok = op >= 0
    dev, op = dev[ok], op[ok]
    if not len(dev):
        return costs
    flops, rd, wr, dtype = flops.copy(), rd.copy(), wr.copy(), dtype.copy()
    same = kind[dev] == kind[op]
    uop, inv, n_all = np.unique(op, return_inverse=True, return_counts=True)
    n_same = np.bincount(inv, weights=same.astype(float), minlength=len(uop))
    share = np.where(n_same[inv] > 0, same / np.maximum(n_same[inv], 1), 1.0 / n_all[inv])
    flops[dev] = flops[op] * share
    rd[dev] = rd[op] * share
    wr[dev] = wr[op] * share
    need = np.array([d is None for d in dtype[dev].tolist()], dtype=bool)
    dtype[dev[need]] = dtype[op[need]]
    return replace(costs, flops=flops, bytes_read=rd, bytes_written=wr, dtype=dtype)


def _device_steps(step: np.ndarray, launch: np.ndarray, is_dev: np.ndarray) -> np.ndarray:
    """``step`` where each launched device event takes its launching call's step."""
    dev = np.flatnonzero(is_dev)
    linked = dev[launch[dev] >= 0]
    out = step.copy()
    out[linked] = step[launch[linked]]
    return out


def _thread_tracks(raws: list[RawFile], word: str) -> set[str]:
    out = set()
    for r in raws:
        for (pid, tid), names in r.info.thread_names.items():
            if any(word in nm for nm in names):
                out.add(f"host:{pid}:{tid}")
    return out


def build(raws: list[RawFile]) -> tuple[pa.Table, list[str]]:
    """The events table and the warnings found while building it."""
    warnings: list[str] = [w for r in raws for w in r.warnings]
    joined = _concat(raws)
    heap.release()  # every file's own columns, freed as joined
    rows, args = _sort(*joined)
    del joined
    kind, kind_in = _kinds(rows)
    parent, depth = _nesting(rows)
    # device rows get steps from time first, then from their launch
    step = _steps(rows)
    launch, corr = _link_job_dmas(rows, args, _launches(rows, kind_in))
    step = _device_steps(step, launch, rows.is_device)
    sync_stream, sync_corr = _syncs(rows, args, kind, launch, corr)
    costs = _count_once(_costs(rows, args, kind, kind_in), parent, rows.is_device)
    costs = _inherit(rows, costs, kind, kind_in, launch, parent)
    dist = {r.info.rank: r.info.distributed_info for r in raws}
    coll, more = collectives.fill(rows, args, kind, parent, launch, dist,
                                  _thread_tracks(raws, "pt_gloo_runloop"),
                                  is_coll=kind_in(schema.COMM_KINDS))
    warnings += more
    warnings += _warn_links(kind_in, rows.is_device, launch)
    del args
    paths = pa.array([r.info.path for r in raws], type=pa.string())
    # text columns: made from their codes once the sorted rows (their per-row str objects
    # among them) are freed below, not beside them
    texts = {"name": (rows.name_codes, rows.name_uniq), "cat": (rows.cat_codes, rows.cat_uniq),
             "ph": (rows.ph_codes, rows.ph_uniq), "track": (rows.tcode, rows.track_uniq)}
    file_of_row = rows.file
    cols: dict[str, Any] = {
        "rank": rows.rank, "event_id": np.arange(len(rows), dtype=np.int64),
        "kind": _text(kind_in.codes, kind_in.names),  # each kind's text converted once
        "is_device": rows.is_device, "device": rows.device, "stream": rows.stream,
        "ts_us": rows.ts_us, "dur_us": rows.dur_us, "step": step, "correlation": corr,
        "external_id": rows.external_id, "parent_id": parent, "depth": depth,
        "launch_id": launch, "sync_stream": sync_stream, "sync_corr": sync_corr,
        "flops": costs.flops, "bytes_read": costs.bytes_read,
        "bytes_written": costs.bytes_written, "dtype": costs.dtype, **coll,
    }
    shard = costs.table_bytes
    # the table takes each column as it converts it: only it holds the arrays from here on
    del rows, kind, parent, depth, step, launch, corr, sync_stream, sync_corr, costs, coll
    heap.release()  # the args and the sorted rows' own columns
    for key in list(texts):
        cols[key] = _text(*texts.pop(key))
    cols["src_file"] = paths.take(pa.array(file_of_row))  # a path per row
    del file_of_row
    table = schema.from_columns(cols, consume=True)
    if shard:
        meta = dict(table.schema.metadata or {})
        meta[schema.TABLE_BYTES_KEY] = json.dumps(shard).encode()
        table = table.replace_schema_metadata(meta)
    return table, warnings


def _warn_links(kind_in: KindIn, is_dev: np.ndarray, launch: np.ndarray) -> list[str]:
    work = is_dev & ~kind_in(("annotation", "sync"))
    unlinked = int((work & (launch < 0)).sum())
    if unlinked:
        return [f"{unlinked} of {int(work.sum())} device events have no launching runtime "
                "call (missing flows or correlation ids); their step comes from time"]
    return []
