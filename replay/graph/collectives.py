"""Collective instances matched across ranks (``collective`` edges) and CPU-backend
enqueues (``launch`` edges to their transfer instances).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mtia_trace.errors import TraceFormatError
from mtia_trace.ingest.consistency import cycle_message, order_cycle
from replay.graph.events import EventArrays


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
            _refuse_cycles(ev, ids, gid, df)
            first_id = df.groupby("gid")["id"].transform("first").to_numpy()
            other = ids != first_id
            coll_src = np.concatenate([ids[other], first_id[other]])
            coll_dst = np.concatenate([first_id[other], ids[other]])
    notes: dict[str, object] = {"collective_enqueues": len(enq_src),
                                "collectives_matched": len(np.unique(group[group >= 0]))}
    return Collectives(group, transfer, coll_src, coll_dst, enq_src, enq_dst, worker_tr), notes


def _refuse_cycles(ev: EventArrays, ids: np.ndarray, gid: np.ndarray, df: object) -> None:
    """Raise `TraceFormatError` when matched collectives wait on each other (swapped sequence
    numbers on a rank: `mtia_trace.ingest.consistency.order_cycle`)."""
    import pandas as pd

    found = order_cycle(ev.rank[ids], ev.tr_of[ids], ev.ts[ids], gid)
    if found is None:
        return
    assert isinstance(df, pd.DataFrame)
    first = df.drop_duplicates("gid").set_index("gid")
    raise TraceFormatError(cycle_message(
        found, lambda k: f"seq {first.loc[k, 'seq']} of process group {first.loc[k, 'pg']!r}")
        + "; fix or re-export the rank's trace")


def worker_pools(ev: EventArrays, coll: Collectives, track_names: list[str]
                 ) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """(pool per event, -1 none; capacity per pool; notes): a CPU backend's worker threads as
    one pool per process and process group.

    gloo runs each process group's collectives on a fixed set of worker threads (2 by default,
    ``ProcessGroupGloo::Options::threads``) that take enqueued work from one FIFO queue
    (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp, ``runLoop``): a transfer waits for
    *any* free worker, not for the one the trace shows it on. The worker threads of one process
    (``host:<pid>:<tid>`` tracks holding only transfers) serving the same process groups form a
    pool whose capacity is how many of them the trace shows; each transfer holds one unit
    while it runs. Limit: a worker picks work up when it is enqueued and holds it while waiting
    for the peers; the pool holds a unit only from the collective's start (all ranks
    arrived)."""
    pool = np.full(ev.n, -1, dtype=np.int64)
    keys: dict[tuple[int, str, tuple[str, ...]], list[int]] = {}
    for t in np.flatnonzero(coll.worker_tr).tolist():
        parts = track_names[t].split(":")
        if len(parts) != 3 or parts[0] != "host":
            continue
        ids = np.arange(ev.runs[t], ev.runs[t + 1])
        pgs = tuple(sorted({str(p) for p in ev.pg[ids][ev.pg_valid[ids]].tolist()}))
        keys.setdefault((int(ev.rank[ids[0]]), parts[1], pgs), []).append(t)
    cap = np.zeros(len(keys), dtype=np.int64)
    for p, threads in enumerate(keys.values()):
        cap[p] = len(threads)
        for t in threads:
            pool[ev.runs[t]:ev.runs[t + 1]] = p
    notes: dict[str, object] = {"worker_pools": len(keys),
                                "worker_threads": int(cap.sum())}
    return pool, cap, notes
