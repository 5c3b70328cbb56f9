"""The canonical tables, declared once: ingest produces them, replay extends them, storage writes them.

Every column has a pyarrow type, a unit and a one-line description. Times are microseconds
(float64) on the trace's own clock; sizes are bytes. ``SCHEMA_VERSION`` is written into the
metadata of every Parquet file; a reader refuses a newer major version and any older version
(a minor version adds columns the readers use).

Invariants of the events table (checked by `validate_events`):
- ``event_id`` equals the row position (0..N-1), so arrays index events directly;
- rows are sorted by ``(rank, track, ts_us, -dur_us)``;
- ``dur_us >= 0``; ``kind`` is in `KINDS`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

SCHEMA_VERSION = "1.2"
#: Events-table schema metadata: JSON ``{rank: bytes}`` of the embedding tables each rank's
#: lookups read from (its shard), from the recorded shapes of its embedding ops.
TABLE_BYTES_KEY = b"mtia_trace.embedding_table_bytes"

#: The closed vocabulary of ``events.kind``.
KINDS: tuple[str, ...] = (
    "gemm",         # matrix multiplies (mm, addmm, bmm, linear, GEMM kernels)
    "conv",         # convolutions
    "attention",    # fused attention kernels / SDPA
    "embedding",    # embedding lookups: embedding, embedding_bag, fbgemm TBE
    "elementwise",  # pointwise math, activations, copies inside a kernel
    "reduction",    # sum, mean, norm, softmax-like reductions
    "memcpy",       # host<->device / device<->device copies, MTIA dma_request
    "memset",       # device memsets
    "collective",   # all-reduce, all-to-all, all-gather, reduce-scatter, broadcast (+ c10d/gloo ops)
    "p2p",          # send / recv
    "optimizer",    # optimizer steps and fused optimizer kernels
    "host_op",      # other CPU-side framework ops (aten ops without a better kind)
    "runtime",      # runtime/driver calls: launches, syncs, event record/wait, MTIA runtime
    "sync",         # device-side sync markers (cuda_sync, MTIA event_record/event_wait)
    "annotation",   # user annotations, ProfilerStep#N, profiler spans
    "instant",      # instant events (ph "i"), e.g. [memory] allocator events
    "other",        # anything unrecognised; kept, never dropped
)

# Kind groups: every "kind in set" test in the code names one of these (or a union of them).
# They partition `KINDS` (tests/test_schema.py): DEVICE_KINDS, HOST_KINDS, CONTROL_KINDS and
# PASSIVE_KINDS; DEVICE_KINDS splits into COMPUTE_KINDS, MEMORY_KINDS and COMM_KINDS.

#: Computation: priced by the compute/fetch roofline, stretched by the overlap slowdown, and
#: HTA's "compute" share (every kernel that is neither communication nor a memory copy / set).
COMPUTE_KINDS: tuple[str, ...] = ("gemm", "conv", "attention", "embedding", "elementwise",
                                  "reduction", "optimizer", "other")
#: Computation whose arithmetic runs at the matrix-engine (GEMM) efficiency.
GEMM_KINDS: tuple[str, ...] = ("gemm", "conv", "attention")
#: Computation whose FLOPs and bytes ingest (and synth) derive from the recorded input shapes.
SHAPE_KINDS: tuple[str, ...] = ("gemm", "conv", "embedding", "elementwise", "reduction")
#: Memory copies and sets (HTA's "memory" share of device time).
MEMORY_KINDS: tuple[str, ...] = ("memcpy", "memset")
#: Communication: collectives and point-to-point transfers.
COMM_KINDS: tuple[str, ...] = ("collective", "p2p")
#: Work whose duration is data movement, costed as ``fetch``: copies, sets, embedding lookups.
FETCH_KINDS: tuple[str, ...] = (*MEMORY_KINDS, "embedding")
#: Device-work kinds: what a device stream (or, in CPU-only traces, a leaf host op) executes.
DEVICE_KINDS: tuple[str, ...] = (*COMPUTE_KINDS, *MEMORY_KINDS, *COMM_KINDS)
#: CPU-side framework ops without a better kind.
HOST_KINDS: tuple[str, ...] = ("host_op",)
#: Runtime calls and sync markers: they launch and wait for work, they are not work.
CONTROL_KINDS: tuple[str, ...] = ("runtime", "sync")
#: Annotations and instants: they mark time, they are not work.
PASSIVE_KINDS: tuple[str, ...] = ("annotation", "instant")


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str
    doc: str
    null: object = None  # fill value meaning "absent" for non-nullable numeric columns


def _schema(columns: tuple[Column, ...], table: str) -> pa.Schema:
    fields = [
        pa.field(c.name, c.type, metadata={"unit": c.unit, "doc": c.doc}) for c in columns
    ]
    return pa.schema(fields, metadata={"mtia_trace.schema_version": SCHEMA_VERSION,
                                       "mtia_trace.table": table})


I64, I32, F64, STR, BOOL = pa.int64(), pa.int32(), pa.float64(), pa.string(), pa.bool_()
#: strings with few distinct values that can be long (a process group's rank list is as long as
#: the group): stored once each, referenced per row by an int32 code
DICT_STR = pa.dictionary(pa.int32(), pa.string())

#: One row per complete ("X") or instant ("i") trace event, all ranks together.
EVENT_COLUMNS: tuple[Column, ...] = (
    Column("rank", I32, "", "global rank of the process that recorded the event"),
    Column("event_id", I64, "", "row position; unique over all ranks"),
    Column("name", STR, "", "event name as recorded (op, kernel, runtime call, annotation)"),
    Column("cat", STR, "", "Kineto category (cpu_op, kernel, cuda_runtime, mtia_ccp_events, ...)"),
    Column("kind", STR, "", "normalised kind, one of schema.KINDS"),
    Column("ph", STR, "", "Chrome-trace phase: X (complete) or i (instant)"),
    Column("track", STR, "", "timeline the event runs on: 'host:<pid>:<tid>' or 'dev:<device>:<stream>'"),
    Column("is_device", BOOL, "", "true for events on a device stream (kernels, copies, DMA)"),
    Column("device", I32, "", "device index for device events, -1 for host events", -1),
    Column("stream", I64, "", "device stream / queue id, -1 for host events", -1),
    Column("ts_us", F64, "us", "start time on the trace clock"),
    Column("dur_us", F64, "us", "measured duration (0 for instants)"),
    Column("step", I32, "", "ProfilerStep number the event belongs to; -1 outside any step", -1),
    Column("correlation", I64, "", "runtime<->device correlation id, -1 if none", -1),
    Column("external_id", I64, "", "External id linking kernels and runtime calls to their cpu_op, -1 if none", -1),
    Column("parent_id", I64, "", "event_id of the innermost enclosing event on the same host track, -1 at top level", -1),
    Column("depth", I32, "", "nesting depth on the host track (0 = top level); 0 for device events", 0),
    Column("launch_id", I64, "", "event_id of the runtime call that launched this device event, -1 if unknown", -1),
    Column("sync_stream", I64, "", "stream a wait/synchronize call waits on (-1 none; -2 whole device)", -1),
    Column("sync_corr", I64, "", "correlation id of the event record a wait refers to, -1 if none", -1),
    Column("flops", F64, "flop", "floating-point operations, from shapes or args; 0 when unknown", 0.0),
    Column("bytes_read", F64, "B", "bytes read from memory (inputs, gathered rows, copy source)", 0.0),
    Column("bytes_written", F64, "B", "bytes written to memory (outputs, copy destination)", 0.0),
    Column("dtype", STR, "", "main element type (float, c10::BFloat16, ...), null when unknown"),
    Column("coll_op", STR, "", "collective operation (all_reduce, all_to_all, ...), null if not a collective"),
    Column("coll_bytes_in", F64, "B", "bytes this rank contributes to the collective", 0.0),
    Column("coll_bytes_out", F64, "B", "bytes this rank receives from the collective", 0.0),
    Column("group_size", I32, "", "ranks in the collective's process group, 0 if unknown", 0),
    Column("pg", STR, "", "process group name, null if unknown"),
    Column("pg_ranks", DICT_STR, "", "process group ranks as recorded (e.g. '[0, 1, 2, 3]'), null if unknown; dictionary-encoded (each distinct list stored once)"),
    Column("coll_seq", I64, "", "collective sequence number within its process group, -1 if unknown", -1),
    Column("src_file", STR, "", "trace file the event came from (path as given)"),
)

EVENTS_SCHEMA = _schema(EVENT_COLUMNS, "events")

#: Columns replay adds to the events table. The cost components sum to ``end_us - start_us``.
REPLAY_COLUMNS: tuple[Column, ...] = (
    Column("start_us", F64, "us", "replayed start"),
    Column("end_us", F64, "us", "replayed end"),
    Column("compute_us", F64, "us", "cost component: arithmetic at the target's peak x efficiency"),
    Column("fetch_us", F64, "us", "cost component: memory-bound excess (HBM, gathers, DMA, copies)"),
    Column("collective_us", F64, "us", "cost component: collective / p2p transfer time"),
    Column("retry_us", F64, "us", "cost component: retransmission after packet loss"),
    Column("host_us", F64, "us", "cost component: host-side time (CPU ops, launches, doorbells)"),
    Column("queue_us", F64, "us", "time between ready and start spent waiting for a busy resource"),
    Column("bound_by", STR, "", "what bound the start: track, host, launch, sync, collective, resource, none"),
    Column("bound_src", I64, "", "event_id whose end bound the start, -1 for none/resource", -1),
    Column("critical", BOOL, "", "true if its step's critical path crosses the event's own work (a leaf's run, an op's self time)"),
    Column("critical_us", F64, "us", "the event's own work on critical paths: a leaf's or device event's run, an op's self time (duration minus its children's); summed over rank-steps", 0.0),
    Column("peer_wait_us", F64, "us", "time a collective instance, ready, waited for the other ranks to arrive", 0.0),
)

REPLAYED_EVENTS_SCHEMA = _schema(EVENT_COLUMNS + REPLAY_COLUMNS, "events")

#: Dependency edges of the replay graph.
EDGE_TYPES: tuple[str, ...] = ("stream", "host", "launch", "sync", "collective", "queue", "thread",
                               "contention")
EDGE_COLUMNS: tuple[Column, ...] = (
    Column("src", I64, "", "event_id that must end first"),
    Column("dst", I64, "", "event_id that may start after src ends"),
    Column("type", STR, "", "edge type, one of schema.EDGE_TYPES"),
    Column("lag_us", F64, "us", "minimum delay between src ready and dst (launch/ready latency, host gap, sync return)", 0.0),
)
EDGES_SCHEMA = _schema(EDGE_COLUMNS, "edges")

#: The attribution categories; per (rank, step) they sum exactly to ``total_us``.
ATTRIBUTION: tuple[str, ...] = ("compute", "fetch", "collective", "peer_wait", "queue", "retry",
                                "host", "idle")
#: What each category's ``<name>_us`` column of the steps table holds (critical-path time).
ATTRIBUTION_DOCS: dict[str, str] = {
    "compute": "critical-path time in arithmetic (the compute cost of the events on the path)",
    "fetch": "critical-path time in memory-bound work (HBM, embedding gathers, DMA, copies)",
    "collective": "critical-path time transferring collective / p2p data (transfer only)",
    "peer_wait": "critical-path time a rank, ready for a collective, waited for its peers",
    "queue": "critical-path time waiting for a busy resource (message engines, links)",
    "retry": "critical-path time retransmitting after packet loss",
    "host": "critical-path time on host threads: ops, launch latency and gaps between ops",
    "idle": "critical-path time with nothing running (device ready lags, before the first op)",
}

STEP_COLUMNS: tuple[Column, ...] = (
    Column("rank", I32, "", "rank"),
    Column("step", I32, "", "step number (ProfilerStep#N); -1 for a trace without steps"),
    Column("start_us", F64, "us", "replayed step start"),
    Column("end_us", F64, "us", "replayed step end"),
    Column("total_us", F64, "us", "replayed step wall time (end - start)"),
    Column("measured_us", F64, "us", "measured step wall time from the trace"),
    *(Column(f"{a}_us", F64, "us", ATTRIBUTION_DOCS[a]) for a in ATTRIBUTION),
    Column("unexplained_us", F64, "us",
           "part of host_us and idle_us on the step's critical path that no dependency and no "
           "modelled latency explains: host gaps outside every op of their thread and the part of "
           "device ready lags beyond the launch latency (kept, as measured)", 0.0),
    Column("straggler_rank", I32, "", "rank whose late arrival cost this rank the most wait, -1 if none", -1),
)
STEPS_SCHEMA = _schema(STEP_COLUMNS, "steps")

COLLECTIVE_COLUMNS: tuple[Column, ...] = (
    Column("pg", STR, "", "process group"),
    Column("coll_seq", I64, "", "sequence number within the process group"),
    Column("coll_op", STR, "", "collective operation"),
    Column("step", I32, "", "step of the first rank's instance"),
    Column("ranks", I32, "", "ranks that took part"),
    Column("bytes", F64, "B", "max bytes in per rank"),
    Column("first_arrival_us", F64, "us", "earliest rank ready time"),
    Column("last_arrival_us", F64, "us", "latest rank ready time (the collective's start)"),
    Column("skew_us", F64, "us", "last minus first arrival"),
    Column("late_rank", I32, "", "rank that arrived last"),
    Column("start_us", F64, "us", "replayed start"),
    Column("end_us", F64, "us", "replayed end (latest rank)"),
    Column("transfer_us", F64, "us", "transfer time (collective + fetch components)"),
    Column("queue_us", F64, "us", "time waiting for engines / links"),
    Column("retry_us", F64, "us", "retransmission time"),
)
COLLECTIVES_SCHEMA = _schema(COLLECTIVE_COLUMNS, "collectives")


def column_docs(columns: tuple[Column, ...]) -> list[tuple[str, str, str, str]]:
    """(name, arrow type, unit, doc) rows, for docs and `--help`."""
    return [(c.name, str(c.type), c.unit, c.doc) for c in columns]


def empty_table(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def from_columns(columns: dict[str, object], schema: pa.Schema = EVENTS_SCHEMA,
                 consume: bool = False) -> pa.Table:
    """Build a table in ``schema`` from arrays; missing columns get their 'absent' value.

    ``consume``: take each array out of ``columns`` as it is converted, so the source arrays are
    freed one by one instead of living alongside the whole table."""
    n = None
    for v in columns.values():
        n = len(v)  # type: ignore[arg-type]
        break
    n = n or 0
    specs = {c.name: c for c in EVENT_COLUMNS + REPLAY_COLUMNS + STEP_COLUMNS + COLLECTIVE_COLUMNS
             + EDGE_COLUMNS}
    arrays = []
    for field in schema:
        if field.name in columns:
            v = columns.pop(field.name) if consume else columns[field.name]
            arrays.append(_dictionary(v, field.type) if pa.types.is_dictionary(field.type)
                          else pa.array(v, type=field.type))
            del v
            continue
        spec = specs.get(field.name)
        if spec is not None and spec.null is not None:
            arrays.append(pa.array(np.full(n, spec.null), type=field.type))
        else:
            arrays.append(pa.nulls(n, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _dictionary(values: object, type_: pa.DictionaryType) -> pa.Array:
    """A dictionary array of ``values`` (a sequence with None for null): distinct values are
    found by hashing the Python objects (a string's hash is cached on the object, so rows that
    share one string object cost one hash), never by copying every row's text."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.cast(type_) if values.type != type_ else values  # type: ignore[return-value]
    codes, uniq = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
    idx = pa.array(codes.astype(np.int32), mask=codes < 0, type=type_.index_type)
    return pa.DictionaryArray.from_arrays(idx, pa.array(uniq, type=type_.value_type))


def validate_events(table: pa.Table) -> None:
    """Raise AssertionError when the events-table invariants do not hold (a bug, not user error)."""
    missing = [f.name for f in EVENTS_SCHEMA if f.name not in table.column_names]
    assert not missing, f"events table lacks columns {missing}"
    ids = table.column("event_id").to_numpy()
    assert np.array_equal(ids, np.arange(len(ids))), "event_id must equal row position"
    dur = table.column("dur_us").to_numpy()
    assert (dur >= 0).all(), f"{int((dur < 0).sum())} events have negative duration"
    kinds = set(table.column("kind").unique().to_pylist())
    assert kinds <= set(KINDS), f"unknown kinds {sorted(kinds - set(KINDS))}"

#: Busy vs critical-path time per rank and component over the whole run.
SUMMARY_COLUMNS: tuple[Column, ...] = (
    Column("rank", I32, "", "rank"),
    Column("component", STR, "", "attribution category (schema.ATTRIBUTION)"),
    Column("busy_us", F64, "us", "total time events of this component ran, overlapped or not"),
    Column("critical_us", F64, "us", "time attributed to this component on the critical path"),
    Column("steps", I32, "", "number of steps summed"),
)
SUMMARY_SCHEMA = _schema(SUMMARY_COLUMNS, "summary")
