"""Raw per-file columns -> the canonical events table (schema.EVENTS_SCHEMA).

All steps are array operations over every rank at once; Python loops run over ranks, distinct
(cat, name) pairs, or the few events that carry shapes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from mtia_trace import keys, schema
from mtia_trace.ingest import collectives
from mtia_trace.ingest.classify import classify
from mtia_trace.ingest.decode import RawLists
from mtia_trace.ingest.kineto import RawFile
from mtia_trace.ingest.nesting import END_TOLERANCE_US, parents
from mtia_trace.ingest.shapes import op_cost, parse_size, table_bytes

_DEVICE_SYNC = re.compile(r"^(cuda|hip)DeviceSynchronize$")
_STREAM_SYNC = re.compile(r"^((cuda|hip)StreamSynchronize|synchronizeStream|synchronize|"
                          r"(cuda|hip)StreamWaitEvent|(cuda|hip)EventSynchronize|"
                          r"enqueueCommand waitOnEvent)$")
_MTIA_DTYPE = re.compile(r"-dtype_([A-Za-z0-9]+)")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _isin(values: np.ndarray, choices: tuple[str, ...]) -> np.ndarray:
    """Hash-based membership for object arrays (np.isin sorts Python objects)."""
    return pd.Series(values, dtype=object, copy=False).isin(choices).to_numpy()


def _concat(raws: list[RawFile]) -> tuple[dict[str, Any], np.ndarray]:
    """All files' columns end to end; each file's own columns and args are released once
    copied, so the per-file and the joined copies are not alive together."""
    n = sum(r.info.n_events for r in raws)
    cols: dict[str, Any] = {}
    for key in list(raws[0].cols):
        cols[key] = np.concatenate([r.cols[key] for r in raws])
        for r in raws:
            del r.cols[key]
    cols["rank"] = np.concatenate([np.full(r.info.n_events, r.info.rank, dtype=np.int32) for r in raws])
    # file index per row; the path strings are made once per file at the end
    cols["_file"] = np.repeat(np.arange(len(raws), dtype=np.int32), [r.info.n_events for r in raws])
    args = np.empty(n, dtype=object)
    pos = 0
    for r in raws:
        args[pos:pos + r.info.n_events] = r.args
        pos += r.info.n_events
        r.args = []
    return cols, args


def _sort(cols: dict[str, Any], args: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    codes, uniq = pd.factorize(cols["track"])
    rank_of_name = np.argsort(np.argsort(np.asarray(uniq, dtype=str), kind="stable"))
    tcode = rank_of_name[codes]
    order = np.lexsort((-cols["dur_us"], cols["ts_us"], tcode, cols["rank"]))
    for k in list(cols):  # one column at a time: the unsorted copy is freed as we go
        cols[k] = cols[k][order]
    cols["_tcode"] = tcode[order]
    return cols, args[order]


def _name_codes(cols: dict[str, Any]) -> tuple[np.ndarray, Any]:
    """Codes of the event names and the distinct names (factorized once per build)."""
    if "_ncode" not in cols:
        cols["_ncode"], cols["_nuniq"] = pd.factorize(cols["name"])
    return cols["_ncode"], cols["_nuniq"]


def _name_mask(cols: dict[str, Any], test: Callable[[str], bool]) -> np.ndarray:
    """Per-row boolean of a test on the event name, evaluated once per distinct name."""
    _name_codes(cols)
    return np.array([bool(test(s)) for s in cols["_nuniq"]], dtype=bool)[cols["_ncode"]]


def _kinds(cols: dict[str, Any]) -> np.ndarray:
    ccode, cuniq = pd.factorize(cols["cat"], use_na_sentinel=False)
    cuniq = [c if isinstance(c, str) else "" for c in cuniq]
    ncode, nuniq = _name_codes(cols)
    pair, puniq = pd.factorize(ccode.astype(np.int64) * (len(nuniq) + 1) + ncode)
    kinds = np.array([classify(cuniq[p // (len(nuniq) + 1)], nuniq[p % (len(nuniq) + 1)])
                      for p in puniq.tolist()], dtype=object)
    kind = kinds[pair]
    kind[cols["ph"] == "i"] = "instant"
    return kind


def _steps(cols: dict[str, Any], warnings: list[str]) -> np.ndarray:
    """Host events: the ProfilerStep interval of their rank containing their start."""
    name, rank, ts, dur = cols["name"], cols["rank"], cols["ts_us"], cols["dur_us"]
    step = np.full(len(ts), -1, dtype=np.int32)
    is_step = _name_mask(cols, lambda s: s.startswith("ProfilerStep#")) & ~cols["is_device"]
    # rows are sorted by rank (`_sort`): each rank is one slice
    cut = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1], True])
    for lo, hi in zip(cut[:-1].tolist(), cut[1:].tolist()):
        rows = np.arange(lo, hi)
        srows = rows[is_step[lo:hi]]
        if not len(srows):
            step[rows] = 0
            continue
        srows = srows[np.argsort(ts[srows], kind="stable")]
        nums = np.array([int(_STEP.match(name[i]).group(1)) if _STEP.match(name[i]) else -1
                         for i in srows.tolist()], dtype=np.int32)
        starts, ends = ts[srows], ts[srows] + dur[srows]
        k = np.searchsorted(starts, ts[rows], side="right") - 1
        inside = (k >= 0) & (ts[rows] < ends[np.maximum(k, 0)] + END_TOLERANCE_US)
        step[rows[inside]] = nums[k[inside]]
    return step


def _launches(cols: dict[str, Any]) -> np.ndarray:
    """Device event -> event_id of the runtime call with the same (rank, correlation)."""
    kind, is_dev, corr, rank = cols["kind"], cols["is_device"], cols["correlation"], cols["rank"]
    n = len(kind)
    launch = np.full(n, -1, dtype=np.int64)
    host = np.flatnonzero((kind == "runtime") & ~is_dev & (corr >= 0))
    dev = np.flatnonzero(is_dev & (kind != "annotation") & (corr >= 0))
    if not len(host) or not len(dev):
        return launch
    hkey, dkey = keys.joint_codes((rank[host], corr[host]), (rank[dev], corr[dev]))
    pos = keys.lookup(hkey, dkey)
    hit = pos >= 0
    launch[dev[hit]] = host[pos[hit]]
    return launch


def _link_job_dmas(cols: dict[str, Any], args: np.ndarray) -> None:
    """MTIA: link the job-descriptor DMA requests to the runtime call that launched their job.

    MTIA `dma_request` events carry no correlation id. On each queue, the firmware fetches a
    job's descriptors as a burst of host-to-device DMA requests sharing one `packet_ptr`
    immediately before the job's kernel; those take the kernel's launch and correlation.
    Other DMA requests (bulk data copies between jobs, the DMA_REQUEST queue) record nothing
    that names a host call — `k_work_ptr` is a recycled ring-buffer slot — and stay unlinked.
    """
    rows = np.flatnonzero(cols["is_device"] & (cols["cat"] == "mtia_ccp_events"))
    if not len(rows):
        return
    is_dma = cols["name"][rows] == "dma_request"
    if not is_dma.any():
        return
    pk = np.array([-1 if a is None or a.packet_ptr is None else a.packet_ptr
                   for a in args[rows].tolist()], dtype=np.int64)
    tcode, rank = cols["_tcode"][rows], cols["rank"][rows]
    same_next = np.r_[(tcode[1:] == tcode[:-1]) & (rank[1:] == rank[:-1]), False]
    owner = np.full(len(rows), -1, dtype=np.int64)   # row position of the kernel a DMA feeds
    for j in range(len(rows) - 2, -1, -1):
        if not is_dma[j] or pk[j] < 0 or not same_next[j]:
            continue
        if not is_dma[j + 1]:
            owner[j] = j + 1
        elif owner[j + 1] >= 0 and pk[j + 1] == pk[j]:
            owner[j] = owner[j + 1]
    dma = np.flatnonzero(owner >= 0)
    kern = rows[owner[dma]]
    dma = rows[dma]
    launch, corr = cols["launch_id"], cols["correlation"]
    ok = (launch[kern] >= 0) & (launch[dma] < 0)
    launch[dma[ok]] = launch[kern[ok]]
    corr[dma[ok]] = corr[kern[ok]]


def _mtia_wait_corr(cols: dict[str, Any], args: np.ndarray, sync_corr: np.ndarray) -> None:
    """MTIA `event_wait` -> the `event_record` it waits for: same `seq_num` on `wait_on_stream`.

    The wait gets the record's correlation id (records without one stay unlinked).
    """
    is_dev, rank, device = cols["is_device"], cols["rank"], cols["device"]
    recs = np.flatnonzero(is_dev & (cols["name"] == "event_record") & (cols["correlation"] >= 0))
    waits = np.flatnonzero(is_dev & (cols["name"] == "event_wait") & (sync_corr < 0))
    if not len(recs) or not len(waits):
        return
    by_key = {}
    for i in recs.tolist():
        a = args[i]
        if a is not None and a.seq_num is not None:
            by_key[(int(rank[i]), int(device[i]), int(cols["stream"][i]), a.seq_num)] = cols["correlation"][i]
    for i in waits.tolist():
        a = args[i]
        if a is not None and a.seq_num is not None and a.wait_on_stream is not None:
            c = by_key.get((int(rank[i]), int(device[i]), a.wait_on_stream, a.seq_num))
            if c is not None:
                sync_corr[i] = c
                h = cols["launch_id"][i]
                if h >= 0:
                    sync_corr[h] = c


def _syncs(cols: dict[str, Any], args: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    kind, is_dev, launch = cols["kind"], cols["is_device"], cols["launch_id"]
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
            s = int(cols["stream"][i])
        else:
            s = -1
        sync_stream[i] = s
        if a.wait_corr is not None and a.wait_corr >= 0:
            sync_corr[i] = a.wait_corr
        h = launch[i]
        if h >= 0:
            sync_stream[h], sync_corr[h] = sync_stream[i], sync_corr[i]
    _mtia_wait_corr(cols, args, sync_corr)
    host_rt = (kind == "runtime") & ~is_dev
    sync_stream[host_rt & _name_mask(cols, _DEVICE_SYNC.match)] = -2
    stream_sync = _name_mask(cols, lambda s: bool(_STREAM_SYNC.match(s)) and not s.startswith("enqueueCommand"))
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


def _raw_codes(present: list[Any], attr: str) -> np.ndarray:
    """Codes of one raw JSON arg's distinct values (absent = its own code)."""
    vals = [b"" if r is None else bytes(r) for r in map(attrgetter(attr), present)]
    return pd.factorize(np.array(vals, dtype=object))[0]


def _first_of_each(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense codes, position of each code's first row)."""
    codes, uniq = pd.factorize(key)
    first = np.full(len(uniq), len(key), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(key)))
    return codes, first


def _arg_floats(present: list[Any], attr: str) -> np.ndarray:
    """One numeric arg of the rows that have args, NaN where absent."""
    return np.array(list(map(attrgetter(attr), present)), dtype=np.float64)


def _costs(cols: dict[str, Any], args: np.ndarray) -> None:
    """flops, bytes_read, bytes_written and dtype from shapes and the trace's own args.

    A recorded ``flops`` arg wins over the shape formula. A recorded ``bytes`` arg is the op's
    total memory traffic: the shape-derived output bytes (capped at the total) are written,
    the rest is read; with no output estimate it is all read. Copies and DMA take their size.
    """
    kind, name, is_dev, cat = cols["kind"], cols["name"], cols["is_device"], cols["cat"]
    n = len(kind)
    flops, rd, wr = np.zeros(n), np.zeros(n), np.zeros(n)
    dtype = np.full(n, None, dtype=object)
    arg_rows = np.flatnonzero(pd.Series(args, dtype=object, copy=False).notna().to_numpy())
    with_args = np.zeros(n, dtype=bool)
    with_args[arg_rows] = True
    shape_kind = _isin(kind, schema.SHAPE_KINDS)
    host_shape = np.flatnonzero(with_args & ~is_dev & shape_kind)
    lists = RawLists()
    if len(host_shape):
        shaped = args[host_shape].tolist()
        key = keys.codes(_name_codes(cols)[0][host_shape], kind[host_shape],
                       *(_raw_codes(shaped, f) for f in ("input_dims", "input_type", "concrete")))
        codes, first = _first_of_each(key)
        got = [op_cost(kind[i], name[i], lists(args[i].input_dims), lists(args[i].input_type),
                       lists(args[i].concrete)) for i in host_shape[first].tolist()]
        fl, r, w, dt = (np.array(c, dtype=object if j == 3 else np.float64)
                        for j, c in enumerate(zip(*got)))
        flops[host_shape], rd[host_shape], wr[host_shape] = fl[codes], r[codes], w[codes]
        dtype[host_shape] = dt[codes]
        # each rank's embedding shard: the tables its distinct lookups (name + shapes) read
        tb = np.array([table_bytes(kind[i], name[i], lists(args[i].input_dims),
                                   lists(args[i].input_type)) for i in host_shape[first].tolist()])
        shard: dict[int, float] = {}
        for u in np.flatnonzero(tb > 0).tolist():
            ranks = np.unique(cols["rank"][host_shape[codes == u]]).tolist()
            for rk in ranks:
                shard[int(rk)] = shard.get(int(rk), 0.0) + float(tb[u])
        cols["_table_bytes"] = shard
    plain = np.flatnonzero(with_args & (cat == "cpu_op") & ~shape_kind)
    if len(plain):
        codes, first = _first_of_each(_raw_codes(args[plain].tolist(), "input_type"))
        firsts = [next((x for x in lists(args[i].input_type) or [] if isinstance(x, str)
                        and x not in ("", "Scalar", "ScalarList")), None)
                  for i in plain[first].tolist()]
        dtype[plain] = np.array(firsts + [None], dtype=object)[:-1][codes]
    if len(arg_rows):
        present = args[arg_rows].tolist()
        own_flops, own_bytes = _arg_floats(present, "flops"), _arg_floats(present, "bytes")
        has = ~np.isnan(own_flops)
        flops[arg_rows[has]] = own_flops[has]
        copy = _isin(kind[arg_rows], schema.MEMORY_KINDS)
        has = ~np.isnan(own_bytes) & ~(copy & is_dev[arg_rows])
        rows, total = arg_rows[has], own_bytes[has]
        wr[rows] = np.minimum(wr[rows], total)
        rd[rows] = total - wr[rows]
    copies = np.flatnonzero(with_args & is_dev & _isin(kind, schema.MEMORY_KINDS))
    for i in copies.tolist():
        a = args[i]
        b = parse_size(a.bytes if a.bytes is not None else a.size if a.size is not None else a.mem_size)
        wr[i] = b
        if kind[i] == "memcpy":
            rd[i] = b
    dev_dtype = _name_mask(cols, lambda s: _MTIA_DTYPE.search(s) is not None)
    for i in np.flatnonzero(is_dev & dev_dtype).tolist():
        if dtype[i] is None:
            dtype[i] = _MTIA_DTYPE.search(name[i]).group(1)
    cols.update(flops=flops, bytes_read=rd, bytes_written=wr, dtype=dtype)


def _count_once(cols: dict[str, Any]) -> None:
    """Host work is counted once: an op whose descendant carries flops/bytes gives them up."""
    parent, is_dev = cols["parent_id"], cols["is_device"]
    work = np.flatnonzero(~is_dev & ((cols["flops"] > 0) | (cols["bytes_read"] > 0)))
    has_desc = np.zeros(len(parent), dtype=bool)
    cur = parent[work]
    cur = cur[cur >= 0]
    while len(cur):
        cur = np.unique(cur)
        cur = cur[~has_desc[cur]]
        has_desc[cur] = True
        cur = parent[cur]
        cur = cur[cur >= 0]
    for c in ("flops", "bytes_read", "bytes_written"):
        cols[c][has_desc] = 0.0


def _inherit(cols: dict[str, Any]) -> None:
    """Device events take flops/bytes/dtype from their launching op, split among its kernels."""
    kind, is_dev, rank, ext = cols["kind"], cols["is_device"], cols["rank"], cols["external_id"]
    launch, parent, cat = cols["launch_id"], cols["parent_id"], cols["cat"]
    flops, rd, wr, dtype = cols["flops"], cols["bytes_read"], cols["bytes_written"], cols["dtype"]
    dev = np.flatnonzero(is_dev & ~_isin(kind, (*schema.MEMORY_KINDS, "sync", "annotation"))
                         & (flops == 0) & (rd == 0))
    if not len(dev):
        return
    op = np.full(len(dev), -1, dtype=np.int64)
    ops = np.flatnonzero((cat == "cpu_op") & (ext >= 0))
    if len(ops):
        src_ext = np.where(ext[dev] >= 0, ext[dev], np.where(launch[dev] >= 0, ext[np.maximum(launch[dev], 0)], -1))
        okey, dkey = keys.joint_codes((rank[ops], ext[ops]), (rank[dev], src_ext))
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
        return
    same = kind[dev] == kind[op]
    uop, inv, n_all = np.unique(op, return_inverse=True, return_counts=True)
    n_same = np.bincount(inv, weights=same.astype(float), minlength=len(uop))
    share = np.where(n_same[inv] > 0, same / np.maximum(n_same[inv], 1), 1.0 / n_all[inv])
    flops[dev] = flops[op] * share
    rd[dev] = rd[op] * share
    wr[dev] = wr[op] * share
    need = np.array([d is None for d in dtype[dev].tolist()], dtype=bool)
    dtype[dev[need]] = dtype[op[need]]


def _device_steps(cols: dict[str, Any]) -> None:
    step, launch, is_dev = cols["step"], cols["launch_id"], cols["is_device"]
    dev = np.flatnonzero(is_dev)
    linked = dev[launch[dev] >= 0]
    step[linked] = step[launch[linked]]


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
    cols, args = _concat(raws)
    cols, args = _sort(cols, args)
    n = len(cols["ts_us"])
    cols["event_id"] = np.arange(n, dtype=np.int64)
    cols["kind"] = _kinds(cols)
    # device rows get steps from time first, then from their launch
    tcode, rank = cols["_tcode"], cols["rank"]
    new_track = np.r_[True, (tcode[1:] != tcode[:-1]) | (rank[1:] != rank[:-1])]
    track_start = np.maximum.accumulate(np.where(new_track, np.arange(n), 0))
    host_x = ~cols["is_device"] & (cols["ph"] == "X")
    parent, depth = parents(track_start, cols["ts_us"], cols["dur_us"], host_x)
    dev = cols["is_device"]
    parent[dev], depth[dev] = -1, 0
    cols["parent_id"], cols["depth"] = parent, depth
    cols["step"] = _steps(cols, warnings)
    cols["launch_id"] = _launches(cols)
    _link_job_dmas(cols, args)
    _device_steps(cols)
    cols["sync_stream"], cols["sync_corr"] = _syncs(cols, args)
    _costs(cols, args)
    _count_once(cols)
    _inherit(cols)
    dist = {r.info.rank: r.info.distributed_info for r in raws}
    warnings += collectives.fill(cols, args, dist, _thread_tracks(raws, "pt_gloo_runloop"))
    _warn_links(cols, warnings)
    del args
    shard = cols.pop("_table_bytes", None)
    paths = pa.array([r.info.path for r in raws], type=pa.string())
    cols["src_file"] = paths.take(pa.array(cols.pop("_file")))
    keep = {f.name for f in schema.EVENTS_SCHEMA}
    for k in [k for k in cols if k not in keep]:
        del cols[k]
    table = schema.from_columns(cols, consume=True)
    if shard:
        meta = dict(table.schema.metadata or {})
        meta[schema.TABLE_BYTES_KEY] = json.dumps(shard).encode()
        table = table.replace_schema_metadata(meta)
    return table, warnings


def _warn_links(cols: dict[str, Any], warnings: list[str]) -> None:
    kind, is_dev, launch = cols["kind"], cols["is_device"], cols["launch_id"]
    work = is_dev & ~_isin(kind, ("annotation", "sync"))
    unlinked = int((work & (launch < 0)).sum())
    if unlinked:
        warnings.append(f"{unlinked} of {int(work.sum())} device events have no launching runtime "
                        "call (missing flows or correlation ids); their step comes from time")
