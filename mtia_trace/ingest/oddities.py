"""Single-rank oddities: recorded times and links that a profiler does not produce and that the
replay's answer depends on. Each check returns at most one warning with a count and the first
case (corrupt timestamps are refused earlier, by `anomalies`):

* device events starting more than ``LAUNCH_WARN_US`` before the call that launched them (the
  replay starts them after it: the step grows);
* no recorded time: every work event of a rank lasting 0, or starting at the same instant;
* steps: a ``ProfilerStep`` number given twice on a rank, steps that overlap;
* device streams: ops that overlap on one stream (a stream runs one op at a time, so the
  replay serializes them), or that run in another order than they were launched (swapped
  correlation ids);

Two look odd and need no warning, as the replay does not depend on them: host and device events
under one pid (device events are told apart by their category and keep their device and stream
from their args), and a flow whose start and end are the same event (flows only link a device
event without a correlation id, and one that links nothing is counted by the ingest's
"no launching runtime call" warning).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.schema import PASSIVE_KINDS

#: A device event may start this much before its launch without a warning: clock conversion
#: jitter is microseconds on GPUs and up to ~1.2 ms on MTIA exports (`anomalies` refuses
#: beyond `anomalies.LAUNCH_SLACK_US`).
LAUNCH_WARN_US = 1500.0
#: Overlaps shorter than this (us) are rounding: Kineto writes three decimals.
OVERLAP_TOLERANCE_US = 1e-3
#: Device events that run one at a time on their stream, in launch order.
STREAM_WORK_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def check(events: pa.Table) -> list[str]:
    """Warnings about single-rank oddities the replay depends on."""
    if events.num_rows == 0:
        return []
    cols = {c: events.column(c).to_numpy(zero_copy_only=False)
            for c in ("rank", "ts_us", "dur_us", "is_device", "launch_id")}
    # complete events, compared in Arrow: the column as numpy would be a str object per row
    cols["is_x"] = pc.fill_null(pc.equal(events.column("ph"), "X"),
                                False).to_numpy(zero_copy_only=False)
    kind = events.column("kind")
    cols["passive"] = pc.fill_null(pc.is_in(kind, pa.array(list(PASSIVE_KINDS))),
                                   False).to_numpy(zero_copy_only=False)
    name = events.column("name")

    def describe(i: int) -> str:
        return f"{str(name[i].as_py())[:60]!r} on rank {int(cols['rank'][i])}"

    out: list[str] = []
    for fn in (_early_kernels, _no_time, _steps, _streams):
        out += fn(events, cols, describe)
    return out


def _early_kernels(events: pa.Table, c: dict[str, np.ndarray],
                   describe: Callable[[int], str]) -> list[str]:
    dev = np.flatnonzero(c["launch_id"] >= 0)
    if not len(dev):
        return []
    early = c["ts_us"][c["launch_id"][dev]] - c["ts_us"][dev]
    hit = early > LAUNCH_WARN_US
    if not hit.any():
        return []
    k = int(np.argmax(early))
    return [f"{int(hit.sum())} device events start more than {LAUNCH_WARN_US / 1e3:g} ms before "
            f"the call that launched them (first: {describe(int(dev[k]))}, "
            f"{early[k] / 1e3:.3g} ms early): the replay starts them after their launch, so "
            "their steps replay longer than measured"]


def _no_time(events: pa.Table, c: dict[str, np.ndarray],
             describe: Callable[[int], str]) -> list[str]:
    work = np.flatnonzero(c["is_x"] & ~c["passive"])
    if len(work) < 2:
        return []
    out = []
    rank = c["rank"][work]
    for r in np.unique(rank).tolist():
        w = work[rank == r]
        if len(w) < 2:
            continue
        if (c["dur_us"][w] == 0).all():
            out.append(f"every one of rank {r}'s {len(w)} events lasts 0 us: the trace records "
                       "no durations, every replayed time is 0")
        elif np.ptp(c["ts_us"][w]) == 0:
            out.append(f"every one of rank {r}'s {len(w)} events starts at the same time "
                       f"({c['ts_us'][w[0]]:.17g} us): the trace records no order in time, "
                       "nesting and dependencies are guesses")
    return out[:1] + ([f"(and {len(out) - 1} more ranks alike)"] if len(out) > 1 else [])


def _steps(events: pa.Table, c: dict[str, np.ndarray],
           describe: Callable[[int], str]) -> list[str]:
    is_step = pc.fill_null(pc.starts_with(events.column("name"), "ProfilerStep#"),
                           False).to_numpy(zero_copy_only=False) & ~c["is_device"]
    rows = np.flatnonzero(is_step & c["is_x"])
    if len(rows) < 2:
        return []
    # the number in the name (the step column places events by time, not by name)
    num = pc.extract_regex(events.column("name").take(pa.array(rows)), r"#(?P<n>\d+)")
    step = pc.struct_field(num, "n").to_numpy(zero_copy_only=False)
    rank, ts, end = c["rank"][rows], c["ts_us"][rows], c["ts_us"][rows] + c["dur_us"][rows]
    out = []
    o = np.lexsort((step, rank))
    same = (rank[o][1:] == rank[o][:-1]) & (step[o][1:] == step[o][:-1])
    if same.any():
        i = int(rows[o][1:][same][0])
        out.append(f"{int(same.sum())} ProfilerStep annotations repeat a step number already "
                   f"used on their rank (first: {describe(i)}): their events are counted as one "
                   "step, so per-step times add up iterations")
    o = np.lexsort((ts, rank))
    over = (rank[o][1:] == rank[o][:-1]) & (ts[o][1:] < end[o][:-1] - OVERLAP_TOLERANCE_US)
    if over.any():
        i = int(rows[o][1:][over][0])
        out.append(f"{int(over.sum())} ProfilerStep annotations start before the previous "
                   f"step on their rank ends (first: {describe(i)}): events in the overlap "
                   "count toward the later step")
    return out


def _streams(events: pa.Table, c: dict[str, np.ndarray],
             describe: Callable[[int], str]) -> list[str]:
    # stream work as GPU profilers record it: kernels, copies, fills (not sync markers, not
    # MTIA's DMA requests, which queue on several engines)
    gpu = pc.fill_null(pc.is_in(events.column("cat"), pa.array(list(STREAM_WORK_CATS))),
                       False).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(c["is_device"] & c["is_x"] & gpu)
    if len(rows) < 2:
        return []
    track = pc.dictionary_encode(events.column("track").take(pa.array(rows))).combine_chunks()
    # a stream is a (rank, track): device ids repeat across hosts
    tr = track.indices.to_numpy(zero_copy_only=False).astype(np.int64) * (
        int(c["rank"].max()) + 1) + c["rank"][rows]
    ts, end = c["ts_us"][rows], c["ts_us"][rows] + c["dur_us"][rows]
    o = np.lexsort((ts, tr))
    same = tr[o][1:] == tr[o][:-1]
    out = []
    # the running end of the stream's earlier ops (restarted at each stream)
    starts = np.flatnonzero(np.r_[True, ~same])
    run_end = np.empty(len(o))
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(o)]):
        run_end[a:b] = np.maximum.accumulate(end[o][a:b])
    over = same & (ts[o][1:] < run_end[:-1] - OVERLAP_TOLERANCE_US)
    if over.any():
        i = int(rows[o][1:][over][0])
        out.append(f"{int(over.sum())} device ops start before the previous op on their stream "
                   f"ends (first: {describe(i)}): a stream runs one op at a time, so the replay "
                   "runs them one after another and the stream replays longer than measured")
    launch = c["launch_id"][rows][o]
    has = (launch[1:] >= 0) & (launch[:-1] >= 0) & same
    lts = c["ts_us"][np.maximum(launch, 0)]
    swapped = has & (lts[1:] < lts[:-1])
    if swapped.any():
        i = int(rows[o][1:][swapped][0])
        out.append(f"{int(swapped.sum())} device ops run on their stream before an op launched "
                   f"earlier (first: {describe(i)}): streams run in launch order, so their "
                   "correlation ids are probably swapped; the replay links each op to the call "
                   "its id names")
    return out
