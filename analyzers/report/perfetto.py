"""A replayed run as Chrome-trace JSON for Perfetto / chrome://tracing.

One process per rank and one thread per track (host thread or device stream) of that rank; each
slice is an event at its *replayed* start and duration, with its cost components and the
attribution component that dominates it in ``args``. Flow arrows join a launch to the device work
it launched and the ranks' instances of each collective. Kineto's own keys (``correlation``,
``External id``, ``device``, ``stream``, collective fields) are kept, so the file reads back
through `mtia_trace.ingest`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from analyzers.report.run_data import RunData
from mtia_trace.destinations import check_file, write_file

#: Event cost columns (per-event attribution), in the order ties are broken.
COST_COLUMNS: tuple[str, ...] = ("compute", "fetch", "collective", "queue", "retry", "host")


def _np(t: pa.Table, c: str) -> np.ndarray:
    return t.column(c).to_numpy(zero_copy_only=False)


def dominant_component(events: pa.Table) -> np.ndarray:
    """Per event, the cost component with the most time; 'none' for events with no cost."""
    costs = np.column_stack([_np(events, f"{c}_us") for c in COST_COLUMNS]) if events.num_rows \
        else np.zeros((0, len(COST_COLUMNS)))
    names = np.array(COST_COLUMNS + ("none",), dtype=object)
    idx = np.where(costs.max(axis=1, initial=0.0) > 0, costs.argmax(axis=1), len(COST_COLUMNS))
    return names[idx]


def _track_ids(events: pa.Table) -> tuple[np.ndarray, list[tuple[int, str, int, bool]]]:
    """Thread id per event and (rank, track, tid, is_device) per distinct track."""
    keys = pa.table({"rank": events.column("rank"), "track": events.column("track"),
                     "is_device": events.column("is_device")})
    uniq = keys.group_by(["rank", "track"]).aggregate([("is_device", "max")]) \
        .sort_by([("rank", "ascending"), ("is_device_max", "ascending"), ("track", "ascending")])
    tracks = []
    tid_of: dict[tuple[int, str], int] = {}
    per_rank: dict[int, int] = {}
    for r, t, d in zip(*(uniq.column(c).to_pylist() for c in ("rank", "track", "is_device_max"))):
        tid = per_rank.get(r, 0) + 1
        per_rank[r] = tid
        tid_of[(r, t)] = tid
        tracks.append((r, t, tid, bool(d)))
    tid = np.fromiter((tid_of[(r, t)] for r, t in zip(_np(events, "rank").tolist(),
                                                      _np(events, "track").tolist())),
                      dtype=np.int64, count=events.num_rows)
    return tid, tracks


def _metadata(tracks: list[tuple[int, str, int, bool]]) -> list[dict]:
    out: list[dict] = []
    for r in sorted({t[0] for t in tracks}):
        out.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                    "args": {"name": f"rank {r}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0,
                    "args": {"sort_index": r}})
    for r, track, tid, is_dev in tracks:
        label = track.replace("dev:", "device ").replace("host:", "host ")
        if is_dev:
            parts = track.split(":")
            label = f"device {parts[1]} stream {parts[2]}" if len(parts) == 3 else label
        out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": tid,
                    "args": {"name": label}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": tid,
                    "args": {"sort_index": tid + (1000 if is_dev else 0)}})
    return out


def _slices(events: pa.Table, tid: np.ndarray) -> list[dict]:
    comp = dominant_component(events)
    cols = {c: events.column(c).to_pylist() for c in (
        "rank", "name", "cat", "ph", "start_us", "end_us", "ts_us", "dur_us", "event_id", "step",
        "kind", "correlation", "external_id", "device", "stream", "is_device", "coll_op", "pg",
        "coll_seq", "group_size", "bound_by", "critical", *(f"{c}_us" for c in COST_COLUMNS))}
    out = []
    for i in range(events.num_rows):
        args: dict[str, object] = {
            "component": comp[i], "kind": cols["kind"][i], "step": cols["step"][i],
            "event_id": cols["event_id"][i], "critical": bool(cols["critical"][i]),
            "bound_by": cols["bound_by"][i], "measured_ts_us": cols["ts_us"][i],
            "measured_dur_us": cols["dur_us"][i],
        }
        for c in COST_COLUMNS:
            v = cols[f"{c}_us"][i]
            if v:
                args[f"{c}_us"] = v
        if cols["correlation"][i] >= 0:
            args["correlation"] = cols["correlation"][i]
        if cols["external_id"][i] >= 0:
            args["External id"] = cols["external_id"][i]
        if cols["is_device"][i]:
            args["device"] = cols["device"][i]
            args["stream"] = cols["stream"][i]
        if cols["coll_op"][i] is not None:
            args["Collective name"] = cols["coll_op"][i]
            if cols["pg"][i] is not None:
                args["Process Group Name"] = cols["pg"][i]
            if cols["coll_seq"][i] >= 0:
                args["Seq"] = cols["coll_seq"][i]
            if cols["group_size"][i]:
                args["Group size"] = cols["group_size"][i]
        start = cols["start_us"][i]
        ev = {"ph": cols["ph"][i], "name": cols["name"][i], "cat": cols["cat"][i],
              "pid": cols["rank"][i], "tid": int(tid[i]), "ts": start, "args": args}
        if ev["ph"] == "X":
            ev["dur"] = cols["end_us"][i] - start
        else:
            ev["s"] = "t"
        out.append(ev)
    return out


def _flows(events: pa.Table, edges: pa.Table, tid: np.ndarray) -> list[dict]:
    """Flow start/finish pairs: launch -> device event, and collective edges across ranks."""
    start = _np(events, "start_us")
    rank = _np(events, "rank")
    launch = _np(events, "launch_id")
    dst = np.flatnonzero(launch >= 0)
    src = launch[dst]
    pairs = [("ac2g", "launch", src, dst)]
    if edges.num_rows:
        coll = edges.filter(pc.equal(edges.column("type"), "collective"))
        pairs.append(("collective", "collective", _np(coll, "src"), _np(coll, "dst")))
    out: list[dict] = []
    fid = 0
    for cat, name, s_ids, d_ids in pairs:
        for s, d in zip(s_ids.tolist(), d_ids.tolist()):
            fid += 1
            out.append({"ph": "s", "id": fid, "cat": cat, "name": name, "pid": int(rank[s]),
                        "tid": int(tid[s]), "ts": float(start[s])})
            out.append({"ph": "f", "bp": "e", "id": fid, "cat": cat, "name": name,
                        "pid": int(rank[d]), "tid": int(tid[d]), "ts": float(start[d])})
    return out


def perfetto_trace(run: RunData) -> dict:
    """The Chrome-trace document for ``run``."""
    events = run.events
    tid, tracks = _track_ids(events)
    doc: dict[str, object] = {
        "displayTimeUnit": "ms",
        "traceEvents": _metadata(tracks) + _slices(events, tid) + _flows(events, run.edges, tid),
        "otherData": {"producer": "mtia-trace export", "run": run.name,
                      "hardware": run.hardware, "times": "replayed"},
    }
    ranks = np.unique(_np(events, "rank")) if events.num_rows else np.array([])
    if len(ranks) == 1:
        doc["distributedInfo"] = {"rank": int(ranks[0])}
    return doc


def write_perfetto(run: RunData, path: str | Path, *, force: bool = False) -> Path:
    """Write the Chrome-trace JSON to ``path`` (refuses to overwrite without ``force``)."""
    path = Path(path)
    check_file(path, force=force, flag="--perfetto")
    data = orjson.dumps(perfetto_trace(run), option=orjson.OPT_SERIALIZE_NUMPY)
    return write_file(data, path, force=force, flag="--perfetto")
