"""The replay as one pipeline of stages, run by a single-process replay (`replay.run`) and by
every shard of a distributed one (`replay.distributed.shard`), so the two cannot drift.

`STAGES`, in order:

- ``graph``: `replay.graph.build_graph` (depends on the events only; a sweep reuses it);
- ``lags``: measured ready lags become modelled ones (`modelled_lags`, DESIGN §10): a device
  event's lag is its launch latency when its measured ready time is its launch, else 0, on the
  target (its spec's ``host.kernel_launch_us``), plus the part of the measured lag that the
  source's launch latency does not explain (*unexplained*, kept by default, counted per step;
  ``strict`` drops it, except for work with no launching call in the trace, whose measured lag
  nothing models: kept and counted as unexplained);
- ``cost``: the model prices `costing_input` (measured durations corrected so a model prices
  work, not waiting: a matched collective instance's duration becomes its transfer part, a host
  synchronize call's, a launch blocked by a full queue's and an op waiting on another thread's
  their return latency, a device sync marker costs nothing);
- ``schedule``: `replay.scheduler.schedule` (a shard schedules with its ghosts' arrivals as
  their base times, and repeats until the arrivals are the fixed point);
- ``overlap``: the overlap-slowdown correction (`CostModel.overlap_slowdown`, s > 0): each
  device compute event's compute part is stretched by ``s x (fraction of it overlapping
  communication on its rank)`` in the first schedule, and the graph is scheduled again (one
  correction step, a documented approximation);
- ``attribute``: critical paths, the steps table (checked: parts sum to the step), critical
  marks (annotations and instants are never critical), the replayed events, the summary and the
  collective members (`collectives_table` turns members of all shards into the collectives table).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from mtia_trace import schema
from mtia_trace.schema import COMPUTE_KINDS
from replay.attribution import attribute_steps, check_attribution, passive_events, summarize
from replay.costs import COMPONENTS, MEASURED_DUR, CostModel, device_waits
from replay.critical_path import critical_time, mark_critical, path_tables, segment_owners
from replay.graph import EDGE_CODE, Graph, _is_in
from replay.intervals import overlap_fraction
from replay.scheduler import BOUND_CHAIN, BOUND_RESOURCE, Schedule, SchedulePlan, schedule

STAGES = ("graph", "lags", "cost", "schedule", "overlap", "attribute")


def launch_latencies(model: CostModel, events: pa.Table) -> tuple[float | None, float | None]:
    """(source, target) launch latency in us a model states (None: unknown / as measured)."""
    f = getattr(model, "launch_latencies", None)
    return f(events) if f is not None else (None, None)


def modelled_lags(g: Graph, source_us: float | None, target_us: float | None,
                  strict: bool = False) -> tuple[Graph, dict]:
    """The ``lags`` stage: ``g`` with each stream-like event's ready lag (on its stream chain and
    on its launch and wait edges) modelled; and notes on what was assumed.

    Per event with measured lag ``r``: the modelled latency is ``m = L`` (launch latency) when its
    measured ready time is its launch, else 0. Explained by the source: ``min(r, m_src)``; the
    rest ``u = r - min(r, m_src)`` is unexplained. Lag used: ``m_tgt + u`` (``m_tgt`` only when
    ``strict``; a measured launch faster than ``m_src`` is scaled by ``m_tgt / m_src``); as measured (no target) the measured ``r`` itself, or ``m_src`` when strict. An unknown source latency is taken to be the target's (the lag then carries
    over as measured); without either (as-measured, unknown source) no latency is modelled and
    the whole lag is unexplained. An event with no launching call in the trace
    (`Graph.unlaunched`: launched before the capture window, or a sampled trace) has no modelled
    lag: ``strict`` keeps its measured lag (and its measured first start) and counts it as
    unexplained instead of re-timing it.
    """
    src = source_us if source_us is not None else target_us
    tgt = target_us if target_us is not None else src
    src_v = 0.0 if src is None else float(src)
    tgt_v = 0.0 if tgt is None else float(tgt)
    r = g.ready_lag
    via = g.via_launch if g.via_launch is not None else np.zeros(g.n, dtype=bool)
    explained = np.minimum(r, np.where(via, src_v, 0.0))
    u = r - explained
    if target_us is None and not strict:
        lag_ev = r.copy()  # as measured: explained and unexplained parts both kept
    elif strict:
        lag_ev = np.where(via, tgt_v, 0.0)
        if g.unlaunched is not None:  # no launch in the trace: nothing models its lag
            lag_ev = np.where(g.unlaunched, r, lag_ev)
    else:
        # the launch part of the measured lag on the target: its spec latency, or, where the
        # trace launched faster than the source's spec says (e.g. CUDA-graph launches), the
        # measured part scaled by target / source latency (same hardware: as measured)
        scale = tgt_v / src_v if src_v > 0 else 1.0
        lag_ev = np.where(via, np.where(r >= src_v, tgt_v, explained * scale), 0.0) + u
    lagged = r > 0
    lagged |= via
    lag_ev = np.where(lagged, lag_ev, 0.0)
    into = (g.dst_pt % 2 == 0) & lagged[g.dst_pt // 2] & (
        (g.etype == EDGE_CODE["launch"]) | (g.etype == EDGE_CODE["sync"])
        | (g.etype == EDGE_CODE["contention"]))
    lag = g.lag.copy()
    lag[into] = lag_ev[g.dst_pt[into] // 2]
    notes = {"launch_latency": {"source_us": source_us, "target_us": target_us,
                                "modelled_us": tgt_v, "strict": bool(strict)}}
    base = g.base
    unx = u
    if strict:
        unl = g.unlaunched if g.unlaunched is not None else np.zeros(g.n, dtype=bool)
        unx = np.where(unl, r, 0.0)
        if g.pinned_us is not None and g.pinned_us.any():
            # an input-less first start with a launch: back to its rank's start
            keep = np.repeat(unl, 2)
            base = np.where(keep, g.base, g.base - g.pinned_us)
    out = dataclasses.replace(g, ready_lag=lag_ev, lag=lag, base=base, unexplained_lag=unx)
    return out, notes


def costing_input(events: pa.Table, g: Graph) -> pa.Table:
    """The events with ``dur_us`` corrected (module docstring, ``cost``); the measured durations
    ride along as `MEASURED_DUR`, for models that need the measured schedule (e.g. where compute
    overlapped communication in the trace)."""
    measured = events.column("dur_us")
    dur = measured.to_numpy().astype(np.float64, copy=True)
    m = np.isfinite(g.transfer_us)
    dur[m] = g.transfer_us[m]
    m = np.isfinite(g.sync_lag)
    dur[m] = g.sync_lag[m]
    if g.wait_lag is not None:
        m = np.isfinite(g.wait_lag)
        dur[m] = g.wait_lag[m]
    dur[device_waits(events)] = 0.0
    i = events.schema.get_field_index("dur_us")
    out = events.set_column(i, events.schema.field(i), pa.array(dur, type=pa.float64()))
    if MEASURED_DUR in out.schema.names:
        out = out.drop_columns([MEASURED_DUR])
    return out.append_column(MEASURED_DUR, measured.cast(pa.float64()))


@dataclass
class Costed:
    """Output of the ``cost`` (and ``overlap``) stage: what the scheduler needs."""

    comps: dict[str, np.ndarray]
    resource: np.ndarray
    capacity: np.ndarray
    notes: dict
    stretched: bool = False
    #: the model's per-event interference (`EventCosts.interference`), None: scalar slowdown
    interference: object | None = None

    @property
    def dur(self) -> np.ndarray:
        return sum(self.comps.values())  # type: ignore[return-value]


def cost(events: pa.Table, g: Graph, model: CostModel, local: np.ndarray | None = None) -> Costed:
    """Price every event; rows outside ``local`` (a shard's ghosts) cost nothing, hold no pool."""
    costs = model.cost(costing_input(events, g))
    comps = {c: np.asarray(getattr(costs, f"{c}_us"), dtype=np.float64).copy() for c in COMPONENTS}
    resource = np.asarray(costs.resource).copy()
    if local is not None:
        for c in comps:
            comps[c][~local] = 0.0
        if len(resource):
            resource[~local] = -1
    return Costed(comps=comps, resource=resource, capacity=np.asarray(costs.resource_capacity),
                  notes=dict(costs.notes), interference=costs.interference)


def run_schedule(g: Graph, c: Costed, plan: SchedulePlan | None = None) -> Schedule:
    """The ``schedule`` stage (``plan``: `replay.scheduler.SchedulePlan`, for a graph scheduled
    more than once)."""
    return schedule(g, c.dur, c.resource, c.capacity, plan=plan)


def stretch(events: pa.Table, s: Schedule, c: Costed, slow: float,
            local: np.ndarray | None = None) -> Costed | None:
    """The ``overlap`` stage on schedule ``s``: compute (and fetch) stretched where it overlaps
    communication, by the model's per-event interference when it gives one
    (`replay.hardware.interference`), else by ``1 + slow x overlapped fraction``; rows outside
    ``local`` (a shard's ghosts) stay free. None when nothing changes (no second schedule)."""
    comps = dict(c.comps)
    inter = c.interference
    if inter is not None:
        cs, fs = inter.apply(c.comps["compute"], c.comps["fetch"], s.ready[0::2],  # type: ignore[attr-defined]
                             s.T[0::2], s.T[1::2])
        if local is not None:
            cs, fs = np.where(local, cs, 0.0), np.where(local, fs, 0.0)
        if np.array_equal(cs, c.comps["compute"]) and np.array_equal(fs, c.comps["fetch"]):
            return None
        comps["compute"], comps["fetch"] = cs, fs
        return dataclasses.replace(c, comps=comps, stretched=True)
    if slow <= 0:
        return None
    frac = overlap_fraction(events, s.T[0::2], s.T[1::2])
    m = _is_in(events, "kind", COMPUTE_KINDS) & (frac > 0)
    if local is not None:
        m &= local
    if not m.any():
        return None
    comps["compute"] = comps["compute"] * (1.0 + slow * frac * m)
    return dataclasses.replace(c, comps=comps, stretched=True)


def schedule_costs(events: pa.Table, g: Graph, c: Costed, slow: float,
                   local: np.ndarray | None = None,
                   plan: SchedulePlan | None = None) -> tuple[Schedule, Costed]:
    """The ``schedule`` and ``overlap`` stages together: schedule, stretch compute overlapping
    communication by ``slow``, and schedule once more when anything was stretched (replaying
    the first schedule's rounds, or those of ``plan`` when given). Returns the schedule and the
    costs it used."""
    plan = plan if plan is not None else SchedulePlan()
    s = run_schedule(g, c, plan)
    stretched = stretch(events, s, c, slow, local)
    if stretched is not None:
        c = stretched
        del s  # not kept alive beside the next one (its arrays are a few per point)
        s = run_schedule(g, c, plan)
    return s, c


@dataclass
class Attributed:
    """Output of the ``attribute`` stage."""

    steps: pa.Table
    summary: pa.Table
    events: pa.Table
    critical: np.ndarray


def attribute(events: pa.Table, g: Graph, s: Schedule, comps: dict[str, np.ndarray],
              ranks: list[int] | None = None) -> Attributed:
    """Attribute every step; ``ranks``: keep (and check) only these ranks' steps and summary."""
    pt = path_tables(g, s, comps)
    steps, walks = attribute_steps(events, g, s, pt)
    passive = passive_events(events)
    owner = segment_owners(g, pt, events.column("parent_id").to_numpy(), passive)
    crit_us = critical_time(g, pt, walks, owner)
    del pt, owner  # the largest tables of the stage (categories x points): free before the next
    # an op is critical when the path crosses its own work: a leaf's run or a parent's self time
    crit = mark_critical(g, walks, passive) | ((crit_us > 0) & ~passive)
    crit_us[passive] = 0.0
    out = replayed_events(events, g, s, comps, crit, crit_us)
    summary = summarize(events, g, s, comps, steps)
    if ranks is not None:
        mine = np.asarray(ranks, dtype=np.int32)
        steps = steps.filter(pa.array(np.isin(steps.column("rank").to_numpy(), mine)))
        summary = summary.filter(pa.array(np.isin(summary.column("rank").to_numpy(), mine)))
    check_attribution(steps)
    return Attributed(steps=steps, summary=summary, events=out, critical=crit)


def replayed_events(events: pa.Table, g: Graph, s: Schedule, comps: dict[str, np.ndarray],
                    crit: np.ndarray, crit_us: np.ndarray) -> pa.Table:
    """schema.REPLAYED_EVENTS_SCHEMA: the events with their replayed times, cost split, binding."""
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
    for k in range(len(schema.EDGE_TYPES)):
        code[sb == k] = 3 + k
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
    for c in COMPONENTS:
        extra[f"{c}_us"] = np.where(leaf, comps[c], 0.0)
    # containers (host events with children): their span is host time around their children
    extra["host_us"] = np.where(leaf, extra["host_us"], span)
    extra["queue_us"] = s.queue
    arrays = [cols[f.name] for f in schema.EVENTS_SCHEMA]
    arrays += [pa.array(extra["start_us"]), pa.array(extra["end_us"])]
    arrays += [pa.array(extra[f"{c}_us"]) for c in COMPONENTS]
    arrays += [pa.array(extra["queue_us"]), names, pa.array(bsrc),
               pa.array(crit), pa.array(crit_us), pa.array(s.coll_wait)]
    return pa.Table.from_arrays(arrays, schema=schema.REPLAYED_EVENTS_SCHEMA)


#: Columns of a collective-members frame (`member_frame`), the input of `collectives_table`.
MEMBER_FRAME_COLS = ("pg", "seq", "rank", "op", "step", "bytes", "ready", "start", "end",
                     "transfer", "queue", "retry")


def member_frame(events: pa.Table, s: Schedule, comps: dict[str, np.ndarray],
                 ids: np.ndarray) -> pd.DataFrame:
    """One row per collective member ``ids`` (event ids): its replayed arrival, times and costs."""
    take = pa.array(np.asarray(ids, dtype=np.int64))
    col = lambda c: events.column(c).take(take).to_numpy(zero_copy_only=False)  # noqa: E731
    return pd.DataFrame({
        "pg": col("pg").astype(str), "seq": col("coll_seq"), "rank": col("rank"),
        "op": col("coll_op"), "step": col("step"), "bytes": col("coll_bytes_in"),
        "ready": s.ready[2 * ids], "start": s.T[2 * ids], "end": s.T[2 * ids + 1],
        "transfer": (comps["collective"] + comps["fetch"])[ids],
        "queue": s.queue[ids], "retry": comps["retry"][ids],
    })


def collectives_table(members: pd.DataFrame, t0: float) -> pa.Table:
    """schema.COLLECTIVES_SCHEMA from the members of every collective (`member_frame` rows of one
    process or of all shards): one row per (pg, seq), ordered by them."""
    rows: dict[str, list[object]] = {f.name: [] for f in schema.COLLECTIVES_SCHEMA}
    if len(members):  # one vectorized aggregation: a trace may hold 10^5 collectives
        d = members.sort_values(["pg", "seq", "rank"], kind="stable").reset_index(drop=True)
        g = d.groupby(["pg", "seq"], sort=True)
        a = g.agg(op=("op", "first"), step=("step", "first"), ranks=("rank", "nunique"),
                  nbytes=("bytes", "max"), first=("ready", "min"), last=("ready", "max"),
                  start=("start", "min"), end=("end", "max"), transfer=("transfer", "max"),
                  queue=("queue", "max"), retry=("retry", "max"))
        late = d["rank"].to_numpy()[g["ready"].idxmax().to_numpy()]  # first latest, rank order
        rows = {
            "pg": [str(v) for v in a.index.get_level_values(0)],
            "coll_seq": a.index.get_level_values(1).astype(np.int64).tolist(),
            "coll_op": a["op"].tolist(), "step": a["step"].astype(np.int64).tolist(),
            "ranks": a["ranks"].astype(np.int64).tolist(),
            "bytes": a["nbytes"].astype(float).tolist(),
            "first_arrival_us": (a["first"].astype(float) + t0).tolist(),
            "last_arrival_us": (a["last"].astype(float) + t0).tolist(),
            "skew_us": (a["last"] - a["first"]).astype(float).tolist(),
            "late_rank": late.astype(np.int64).tolist(),
            "start_us": (a["start"].astype(float) + t0).tolist(),
            "end_us": (a["end"].astype(float) + t0).tolist(),
            "transfer_us": a["transfer"].astype(float).tolist(),
            "queue_us": a["queue"].astype(float).tolist(),
            "retry_us": a["retry"].astype(float).tolist()}
    return pa.Table.from_pydict(rows, schema=schema.COLLECTIVES_SCHEMA)
