"""Cross-rank consistency: what the ranks of one job must agree on, checked after ingest.

The replay joins ranks at their collectives (same process group and sequence number) and
compares them step by step, so ranks that disagree give results that look right and are not.
Each check returns at most one warning, with a count and the first case:

* **collectives**: a collective that did not find all its peers (the ranks of its process group
  among those given, else ``group_size`` of them); matched instances that differ in op, group
  size or message size (sizes must be equal on every rank for all-reduce, broadcast, reduce and
  barrier, the input for all-gather and the output for reduce-scatter; an all-to-all's inputs
  summed over its ranks must equal its outputs);
* **steps**: every rank records the same ``ProfilerStep`` numbers;
* **distributedInfo**: one ``world_size``, every rank below it, and the same process groups
  (name, size) on every rank that lists them.

* **order**: ranks that run two collectives in opposite orders (swapped sequence numbers) tie
  them into a cycle no schedule satisfies (`order_cycle`): a warning here, and the replay's
  collective matching (`replay.graph.collectives`) refuses such a trace in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.schema import COMM_KINDS

#: Ops whose every rank sends and receives the same bytes (in, out).
_SAME_BYTES = {"all_reduce": ("bin", "bout"), "broadcast": ("bin",), "reduce": ("bin",),
               "barrier": ("bin",), "all_gather": ("bin",), "reduce_scatter": ("bout",)}
#: Relative tolerance of a byte comparison (sizes are integers times a dtype size).
_RTOL = 1e-9


@dataclass
class Facts:
    """What the checks read from the events of some ranks: a row per step and per collective
    instance per rank. Facts of disjoint sets of ranks (the shards of a distributed replay)
    `combine` into those of all of them."""

    #: rank -> that rank's distributedInfo
    dist: dict[int, dict]
    #: rank, name, step, ts_us of every ProfilerStep annotation
    steps: pd.DataFrame
    #: one row per collective per rank: pg, coll_seq, rank, op, bin, bout, g, pg_ranks
    per: pd.DataFrame
    #: per collective per rank, the instance the replay matches (device ones first, then the
    #: earliest): pg, coll_seq, rank, track, ts
    inst: pd.DataFrame


def check(events: pa.Table, files: list[Any]) -> list[str]:
    """Warnings about ranks that disagree (none for a single rank)."""
    return check_facts(facts(events, files))


def check_facts(f: Facts) -> list[str]:
    """`check` on facts gathered (and combined) beforehand."""
    ranks = sorted(f.dist)
    if len(ranks) < 2:
        return []
    return _distributed_info(f.dist) + _steps(f.steps, ranks) + _collectives(f, ranks)


def combine(parts: list[Facts]) -> Facts:
    """The facts of all ranks from those of disjoint sets of them."""
    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    return Facts(dist={r: d for f in parts for r, d in f.dist.items()},
                 steps=cat([f.steps for f in parts]), per=cat([f.per for f in parts]),
                 inst=cat([f.inst for f in parts]))


def facts(events: pa.Table, files: list[Any]) -> Facts:
    """The `Facts` of ``events`` read from ``files`` (their rank and distributedInfo)."""
    dist = {int(f.rank): f.distributed_info if isinstance(f.distributed_info, dict) else {}
            for f in files}
    mask = pc.fill_null(pc.starts_with(events.column("name"), "ProfilerStep#"), False)
    steps = events.filter(mask).select(["rank", "name", "step", "ts_us"]).to_pandas()
    per, inst = _instances(events)
    return Facts(dist=dist, steps=steps, per=per, inst=inst)


def _instances(events: pa.Table) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per collective per rank, the instance of each the replay matches)."""
    seq = events.column("coll_seq").to_numpy()
    kind = events.column("kind")
    is_comm = pc.fill_null(pc.is_in(kind, pa.array(list(COMM_KINDS))), False).to_numpy(
        zero_copy_only=False)
    # as the replay matches them: instances with a process group and a sequence number
    has_pg = events.column("pg").is_valid().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(is_comm & (seq >= 0) & has_pg)
    t = events.take(pa.array(rows, type=pa.int64())).select(
        ["rank", "pg", "coll_seq", "coll_op", "coll_bytes_in", "coll_bytes_out", "group_size",
         "pg_ranks", "is_device", "track", "ts_us"])
    df = t.drop_columns(["track", "ts_us"]).to_pandas()
    df["group_size"] = df["group_size"].where(df["group_size"] > 0)
    # one row per collective per rank: the op of its device instance (the one the replay
    # matches) else of its host events, its largest sizes, the smallest group size recorded
    df = df.sort_values("is_device", ascending=False, kind="stable")
    per = df.groupby(["pg", "coll_seq", "rank"], sort=True).agg(
        op=("coll_op", "first"), bin=("coll_bytes_in", "max"), bout=("coll_bytes_out", "max"),
        g=("group_size", "min"), pg_ranks=("pg_ranks", "first")).reset_index()
    per["op"] = per["op"].fillna("")
    per["g"] = per["g"].fillna(0).astype(np.int64)
    inst = t.select(["rank", "pg", "coll_seq", "is_device"]).to_pandas()
    inst["track"] = pd.Series(t.column("track").to_pylist(), dtype=object)
    inst["ts"] = t.column("ts_us").to_numpy()
    inst = inst.sort_values(["pg", "coll_seq", "rank", "is_device", "ts"],
                            ascending=[True, True, True, False, True])
    inst = inst.drop_duplicates(["pg", "coll_seq", "rank"]).drop(columns="is_device")
    return per, inst.reset_index(drop=True)


def _span(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2, 5``."""
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(out)


def _odd_one(values: dict[int, Any]) -> str:
    """Which ranks hold which value: the most common one first (``8 on ranks 0-2, 4-7; 4 on
    rank 3``)."""
    by: dict[Any, list[int]] = {}
    for r, v in sorted(values.items()):
        by.setdefault(v, []).append(r)
    parts = sorted(by.items(), key=lambda kv: -len(kv[1]))
    return "; ".join(f"{v} on rank{'s' if len(rs) > 1 else ''} {_span(rs)}" for v, rs in parts)


def _distributed_info(dist: dict[int, dict]) -> list[str]:
    out = []
    ws = {r: d["world_size"] for r, d in dist.items()
          if isinstance(d.get("world_size"), int) and not isinstance(d.get("world_size"), bool)}
    if len(set(ws.values())) > 1:
        out.append(f"distributedInfo.world_size differs across ranks ({_odd_one(ws)}): the "
                   "traces come from different jobs or a rank's trace was edited")
    elif ws:
        size = next(iter(ws.values()))
        beyond = sorted(r for r in dist if r >= size)
        if beyond:
            out.append(f"rank {_span(beyond)} is outside world_size {size} (ranks 0-{size - 1}): "
                       "the traces come from different jobs or a rank's trace was edited")
    pgs: dict[int, str] = {}
    for r, d in dist.items():
        cfg = d.get("pg_config")
        if isinstance(cfg, list) and cfg:
            pgs[r] = ", ".join(sorted(f"{c.get('pg_name')!s:.20} (size {c.get('pg_size')})"
                                      for c in cfg if isinstance(c, dict)))
    if len(set(pgs.values())) > 1:
        out.append(f"the process groups in distributedInfo differ across ranks "
                   f"({_odd_one(pgs)[:300]}): collectives of the differing groups cannot match")
    return out


def _steps(steps: pd.DataFrame, ranks: list[int]) -> list[str]:
    if not len(steps):
        return []
    rank, step = steps["rank"].to_numpy(), steps["step"].to_numpy()
    sets = {r: frozenset(step[rank == r].tolist()) for r in ranks}
    if len(set(sets.values())) <= 1:
        return []

    def show(s: frozenset) -> str:
        v = sorted(s)
        if not v:
            return "no steps"
        rng = f"#{v[0]}" if len(v) == 1 else f"#{v[0]}-#{v[-1]}"
        return f"{len(v)} step{'s' if len(v) > 1 else ''} ({rng})"

    return [f"ranks record different steps ({_odd_one({r: show(s) for r, s in sets.items()})}): "
            "steps are compared by number across ranks, so per-step results mix different "
            "iterations"]


def _collectives(f: Facts, ranks: list[int]) -> list[str]:
    per = f.per
    if not len(per):
        return []
    given = set(ranks)
    out = []
    coll = per.groupby(["pg", "coll_seq"], sort=True)
    n_coll = coll.ngroups

    def name(pg: str, s: int, op: str) -> str:
        return f"{op or 'collective'} seq {s} of process group {pg!r}"

    # peers: the ranks of its group that were given; what a collective must find depends on
    # its group's rank list and size only, worked once per distinct pair
    first = coll.first()
    found = coll.size().to_numpy()
    known: dict[tuple[Any, int], tuple[int | None, set[int]]] = {}
    keys = [(p if isinstance(p, str) else None, int(g))
            for p, g in zip(first["pg_ranks"].tolist(), first["g"].tolist())]
    for k in set(keys):
        known[k] = _expected(k[0], k[1], given)
    expect = np.array([-1 if known[k][0] is None else known[k][0] for k in keys],
                      dtype=np.int64)
    short = np.flatnonzero((expect >= 0) & (found < expect))
    if len(short):
        i = int(short[0])
        pg, s = first.index[i]
        rs = sorted(int(r) for r in per.loc[(per["pg"] == pg) & (per["coll_seq"] == s),
                                            "rank"])
        peers = known[keys[i]][1]
        gone = sorted(peers - set(rs)) if peers else []
        said = (f"{name(pg, s, first['op'].iloc[i])} on rank{'s' if len(rs) > 1 else ''} "
                f"{_span(rs)} of {expect[i]}"
                + (f", none on rank{'s' if len(gone) > 1 else ''} {_span(gone)}" if gone else ""))
        out.append(f"{len(short)} of {n_coll} collectives did not find all their peers (first: "
                   f"{said}): a rank is missing a collective or numbers them differently "
                   "(Seq); unmatched instances replay without waiting for their peers")
    multi = per[coll["rank"].transform("size") > 1]
    if not len(multi):
        return out
    g2 = multi.groupby(["pg", "coll_seq"], sort=True)
    for col, what in (("op", "op"), ("g", "group size")):
        nun = g2[col].nunique()
        bad = nun[nun > 1]
        if len(bad):
            pg, s = bad.index[0]
            vals = dict(zip(multi.loc[(multi["pg"] == pg) & (multi["coll_seq"] == s), "rank"],
                            multi.loc[(multi["pg"] == pg) & (multi["coll_seq"] == s), col]))
            out.append(f"{len(bad)} matched collectives differ in {what} across ranks (first: "
                       f"seq {s} of process group {pg!r}: {_odd_one(vals)[:200]}): "
                       "the ranks' Seq numbers or traces disagree")
    out += _bytes(multi, g2)
    out += _order(f.inst, multi)
    return out


def _order(inst: pd.DataFrame, multi: pd.DataFrame) -> list[str]:
    said = _cycle(inst, multi)
    return [] if said is None else [f"{said}; a replay of this trace is refused"]


def cycle(f: Facts) -> str | None:
    """The words naming collectives that wait on each other across ranks (the refusal of
    `replay.graph.collectives`, from the facts alone), or None."""
    if not len(f.per):
        return None
    n = f.per.groupby(["pg", "coll_seq"], sort=True)["rank"].transform("size")
    return _cycle(f.inst, f.per[n > 1])


def _cycle(inst: pd.DataFrame, multi: pd.DataFrame) -> str | None:
    """The cycle check on each collective's instance per rank the replay would match (device
    ones first, then the earliest), among the collectives found on several ranks."""
    keep = inst.merge(multi[["pg", "coll_seq"]].drop_duplicates(), on=["pg", "coll_seq"])
    keep = keep.sort_values(["pg", "coll_seq", "rank"])
    if not len(keep):
        return None
    keep = keep.assign(track=pd.factorize(keep["track"])[0])
    gid = keep.groupby(["pg", "coll_seq"], sort=False).ngroup().to_numpy()
    found = order_cycle(keep["rank"].to_numpy(), keep["track"].to_numpy(),
                        keep["ts"].to_numpy(), gid)
    if found is None:
        return None
    first = keep.assign(gid=gid).drop_duplicates("gid").set_index("gid")
    return cycle_message(found, lambda k: f"seq {first.loc[k, 'coll_seq']} of process group "
                                          f"{first.loc[k, 'pg']!r}")


def order_cycle(rank: np.ndarray, track: np.ndarray, ts: np.ndarray, gid: np.ndarray
                ) -> tuple[list[int], int, int, list[int]] | None:
    """A cycle among collectives, from one instance per (collective ``gid``, rank): each track
    runs its instances in time order and every instance of a collective starts with the
    others, so a track running ``a`` before ``b`` while another runs ``b`` before ``a`` (two
    sequence numbers swapped on a rank) ties them into a cycle no schedule satisfies.
    Returns (the collectives of one cycle in order, a, b, the ranks running a before b: the
    edge of the cycle with the fewest ranks), or None. The graph has a node per collective:
    few, so Kahn's algorithm runs as a Python loop."""
    o = np.lexsort((ts, track, rank))
    t, r, g = track[o], rank[o], gid[o]
    nxt = (t[1:] == t[:-1]) & (r[1:] == r[:-1]) & (g[1:] != g[:-1])
    if not nxt.any():
        return None
    ga, gb, ra = g[:-1][nxt], g[1:][nxt], r[:-1][nxt]
    pairs = np.unique(np.stack([ga, gb], axis=1), axis=0)
    ng = int(gid.max()) + 1
    deg = np.bincount(pairs[:, 1], minlength=ng).tolist()
    ptr = np.r_[0, np.cumsum(np.bincount(pairs[:, 0], minlength=ng))].tolist()
    succ = pairs[np.argsort(pairs[:, 0], kind="stable"), 1].tolist()
    ready = [k for k in range(ng) if deg[k] == 0]
    while ready:
        k = ready.pop()
        for m in succ[ptr[k]:ptr[k + 1]]:
            deg[m] -= 1
            if deg[m] == 0:
                ready.append(m)
    left = {k for k in range(ng) if deg[k] > 0}
    if not left:
        return None
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
    edges = []
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        ranks = sorted({int(x) for x in ra[(ga == a) & (gb == b)].tolist()})
        edges.append((len(ranks), a, b, ranks))
    _, a, b, ranks = min(edges)
    return cycle, a, b, ranks


def cycle_message(found: tuple[list[int], int, int, list[int]],
                  name: Callable[[int], str]) -> str:
    """One line naming a cycle `order_cycle` found (``name``: a collective's words)."""
    cycle, a, b, ranks = found
    names = ", ".join(name(k) for k in cycle[:4]) + (" ..." if len(cycle) > 4 else "")
    n = len(ranks)
    return (f"collectives wait on each other across ranks ({names}): rank{'s' if n > 1 else ''} "
            f"{_span(ranks)} run{'s' if n == 1 else ''} {name(a)} before {name(b)}, the other "
            "ranks the other way round: the ranks' sequence numbers (Seq) disagree")


def _expected(pg_ranks: Any, group: int, given: set[int]) -> tuple[int | None, set[int]]:
    """(how many peers, which) a collective must find among the given ranks: its group's ranks
    that were given (from its rank list when recorded in full), else ``group_size`` capped by
    the ranks given (all of them when the group spans them)."""
    if isinstance(pg_ranks, str) and "..." not in pg_ranks:
        try:
            listed = {int(x) for x in pg_ranks.strip("[]() ").replace(",", " ").split()}
        except ValueError:
            listed = set()
        if listed:
            return len(listed & given), listed & given
    if group > 0:
        return min(group, len(given)), (given if group >= len(given) else set())
    return None, set()


def _bytes(multi: pd.DataFrame, g2: Any) -> list[str]:
    op = g2["op"].first()
    bad: list[tuple[str, int]] = []
    for col in ("bin", "bout"):
        lo, hi = g2[col].min(), g2[col].max()
        uses = op.map(lambda o, c=col: c in _SAME_BYTES.get(o, ()))
        diff = uses & (hi - lo > _RTOL * hi.abs())
        bad += list(diff[diff].index)
    a2a = op == "all_to_all"
    if a2a.any():
        sin, sout = g2["bin"].sum(), g2["bout"].sum()
        full = g2["rank"].size() >= g2["g"].max()  # a missing peer is reported as such
        cons = a2a & full & ((sin - sout).abs() > _RTOL * np.maximum(sin, sout)) & (sin > 0) & (sout > 0)
        bad += list(cons[cons].index)
    if not bad:
        return []
    bad = sorted(set(bad))
    pg, s = bad[0]
    sel = multi[(multi["pg"] == pg) & (multi["coll_seq"] == s)]
    sizes = {int(r): f"{b:.6g} B in, {o:.6g} B out"
             for r, b, o in zip(sel["rank"], sel["bin"], sel["bout"])}
    return [f"{len(bad)} matched collectives disagree in message bytes across ranks (first: "
            f"{op.loc[(pg, s)]} seq {s} of process group {pg!r}: "
            f"{_odd_one(sizes)[:240]}): a rank's sizes were edited or the ranks' Seq numbers "
            "disagree; the replay costs each rank's own size"]
