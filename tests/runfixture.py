"""A tiny hand-built replay result (2 ranks x 2 steps) with known answers, for storage and analyzers.

Per rank and step: an embedding lookup (rank 1 is 100 us slower: the straggler), a GEMM, a
host-to-device copy, an all-reduce on a second stream that waits for both ranks (and queues for
20 us in step 1, with 20 us of retries), and an optimizer kernel after it. Attribution per step:
compute 100, fetch E, collective 400 - retry, retry, queue, host 60, idle = the rest.
"""

from __future__ import annotations

import pyarrow as pa

from mtia_trace import schema

RANKS, STEPS, STEP_US = 2, 2, 1000.0


def _embed_us(rank: int) -> float:
    return 200.0 + 100.0 * rank


def _queue_us(step: int) -> float:
    return 20.0 * step


def _rows() -> list[dict]:
    rows: list[dict] = []

    def add(key: str, **kw: object) -> None:
        kw.setdefault("ph", "X")
        kw.setdefault("critical", False)
        kw.setdefault("bound_by", "track")
        rows.append({"key": key, **kw})

    for r in range(RANKS):
        host, dev, comm = f"host:{100 + r}:1", f"dev:{r}:7", f"dev:{r}:13"
        for s in range(STEPS):
            t = s * STEP_US
            e, q = _embed_us(r), _queue_us(s)
            retry = q  # retries appear together with queueing in step 1
            ar_start = t + 60 + _embed_us(RANKS - 1) + q
            ar_end = ar_start + 400.0
            k = f"{r}.{s}."
            common = {"rank": r, "step": s}
            hostc = {**common, "track": host, "is_device": False, "device": -1, "stream": -1}
            devc = {**common, "track": dev, "is_device": True, "device": r, "stream": 7}
            add(k + "ann", **hostc, name=f"ProfilerStep#{s}", cat="user_annotation",
                kind="annotation", ts=t, end=ar_end + 100, depth=0, bound_by="none")
            add(k + "fwd", **hostc, name="## forward ##", cat="user_annotation",
                kind="annotation", ts=t + 5, end=t + 95, depth=1, parent=k + "ann",
                bound_by="none")
            add(k + "emb_op", **hostc, name="aten::embedding_bag", cat="cpu_op",
                kind="embedding", ts=t + 10, end=t + 60, depth=1, parent=k + "ann",
                host_us=50.0, bound_by="host")
            add(k + "launch1", **hostc, name="cudaLaunchKernel", cat="cuda_runtime",
                kind="runtime", ts=t + 50, end=t + 58, depth=2, parent=k + "emb_op",
                host_us=8.0, correlation=r * 100 + s * 10 + 1)
            add(k + "emb", **devc, name="embedding_bag_kernel", cat="kernel", kind="embedding",
                ts=t + 60, end=t + 60 + e, fetch_us=e, bytes_read=1e6 * (1 + r),
                bytes_written=1e5, launch=k + "launch1", bound_by="launch",
                bound_src=k + "launch1", critical=True, correlation=r * 100 + s * 10 + 1)
            add(k + "mm_op", **hostc, name="aten::mm", cat="cpu_op", kind="gemm",
                ts=t + 70, end=t + 90, depth=1, parent=k + "ann", host_us=20.0, flops=1e9,
                bound_by="host")
            add(k + "launch2", **hostc, name="cudaLaunchKernel", cat="cuda_runtime",
                kind="runtime", ts=t + 80, end=t + 88, depth=2, parent=k + "mm_op",
                host_us=8.0, correlation=r * 100 + s * 10 + 2)
            add(k + "gemm", **devc, name="sm90_gemm", cat="kernel", kind="gemm",
                ts=t + 60 + e, end=t + 360 + e, compute_us=250.0, fetch_us=50.0, flops=1e9,
                bytes_read=4e6, launch=k + "launch2", bound_src=k + "emb",
                correlation=r * 100 + s * 10 + 2)
            add(k + "h2d", **devc, name="Memcpy HtoD (Pageable -> Device)", cat="gpu_memcpy",
                kind="memcpy", ts=t + 360 + e, end=t + 410 + e, fetch_us=50.0, bytes_read=5e5,
                bytes_written=5e5, bound_src=k + "gemm")
            add(k + "ar", **common, track=comm, is_device=True, device=r, stream=13,
                name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", cat="kernel", kind="collective",
                ts=ar_start, end=ar_end, collective_us=400.0 - retry, retry_us=retry, queue_us=q,
                coll_op="all_reduce", coll_bytes_in=4e6, coll_bytes_out=4e6, group_size=RANKS,
                pg="0", pg_ranks="[0, 1]", coll_seq=s, critical=True,
                bound_by="resource" if q else "collective",
                bound_src=-1 if q else f"{RANKS - 1}.{s}.emb")
            add(k + "opt", **devc, name="optimizer_kernel", cat="kernel", kind="optimizer",
                ts=ar_end, end=ar_end + 100, compute_us=100.0, bound_by="sync",
                bound_src=k + "ar", critical=True)
    return rows


def _events(rows: list[dict]) -> tuple[pa.Table, dict[str, int]]:
    rows = sorted(rows, key=lambda x: (x["rank"], x["track"], x["ts"], -(x["end"] - x["ts"])))
    ids = {row["key"]: i for i, row in enumerate(rows)}
    ref = lambda v: ids[v] if isinstance(v, str) else -1 if v is None else v  # noqa: E731
    cols: dict[str, list] = {n: [] for n in schema.REPLAYED_EVENTS_SCHEMA.names}
    for i, row in enumerate(rows):
        dur = row["end"] - row["ts"]
        values = {
            "event_id": i, "ts_us": row["ts"], "dur_us": dur, "start_us": row["ts"],
            "end_us": row["end"], "src_file": f"rank{row['rank']}.json",
            "parent_id": ref(row.get("parent")), "launch_id": ref(row.get("launch")),
            "bound_src": ref(row.get("bound_src")),
            # the critical events here are leaves: their whole run is their own work
            "critical_us": row.get("critical_us", dur if row.get("critical") else 0.0),
        }
        for name in cols:
            if name in values:
                cols[name].append(values[name])
            elif name in row:
                cols[name].append(row[name])
            else:
                spec = {c.name: c for c in schema.EVENT_COLUMNS + schema.REPLAY_COLUMNS}[name]
                default = spec.null
                if default is None and spec.type == pa.float64():
                    default = 0.0
                cols[name].append(default)
    return schema.from_columns(cols, schema=schema.REPLAYED_EVENTS_SCHEMA), ids


def _edges(ids: dict[str, int], events: pa.Table) -> pa.Table:
    src, dst, typ = [], [], []

    def edge(a: str, b: str, t: str) -> None:
        src.append(ids[a]), dst.append(ids[b]), typ.append(t)

    for r in range(RANKS):
        for s in range(STEPS):
            k = f"{r}.{s}."
            edge(k + "launch1", k + "emb", "launch")
            edge(k + "launch2", k + "gemm", "launch")
            edge(k + "emb", k + "gemm", "stream")
            edge(k + "gemm", k + "h2d", "stream")
            edge(k + "h2d", k + "opt", "stream")
            edge(k + "emb", k + "ar", "sync")
            edge(k + "ar", k + "opt", "sync")
            for other in range(RANKS):
                if other != r:
                    edge(f"{other}.{s}.emb", k + "ar", "collective")
    return schema.from_columns({"src": src, "dst": dst, "type": typ}, schema=schema.EDGES_SCHEMA)


def _steps() -> pa.Table:
    cols: dict[str, list] = {n: [] for n in schema.STEPS_SCHEMA.names}
    for r in range(RANKS):
        for s in range(STEPS):
            t, e, q = s * STEP_US, _embed_us(r), _queue_us(s)
            end = t + 60 + _embed_us(RANKS - 1) + q + 500.0
            total = end - t
            wait = _embed_us(RANKS - 1) - e
            parts = {"compute": 100.0, "fetch": e, "collective": 400.0 - q, "peer_wait": wait,
                     "queue": q, "retry": q, "host": 60.0}
            parts["idle"] = total - sum(parts.values())
            row = {"rank": r, "step": s, "start_us": t, "end_us": end, "total_us": total,
                   "measured_us": total,
                   "straggler_rank": RANKS - 1 if wait > 0 else -1,
                   "unexplained_us": 0.0,
                   **{f"{a}_us": v for a, v in parts.items()}}
            for n in cols:
                cols[n].append(row[n])
    return schema.from_columns(cols, schema=schema.STEPS_SCHEMA)


def _collectives() -> pa.Table:
    cols: dict[str, list] = {n: [] for n in schema.COLLECTIVES_SCHEMA.names}
    for s in range(STEPS):
        t, q = s * STEP_US, _queue_us(s)
        first, last = t + 60 + _embed_us(0), t + 60 + _embed_us(RANKS - 1)
        row = {"pg": "0", "coll_seq": s, "coll_op": "all_reduce", "step": s, "ranks": RANKS,
               "bytes": 4e6, "first_arrival_us": first, "last_arrival_us": last,
               "skew_us": last - first, "late_rank": RANKS - 1, "start_us": last + q,
               "end_us": last + q + 400.0, "transfer_us": 400.0 - q, "queue_us": q,
               "retry_us": q}
        for n in cols:
            cols[n].append(row[n])
    return schema.from_columns(cols, schema=schema.COLLECTIVES_SCHEMA)


def _summary(events: pa.Table, steps: pa.Table) -> pa.Table:
    ev, st = events.to_pylist(), steps.to_pylist()
    cols: dict[str, list] = {n: [] for n in schema.SUMMARY_SCHEMA.names}
    for r in range(RANKS):
        for a in schema.ATTRIBUTION:
            col = f"{a}_us"
            busy = sum(e[col] for e in ev if e["rank"] == r and col in e)
            exposed = sum(x[col] for x in st if x["rank"] == r)
            for n, v in (("rank", r), ("component", a), ("busy_us", busy),
                         ("critical_us", exposed), ("steps", STEPS)):
                cols[n].append(v)
    return schema.from_columns(cols, schema=schema.SUMMARY_SCHEMA)


def tiny_tables() -> dict[str, pa.Table]:
    """The five run tables of the tiny workload."""
    events, ids = _events(_rows())
    steps = _steps()
    return {"events": events, "edges": _edges(ids, events), "steps": steps,
            "collectives": _collectives(), "summary": _summary(events, steps)}


def tiny_meta() -> dict:
    return {"hardware": "as-measured", "seed": 0, "spec": {"name": "as-measured"},
            "options": {"mode": "auto", "loss_rate": 0.0},
            "traces": [{"path": f"rank{r}.json", "rank": r, "sha256": "0" * 64}
                       for r in range(RANKS)]}
