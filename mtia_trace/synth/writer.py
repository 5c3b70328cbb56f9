"""Serialize the event columns as Kineto JSON, one gzip file per rank, deterministically.

Every event is written as 9 static fragments around 8 numeric slots (pid, tid, ts, dur,
External id, correlation/flow id, Seq, device); the fragments are built once per template event
(and per rank only where args differ by rank), the numbers are formatted a column at a time by
orjson, and a rank's file is one ``bytes.join``. Gzip headers carry no name or time.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson

from mtia_trace.synth.timeline import HOST_PID, Rec

SLOTS = 8  # pid, tid, ts, dur, ext, corr, seq, device
_EMPTY = b""


def _frags(rec: Rec, args: dict | None) -> tuple[bytes, ...]:
    """The 9 fragments around the 8 numeric slots of one event."""
    head = b'{"ph":"' + rec.ph.encode() + b'","cat":' + orjson.dumps(rec.cat) + b',"name":' \
        + orjson.dumps(rec.name) + b',"pid":'
    if rec.ph in ("s", "f"):
        tail = b',"bp":"e"}' if rec.ph == "f" else b"}"
        return (head, b',"tid":', b',"ts":', _EMPTY, _EMPTY, b',"id":', _EMPTY, _EMPTY, tail)
    body = orjson.dumps(args)[1:-1] if args else b""
    return (head, b',"tid":', b',"ts":', b',"dur":', b',"args":{"External id":',
            b',"correlation":' if rec.corr is not None else _EMPTY,
            b',"Seq":' if rec.seq is not None else _EMPTY,
            b',"device":' if rec.device else _EMPTY,
            (b"," + body if body else b"") + b"}}")


class RankWriter:
    """Holds the rank-independent parts of all events; renders one rank's event list."""

    def __init__(self, recs: list[Rec], ranks: int, ranks_per_node: int) -> None:
        self.recs, self.R = recs, ranks
        n = len(recs)
        self.frags = np.empty((n, SLOTS + 1), dtype=object)
        self.varying: list[int] = []
        cache: dict[int, tuple[bytes, ...]] = {}
        for i, rec in enumerate(recs):
            if isinstance(rec.args, list):
                self.varying.append(i)
                continue
            key = (rec.ph, rec.cat, rec.name, rec.corr is None, rec.seq is None, rec.device,
                   id(rec.args))
            f = cache.get(key)  # type: ignore[arg-type]
            if f is None:
                f = cache[key] = _frags(rec, rec.args)  # type: ignore[index]
            self.frags[i] = f
        dev = np.array([r.device for r in recs])
        self.is_dev = dev
        self.stream = np.array([r.stream for r in recs], np.int64)
        self.ts = np.stack([r.ts for r in recs])                        # (n, ranks) ns
        self.dur = np.stack([r.dur if r.dur is not None else np.zeros(ranks, np.int64)
                             for r in recs])
        self.has_dur = np.array([r.dur is not None for r in recs])
        self.ext = np.array([r.ext if r.ext is not None else 0 for r in recs], np.int64)
        self.has_ext = np.array([r.ext is not None for r in recs])
        self.corr = np.array([r.corr if r.corr is not None else 0 for r in recs], np.int64)
        self.has_corr = np.array([r.corr is not None for r in recs])
        self.seq = np.array([r.seq if r.seq is not None else 0 for r in recs], np.int64)
        self.has_seq = np.array([r.seq is not None for r in recs])
        self.per_node = ranks_per_node
        # rank-independent numeric columns, formatted once
        self.ext_s = _fmt_int(self.ext, self.has_ext)
        self.corr_s = _fmt_int(self.corr, self.has_corr)
        self.seq_s = _fmt_int(self.seq, self.has_seq)
        self.tid_host = None

    def events(self, rank: int) -> bytes:
        n = len(self.recs)
        frags = self.frags.copy()
        for i in self.varying:
            frags[i] = _frags(self.recs[i], self.recs[i].args[rank])  # type: ignore[index]
        dev = rank % self.per_node
        pid = np.where(self.is_dev, dev, HOST_PID + rank)
        tid = np.where(self.is_dev, self.stream, HOST_PID + rank)
        out = np.empty((n, 2 * SLOTS + 2), dtype=object)
        out[:, 0:2 * SLOTS + 1:2] = frags
        out[:, 1] = _fmt_int(pid, None)
        out[:, 3] = _fmt_int(tid, None)
        out[:, 5] = _fmt_us(self.ts[:, rank], None)
        out[:, 7] = _fmt_us(self.dur[:, rank], self.has_dur)
        out[:, 9] = self.ext_s
        out[:, 11] = self.corr_s
        out[:, 13] = self.seq_s
        out[:, 15] = np.where(self.is_dev & self.has_dur, str(dev).encode(), _EMPTY)
        out[:, -1] = b",\n"
        out[-1, -1] = b"\n"
        return b"".join(out.ravel().tolist())


def _split(raw: bytes) -> np.ndarray:
    return np.array(raw[1:-1].split(b","), dtype=object)


def _fmt_int(values: np.ndarray, present: np.ndarray | None) -> np.ndarray:
    s = _split(orjson.dumps(np.ascontiguousarray(values, np.int64), option=orjson.OPT_SERIALIZE_NUMPY))
    return s if present is None else np.where(present, s, _EMPTY)


def _fmt_us(ns: np.ndarray, present: np.ndarray | None) -> np.ndarray:
    us = np.ascontiguousarray(ns, np.int64) / 1000.0
    s = _split(orjson.dumps(us, option=orjson.OPT_SERIALIZE_NUMPY))
    return s if present is None else np.where(present, s, _EMPTY)


def write_trace(path: Path, header: dict, metadata: list[dict], events: bytes,
                level: int = 6) -> int:
    """Write ``{header..., "traceEvents": [metadata..., events]}`` gzipped; returns bytes written."""
    head = orjson.dumps(header, option=orjson.OPT_SORT_KEYS)[:-1]
    meta = b",\n".join(orjson.dumps(m) for m in metadata)
    with open(path, "wb") as fh:
        with gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=level) as gz:
            gz.write(head + b',\n"traceEvents":[\n' + meta + (b",\n" if meta else b"")
                     + events + b"]}\n")
    return path.stat().st_size
