"""The first look at a trace, as data: ranks, steps, streams, kinds, top ops, collectives, warnings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mtia_trace.ingest import Trace
from mtia_trace.schema import CONTROL_KINDS, PASSIVE_KINDS

#: Kinds that are not work of their own (excluded from "top ops by time").
_NOT_WORK = (*PASSIVE_KINDS, *CONTROL_KINDS)


@dataclass
class Summary:
    files: list[dict[str, Any]]
    ranks: list[int]
    steps: pd.DataFrame          # rank, step, measured_us, events
    streams: pd.DataFrame        # rank, track, events, busy_us (work only, overlaps once)
    counts: dict[str, int]
    top_ops: pd.DataFrame        # name, kind, calls, total_us, mean_us, share (device time, or host self time)
    collectives: pd.DataFrame    # coll_op, pg, count, bytes_in, bytes_out
    warnings: list[str] = field(default_factory=list)
    device: bool = False         # true when device streams exist (top ops are device time)


def _stream_busy(dev: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, track): work events and busy time, the union of their intervals (a span that
    annotates kernels, such as ``gpu_user_annotation``, is not work; overlaps count once)."""
    d = dev.sort_values(["rank", "track", "ts_us"])
    key = d["rank"].astype(str) + "\x00" + d["track"].astype(str)
    start = d["ts_us"].to_numpy(dtype=np.float64)
    end = start + d["dur_us"].to_numpy(dtype=np.float64)
    new = np.r_[True, key.to_numpy()[1:] != key.to_numpy()[:-1]] if len(d) else np.zeros(0, bool)
    grp = np.cumsum(new) - 1
    # the furthest end so far within the group, before each event
    reach = pd.Series(end).groupby(grp).cummax().to_numpy() if len(d) else end
    prev = np.r_[-np.inf, reach[:-1]]
    prev[new] = -np.inf
    gained = np.clip(end - np.maximum(start, prev), 0.0, None)
    return (d.assign(busy_us=gained).groupby(["rank", "track"], as_index=False)
            .agg(events=("dur_us", "size"), busy_us=("busy_us", "sum")))


def summarize(trace: Trace, top: int = 10) -> Summary:
    cols = ["rank", "event_id", "parent_id", "name", "kind", "track", "is_device", "ts_us", "dur_us", "step", "depth",
            "coll_op", "coll_bytes_in", "coll_bytes_out", "pg", "coll_seq"]
    df = trace.events.select(cols).to_pandas()
    is_step = df["name"].str.startswith("ProfilerStep#") & ~df["is_device"]
    if is_step.any():
        steps = (df[is_step].groupby(["rank", "step"], as_index=False)
                 .agg(measured_us=("dur_us", "sum")))
    else:  # one step spanning the trace per rank
        g = df.assign(end=df["ts_us"] + df["dur_us"]).groupby("rank")
        steps = pd.DataFrame({"rank": g["ts_us"].min().index, "step": 0,
                              "measured_us": (g["end"].max() - g["ts_us"].min()).to_numpy()})
    n_ev = df.groupby(["rank", "step"]).size().rename("events").reset_index()
    steps = steps.merge(n_ev, on=["rank", "step"], how="left").fillna({"events": 0})
    dev = df[df["is_device"]]
    streams = _stream_busy(dev[~dev["kind"].isin(PASSIVE_KINDS)])
    if len(dev):
        work = dev.assign(time_us=dev["dur_us"])
    else:  # CPU-only: rank host ops by self time (duration minus their children's)
        child = df[df["parent_id"] >= 0].groupby("parent_id")["dur_us"].sum()
        self_us = (df["dur_us"] - df["event_id"].map(child).fillna(0.0)).clip(lower=0.0)
        work = df.assign(time_us=self_us)
    work = work[~work["kind"].isin(_NOT_WORK)]
    total = float(work["time_us"].sum()) or 1.0
    top_ops = (work.groupby(["name", "kind"], as_index=False)
               .agg(calls=("time_us", "size"), total_us=("time_us", "sum"))
               .sort_values("total_us", ascending=False).head(top))
    top_ops["mean_us"] = top_ops["total_us"] / top_ops["calls"]
    top_ops["share"] = top_ops["total_us"] / total
    coll = df[df["coll_op"].notna() & (df["coll_seq"] >= 0)]
    # one row per collective instance: the outermost host event (or the device kernel)
    coll = coll.sort_values(["rank", "pg", "coll_seq", "is_device", "depth"])
    inst = coll.drop_duplicates(["rank", "pg", "coll_seq"], keep="first")
    collectives = (inst.groupby(["coll_op", "pg"], dropna=False, as_index=False)
                   .agg(count=("coll_seq", "size"), bytes_in=("coll_bytes_in", "sum"),
                        bytes_out=("coll_bytes_out", "sum")))
    files = [{"path": f.path, "rank": f.rank, "events": f.n_events, "bytes": f.bytes,
              "world_size": f.distributed_info.get("world_size"),
              "backend": f.distributed_info.get("backend")} for f in trace.files]
    return Summary(files=files, ranks=trace.ranks, steps=steps, streams=streams, device=bool(len(dev)),
                   counts=trace.counts, top_ops=top_ops, collectives=collectives,
                   warnings=list(trace.warnings))
