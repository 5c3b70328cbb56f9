"""Small hand-built canonical events tables for replay tests."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mtia_trace import schema

FIELDS = ("rank", "track", "is_device", "device", "stream", "ts_us", "dur_us", "depth", "kind",
          "name", "correlation", "launch_id", "step", "sync_stream", "sync_corr", "pg", "coll_seq",
          "coll_op")


def table(rows: list[dict[str, object]]) -> pa.Table:
    """Rows (dicts, any order) -> canonical events table sorted by (rank, track, ts, -dur);
    launch_id in the input refers to the input row index and is remapped."""
    defaults = {"device": -1, "stream": -1, "depth": 0, "correlation": -1, "launch_id": -1,
                "step": -1, "sync_stream": -1, "sync_corr": -1, "pg": None, "coll_seq": -1, "coll_op": None,
                "name": "op", "is_device": False}
    full = [{**defaults, **r} for r in rows]
    order = sorted(range(len(full)), key=lambda i: (full[i]["rank"], full[i]["track"],
                                                    full[i]["ts_us"], -full[i]["dur_us"]))
    new_pos = {old: new for new, old in enumerate(order)}
    cols: dict[str, list[object]] = {f: [] for f in FIELDS}
    for i in order:
        r = dict(full[i])
        if r["launch_id"] >= 0:  # type: ignore[operator]
            r["launch_id"] = new_pos[r["launch_id"]]  # type: ignore[index]
        for f in FIELDS:
            cols[f].append(r[f])
    cols["event_id"] = list(range(len(order)))  # type: ignore[assignment]
    return schema.from_columns(cols)


def host(rank: int, ts: float, dur: float, *, name: str = "op", depth: int = 0, kind: str = "host_op",
         tid: int = 1, **kw: object) -> dict[str, object]:
    return {"rank": rank, "track": f"host:{rank}:{tid}", "ts_us": ts, "dur_us": dur,
            "depth": depth, "kind": kind, "name": name, **kw}


def dev(rank: int, ts: float, dur: float, *, stream: int = 7, kind: str = "gemm",
        **kw: object) -> dict[str, object]:
    return {"rank": rank, "track": f"dev:{rank}:{stream}", "is_device": True, "device": 0,
            "stream": stream, "ts_us": ts, "dur_us": dur, "kind": kind, "name": f"k{kind}", **kw}


def rows_of(t: pa.Table) -> list[dict[str, object]]:
    return t.to_pylist()


def by_name(t: pa.Table, name: str) -> int:
    names = t.column("name").to_pylist()
    return names.index(name)


__all__ = ["table", "host", "dev", "by_name", "np"]
