"""The public entry point: replay a canonical events table on a cost model.

Costing sees the events with three measured durations corrected first, so a model prices work and
not waiting: a matched collective instance's duration becomes its transfer part (own end − last
rank's arrival), a host synchronize call's duration becomes its return latency, and a device sync
marker (``cuda_sync`` Stream Wait Event, MTIA ``event_wait`` / ``event_record``) costs nothing. The
wait in all three comes back out of the graph.

Overlap slowdown (`CostModel.overlap_slowdown`, s > 0): after a first schedule, each device
compute event's compute part is stretched by ``s × (fraction of it overlapping communication on
its rank)`` and the graph is scheduled again (one correction step, documented approximation).
A model that carries measured compute over (``scaled`` mode) first takes the source hardware's
own slowdown out of it where it overlapped communication in the measured trace, so it is not
counted twice (`replay.hardware.model`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from mtia_trace import schema
from replay.attribution import (
    attribute_steps,
    check_attribution,
    passive_events,
    summarize,
)
from replay.costs import (
    COMPONENTS,
    MEASURED_DUR,
    AsMeasured,
    CostModel,
    EventCosts,
    device_waits,
)
from replay.critical_path import mark_critical, path_tables
from replay.graph import Graph, _is_in, build_graph
from replay.groups import runs
from replay.intervals import covered, union
from replay.result import ReplayResult
from replay.scheduler import BOUND_CHAIN, BOUND_RESOURCE, Schedule, schedule
from replay.whatif import WhatIf, apply_whatifs

COMPUTE_KINDS = ("gemm", "conv", "attention", "elementwise", "reduction", "optimizer", "embedding",
                 "other")




def costing_input(events: pa.Table, g: Graph) -> pa.Table:
    """The events with ``dur_us`` corrected (module docstring); the measured durations ride
    along as `MEASURED_DUR`, for models that need the measured schedule (e.g. where compute
    overlapped communication in the trace)."""
    measured = events.column("dur_us")
    dur = measured.to_numpy().astype(np.float64, copy=True)
    m = np.isfinite(g.transfer_us)
    dur[m] = g.transfer_us[m]
    m = np.isfinite(g.sync_lag)
    dur[m] = g.sync_lag[m]
    dur[device_waits(events)] = 0.0
    i = events.schema.get_field_index("dur_us")
    out = events.set_column(i, events.schema.field(i), pa.array(dur, type=pa.float64()))
    if MEASURED_DUR in out.schema.names:
        out = out.drop_columns([MEASURED_DUR])
    return out.append_column(MEASURED_DUR, measured.cast(pa.float64()))


def overlap_fraction(events: pa.Table, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per event: fraction of its span overlapping communication device events of its rank."""
    rank = events.column("rank").to_numpy()
    is_dev = events.column("is_device").to_numpy(zero_copy_only=False)
    comm = is_dev & _is_in(events, "kind", ["collective", "p2p"])
    frac = np.zeros(len(rank))
    dev = np.flatnonzero(is_dev)
    rows, bounds, _ = runs(rank[dev])  # device rows of each rank as one slice: O(N) over ranks
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        mine = dev[rows[lo:hi]]
        c = comm[mine]
        if not c.any():
            continue
        seg_s, seg_e = union(start[mine[c]], end[mine[c]])
        sel = mine[~c]
        span = end[sel] - start[sel]
        ov = covered(seg_s, seg_e, start[sel], end[sel])
        frac[sel] = np.where(span > 0, ov / np.where(span > 0, span, 1), 0.0)
    return frac


def overlap_stretch(events: pa.Table, inter: object | None, comps: dict[str, np.ndarray],
                    s: Schedule, slow: float) -> dict[str, np.ndarray] | None:
    """The cost components with compute (and fetch) stretched where it overlaps communication
    in schedule ``s``: by the model's per-event interference ``inter`` when it gives one
    (`EventCosts.interference`), else by ``1 + slow x overlapped fraction``; None if unchanged."""
    out = dict(comps)
    if inter is not None:
        c, f = inter.apply(comps["compute"], comps["fetch"], s.ready[0::2], s.T[0::2],  # type: ignore[attr-defined]
                           s.T[1::2])
        if np.array_equal(c, comps["compute"]) and np.array_equal(f, comps["fetch"]):
            return None
        out["compute"], out["fetch"] = c, f
        return out
    if slow <= 0:
        return None
    frac = overlap_fraction(events, s.T[0::2], s.T[1::2])
    stretch = _is_in(events, "kind", COMPUTE_KINDS) & (frac > 0)
    if not stretch.any():
        return None
    out["compute"] = comps["compute"] * (1.0 + slow * frac * stretch)
    return out


def replay_events(events: pa.Table, model: CostModel | None = None, *,
                  progress: Callable[[str], None] | None = None,
                  max_ready_lag_us: float | None = None, graph: Graph | None = None,
                  whatifs: list[WhatIf] | None = None) -> ReplayResult:
    """Replay ``events`` (schema.EVENTS_SCHEMA) on ``model`` (default: as measured).

    ``graph``: the prebuilt `build_graph(events)` (a sweep replays one trace many times); it
    depends only on the events, never on the model. ``whatifs``: op-level edits of the costs
    (`replay.whatif`), applied after costing and before scheduling.
    """
    model = model or AsMeasured()
    say = progress or (lambda _msg: None)
    if graph is None:
        kw = {} if max_ready_lag_us is None else {"max_ready_lag_us": max_ready_lag_us}
        say("building dependency graph")
        g = build_graph(events, **kw)  # type: ignore[arg-type]
    else:
        if graph.n != events.num_rows:
            raise ValueError(f"graph has {graph.n} events, the table {events.num_rows}")
        g = graph
    say("costing")
    costs: EventCosts = model.cost(costing_input(events, g))
    comps = {c: np.asarray(getattr(costs, f"{c}_us"), dtype=np.float64) for c in COMPONENTS}
    whatif_notes: list[dict[str, object]] = []
    if whatifs:
        ed = apply_whatifs(events, g, comps, whatifs)
        g, comps, whatif_notes = ed.graph, ed.comps, ed.notes
    say("scheduling")
    slow = float(model.overlap_slowdown())
    s, comps = schedule_costs(events, g, comps, costs, slow)
    say("attributing")
    pt = path_tables(g, s, comps)
    steps, walks = attribute_steps(events, g, s, pt)
    check_attribution(steps)
    crit = mark_critical(g, walks, passive_events(events))
    out_events = replayed_events(events, g, s, comps, crit)
    collectives = _collectives(events, g, s, comps)
    summary = summarize(events, g, s, comps, steps)
    notes = dict(g.notes)
    notes.update({"passes": s.passes, "overlap_slowdown": slow})
    notes.update({k: v for k, v in costs.notes.items()})
    if whatif_notes:
        notes["whatif"] = whatif_notes
    return ReplayResult(events=out_events, edges=g.edges, steps=steps, collectives=collectives,
                        summary=summary, hardware=getattr(model, "name", "custom"), notes=notes)


def schedule_costs(events: pa.Table, g: Graph, comps: dict[str, np.ndarray], costs: EventCosts,
                   slow: float) -> tuple[Schedule, dict[str, np.ndarray]]:
    """Schedule ``g`` with the cost components ``comps``; where compute overlaps communication
    stretch it (`overlap_stretch`: the model's per-event interference, else ``slow``) and
    schedule once more (module docstring). Returns the schedule and the components it used."""
    dur = sum(comps.values())
    s = schedule(g, dur, costs.resource, costs.resource_capacity)
    stretched = overlap_stretch(events, costs.interference, comps, s, slow)
    if stretched is not None:
        comps = stretched
        s = schedule(g, sum(comps.values()), costs.resource, costs.resource_capacity)
    return s, comps


def replayed_events(events: pa.Table, g: Graph, s: Schedule, comps: dict[str, np.ndarray],
                     crit: np.ndarray) -> pa.Table:
    start = s.T[0::2]
    end = s.T[1::2]
    is_dev = events.column("is_device").to_numpy(zero_copy_only=False)
    depth = events.column("depth").to_numpy()
    # a host event's start chained to a sibling's end is a 'host' binding; to its parent's start
    # (nesting) it is 'track' too
    sb = s.bound[0::2]
    vocab = ["none", "track", "resource", *schema.EDGE_TYPES]
    code = np.zeros(g.n, dtype=np.int32)
    code[sb == BOUND_CHAIN] = 1
    code[sb == BOUND_RESOURCE] = 2
    for c, nm in enumerate(schema.EDGE_TYPES):
        code[sb == c] = 3 + c
    code[(sb == BOUND_CHAIN) & ~is_dev & (depth == 0)] = 3 + schema.EDGE_TYPES.index("host")
    names = pa.DictionaryArray.from_arrays(pa.array(code), pa.array(vocab)).cast(pa.string())
    src = s.bound_src[0::2]
    bsrc = np.where(src >= 0, src // 2, -1)
    leaf = np.zeros(g.n, dtype=bool)
    leaf[g.order[g.leaf_end] // 2] = True
    leaf |= is_dev
    span = end - start
    cols = {f.name: events.column(f.name) for f in schema.EVENTS_SCHEMA}
    extra: dict[str, np.ndarray] = {"start_us": start + g.t0, "end_us": end + g.t0}
    for c in ("compute", "fetch", "collective", "retry", "host"):
        extra[f"{c}_us"] = np.where(leaf, comps[c], 0.0)
    # containers (host events with children): their span is host time around their children
    extra["host_us"] = np.where(leaf, extra["host_us"], span)
    extra["queue_us"] = s.queue
    arrays = [cols[f.name] for f in schema.EVENTS_SCHEMA]
    arrays += [pa.array(extra["start_us"]), pa.array(extra["end_us"])]
    arrays += [pa.array(extra[f"{c}_us"]) for c in ("compute", "fetch", "collective", "retry", "host")]
    arrays += [pa.array(extra["queue_us"]), names, pa.array(bsrc),
               pa.array(crit), pa.array(s.coll_wait)]
    return pa.Table.from_arrays(arrays, schema=schema.REPLAYED_EVENTS_SCHEMA)


def _collectives(events: pa.Table, g: Graph, s: Schedule, comps: dict[str, np.ndarray]) -> pa.Table:
    members = np.flatnonzero(g.coll_group >= 0)
    rows: dict[str, list[object]] = {f.name: [] for f in schema.COLLECTIVES_SCHEMA}
    if len(members):
        import pandas as pd

        rank = events.column("rank").to_numpy()
        df = pd.DataFrame({
            "gid": g.coll_group[members], "id": members, "rank": rank[members],
            "pg": events.column("pg").to_numpy(zero_copy_only=False)[members],
            "seq": events.column("coll_seq").to_numpy()[members],
            "op": events.column("coll_op").to_numpy(zero_copy_only=False)[members],
            "step": events.column("step").to_numpy()[members],
            "bytes": events.column("coll_bytes_in").to_numpy()[members],
            "ready": s.ready[2 * members], "start": s.T[2 * members], "end": s.T[2 * members + 1],
            "transfer": (comps["collective"] + comps["fetch"])[members],
            "queue": s.queue[members], "retry": comps["retry"][members],
        }).sort_values(["gid", "rank"])
        for _gid, d in df.groupby("gid", sort=True):  # collectives: few
            late = d["ready"].to_numpy().argmax()
            rows["pg"].append(str(d["pg"].iloc[0]))
            rows["coll_seq"].append(int(d["seq"].iloc[0]))
            rows["coll_op"].append(d["op"].iloc[0])
            rows["step"].append(int(d["step"].iloc[0]))
            rows["ranks"].append(int(d["rank"].nunique()))
            rows["bytes"].append(float(d["bytes"].max()))
            rows["first_arrival_us"].append(float(d["ready"].min()) + g.t0)
            rows["last_arrival_us"].append(float(d["ready"].max()) + g.t0)
            rows["skew_us"].append(float(d["ready"].max() - d["ready"].min()))
            rows["late_rank"].append(int(d["rank"].iloc[late]))
            rows["start_us"].append(float(d["start"].min()) + g.t0)
            rows["end_us"].append(float(d["end"].max()) + g.t0)
            rows["transfer_us"].append(float(d["transfer"].max()))
            rows["queue_us"].append(float(d["queue"].max()))
            rows["retry_us"].append(float(d["retry"].max()))
    return pa.Table.from_pydict(rows, schema=schema.COLLECTIVES_SCHEMA)
