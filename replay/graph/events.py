"""The graph's view of the events table: measured times (float us and integer ns keys) and
`EventArrays`, the one record of event columns every stage of `build_graph` reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace import schema

#: Names of runtime calls that block the host until device work finishes (scope: whole device
#: unless the event carries ``sync_stream``).
HOST_SYNC_NAMES = ("Synchronize", "synchronizeStream", "synchronizeDevice", "synchronizeEvent")

#: Device-side markers that are a host wait, not a stream wait (Kineto ``cuda_sync`` kinds).
HOST_WAIT_MARKERS = ("Stream Sync", "Context Sync", "Event Sync")

#: Host calls that make a stream wait for an event, and that record one (CUDA / HIP runtime).
STREAM_WAIT_CALLS = ("cudaStreamWaitEvent", "hipStreamWaitEvent")
EVENT_RECORD_CALLS = ("cudaEventRecord", "cudaEventRecordWithFlags", "hipEventRecord")

#: Copy names (Kineto ``gpu_memcpy``) of copies the host does not wait for: from or to pinned
#: memory, and device to device (CUDA runtime API, "API synchronization behavior").
ASYNC_COPY = r"Pinned|DtoD|Device -> Device"

#: Resolution of event times in the graph: Kineto writes microseconds with three decimals.
NS_PER_US = 1000


def event_times(events: pa.Table) -> tuple[float, np.ndarray, np.ndarray]:
    """(t0, start, end): the trace start and each event's measured start and end in us after it
    (floats; an as-measured replay reproduces them)."""
    if not events.num_rows:
        return 0.0, np.zeros(0), np.zeros(0)
    ts = _col(events, "ts_us").astype(np.float64)
    t0 = float(ts.min())
    start = ts - t0
    return t0, start, start + np.nan_to_num(_col(events, "dur_us").astype(np.float64))


def time_keys(events: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Integer nanosecond keys of each event's measured start and end, for ordering.

    ``ts_us`` and ``dur_us`` are each rounded once to integer ns and the end key is their sum, so
    an event that ends where the next one starts ties exactly; float ``ts - t0 + dur`` can land
    either side of the next ``ts - t0``, and a tie broken the wrong way changes the host chain's
    nesting (the next call stops being a leaf and keeps its measured duration).
    """
    if not events.num_rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    us = _col(events, "ts_us").astype(np.float64)
    # relative to the first start before scaling: epoch microseconds (~1.7e15) times 1000 are
    # past float64's integer range (2^53), so their ns would round to 256 ns and break ties
    ts = np.rint((us - us.min()) * NS_PER_US).astype(np.int64)
    dur = np.rint(np.nan_to_num(_col(events, "dur_us").astype(np.float64)) * NS_PER_US)
    return ts, ts + dur.astype(np.int64)


def _col(events: pa.Table, name: str) -> np.ndarray:
    c = events.column(name)
    if c.null_count and pa.types.is_integer(c.type):
        c = c.fill_null(-1)
    return c.to_numpy(zero_copy_only=False)


def _is_in(events: pa.Table, name: str, values: tuple[str, ...] | list[str]) -> np.ndarray:
    m = pc.is_in(events.column(name), value_set=pa.array(list(values), type=pa.string()))
    return m.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)


def _codes(events: pa.Table, name: str) -> np.ndarray:
    col = events.column(name).combine_chunks() if events.num_rows else pa.array([], pa.string())
    enc = pc.dictionary_encode(col)
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _track_runs(rank: np.ndarray, track: np.ndarray) -> np.ndarray:
    """Start offsets of each contiguous (rank, track) run; asserts tracks are contiguous."""
    n = len(rank)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    change = np.ones(n, dtype=bool)
    change[1:] = (rank[1:] != rank[:-1]) | (track[1:] != track[:-1])
    starts = np.flatnonzero(change)
    keys = list(zip(rank[starts].tolist(), track[starts].tolist()))
    assert len(set(keys)) == len(keys), "events must be sorted by (rank, track, ts_us)"
    return np.append(starts, n).astype(np.int64)


@dataclass
class EventArrays:
    """The columns of the events table the graph reads, one entry per event (event id = row), and
    the track layout. Built once (`event_arrays`); every stage of `build_graph` only reads it."""

    n: int
    t0: float                  # trace start (min ts_us)
    rank: np.ndarray
    is_dev: np.ndarray
    ts: np.ndarray             # measured start / end, us after t0 (floats: the values)
    end: np.ndarray
    ts_k: np.ndarray           # integer ns keys of start / end (`time_keys`: orders and ties)
    end_k: np.ndarray
    dur: np.ndarray            # dur_us as stored
    depth: np.ndarray
    corr: np.ndarray           # correlation id, -1 none
    launch_id: np.ndarray      # as ingested, -1 none
    sync_stream: np.ndarray
    sync_corr: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    pg: np.ndarray             # process group (object; None when absent)
    pg_valid: np.ndarray
    coll_seq: np.ndarray
    is_sync_kind: np.ndarray
    is_memcpy: np.ndarray
    is_comm: np.ndarray
    is_kernel: np.ndarray      # device work that takes compute units (compute kinds, "other")
    passive: np.ndarray        # annotations and instants: they mark time, they are not work
    dev_marker: np.ndarray     # device-side annotations (gpu_user_annotation): not stream work
    host_marker: np.ndarray    # device-side markers of a host wait (HOST_WAIT_MARKERS)
    sync_named: np.ndarray     # host runtime/sync/other calls named like a synchronize call
    wait_call: np.ndarray      # host calls named in STREAM_WAIT_CALLS
    record_call: np.ndarray    # host calls named in EVENT_RECORD_CALLS
    async_copy: np.ndarray     # copies named as asynchronous (ASYNC_COPY: pinned memory, DtoD)
    runs: np.ndarray           # start offset of each (rank, track) run, then n
    tr_of: np.ndarray          # per event: its track
    tr_dev: np.ndarray         # per track: a device track


def event_arrays(events: pa.Table) -> EventArrays:
    """The graph's view of ``events`` (canonical schema, sorted by rank, track, ts_us)."""
    n = events.num_rows
    rank = _col(events, "rank").astype(np.int64)
    is_dev = _col(events, "is_device").astype(bool)
    t0, ts, end = event_times(events)
    ts_k, end_k = time_keys(events)
    passive = _is_in(events, "kind", schema.PASSIVE_KINDS)
    runs = _track_runs(rank, _codes(events, "track"))
    ntr = len(runs) - 1
    return EventArrays(
        n=n, t0=t0, rank=rank, is_dev=is_dev, ts=ts, end=end, ts_k=ts_k, end_k=end_k,
        dur=_col(events, "dur_us").astype(np.float64),
        depth=_col(events, "depth").astype(np.int64),
        corr=_col(events, "correlation").astype(np.int64),
        launch_id=_col(events, "launch_id").astype(np.int64),
        sync_stream=_col(events, "sync_stream").astype(np.int64),
        sync_corr=_col(events, "sync_corr").astype(np.int64),
        stream=_col(events, "stream").astype(np.int64),
        device=_col(events, "device").astype(np.int64),
        pg=events.column("pg").to_numpy(zero_copy_only=False),
        pg_valid=events.column("pg").is_valid().to_numpy(zero_copy_only=False),
        coll_seq=_col(events, "coll_seq").astype(np.int64),
        is_sync_kind=_is_in(events, "kind", ["sync"]),
        is_memcpy=_is_in(events, "kind", ["memcpy"]),
        is_comm=_is_in(events, "kind", schema.COMM_KINDS),
        is_kernel=is_dev & _is_in(events, "kind", (*schema.COMPUTE_KINDS, "other")),
        passive=passive,
        dev_marker=is_dev & passive,
        host_marker=_is_in(events, "name", HOST_WAIT_MARKERS),
        # host calls that may be synchronize calls: runtime calls, sync markers, unrecognised
        sync_named=_sync_named(events, ~is_dev & _is_in(events, "kind",
                                                        (*schema.CONTROL_KINDS, "other"))),
        wait_call=~is_dev & _is_in(events, "name", STREAM_WAIT_CALLS),
        record_call=~is_dev & _is_in(events, "name", EVENT_RECORD_CALLS),
        async_copy=is_dev & _matches(events, ASYNC_COPY),
        runs=runs,
        tr_of=np.repeat(np.arange(ntr), np.diff(runs)) if n else np.zeros(0, dtype=np.int64),
        tr_dev=is_dev[runs[:-1]] if ntr else np.zeros(0, dtype=bool),
    )


def _matches(events: pa.Table, pattern: str) -> np.ndarray:
    """Per event: its name matches the regular expression ``pattern``."""
    if not events.num_rows:
        return np.zeros(0, dtype=bool)
    names = pc.dictionary_encode(events.column("name").combine_chunks())
    hit = pc.match_substring_regex(names.dictionary, pattern).fill_null(False)
    hit_v = np.append(hit.to_numpy(zero_copy_only=False).astype(bool), False)
    return hit_v[names.indices.fill_null(-1).to_numpy(zero_copy_only=False)]


def _sync_named(events: pa.Table, among: np.ndarray) -> np.ndarray:
    """Per event: one of ``among`` whose name matches a HOST_SYNC_NAMES entry."""
    out = np.zeros(events.num_rows, dtype=bool)
    rt = np.flatnonzero(among)
    if len(rt):
        # names repeat: match each distinct name once
        names = pc.dictionary_encode(events.column("name").take(pa.array(rt)).combine_chunks())
        hit_v = pc.match_substring_regex(names.dictionary, "|".join(HOST_SYNC_NAMES))
        hit_v = hit_v.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
        idx = names.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        hit = np.append(hit_v, False)[idx]  # null names (-1) do not match
        out[rt[hit]] = True
    return out
