"""One Kineto file -> raw columns of its complete ("X") and instant ("i") events.

Metadata events (ph "M") are deduplicated into thread/process names; flow events (ph "s"/"f")
become a (pid, tid, ts) -> id map used to link device events to their launches. Everything
else is counted and reported, never silently dropped.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from mtia_trace.errors import TraceFormatError
from mtia_trace.ingest.classify import DEVICE_CATS, FLOW_CATS, RUNTIME_CATS
from mtia_trace.ingest.decode import Args, Document, decode, read_bytes

_RANK_IN_NAME = re.compile(r"(?:rank|_r)[-_]?(\d+)", re.I)
_STREAM_IN_THREAD = re.compile(r"stream\s*(\d+)", re.I)
_UINT32_MINUS_ONE = 4294967295


@dataclass
class FileInfo:
    """What was read from one trace file."""

    path: str
    rank: int
    sha256: str
    bytes: int
    n_events: int                      # complete + instant events (= rows in the table)
    distributed_info: dict[str, Any]
    device_properties: list[Any]
    phase_counts: dict[str, int] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], list[str]] = field(default_factory=dict)


@dataclass
class RawFile:
    info: FileInfo
    cols: dict[str, Any]               # numpy arrays / lists, one entry per row
    args: list[Args | None]
    warnings: list[str]


def rank_from_name(path: Path) -> int | None:
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def _int_or(values: list[Any], fill: int) -> np.ndarray:
    return pa.array(values, type=pa.int64(), from_pandas=True).fill_null(fill).to_numpy().copy()


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return None
    return None


def read_file(path: Path) -> RawFile:
    """Parse one file; raise TraceFormatError with a one-line message on bad input."""
    raw = read_bytes(path)
    sha = hashlib.sha256(raw).hexdigest()
    size = len(raw)
    doc: Document = decode(path, raw)
    del raw

    events = doc.traceEvents
    ph_all = [e.ph for e in events]
    phases: Counter[str] = Counter(ph_all)
    rows = [e for e, p in zip(events, ph_all) if p == "X" or p == "i" or p == "I"]
    meta = {(e.name, e.pid, e.tid, e.args.name) for e, p in zip(events, ph_all)
            if p == "M" and e.args is not None and e.args.name is not None}
    thread_names: dict[tuple[Any, Any], list[str]] = {}
    for kind, pid, tid, label in sorted(meta, key=str):
        if kind == "thread_name":
            thread_names.setdefault((pid, tid), []).append(label)
    flows: dict[tuple[Any, Any, Any, float], int | str] = {
        (p, e.pid, e.tid, e.ts): e.id for e, p in zip(events, ph_all)
        if (p == "s" or p == "f") and e.cat in FLOW_CATS and e.id is not None
    }
    del events, ph_all, meta
    n = len(rows)
    if n == 0:
        raise TraceFormatError(
            f"{path}: no complete (ph \"X\") or instant (ph \"i\") events; "
            "the trace is empty — profile at least one active step"
        )

    ts_list = [e.ts for e in rows]
    dur_list = [e.dur for e in rows]
    ph = [e.ph for e in rows]
    ts = np.array(ts_list, dtype=np.float64)  # None -> nan
    if np.isnan(ts).any():
        i = int(np.flatnonzero(np.isnan(ts))[0])
        raise TraceFormatError(
            f"{path}: event {i} ({rows[i].name!r}) has no \"ts\"; fix or re-export the trace"
        )
    dur = np.array([d if d is not None else (0.0 if p != "X" else np.nan)
                    for d, p in zip(dur_list, ph)], dtype=np.float64)
    if np.isnan(dur).any():
        i = int(np.flatnonzero(np.isnan(dur))[0])
        raise TraceFormatError(
            f"{path}: complete event {i} ({rows[i].name!r}) has no \"dur\"; fix or re-export the trace"
        )
    if (dur < 0).any():
        bad = np.flatnonzero(dur < 0)
        i = int(bad[0])
        raise TraceFormatError(
            f"{path}: {len(bad)} events have negative durations (first: {rows[i].name!r}, "
            f"dur {dur[i]}); the trace is corrupt — re-export it"
        )

    names = [e.name for e in rows]
    cats = [e.cat for e in rows]
    pids = [e.pid for e in rows]
    tids = [e.tid for e in rows]
    args = [e.args for e in rows]
    is_device = np.array([c in DEVICE_CATS for c in cats], dtype=bool)

    def arg(attr: str) -> list[Any]:
        return [getattr(a, attr) if a is not None else None for a in args]

    external = arg("external_id")
    if any(a is not None and a.external_id_old is not None for a in args):
        external = [x if x is not None else (a.external_id_old if a is not None else None)
                    for x, a in zip(external, args)]
    correlation = _int_or(arg("correlation"), -1)

    # flows fill correlation ids the args lack (older traces, MTIA DMA requests)
    missing = np.flatnonzero((correlation < 0) & (is_device | np.array(
        [c in RUNTIME_CATS for c in cats], dtype=bool)))
    if flows and len(missing):
        for i in missing.tolist():
            key_ph = "f" if is_device[i] else "s"
            fid = flows.get((key_ph, pids[i], tids[i], ts_list[i]))
            fid = _as_int(fid)
            if fid is not None:
                correlation[i] = fid

    device = np.full(n, -1, dtype=np.int64)
    stream = np.full(n, -1, dtype=np.int64)
    dev_idx = np.flatnonzero(is_device)
    stream_of_thread: dict[tuple[Any, Any], int | None] = {}
    placed: dict[tuple[Any, Any, Any, Any], tuple[int, int]] = {}
    for i in dev_idx.tolist():
        a = args[i]
        key4 = (pids[i], tids[i], a.device if a is not None else None,
                a.stream if a is not None else None)
        hit = placed.get(key4)
        if hit is None:
            d = key4[2] if key4[2] is not None else _as_int(pids[i])
            s = _as_int(key4[3]) if key4[3] is not None else None
            if s is None:
                key = (pids[i], tids[i])
                if key not in stream_of_thread:
                    found = None
                    for tn in thread_names.get(key, []):
                        m = _STREAM_IN_THREAD.search(tn)
                        if m:
                            found = int(m.group(1))
                            break
                    stream_of_thread[key] = found if found is not None else _as_int(tids[i])
                s = stream_of_thread[key]
            if s == _UINT32_MINUS_ONE:
                s = -1
            hit = placed[key4] = (d if d is not None else -1, s if s is not None else -1)
        device[i], stream[i] = hit

    track = np.array([f"dev:{device[i]}:{stream[i]}" if is_device[i] else f"host:{pids[i]}:{tids[i]}"
                      for i in range(n)], dtype=object)

    di = doc.distributedInfo or {}
    rank = _as_int(di.get("rank")) if isinstance(di, dict) else None
    if rank is None:
        rank = rank_from_name(path)
    info = FileInfo(
        path=str(path), rank=rank if rank is not None else -1, sha256=sha, bytes=size,
        n_events=n, distributed_info=di if isinstance(di, dict) else {},
        device_properties=doc.deviceProperties or [], phase_counts=dict(phases),
        thread_names=thread_names,
    )
    warnings = []
    other_ph = {p: c for p, c in phases.items() if p not in ("X", "i", "I", "M", "s", "f")}
    if other_ph:
        warnings.append(f"{path}: events with phases {other_ph} are not rows (only X and i are)")
    cols = {
        "name": np.array(names, dtype=object),
        "cat": np.array(cats, dtype=object),
        "ph": np.array(["i" if p == "I" else p for p in ph], dtype=object),
        "track": track,
        "is_device": is_device,
        "device": device,
        "stream": stream,
        "ts_us": ts,
        "dur_us": dur,
        "correlation": correlation,
        "external_id": _int_or(external, -1),
        "pid": pids,
        "tid": tids,
    }
    return RawFile(info=info, cols=cols, args=args, warnings=warnings)
