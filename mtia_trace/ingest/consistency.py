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

Ranks that order two collectives oppositely (swapped sequence numbers) cannot be replayed at
all: `replay.graph.collectives` refuses them in one line.
"""

from __future__ import annotations

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


def check(events: pa.Table, files: list[Any]) -> list[str]:
    """Warnings about ranks that disagree (none for a single rank)."""
    ranks = sorted({int(f.rank) for f in files})
    if len(ranks) < 2:
        return []
    return (_distributed_info(files) + _steps(events, ranks)
            + _collectives(events, ranks))


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


def _distributed_info(files: list[Any]) -> list[str]:
    out = []
    dist = {int(f.rank): f.distributed_info if isinstance(f.distributed_info, dict) else {}
            for f in files}
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


def _steps(events: pa.Table, ranks: list[int]) -> list[str]:
    mask = pc.fill_null(pc.starts_with(events.column("name"), "ProfilerStep#"), False)
    t = events.filter(mask).select(["rank", "step"])
    if not t.num_rows:
        return []
    rank, step = t.column("rank").to_numpy(), t.column("step").to_numpy()
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


def _collectives(events: pa.Table, ranks: list[int]) -> list[str]:
    seq = events.column("coll_seq").to_numpy()
    kind = events.column("kind")
    is_comm = pc.fill_null(pc.is_in(kind, pa.array(list(COMM_KINDS))), False).to_numpy(
        zero_copy_only=False)
    # as the replay matches them: instances with a process group and a sequence number
    has_pg = events.column("pg").is_valid().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(is_comm & (seq >= 0) & has_pg)
    if not len(rows):
        return []
    t = events.take(pa.array(rows)).select(["rank", "pg", "coll_seq", "coll_op",
                                            "coll_bytes_in", "coll_bytes_out", "group_size",
                                            "pg_ranks", "is_device"])
    df = t.to_pandas()
    df["group_size"] = df["group_size"].where(df["group_size"] > 0)
    # one row per collective per rank: the op of its device instance (the one the replay
    # matches) else of its host events, its largest sizes, the smallest group size recorded
    df = df.sort_values("is_device", ascending=False, kind="stable")
    per = df.groupby(["pg", "coll_seq", "rank"], sort=True).agg(
        op=("coll_op", "first"), bin=("coll_bytes_in", "max"), bout=("coll_bytes_out", "max"),
        g=("group_size", "min"), pg_ranks=("pg_ranks", "first")).reset_index()
    per["op"] = per["op"].fillna("")
    per["g"] = per["g"].fillna(0).astype(np.int64)
    given = set(ranks)
    out = []
    coll = per.groupby(["pg", "coll_seq"], sort=True)
    n_coll = coll.ngroups

    def name(pg: str, s: int, op: str) -> str:
        return f"{op or 'collective'} seq {s} of process group {pg!r}"

    # peers: the ranks of its group that were given
    short: list[str] = []
    n_short = 0
    members = coll["rank"].agg(list)
    first = coll.first()
    for (pg, s), rs in members.items():
        row = first.loc[(pg, s)]
        expect, peers = _expected(row["pg_ranks"], int(row["g"]), given)
        if expect is not None and len(rs) < expect:
            n_short += 1
            if not short:
                gone = sorted(peers - set(rs)) if peers else []
                short.append(f"{name(pg, s, row['op'])} on rank{'s' if len(rs) > 1 else ''} "
                             f"{_span(sorted(rs))} of {expect}"
                             + (f", none on rank{'s' if len(gone) > 1 else ''} {_span(gone)}"
                                if gone else ""))
    if n_short:
        out.append(f"{n_short} of {n_coll} collectives did not find all their peers (first: "
                   f"{short[0]}): a rank is missing a collective or numbers them differently "
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
    return out


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
