"""Collective metadata: op, bytes, process group and a per-group sequence number.

Sources: `record_param_comms` args and NCCL/HCCL kernel args where the backend records them;
otherwise `c10d::*` ops (sizes from `Input Dims`) and, for gloo CPU traces, the `gloo:*`
annotations on the gloo worker threads, paired with the c10d ops by order per op type.

`coll_seq` is the trace's own sequence number (`Seq` arg of record_param_comms) when every
collective of a (rank, process group) carries one, so ranks whose traces start mid-way still
match; otherwise it numbers the outermost collective ops of each (rank, process group) in time order;
every event of the same collective on that rank (the c10d op, its record_param_comms and
annotations, the kernel it launched, the paired gloo annotation) carries the same number, so
(pg, coll_seq, coll_op) identifies one collective across ranks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from mtia_trace import keys
from mtia_trace.ingest.classify import coll_op_of
from mtia_trace.ingest.decode import RawLists
from mtia_trace.ingest.rows import Rows
from mtia_trace.ingest.shapes import _numel, dtype_size
from mtia_trace.schema import COMM_KINDS

_SPLIT_OPS = ("all_to_all", "all_gather", "reduce_scatter")


def _dims_bytes(op: str | None, raw_dims: bytes | None, raw_types: bytes | None, group: int,
                lists: RawLists) -> tuple[float, float, str | None]:
    """(bytes in, bytes out, dtype) from Input Dims / Input type (raw JSON)."""
    dims = lists(raw_dims)
    if not dims:
        return 0.0, 0.0, None
    types = lists(raw_types) or []
    tens = [(d, types[i] if i < len(types) else "") for i, d in enumerate(dims)
            if isinstance(d, list) and (i >= len(types) or types[i] not in ("", "Scalar", "ScalarList"))]
    if not tens:
        return 0.0, 0.0, None
    dtype = next((t for _, t in tens if t not in ("TensorList", "")), None)
    size = dtype_size(dtype)

    def numel(d: Any, t: str) -> int:
        if t == "TensorList" and d in ([], [[]]) and not (isinstance(d, list) and d and d[0] == []):
            return 0
        return _numel(d)

    if len(tens) >= 2 and op in _SPLIT_OPS:
        out_n, in_n = numel(*tens[0]), numel(*tens[1])
    elif len(tens) == 1 and op == "all_gather":
        in_n = numel(*tens[0])
        out_n = in_n * max(group, 1)
    else:
        in_n = out_n = numel(*tens[0])
    return float(in_n * size), float(out_n * size), dtype


def _default_pg(dist: dict[str, Any], texts: dict[tuple[int, ...], str]
                ) -> tuple[str | None, int, str | None]:
    """(pg name, size, rank list) of a rank's only process group, from its distributedInfo;
    ``texts`` memoizes rank lists as text (every rank of a job records the same ones)."""
    cfg = dist.get("pg_config") or []
    if len(cfg) == 1 and isinstance(cfg[0], dict):
        c = cfg[0]
        ranks = c.get("ranks")
        return (str(c.get("pg_name")), int(c.get("pg_size") or 0),
                _ranks_text(ranks, texts) if isinstance(ranks, list) else None)
    ws = dist.get("world_size")
    return None, int(ws) if isinstance(ws, int) and not cfg else 0, None


def _ranks_text(ranks: list[Any], texts: dict[tuple[int, ...], str]) -> str:
    if not set(map(type, ranks)) <= {int}:  # only plain ints are memoized (1, 1.0, True are equal)
        return str(list(ranks))
    key = tuple(ranks)
    got = texts.get(key)
    if got is None:
        got = texts[key] = str(list(ranks))
    return got


def fill(rows: Rows, args: np.ndarray, kind: np.ndarray, parent: np.ndarray, launch: np.ndarray,
         dist_by_rank: dict[int, dict[str, Any]], gloo_tracks: set[str], *,
         is_coll: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], list[str]]:
    """The collective columns (coll_op, coll_bytes_in/out, group_size, pg, pg_ranks, coll_seq;
    rows in events-table order) and the warnings found. ``is_coll``: whether each row's kind
    is one of `COMM_KINDS`, where the caller knows."""
    name, rank, is_dev, ts = rows.name, rows.rank, rows.is_device, rows.ts_us
    n = len(kind)
    if is_coll is None:
        is_coll = np.logical_or.reduce([kind == k for k in COMM_KINDS])
    idx = np.flatnonzero(is_coll)
    warnings: list[str] = []
    coll_op = np.full(n, None, dtype=object)
    b_in = np.zeros(n)
    b_out = np.zeros(n)
    gsize = np.zeros(n, dtype=np.int32)
    pg = np.full(n, None, dtype=object)
    pg_ranks = np.full(n, None, dtype=object)
    seq = np.full(n, -1, dtype=np.int64)
    def columns() -> dict[str, np.ndarray]:
        return {"coll_op": coll_op, "coll_bytes_in": b_in, "coll_bytes_out": b_out,
                "group_size": gsize, "pg": pg, "pg_ranks": pg_ranks, "coll_seq": seq}

    if not len(idx):
        return columns(), warnings

    # 1. per-event metadata
    texts: dict[tuple[int, ...], str] = {}
    defaults = {r: _default_pg(d, texts) for r, d in dist_by_rank.items()}
    shared: dict[str, str] = {}  # one object per distinct rank list over all files
    lists = RawLists()
    sizes: dict[tuple[Any, ...], tuple[float, float, str | None]] = {}
    # the loop reads Python lists: a numpy scalar per read would cost more than the work
    for i, a, nm, rk, dims, types in zip(idx.tolist(), args[idx].tolist(), name[idx].tolist(),
                                         rank[idx].tolist(), rows.input_dims[idx].tolist(),
                                         rows.input_type[idx].tolist()):
        op = coll_op_of(nm)
        if a is not None and a.coll_name:
            op = coll_op_of("c10d::" + a.coll_name) or a.coll_name
        coll_op[i] = op
        d_pg, d_size, d_ranks = defaults.get(rk, (None, 0, None))
        if a is not None and a.pg_name is not None:
            pg[i] = a.pg_name
            text = a.pg_ranks if isinstance(a.pg_ranks, str) else (
                str(a.pg_ranks) if a.pg_ranks is not None else None)
            pg_ranks[i] = shared.setdefault(text, text) if text is not None else None
        else:
            pg[i], pg_ranks[i] = d_pg, d_ranks
        gsize[i] = a.group_size if a is not None and a.group_size else d_size
        if a is not None and a.in_nelems is not None:
            size = dtype_size(a.dtype)
            b_in[i] = a.in_nelems * size
            b_out[i] = (a.out_nelems if a.out_nelems is not None else a.in_nelems) * size
        elif dims < 0:
            b_in[i] = b_out[i] = 0.0
        else:  # shapes repeat across steps and ranks: computed once per distinct value
            g = int(gsize[i])
            key = (op, dims, types, g)
            got = sizes.get(key)
            if got is None:
                got = sizes[key] = _dims_bytes(op, rows.raw[dims],
                                               rows.raw[types] if types >= 0 else None, g, lists)
            b_in[i], b_out[i], _ = got

    # 2. the enclosing collective root of each host collective row
    root = np.full(n, -1, dtype=np.int64)
    host_coll = idx[~is_dev[idx]]
    root[host_coll] = host_coll
    cur = parent[host_coll].copy()
    active = np.arange(len(host_coll))
    while len(active):
        c = cur[active]
        ok = c >= 0
        active, c = active[ok], c[ok]
        hit = is_coll[c]
        root[host_coll[active[hit]]] = c[hit]
        cur[active] = parent[c]
        active = active[cur[active] >= 0]
    tracks = rows.track
    gloo_row = np.array([tracks[i] in gloo_tracks and name[i].startswith("gloo:")
                         for i in host_coll.tolist()], dtype=bool)
    roots = host_coll[(root[host_coll] == host_coll) & ~gloo_row]
    gloo_rows = host_coll[gloo_row]

    # 3. sequence numbers per (rank, pg): the trace's own (`Seq` arg on the root or any event
    #    under it) when every root of the group has one, else the order of the roots in time
    own = np.full(n, -1, dtype=np.int64)
    for i in host_coll.tolist():
        a = args[i]
        if a is not None:
            v = a.seq if a.seq is not None else a.seq_lower
            if v is not None and v >= 0 and root[i] >= 0:
                own[root[i]] = max(own[root[i]], v)
    order = roots[np.lexsort((ts[roots], rank[roots]))]
    groups: dict[tuple[int, Any], list[int]] = {}
    for i in order.tolist():
        groups.setdefault((int(rank[i]), pg[i]), []).append(i)
    for members in groups.values():
        ids = np.array(members, dtype=np.int64)
        recorded = own[ids]
        seq[ids] = recorded if (recorded >= 0).all() else np.arange(len(ids))
    nonroot = host_coll[(root[host_coll] != host_coll) & (root[host_coll] >= 0)]
    seq[nonroot] = seq[root[nonroot]]
    for col in (pg, pg_ranks):
        fill_from = nonroot[np.array([col[i] is None for i in nonroot.tolist()], dtype=bool)] \
            if len(nonroot) else nonroot
        col[fill_from] = col[root[fill_from]]

    # 4. gloo annotations pair with c10d roots by order, per rank and op
    if len(gloo_rows):
        unpaired = 0
        for r in np.unique(rank[gloo_rows]).tolist():
            g = gloo_rows[rank[gloo_rows] == r]
            c = roots[(rank[roots] == r) & np.array([name[i].startswith("c10d::") for i in roots.tolist()], dtype=bool)]
            for op in set(coll_op[g].tolist()):
                gi = g[coll_op[g] == op]
                gi = gi[np.argsort(ts[gi], kind="stable")]
                ci = c[coll_op[c] == op]
                ci = ci[np.argsort(ts[ci], kind="stable")]
                k = min(len(gi), len(ci))
                seq[gi[:k]] = seq[ci[:k]]
                pg[gi[:k]] = pg[ci[:k]]
                pg_ranks[gi[:k]] = pg_ranks[ci[:k]]
                gsize[gi[:k]] = gsize[ci[:k]]
                unpaired += abs(len(gi) - len(ci))
        if unpaired:
            warnings.append(f"{unpaired} gloo annotations and c10d ops could not be paired by order")

    # 5. device collectives take the sequence of the host root that launched them
    dev_coll = idx[is_dev[idx]]
    if len(dev_coll):
        host = launch[dev_coll]
        ok = host >= 0
        src = host[ok]
        cur = src.copy()
        found = np.full(len(src), -1, dtype=np.int64)
        active = np.arange(len(src))
        while len(active):
            c = cur[active]
            hit = is_coll[c] & (root[c] >= 0)
            found[active[hit]] = root[c[hit]]
            active = active[~hit]
            cur[active] = parent[cur[active]]
            active = active[cur[active] >= 0]
        d = dev_coll[ok]
        has = found >= 0
        seq[d[has]] = seq[found[has]]
        for col in (pg, pg_ranks):
            tgt = d[has]
            empty = np.array([col[i] is None for i in tgt.tolist()], dtype=bool) if len(tgt) else np.zeros(0, bool)
            col[tgt[empty]] = col[found[has][empty]]
        nolink = int((~has).sum() + (~ok).sum())
        if nolink:
            warnings.append(f"{nolink} device collectives are not linked to a host collective op")

    _share_within(rank, pg, seq, idx, b_in, b_out, gsize)
    distinct = {id(v): v for v in pg_ranks[idx].tolist() if v is not None}.values()
    truncated = {str(v) for v in distinct if "..." in str(v)}
    if truncated:
        warnings.append(f"{len(truncated)} process-group rank lists are truncated in the trace "
                        "(contain '...'); pg_ranks keeps them as recorded")
    return columns(), warnings


def _share_within(rank: np.ndarray, pg: np.ndarray, seq: np.ndarray, idx: np.ndarray,
                  b_in: np.ndarray, b_out: np.ndarray, gsize: np.ndarray) -> None:
    """Events of one collective (same rank, pg, seq) share the sizes any of them recorded."""
    rows = idx[seq[idx] >= 0]
    if not len(rows):
        return
    group = keys.codes(rank[rows], pd.Series(pg[rows]).fillna("").to_numpy(), seq[rows])
    for col in (b_in, b_out, gsize):
        v = col[rows]
        col[rows] = np.where(v > 0, v, _group_max(group, v))


def _group_max(group: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per row, the largest ``v`` of its group (dense codes ``group``); NaNs are skipped."""
    if v.dtype.kind == "f":
        top = np.full(int(group.max()) + 1, np.nan)
        np.fmax.at(top, group, v)  # NaN where a group has nothing but NaN
    else:
        top = np.full(int(group.max()) + 1, np.iinfo(v.dtype).min, dtype=v.dtype)
        np.maximum.at(top, group, v)
    return top[group]
