"""A replayed run as Chrome-trace JSON for Perfetto / chrome://tracing.

One process per rank and one thread per track (host thread or device stream) of that rank; each
slice is an event at its *replayed* start and duration, with its cost components and the
attribution component that dominates it in ``args``. Flow arrows join a launch to the device work
it launched and the ranks' instances of each collective. Counter tracks per rank: the launch
queue of each device stream (queued / outstanding, as the stream_queues analyzer counts them),
events waiting for busy engines / links, collectives running (link / engine occupancy) and the
critical path's component (1 while the critical path is in work of that component); an async
track per rank lays out the critical path itself (its innermost events, in time order). Kineto's own keys (``correlation``,
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
from analyzers.stream_queues import queue_series
from mtia_trace.destinations import check_file, write_file
from mtia_trace.schema import DEVICE_KINDS

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


#: Thread id offset of a thread's extra lanes (lane k of thread t is ``k * LANE + t``).
LANE = 100_000


def nesting_lanes(events: pa.Table, tid: np.ndarray) -> np.ndarray:
    """Thread id per event with the slices of each thread nesting: a slice that starts inside
    another and ends after it (a trace records such spans: an MTIA ``hccl:all_to_all`` host
    span runs 2.5 s past the ``c10d::alltoall_base_`` it began in) moves to the thread's next
    lane where it nests, shown as its own track under the thread."""
    out = tid.copy()
    x = np.flatnonzero(_np(events, "ph") == "X")
    if not len(x):
        return out
    rank = _np(events, "rank")[x]
    start, end = _np(events, "start_us")[x], _np(events, "end_us")[x]
    order = np.lexsort((-end, start, tid[x], rank))
    eps = 1e-9
    key = None
    stacks: list[list[float]] = []
    for j in order.tolist():  # one pass; the inner loop runs over a thread's few lanes
        k = (int(rank[j]), int(tid[x[j]]))
        if k != key:
            key, stacks = k, []
        s, e = float(start[j]), float(end[j])
        lane = 0
        while True:
            if lane == len(stacks):
                stacks.append([])
            st = stacks[lane]
            while st and s >= st[-1] - eps:
                st.pop()
            if not st or e <= st[-1] + eps:
                st.append(e)
                break
            lane += 1
        out[x[j]] = k[1] + LANE * lane
    return out


def _lane_metadata(tracks: list[tuple[int, str, int, bool]], tid: np.ndarray,
                   rank: np.ndarray) -> list[dict]:
    """Names of the extra lanes `nesting_lanes` opened, next to their thread."""
    label = {(r, t): (track, d) for r, track, t, d in tracks}
    out = []
    for r, t in sorted({(int(a), int(b)) for a, b in zip(rank.tolist(), tid.tolist())
                        if b >= LANE}):
        base, lane = t % LANE, t // LANE
        track, dev = label[(r, base)]
        out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": t,
                    "args": {"name": f"{_label(track, dev)} (overlapping spans {lane})"}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": t,
                    "args": {"sort_index": base + (1000 if dev else 0)}})
    return out


def _label(track: str, is_dev: bool) -> str:
    label = track.replace("dev:", "device ").replace("host:", "host ")
    if is_dev:
        parts = track.split(":")
        label = f"device {parts[1]} stream {parts[2]}" if len(parts) == 3 else label
    return label


def _metadata(tracks: list[tuple[int, str, int, bool]]) -> list[dict]:
    out: list[dict] = []
    for r in sorted({t[0] for t in tracks}):
        out.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                    "args": {"name": f"rank {r}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0,
                    "args": {"sort_index": r}})
    for r, track, tid, is_dev in tracks:
        out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": tid,
                    "args": {"name": _label(track, is_dev)}})
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


def _occupancy(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, count after every change at that time) of intervals [start, end)."""
    t = np.r_[starts, ends]
    order = np.argsort(t, kind="stable")
    t, v = t[order], np.cumsum(np.r_[np.ones(len(starts)), -np.ones(len(ends))][order])
    last = np.r_[t[1:] != t[:-1], True] if len(t) else np.zeros(0, dtype=bool)
    return t[last], v[last]


def _counter(name: str, pid: int, t: np.ndarray, values: dict[str, np.ndarray]) -> list[dict]:
    return [{"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": float(ts),
             "args": {k: float(v[i]) for k, v in values.items()}}
            for i, ts in enumerate(t.tolist())]


def innermost_critical(events: pa.Table) -> np.ndarray:
    """Row indices of the critical work events that enclose no other critical event."""
    if events.num_rows == 0 or "critical" not in events.column_names:
        return np.zeros(0, dtype=np.int64)
    crit = _np(events, "critical").astype(bool) & (_np(events, "ph") == "X")
    crit &= ~np.isin(_np(events, "kind"), ["annotation", "instant"])
    parents = np.unique(_np(events, "parent_id")[crit])
    return np.flatnonzero(crit & ~np.isin(_np(events, "event_id"), parents))


def _counters(events: pa.Table) -> list[dict]:
    out: list[dict] = []
    if events.num_rows == 0:
        return out
    rank, start, end = _np(events, "rank"), _np(events, "start_us"), _np(events, "end_us")
    launch = _np(events, "launch_id")
    dev = _np(events, "is_device").astype(bool)
    m = dev & (launch >= 0) & np.isin(_np(events, "kind"), sorted(DEVICE_KINDS))
    pairs = pa.table({"rank": rank[m].astype(np.int32), "stream": _np(events, "track")[m],
                      "launch_start_us": start[launch[m]], "start_us": start[m],
                      "end_us": end[m]})
    series = queue_series(pairs)
    for (r, stream), g in series.to_pandas().groupby(["rank", "stream"], sort=True):
        out += _counter(f"launch queue {stream}", int(r), g["ts_us"].to_numpy(),
                        {"queued": g["queued"].to_numpy(),
                         "outstanding": g["outstanding"].to_numpy()})
    queue = _np(events, "queue_us")
    comm = dev & np.isin(_np(events, "kind"), ["collective", "p2p"])
    crit = innermost_critical(events)
    comp = dominant_component(events.take(pa.array(crit, type=pa.int64())))
    for r in np.unique(rank).tolist():  # ranks: few
        mine = rank == r
        w = mine & (queue > 0)
        if w.any():
            t, v = _occupancy(start[w] - queue[w], start[w])
            out += _counter("waiting for engines / links", r, t, {"events": v})
        c = mine & comm
        if c.any():
            t, v = _occupancy(start[c], end[c])
            out += _counter("collectives running", r, t, {"collectives": v})
        k = rank[crit] == r
        for name in COST_COLUMNS:
            sel = k & (comp == name)
            if sel.any():
                t, v = _occupancy(start[crit[sel]], end[crit[sel]])
                out += _counter(f"critical path: {name}", r, t, {"on": np.minimum(v, 1)})
    return out


def _critical_track(events: pa.Table) -> list[dict]:
    """Async slices per rank: the innermost critical events in time order, each clipped to start
    after the previous one ends so the track nests."""
    crit = innermost_critical(events)
    if len(crit) == 0:
        return []
    sub = events.take(pa.array(crit, type=pa.int64()))
    comp = dominant_component(sub)
    rank, name = _np(sub, "rank"), _np(sub, "name")
    start, end, eid = _np(sub, "start_us"), _np(sub, "end_us"), _np(sub, "event_id")
    out: list[tuple[int, float, float, str, str, int]] = []
    for i in np.lexsort((end, start, rank)).tolist():
        out.append((int(rank[i]), float(start[i]), float(end[i]), str(name[i]), str(comp[i]),
                    int(eid[i])))
    slices: list[dict] = []
    reach: dict[int, float] = {}
    for r, s, e, n, c, ev in out:
        s = max(s, reach.get(r, s))
        if e <= s:
            continue
        reach[r] = e
        common = {"cat": "critical_path", "id": f"critical_path_{r}", "pid": r, "tid": 0,
                  "name": n}
        slices.append({**common, "ph": "b", "ts": s, "args": {"component": c, "event_id": ev}})
        slices.append({**common, "ph": "e", "ts": e})
    return slices


def perfetto_trace(run: RunData) -> dict:
    """The Chrome-trace document for ``run``."""
    events = run.events
    tid, tracks = _track_ids(events)
    tid = nesting_lanes(events, tid)
    doc: dict[str, object] = {
        "displayTimeUnit": "ms",
        "traceEvents": (_metadata(tracks) + _lane_metadata(tracks, tid, _np(events, "rank"))
                        + _slices(events, tid) + _flows(events, run.edges, tid)
                        + _counters(events) + _critical_track(events)),
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
