"""The public entry point: replay a canonical events table on a cost model.

`replay_events` runs the stages of `replay.pipeline` in order in one process (a distributed
replay runs the same stages per shard, `replay.distributed`): graph, cost, schedule, overlap
correction, attribute. Costing sees the events with three measured durations corrected first, so a
model prices work and not waiting (`replay.pipeline.costing_input`); the wait in all three comes
back out of the graph. A model that carries measured compute over (``scaled`` mode) first takes
the source hardware's own overlap slowdown out of it where it overlapped communication in the
measured trace, so it is not counted twice (`replay.hardware.model`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from mtia_trace import schema
from replay import pipeline
from replay.costs import AsMeasured, CostModel
from replay.graph import Graph, build_graph
from replay.result import ReplayResult
from replay.whatif import WhatIf, apply_whatifs


def replay_events(events: pa.Table, model: CostModel | None = None, *,
                  progress: Callable[[str], None] | None = None,
                  max_ready_lag_us: float | None = None, graph: Graph | None = None,
                  strict: bool = False, whatifs: list[WhatIf] | None = None) -> ReplayResult:
    """Replay ``events`` (schema.EVENTS_SCHEMA) on ``model`` (default: as measured).

    ``graph``: the prebuilt `build_graph(events)` (a sweep replays one trace many times); it
    depends only on the events, never on the model. ``strict``: device ready lags are the
    modelled launch latencies only, their unexplained part dropped (`pipeline.modelled_lags`).
    ``whatifs``: op-level edits of the costs (`replay.whatif`), applied after costing and before
    scheduling.
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
    g, lag_notes = pipeline.modelled_lags(g, *pipeline.launch_latencies(model, events),
                                          strict=strict)
    say("costing")
    c = pipeline.cost(events, g, model)
    whatif_notes: list[dict[str, object]] = []
    if whatifs:
        ed = apply_whatifs(events, g, c.comps, whatifs)
        g, c, whatif_notes = ed.graph, dataclasses.replace(c, comps=ed.comps), ed.notes
    say("scheduling")
    slow = float(model.overlap_slowdown())
    s, c = pipeline.schedule_costs(events, g, c, slow)
    say("attributing")
    a = pipeline.attribute(events, g, s, c.comps)
    members = np.flatnonzero(g.coll_group >= 0)
    collectives = pipeline.collectives_table(pipeline.member_frame(events, s, c.comps, members),
                                             g.t0)
    notes = dict(g.notes)
    notes.update(lag_notes)
    notes.update({"passes": s.passes, "overlap_slowdown": slow})
    notes.update(c.notes)
    if whatif_notes:
        notes["whatif"] = whatif_notes
    return ReplayResult(events=a.events, edges=g.edges, steps=a.steps, collectives=collectives,
                        summary=a.summary, hardware=getattr(model, "name", "custom"), notes=notes)


def as_trace(replayed: pa.Table) -> pa.Table:
    """A replay's events as a measured trace (``ts``/``dur`` from the replayed start/end): the
    run that a replay predicts, to feed back in (e.g. as ``diff``'s NEW)."""
    cols = {f.name: replayed.column(f.name) for f in schema.EVENTS_SCHEMA}
    start = replayed.column("start_us").to_numpy()
    cols["ts_us"] = pa.chunked_array([start])
    cols["dur_us"] = pa.chunked_array([replayed.column("end_us").to_numpy() - start])
    return pa.table([cols[f.name] for f in schema.EVENTS_SCHEMA], schema=schema.EVENTS_SCHEMA)
