"""A small, fixed, self-consistent replayed run for report / compare / export tests.

Four ranks, three steps. Each rank has a host thread that launches kernels, a compute stream
(gemm, embedding) and a communication stream (an all_to_all on pg "0" and an all_reduce on pg
"1"). One rank (``late_rank``) reaches the all_to_all late, so every other rank waits for it.
Built with `schema.from_columns` so it only depends on the canonical schema.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from mtia_trace import schema
from replay.result import ReplayResult

RANKS = 4
STEPS = 3


def build_run(*, late_rank: int = 3, late_us: float = 150.0, comm_scale: float = 1.0,
              gemm_us: float = 400.0) -> ReplayResult:
    """The sample run; the keyword arguments make a slower or faster variant for compare tests."""
    rows: list[dict[str, object]] = []

    def add(**kw: object) -> None:
        rows.append(kw)

    a2a_us = 300.0 * comm_scale
    ar_us = 120.0 * comm_scale
    step_len = 120.0 + late_us + gemm_us + 250.0 + a2a_us + ar_us + 100.0
    for r in range(RANKS):
        host = f"host:{100 + r}:1"
        for s in range(STEPS):
            t0 = 1000.0 + s * step_len
            lag = late_us if r == late_rank else 0.0
            add(rank=r, name=f"ProfilerStep#{s}", cat="user_annotation", kind="annotation",
                track=host, ts_us=t0, dur_us=step_len - 10.0, step=s, host_us=0.0)
            # host launches: gemm, embedding, all_to_all, all_reduce
            launches = [("gemm", 20.0), ("embedding", 60.0), ("a2a", 100.0 + lag), ("ar", 140.0 + lag)]
            for k, (what, at) in enumerate(launches):
                add(rank=r, name="cudaLaunchKernel", cat="cuda_runtime", kind="runtime", track=host,
                    ts_us=t0 + at, dur_us=8.0, step=s, correlation=1000 * s + 10 * r + k,
                    host_us=8.0, depth=1, tag=("launch", r, s, what))
            gemm_start = t0 + 30.0
            add(rank=r, name="sm90_xmma_gemm_bf16", cat="kernel", kind="gemm", track=f"dev:{r}:7",
                is_device=True, device=r, stream=7, ts_us=gemm_start, dur_us=gemm_us, step=s,
                correlation=1000 * s + 10 * r, flops=2.0e11, bytes_read=4.0e7, bytes_written=1.0e7,
                dtype="c10::BFloat16", compute_us=gemm_us * 0.8, fetch_us=gemm_us * 0.2,
                tag=("kernel", r, s, "gemm"))
            emb_start = gemm_start + gemm_us
            add(rank=r, name="fbgemm::split_embedding_codegen_forward", cat="kernel",
                kind="embedding", track=f"dev:{r}:7", is_device=True, device=r, stream=7,
                ts_us=emb_start, dur_us=250.0, step=s, correlation=1000 * s + 10 * r + 1,
                bytes_read=3.0e8, fetch_us=250.0, tag=("kernel", r, s, "embedding"))
            a2a_start = t0 + 120.0 + late_us + gemm_us + 250.0  # all ranks start when the last arrives
            add(rank=r, name="ncclDevKernel_AllToAll", cat="kernel", kind="collective",
                track=f"dev:{r}:20", is_device=True, device=r, stream=20, ts_us=a2a_start,
                dur_us=a2a_us, step=s, correlation=1000 * s + 10 * r + 2, coll_op="all_to_all",
                coll_bytes_in=8.0e6, coll_bytes_out=8.0e6, group_size=RANKS, pg="0",
                pg_ranks="[0, 1, 2, 3]", coll_seq=s, collective_us=a2a_us - 20.0, queue_us=20.0,
                tag=("kernel", r, s, "a2a"))
            ar_start = a2a_start + a2a_us
            add(rank=r, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL", cat="kernel",
                kind="collective", track=f"dev:{r}:20", is_device=True, device=r, stream=20,
                ts_us=ar_start, dur_us=ar_us, step=s, correlation=1000 * s + 10 * r + 3,
                coll_op="all_reduce", coll_bytes_in=4.0e6, coll_bytes_out=4.0e6, group_size=RANKS,
                pg="1", pg_ranks="[0, 1, 2, 3]", coll_seq=s, collective_us=ar_us * 0.9,
                retry_us=ar_us * 0.1, tag=("kernel", r, s, "ar"))
    return _assemble(rows, late_rank=late_rank, late_us=late_us, step_len=step_len)


def _assemble(rows: list[dict[str, object]], *, late_rank: int, late_us: float,
              step_len: float) -> ReplayResult:
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["rank"], rows[i]["track"],
                                                   rows[i]["ts_us"], -float(rows[i]["dur_us"])))
    rows = [rows[i] for i in order]
    n = len(rows)
    tag_to_id = {row["tag"]: i for i, row in enumerate(rows) if "tag" in row}
    cols: dict[str, object] = {"event_id": np.arange(n)}
    names = {f.name for f in schema.REPLAYED_EVENTS_SCHEMA}
    for key in names - {"event_id"}:
        vals = [row.get(key) for row in rows]
        if all(v is None for v in vals):
            continue
        spec = {c.name: c for c in schema.EVENT_COLUMNS + schema.REPLAY_COLUMNS}[key]
        fill = spec.null if spec.null is not None else (0.0 if spec.type == pa.float64() else None)
        if key == "is_device":
            fill = False
        cols[key] = [fill if v is None else v for v in vals]
    cols["ph"] = ["X"] * n
    cols["src_file"] = [f"rank{row['rank']}.json" for row in rows]
    ts = np.array([row["ts_us"] for row in rows], dtype=float)
    dur = np.array([row["dur_us"] for row in rows], dtype=float)
    cols["start_us"], cols["end_us"] = ts, ts + dur
    comp = {c: np.array(cols.get(f"{c}_us", np.zeros(n)), dtype=float)
            for c in ("compute", "fetch", "collective", "retry", "host", "queue")}
    # annotations carry no cost; every other event's components already sum to its duration
    cols["launch_id"] = [tag_to_id.get(("launch",) + row["tag"][1:]) if row.get("tag", ("",))[0] == "kernel"
                         else -1 for row in rows]
    cols["launch_id"] = [-1 if v is None else v for v in cols["launch_id"]]
    kinds = [row["kind"] for row in rows]
    cols["critical"] = [k in ("gemm", "embedding", "collective") for k in kinds]
    # the critical events are leaves: their whole run is their own work on the path
    cols["critical_us"] = np.where(cols["critical"], dur, 0.0)
    cols["bound_by"] = ["collective" if k == "collective" else ("launch" if k in ("gemm", "embedding")
                        else "host") for k in kinds]
    cols["bound_src"] = [-1] * n
    events = schema.from_columns(cols, schema=schema.REPLAYED_EVENTS_SCHEMA)

    edges_src, edges_dst, edges_type = [], [], []
    for i, lid in enumerate(cols["launch_id"]):
        if lid >= 0:
            edges_src.append(lid), edges_dst.append(i), edges_type.append("launch")
    for s in range(STEPS):
        for what in ("a2a", "ar"):
            ids = [tag_to_id[("kernel", r, s, what)] for r in range(RANKS)]
            for a, b in zip(ids, ids[1:]):
                edges_src.append(a), edges_dst.append(b), edges_type.append("collective")
    edges = schema.from_columns({"src": edges_src, "dst": edges_dst, "type": edges_type},
                                schema=schema.EDGES_SCHEMA)

    steps_cols: dict[str, list[object]] = {f.name: [] for f in schema.STEPS_SCHEMA}
    for r in range(RANKS):
        for s in range(STEPS):
            sel = [i for i, row in enumerate(rows) if row["rank"] == r and row["step"] == s
                   and row["kind"] != "annotation"]
            dev = [i for i in sel if rows[i]["kind"] != "runtime"]
            start = 1000.0 + s * step_len
            end = start + step_len
            parts = {c: float(sum(comp[c][i] for i in dev)) for c in ("compute", "fetch", "collective",
                                                                       "retry", "queue")}
            wait = 0.0 if r == late_rank else late_us
            parts["peer_wait"] = wait
            parts["host"] = 30.0 + 120.0 - 30.0  # launch latency before the first kernel and gaps
            used = sum(parts.values())
            parts["idle"] = step_len - used
            assert parts["idle"] >= 0, "sample run inconsistent"
            for c in schema.ATTRIBUTION:
                steps_cols[f"{c}_us"].append(parts[c])
            steps_cols["rank"].append(r), steps_cols["step"].append(s)
            steps_cols["start_us"].append(start), steps_cols["end_us"].append(end)
            steps_cols["total_us"].append(step_len), steps_cols["measured_us"].append(step_len)
            steps_cols["straggler_rank"].append(-1 if r == late_rank else late_rank)
            steps_cols["unexplained_us"].append(0.0)
    steps = schema.from_columns(steps_cols, schema=schema.STEPS_SCHEMA)

    coll_cols: dict[str, list[object]] = {f.name: [] for f in schema.COLLECTIVES_SCHEMA}
    for s in range(STEPS):
        for what, pg, op in (("a2a", "0", "all_to_all"), ("ar", "1", "all_reduce")):
            ids = [tag_to_id[("kernel", r, s, what)] for r in range(RANKS)]
            first = float(min(ts[i] for i in ids)) - (late_us if what == "a2a" else 0.0)
            coll_cols["pg"].append(pg), coll_cols["coll_seq"].append(s)
            coll_cols["coll_op"].append(op), coll_cols["step"].append(s)
            coll_cols["ranks"].append(RANKS), coll_cols["bytes"].append(float(rows[ids[0]]["coll_bytes_in"]))
            coll_cols["first_arrival_us"].append(first)
            coll_cols["last_arrival_us"].append(float(ts[ids[0]]))
            coll_cols["skew_us"].append(float(ts[ids[0]]) - first)
            coll_cols["late_rank"].append(late_rank if what == "a2a" else -1)
            coll_cols["start_us"].append(float(ts[ids[0]]))
            coll_cols["end_us"].append(float(max(ts[i] + dur[i] for i in ids)))
            coll_cols["transfer_us"].append(float(comp["collective"][ids[0]]))
            coll_cols["queue_us"].append(float(comp["queue"][ids[0]]))
            coll_cols["retry_us"].append(float(comp["retry"][ids[0]]))
    collectives = schema.from_columns(coll_cols, schema=schema.COLLECTIVES_SCHEMA)

    summary_cols: dict[str, list[object]] = {f.name: [] for f in schema.SUMMARY_SCHEMA}
    ev_rank = np.array(cols["rank"])
    for r in range(RANKS):
        srows = [i for i in range(steps.num_rows) if steps_cols["rank"][i] == r]
        for c in schema.ATTRIBUTION:
            busy = float(comp[c][ev_rank == r].sum()) if c in comp else 0.0
            exposed = float(sum(steps_cols[f"{c}_us"][i] for i in srows))
            summary_cols["rank"].append(r), summary_cols["component"].append(c)
            summary_cols["busy_us"].append(max(busy, 0.0) if c != "idle" else exposed)
            summary_cols["critical_us"].append(exposed), summary_cols["steps"].append(STEPS)
    summary = schema.from_columns(summary_cols, schema=schema.SUMMARY_SCHEMA)
    return ReplayResult(events, edges, steps, collectives, summary, hardware="sample-hw")


RUN_META = {
    "tool_version": "0.1.0",
    "traces": [{"path": "/abs/path/that/must/not/leak/rank0.json", "sha256": "0" * 64}],
    "hardware": "sample-hw",
    "spec": {
        "name": "sample-hw",
        "compute": {"bf16_peak_tflops": {"value": 989.4, "unit": "TFLOPS",
                                         "source": "vendor datasheet", "confidence": "published"}},
        "memory": {"hbm_bw_tbps": {"value": 3.35, "unit": "TB/s", "source": "vendor datasheet",
                                   "confidence": "published"}},
        "network": {"links": 8, "link_gbps": 400},
    },
    "options": {"mode": "scaled", "seed": 0},
    "assumptions": {"model": {"collectives": "ring all-reduce", "loss_rate": 0.0}},
}


def write_run(result: ReplayResult, out: Path, meta: dict[str, object] | None = None) -> Path:
    """Write ``result`` as a run directory through the storage layer."""
    from mtia_trace.storage import write_run as store

    tables = {name: getattr(result, name) for name in ("events", "edges", "steps", "collectives",
                                                       "summary")}
    store(tables, out, dict(RUN_META if meta is None else meta))
    return out
