"""Worker side of a distributed replay: a shard is the ranks one task ingests and replays.

A shard replays its own ranks plus one *ghost* event per (collective, remote rank) it shares a
collective with: a host event alone on its own track, carrying the remote instance's measured
start (so the transfer part costs the same as in one process) and, as its base time, the remote
instance's current replayed arrival. The stock graph and scheduler then resolve each collective
as ``max`` over all ranks' arrivals, exactly as in one process, and attribution names remote
stragglers by the ghost's rank. A ghost anchor at the trace start keeps the time origin global.
The stages are those of `replay.pipeline`, the ones a single-process replay runs. Nothing here
imports Dask; every function is pure so a lost worker's tasks can be recomputed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from mtia_trace import schema
from mtia_trace.errors import TraceFormatError
from mtia_trace.ingest import consistency, file_facts, load
from mtia_trace.storage import partition_path, write_partition
from replay import pipeline
from replay.graph import Graph, build_graph
from replay.hardware.source import tag_source
from replay.scheduler import Schedule

GHOST = "~ghost"
#: Columns of the per-member table a shard reports (chosen instance of a collective per rank).
MEMBER_COLS = ("pg", "seq", "rank", "id", "ts", "step")


@dataclass
class Ingested:
    events: pa.Table          # the shard's ranks, local event ids
    files: list[dict]
    warnings: list[str]
    ranks: list[int]
    rows: dict[int, int]      # rows per rank
    start: dict[int, int]     # first local row per rank
    t0: float                 # earliest ts (inf when empty)
    members: pd.DataFrame     # MEMBER_COLS: chosen collective instances of the shard's ranks
    devices: list[str]
    cross: consistency.Facts  # what the checks across ranks need (run on every shard's)
    #: why the shard's own ranks cannot be scheduled (collectives that wait on each other), or
    #: None: the driver says it after its check over every rank, which names the right ones
    refused: str | None = None


def ingest(paths: list[str]) -> Ingested:
    """Read the shard's trace files and find its collective instances."""
    tr = load([Path(p) for p in paths], cross_rank=False)  # across shards: by the driver
    ev = tr.events
    rank = ev.column("rank").to_numpy()
    ranks, first, counts = np.unique(rank, return_index=True, return_counts=True)
    devices = [str(p.get("name")) for f in tr.files for p in (f.device_properties or [])
               if isinstance(p, dict) and p.get("name")]
    refused = None
    try:
        members = _members(ev)
    except TraceFormatError as exc:
        members, refused = pd.DataFrame({c: [] for c in MEMBER_COLS}), str(exc)
    return Ingested(events=ev, files=file_facts(tr), warnings=[str(w) for w in tr.warnings],
                    ranks=ranks.tolist(), rows=dict(zip(ranks.tolist(), counts.tolist())),
                    start=dict(zip(ranks.tolist(), first.tolist())),
                    t0=float(ev.column("ts_us").to_numpy().min()) if ev.num_rows else np.inf,
                    members=members, devices=devices,
                    cross=tr.cross, refused=refused)  # type: ignore[arg-type]


def facts(ing: Ingested) -> dict:
    """What the driver needs from a shard (small): everything but the events."""
    return {f.name: getattr(ing, f.name) for f in dataclasses.fields(ing) if f.name != "events"}


def _ghost_rows(ranks: np.ndarray, ts: np.ndarray, step: np.ndarray, pg: list, seq: np.ndarray,
                kind: str, tag: str = "") -> pa.Table:
    n = len(ranks)
    return schema.from_columns({
        "rank": ranks.astype(np.int32), "event_id": np.zeros(n, dtype=np.int64),
        "name": [GHOST] * n, "kind": [kind] * n, "ph": ["X"] * n,
        "track": [f"{GHOST}{tag}:{i}" for i in range(n)], "is_device": np.zeros(n, dtype=bool),
        "ts_us": ts.astype(np.float64), "dur_us": np.zeros(n), "step": step.astype(np.int32),
        "pg": pg, "coll_seq": seq.astype(np.int64),
    }, schema.EVENTS_SCHEMA)


def _members(ev: pa.Table) -> pd.DataFrame:
    """The instance the graph couples per (pg, seq, rank): found by the graph builder itself,
    with one ghost peer per collective so that every local collective matches."""
    if not ev.num_rows:
        return pd.DataFrame({c: [] for c in MEMBER_COLS})
    pg = ev.column("pg").to_numpy(zero_copy_only=False)
    seq = ev.column("coll_seq").to_numpy()
    ok = (seq >= 0) & ev.column("pg").is_valid().to_numpy(zero_copy_only=False)
    keys = pd.DataFrame({"pg": pg[ok], "seq": seq[ok]}).drop_duplicates()
    t0 = float(ev.column("ts_us").to_numpy().min())
    k = len(keys)
    peers = _ghost_rows(np.full(k, -1), np.full(k, t0), np.full(k, -1), keys["pg"].tolist(),
                        keys["seq"].to_numpy(), "collective")
    both = pa.concat_tables([peers, ev])  # rank -1 sorts first
    g = build_graph(both)
    ids = np.flatnonzero(g.coll_group[k:] >= 0)
    col = lambda c: ev.column(c).take(pa.array(ids)).to_numpy(zero_copy_only=False)  # noqa: E731
    return pd.DataFrame({"pg": col("pg").astype(str), "seq": col("coll_seq"), "rank": col("rank"),
                         "id": ids, "ts": col("ts_us"), "step": col("step")})


@dataclass
class Shard:
    """A shard's events with ghosts, graph and costs, ready to schedule."""

    events: pa.Table          # local + ghost rows, sorted by rank (ids = row positions)
    local: np.ndarray         # bool per row
    global_id: np.ndarray     # per row: event id in the single-process table (-1 anchor)
    ranks: list[int]
    g: Graph
    costed: pipeline.Costed   # ghosts cost nothing and hold no pool
    notes: dict
    ghost_pts: np.ndarray     # start points of the ghosts, in the driver's ghost order
    member_pts: np.ndarray    # start points of local members, in the driver's member order


def build(ing: Ingested, ghosts: pd.DataFrame, member_ids: np.ndarray, offsets: dict[int, int],
          anchor: tuple[int, float] | None, model: object, source: tuple[str | None, str]
          ) -> Shard:
    """Insert ghosts (columns rank, ts, step, pg, seq, gid) and the anchor; the ``graph`` and
    ``cost`` stages."""
    ev = ing.events
    n_loc = ev.num_rows
    gh = _ghost_rows(ghosts["rank"].to_numpy(), ghosts["ts"].to_numpy(),
                     ghosts["step"].to_numpy(), ghosts["pg"].tolist(), ghosts["seq"].to_numpy(),
                     "collective")
    parts = [ev.select(schema.EVENTS_SCHEMA.names).cast(schema.EVENTS_SCHEMA), gh]
    ghost_gid = ghosts["gid"].to_numpy().astype(np.int64)
    if anchor is not None:
        parts.append(_ghost_rows(np.array([anchor[0]]), np.array([anchor[1]]), np.array([-1]),
                                 [None], np.array([-1]), "other", tag="-t0"))
        ghost_gid = np.append(ghost_gid, -1)
    allev = pa.concat_tables(parts)
    rank = allev.column("rank").to_numpy()
    order = np.argsort(rank, kind="stable")  # ghosts join their rank's block; local order kept
    new_of = np.empty(len(order), dtype=np.int64)
    new_of[order] = np.arange(len(order))
    allev = allev.take(pa.array(order))
    local = order < n_loc
    # row-index columns follow the new positions
    cols = {}
    for c in ("parent_id", "launch_id"):
        v = allev.column(c).to_numpy().astype(np.int64)
        cols[c] = np.where(v >= 0, new_of[np.maximum(v, 0)], -1)
    cols["event_id"] = np.arange(len(order), dtype=np.int64)
    for c, v in cols.items():
        i = allev.schema.get_field_index(c)
        allev = allev.set_column(i, allev.schema.field(i), pa.array(v, type=pa.int64()))
    if source[0] or source[1]:
        allev = tag_source(allev, source[0], source[1])
    shard_meta = (ev.schema.metadata or {}).get(schema.TABLE_BYTES_KEY)
    if shard_meta:  # the ranks' embedding shards (the cast to the schema dropped it)
        allev = allev.replace_schema_metadata({**(allev.schema.metadata or {}),
                                               schema.TABLE_BYTES_KEY: shard_meta})
    loc_rank = rank[order]
    gid = np.empty(len(order), dtype=np.int64)
    old = order[local]
    start = np.array([ing.start[r] for r in loc_rank[local]])
    gid[local] = np.array([offsets[r] for r in loc_rank[local]]) + old - start
    gid[~local] = ghost_gid[order[~local] - n_loc]

    g = build_graph(allev)
    g, lag_notes = pipeline.modelled_lags(g, *pipeline.launch_latencies(model, allev))  # type: ignore[arg-type]
    costed = pipeline.cost(allev, g, model, local=local)  # type: ignore[arg-type]
    notes = dict(g.notes)
    notes.update(lag_notes)
    notes.update(costed.notes)
    n_gh = len(ghosts)
    return Shard(events=allev, local=local, global_id=gid, ranks=list(ing.ranks), g=g,
                 costed=costed, notes=notes,
                 ghost_pts=2 * new_of[n_loc:n_loc + n_gh],
                 member_pts=2 * new_of[np.asarray(member_ids, dtype=np.int64)])


def _schedule(sh: Shard, arrivals: np.ndarray) -> tuple[Graph, Schedule]:
    """The ``schedule`` stage with the remote members' arrivals as the ghosts' base times."""
    base = sh.g.base.copy()
    base[sh.ghost_pts] = arrivals
    g = dataclasses.replace(sh.g, base=base)
    return g, pipeline.run_schedule(g, sh.costed)


def arrivals(sh: Shard, ghost_arrivals: np.ndarray) -> np.ndarray:
    """Arrival (own ready time) of each local member given the remote members' arrivals."""
    _g, s = _schedule(sh, ghost_arrivals)
    return s.ready[sh.member_pts]


def stretch(sh: Shard, ghost_arrivals: np.ndarray, slow: float) -> Shard:
    """The ``overlap`` stage on the converged schedule (local events only)."""
    _g, s = _schedule(sh, ghost_arrivals)
    c = pipeline.stretch(sh.events, s, sh.costed, slow, local=sh.local)
    return sh if c is None else dataclasses.replace(sh, costed=c)


def is_stretched(sh: Shard) -> bool:
    return sh.costed.stretched


def _write_once(name: str, table: pa.Table, path: Path) -> None:
    """Write a partition unless it is in place: a partition only appears by an atomic rename,
    so one in place is complete, and the replay is deterministic, so it is this one. Dask
    recomputes a finished write whose result was held by a lost worker; that recompute may
    still be running when the run is moved into place, and must not leave a part file there."""
    if not path.exists():
        write_partition(name, table, path)


def finish(sh: Shard, ghost_arrivals: np.ndarray, tmp: str) -> dict:
    """Attribute, write the events and edges partitions of the shard's ranks into the run being
    built at ``tmp``; return the small tables (steps, summary, member rows) and notes. The
    ``attribute`` stage, for the shard's own ranks."""
    g, s = _schedule(sh, ghost_arrivals)
    ev = sh.events
    comps = sh.costed.comps
    a = pipeline.attribute(ev, g, s, comps, ranks=sh.ranks)
    steps, summary, out = a.steps, a.summary, a.events

    gid = sh.global_id
    remap = lambda v: np.where(v >= 0, gid[np.maximum(v, 0)], -1)  # noqa: E731
    for c in ("event_id", "parent_id", "launch_id", "bound_src"):
        i = out.schema.get_field_index(c)
        out = out.set_column(i, out.schema.field(i),
                             pa.array(remap(out.column(c).to_numpy()), type=pa.int64()))
    out = out.filter(pa.array(sh.local))
    rank = ev.column("rank").to_numpy()
    for table in ("events", "edges"):  # fails if the run was already moved into place
        (Path(tmp) / table).mkdir(exist_ok=True)
    for r in sh.ranks:
        part = out.filter(pa.array(out.column("rank").to_numpy() == r))
        _write_once("events", part, partition_path(Path(tmp), "events", r))

    # edges: own-rank edges, and collective edges whose non-first member is local
    e = g.edges
    src, dst = e.column("src").to_numpy(), e.column("dst").to_numpy()
    coll = (e.column("type").to_numpy(zero_copy_only=False) == "collective")
    first = np.zeros(g.n, dtype=bool)
    mem = np.flatnonzero(g.coll_group >= 0)
    if len(mem):
        grp = g.coll_group[mem]
        lo = np.full(int(grp.max()) + 1, np.iinfo(np.int64).max)
        np.minimum.at(lo, grp, rank[mem])
        first[mem[rank[mem] == lo[grp]]] = True
    other = np.where(coll & first[dst], src, dst)
    keep = np.where(coll, sh.local[other], sh.local[src])
    owner = np.where(coll, rank[other], rank[src])[keep]
    edges = e.filter(pa.array(keep))
    edges = edges.set_column(0, edges.schema.field(0), pa.array(gid[src[keep]], type=pa.int64()))
    edges = edges.set_column(1, edges.schema.field(1), pa.array(gid[dst[keep]], type=pa.int64()))
    for r in sh.ranks:
        _write_once("edges", edges.filter(pa.array(owner == r)), partition_path(Path(tmp), "edges", r))

    m = np.flatnonzero(sh.local[sh.member_pts // 2])
    members = pipeline.member_frame(ev, s, comps, sh.member_pts[m] // 2).assign(member=m)
    notes = dict(sh.notes)
    notes["passes"] = s.passes
    return {"steps": steps, "summary": summary, "members": members, "notes": notes,
            "t0": g.t0, "events": int(sh.local.sum())}
