"""Collective instances matched across ranks (``collective`` edges) and CPU-backend
enqueues (``launch`` edges to their transfer instances).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mtia_trace.errors import TraceFormatError
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
    """Raise `TraceFormatError` when matched collectives wait on each other: each track runs
    its instances in order, all instances of a collective start together, so a rank running
    two collectives in the other order than its peers (swapped sequence numbers) ties them
    into a cycle that no schedule satisfies. The order graph has one node per collective."""
    o = np.lexsort((ev.ts[ids], ev.tr_of[ids]))
    t, g = ev.tr_of[ids][o], gid[o]
    nxt = (t[1:] == t[:-1]) & (g[1:] != g[:-1])
    if not nxt.any():
        return
    pairs = np.unique(np.stack([g[:-1][nxt], g[1:][nxt]], axis=1), axis=0)
    ng = int(gid.max()) + 1
    indeg = np.bincount(pairs[:, 1], minlength=ng)
    succ_ptr = np.r_[0, np.cumsum(np.bincount(pairs[:, 0], minlength=ng))]
    succ = pairs[np.argsort(pairs[:, 0], kind="stable"), 1].tolist()
    ptr = succ_ptr.tolist()
    deg = indeg.tolist()
    ready = [k for k in range(ng) if deg[k] == 0]
    while ready:  # Kahn's algorithm over the collectives (few: a Python loop is fine)
        k = ready.pop()
        for m in succ[ptr[k]:ptr[k + 1]]:
            deg[m] -= 1
            if deg[m] == 0:
                ready.append(m)
    left = {k for k in range(ng) if deg[k] > 0}
    if not left:
        return
    # walk back along predecessors that are left until one repeats: that is a cycle
    pred: dict[int, int] = {}
    for a, b in pairs.tolist():
        if a in left and b in left:
            pred.setdefault(b, a)
    path: list[int] = []
    seen: dict[int, int] = {}
    k = min(left)
    while k not in seen:
        seen[k] = len(path)
        path.append(k)
        k = pred[k]
    cycle = path[seen[k]:][::-1]
    _raise_cycle(ev, ids, gid, o, nxt, cycle, df)


def _raise_cycle(ev: EventArrays, ids: np.ndarray, gid: np.ndarray, o: np.ndarray,
                 nxt: np.ndarray, cycle: list[int], df: object) -> None:
    import pandas as pd

    assert isinstance(df, pd.DataFrame)
    first = df.drop_duplicates("gid").set_index("gid")

    def name(k: int) -> str:
        return f"seq {first.loc[k, 'seq']} of process group {first.loc[k, 'pg']!r}"

    # the ranks that run each consecutive pair of the cycle in that order
    a_ids = ids[o][:-1][nxt]
    ga, gb = gid[o][:-1][nxt], gid[o][1:][nxt]
    steps = []
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        ranks = sorted({int(r) for r in ev.rank[a_ids[(ga == a) & (gb == b)]].tolist()})
        steps.append((len(ranks), a, b, ranks))
    n, a, b, ranks = min(steps)
    names = ", ".join(name(k) for k in cycle[:4]) + (" ..." if len(cycle) > 4 else "")
    span = ", ".join(map(str, ranks[:8])) + (" ..." if len(ranks) > 8 else "")
    raise TraceFormatError(
        f"collectives wait on each other across ranks ({names}): rank{'s' if n > 1 else ''} "
        f"{span} run{'s' if n == 1 else ''} {name(a)} before {name(b)}, the other ranks the "
        "other way round; the ranks' sequence numbers (Seq) disagree, fix or re-export the "
        "rank's trace")
