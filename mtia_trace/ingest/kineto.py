"""One Kineto file -> raw columns of its complete ("X") and instant ("i") events.

Metadata events (ph "M") are deduplicated into thread/process names; flow events (ph "s"/"f")
become columns of (phase, pid, tid, ts, id), looked up by the rows whose args carry no
correlation id, to link device events to their launches. Everything else is counted and
reported, never silently dropped.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import attrgetter, eq, is_, is_not
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mtia_trace import keys
from mtia_trace.errors import TraceFormatError
from mtia_trace.ingest.classify import DEVICE_CATS, FLOW_CATS, RUNTIME_CATS
from mtia_trace.ingest.decode import (
    PHASED_TYPES,
    Args,
    Event,
    FlowEnd,
    NotStreamable,
    Pieces,
    check_steps,
    decode,
    read_bytes,
)

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
    cols: dict[str, Any]               # numpy arrays, one entry per row
    args: np.ndarray                   # object: the Args later steps read, else None
    values: dict[str, list[Any]]       # distinct values the CODED columns' codes index
    warnings: list[str]


def rank_from_name(path: Path) -> int | None:
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def _as_int(v: Any) -> int | None:
    """``v`` as an int64, or None (bools, non-integers, text that is no number, out of range)."""
    if isinstance(v, bool):
        return None
    out: int | None = None
    if isinstance(v, int):
        out = v
    elif isinstance(v, float) and v.is_integer():
        out = int(v)
    elif isinstance(v, str):
        try:
            out = int(v, 0)
        except ValueError:
            return None
    return out if out is not None and -(2**63) <= out < 2**63 else None


_PH = attrgetter("ph")
_NAME = attrgetter("name")
_ARGS = attrgetter("args")
_ID, _CAT, _PID, _TID, _TS, _DUR = map(attrgetter, ("id", "cat", "pid", "tid", "ts", "dur"))
_DEVICE, _STREAM = attrgetter("device"), attrgetter("stream")
_META = attrgetter("name", "pid", "tid", "args")
#: how `_partition` groups the phases: complete and instant rows, metadata, flows, the others
_COMPLETE_GROUP, _INSTANT_GROUP, _META_GROUP, _FLOW_GROUP, _OTHER_GROUP = range(5)
_TYPE_INDEX = {t: k for k, t in enumerate(PHASED_TYPES)}
_GROUP = {"X": _COMPLETE_GROUP, "i": _INSTANT_GROUP, "I": _INSTANT_GROUP, "M": _META_GROUP,
          "s": _FLOW_GROUP, "f": _FLOW_GROUP}


class _Index(dict):  # type: ignore[type-arg]
    """value -> code, a new value taking the next code as it is first looked up."""

    def __missing__(self, value: Any) -> int:
        code = self[value] = len(self)
        return code


class Coder:
    """Codes for values as they come, chunk after chunk: each distinct value's code is its
    first-seen position over everything coded so far (``values``); None is a value like any
    other. One pass of dict lookups at C speed (a value seen before never leaves C; a new one
    takes its code in `_Index.__missing__`), so it stays cheap on the small per-rank files a
    many-rank trace is made of (on lists of Python objects pandas' factorize is 2x slower;
    `_tracks` gives it the integer combinations, where it is faster)."""

    def __init__(self) -> None:
        self._index = _Index()

    def __call__(self, values: Iterable[Any], count: int = -1) -> np.ndarray:
        """The codes of ``values`` (a list, or any iterable of ``count`` values)."""
        if count < 0:
            count = len(values)  # type: ignore[arg-type]
        return np.fromiter(map(self._index.__getitem__, values), dtype=np.int64, count=count)

    @property
    def values(self) -> list[Any]:
        return list(self._index)


def codes(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """(code per value, distinct values in first-seen order), as one `Coder` gives them."""
    coder = Coder()
    return coder(values), coder.values


def _thread_labels(meta: list[Any]) -> set[tuple[Any, Any, Any, str]]:
    """The distinct (name, pid, tid, thread name) of the ``thread_name`` metadata events;
    metadata events repeat massively, so they are deduplicated as they are read."""
    threads = [e for e in meta if e.name == "thread_name"]
    return {(k, p, t, a.name) for k, p, t, a in map(_META, threads)
            if a is not None and a.name is not None}


def _thread_names(seen: set[tuple[Any, Any, Any, str]]) -> dict[tuple[Any, Any], list[str]]:
    """(pid, tid) -> distinct thread names (`_thread_labels`), in a fixed order."""
    out: dict[tuple[Any, Any], list[str]] = {}
    for _, pid, tid, label in sorted(seen, key=str):
        out.setdefault((pid, tid), []).append(label)
    return out


def _none(v: Any) -> Any:
    """pandas turns None into NaN among factorized uniques; turn it back."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _place(key: tuple[Any, Any, Any, Any], thread_names: dict[tuple[Any, Any], list[str]]
           ) -> tuple[int, int]:
    """(device, stream) of a device event from (pid, tid, args.device, args.stream)."""
    pid, tid, dev, st = key
    d = dev if dev is not None else _as_int(pid)
    s = _as_int(st) if st is not None else None
    if s is None:
        for tn in thread_names.get((pid, tid), []):
            m = _STREAM_IN_THREAD.search(tn)
            if m:
                s = int(m.group(1))
                break
        else:
            s = _as_int(tid)
    if s == _UINT32_MINUS_ONE:
        s = -1
    return (d if d is not None else -1, s if s is not None else -1)


#: integers up to this are exact in a float64
_EXACT_IN_FLOAT = 2**53
#: raw JSON shape args: columns of codes into the file's distinct raw values
RAW_FIELDS = ("input_dims", "input_type", "concrete")
#: columns held as int32 codes (-1: absent) -> the `RawFile.values` list the codes index
CODED = {"name": "name", "cat": "cat", "ph": "ph", "track": "track",
         **dict.fromkeys(RAW_FIELDS, "raw")}
#: a row's phase in the table: complete or instant ("I" and "i" alike)
_PHASES = ["X", "i"]


def _raw_codes(present: list[Args], arg_rows: np.ndarray, n: int, index: _Index
               ) -> dict[str, np.ndarray]:
    """Each shape arg as a per-row code into ``index``, the distinct raw JSON values seen so far
    (-1: absent). A `msgspec.Raw` is a view that keeps its piece of JSON text alive, and shapes
    repeat massively: each distinct one is copied out once, and no row keeps one of its own."""
    out = {}
    for f in RAW_FIELDS:
        col = np.full(n, -1, dtype=np.int32)
        # traces without shapes skip the per-row pass (a Raw holds a JSON value: never empty)
        if any(map(attrgetter(f), present)):
            col[arg_rows] = [-1 if v is None else index[bytes(v)]
                             for v in map(attrgetter(f), present)]
        out[f] = col
    return out


_EXT, _EXT_OLD, _CORR = map(attrgetter, ("external_id", "external_id_old", "correlation"))


def _ids(present: list[Args], get: attrgetter) -> np.ndarray:
    """One id arg of the rows with args as int64, -1 where absent (the default) or null."""
    try:
        return np.fromiter(map(get, present), dtype=np.int64, count=len(present))
    except TypeError:  # an explicit null: None
        return np.array([-1 if (v := get(a)) is None else v for a in present], np.int64)


#: args read after this file's columns are made (sizes, syncs, collectives); the rest (ids,
#: shapes, and a device event's device/stream) are columns by then
_LATE_FIELDS = tuple(f for f in Args.__struct_fields__
                     if f not in ("external_id", "external_id_old", "correlation", "device",
                                  "stream", "name", *RAW_FIELDS))


def _none_late(a: Args) -> bool:
    """Whether every one of `_LATE_FIELDS` is absent from ``a`` (tests hold the two in step).

    Plain attribute reads: CPython specializes them for struct slots, which makes this about 3x
    faster than comparing an ``attrgetter(*_LATE_FIELDS)`` tuple with a tuple of Nones."""
    return (a.flops is None and a.bytes is None and a.size is None and a.mem_size is None
            and a.direction is None and a.packet_ptr is None and a.seq_num is None
            and a.wait_on_stream is None and a.wait_corr is None and a.sync_kind is None
            and a.coll_name is None and a.in_nelems is None and a.out_nelems is None
            and a.group_size is None and a.dtype is None and a.pg_name is None
            and a.pg_ranks is None and a.seq is None and a.seq_lower is None
            and a.stream_id is None)


#: categories whose rows are read by args later even without any of those (syncs, MTIA queues)
_KEEP_ARGS_CATS = frozenset({"cuda_sync", "mtia_ccp_events"})


def _drop_spent(args: np.ndarray, arg_rows: np.ndarray, present: list[Args],
                is_device: np.ndarray, keep_cat: np.ndarray) -> None:
    """Release the args no later step reads (most ops', kernels' and launches'): they are the
    bulk of the ingest's memory until the table is built. The ones kept drop their raw shape
    views (shapes are columns by now) and share one string per distinct process-group rank list."""
    spent = np.fromiter(map(_none_late, present), dtype=bool, count=len(present))
    # a host event's stream is read later (stream synchronize calls)
    spent &= ~(~is_device[arg_rows] & np.fromiter(map(is_not, map(_STREAM, present),
                                                      repeat(None)), dtype=bool,
                                                  count=len(present)))
    spent &= ~keep_cat[arg_rows]
    args[arg_rows[spent]] = None
    seen: dict[str, str] = {}
    for a in args[arg_rows[~spent]].tolist():
        a.input_dims = a.input_type = a.concrete = None
        if isinstance(a.pg_ranks, str):
            a.pg_ranks = seen.setdefault(a.pg_ranks, a.pg_ranks)


def _partition(events: list[Any]) -> tuple[list[Any], np.ndarray, list[Any], list[Any],
                                          list[Any], dict[str, int]]:
    """(rows, whether each row is complete (not an instant), metadata events, flow events, the
    other events, events per phase in first-seen order) of a file.

    Each event is keyed once: in the phased decode by the index of its struct type among
    `PHASED_TYPES` (the type is the phase; a dict lookup per event, at C speed), in the plain
    one by its ``ph``. The rest is per distinct key, then numpy over the key codes."""
    if events and type(events[0]) is Event:
        code, uniq = codes(list(map(_PH, events)))
        ph_of: list[str] = uniq
    else:
        code = np.fromiter(map(_TYPE_INDEX.__getitem__, map(type, events)), dtype=np.int64,
                           count=len(events))
        counts = np.bincount(code, minlength=len(PHASED_TYPES))
        seen = np.flatnonzero(counts)  # the types present, in first-seen order below
        first = [int(np.argmax(code == k)) for k in seen.tolist()]
        order = seen[np.argsort(first, kind="stable")]
        remap = np.zeros(len(PHASED_TYPES), dtype=np.int64)
        remap[order] = np.arange(len(order))
        code = remap[code]
        ph_of = [PHASED_TYPES[k].ph for k in order.tolist()]
    phases = dict(zip(ph_of, np.bincount(code, minlength=len(ph_of)).tolist()))
    group = np.array([_GROUP.get(p, _OTHER_GROUP) for p in ph_of], dtype=np.int8)[code]

    every = np.fromiter(events, dtype=object, count=len(events))

    def take(mask: np.ndarray) -> list[Any]:
        return every[mask].tolist() if mask.any() else []

    is_row = group <= _INSTANT_GROUP
    rows = take(is_row)
    is_x = group[is_row] == _COMPLETE_GROUP
    return (rows, is_x, take(group == _META_GROUP), take(group == _FLOW_GROUP),
            take(group == _OTHER_GROUP), phases)


def _tracks(pids: Coded, tids: Coded, dev_idx: np.ndarray, devices: Coded, streams: Coded,
            thread_names: dict[tuple[Any, Any], list[str]]
            ) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """(track code per row, the track labels it indexes, device, stream): host rows run on
    ``host:<pid>:<tid>``, device rows (``dev_idx``, with their args' device and stream) on
    ``dev:<device>:<stream>`` (`_place`), each worked out once per distinct (pid, tid,
    args.device, args.stream)."""
    (p_code, p_uniq), (t_code, t_uniq) = pids, tids
    n = len(p_code)
    # pids and tids may be text: dict codes; their integer combinations go to pandas'
    # factorize, which keeps first-seen order too and is 3-10x faster on integers
    pt_code, pt_uniq = pd.factorize(p_code * len(t_uniq) + t_code)
    labels = [f"host:{p_uniq[k // len(t_uniq)]}:{t_uniq[k % len(t_uniq)]}"
              for k in pt_uniq.tolist()]
    track = pt_code.astype(np.int32)
    device = np.full(n, -1, dtype=np.int64)
    stream = np.full(n, -1, dtype=np.int64)
    if len(dev_idx):
        (d_code, d_uniq), (s_code, s_uniq) = devices, streams
        combo = (pt_code[dev_idx].astype(np.int64) * len(d_uniq) + d_code) * len(s_uniq) + s_code
        k_code, k_uniq = pd.factorize(combo)
        placed = []
        for k in k_uniq.tolist():
            k, s = divmod(k, len(s_uniq))
            k, d = divmod(k, len(d_uniq))
            p, t = divmod(int(pt_uniq[k]), len(t_uniq))
            placed.append(_place((p_uniq[p], t_uniq[t], _none(d_uniq[d]), _none(s_uniq[s])),
                                 thread_names))
        device[dev_idx] = np.array([d for d, _ in placed], dtype=np.int64)[k_code]
        stream[dev_idx] = np.array([s for _, s in placed], dtype=np.int64)[k_code]
        track[dev_idx] = len(labels) + k_code
        labels += [f"dev:{d}:{s}" for d, s in placed]
    return track, labels, device, stream


#: a coded column: (code per row, the distinct values the codes index)
Coded = tuple[np.ndarray, list[Any]]


class _Columns:
    """A file's columns built piece by piece (`add`, once per list of decoded events, in file
    order), so that no more than one piece's decoded events are alive at a time; `finish`
    checks them and makes the `RawFile`. Coded columns share one `Coder` over the pieces, so
    their codes are those of the whole file at once."""

    def __init__(self) -> None:
        self.phases: dict[str, int] = {}
        self.name, self.cat, self.pid, self.tid = Coder(), Coder(), Coder(), Coder()
        self.device, self.stream = Coder(), Coder()  # of device rows, from their args
        self.raw = _Index()  # distinct raw shape args -> code
        self.other_names: tuple[set[str], set[str], set[str]] = (set(), set(), set())
        self.threads: set[tuple[Any, Any, Any, str]] = set()
        self.parts: dict[str, list[np.ndarray]] = {}

    def _keep(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(v)

    def _keep_flows(self, flow_events: list[Any]) -> None:
        """The flows that may link a row to its launch (`FLOW_CATS`, with an id), as columns:
        whether it ends a flow, pid and tid (codes of the rows' coders), ts and the id as int64
        (`_as_int`) and whether it is one. The events themselves are not kept: on GPU traces
        they are a third of the file, and a piece's objects kept past it hold its memory."""
        ids: list[Any] = list(map(_ID, flow_events))
        fl = flow_events
        id_types = set(map(type, ids))
        if type(None) in id_types or not FLOW_CATS.issuperset(map(_CAT, flow_events)):
            keep = [e.cat in FLOW_CATS and v is not None for e, v in zip(flow_events, ids)]
            fl, ids = list(compress(fl, keep)), list(compress(ids, keep))
            id_types = set(map(type, ids))
        if not fl:
            return
        n = len(fl)
        ok = np.ones(n, dtype=bool)
        if id_types != {int}:  # ints are the usual case; Int64 bounds them
            ids = [_as_int(v) for v in ids]
            ok = np.array([v is not None for v in ids], dtype=bool)
            ids = [0 if v is None else v for v in ids]
        # a flow's end: its struct's type in the phased decode (reading the class attribute
        # through each event costs more), its ph in the plain one
        end = (map(eq, map(_PH, fl), repeat("f")) if type(fl[0]) is Event
               else map(is_, map(type, fl), repeat(FlowEnd)))
        self._keep(flow_end=np.fromiter(end, dtype=bool, count=n),
                   flow_pid=self.pid(map(_PID, fl), n), flow_tid=self.tid(map(_TID, fl), n),
                   flow_ts=np.fromiter(map(_TS, fl), dtype=np.float64, count=n),  # None -> nan
                   flow_id=np.array(ids, dtype=np.int64), flow_ok=ok)

    def _flow_ids(self, end: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """(the id of the flow at each (end, pid code, tid code, ts), whether there is one and
        it is an integer); of flows given twice, the last counts.

        Keys are complex numbers, (end, pid, tid) as one exact integer in the real part and ts
        in the imaginary one, which numpy sorts and searches lexicographically: one stable
        sort of the flows, one binary search per row (-0.0 and 0.0 compare equal, a NaN time
        equals nothing)."""
        if "flow_ts" not in self.parts:
            return np.zeros(len(ts), dtype=np.int64), np.zeros(len(ts), dtype=bool)
        npid, ntid = len(self.pid.values), len(self.tid.values)
        fts = self._joined("flow_ts")
        nf = len(fts)
        cols = [np.concatenate([self._joined(k), q])
                for k, q in (("flow_end", end), ("flow_pid", pid), ("flow_tid", tid))]
        both = np.empty(nf + len(ts), dtype=np.complex128)
        if 2 * npid * ntid < _EXACT_IN_FLOAT:
            both.real = (cols[0].astype(np.int64) * npid + cols[1]) * ntid + cols[2]
        else:  # more threads than a float counts exactly: dense codes of the triples
            both.real = keys.codes(*cols)
        both.imag[:nf], both.imag[nf:] = fts, ts
        del cols
        flows, queries = both[:nf], both[nf:]
        order = np.argsort(flows, kind="stable")
        fk = flows[order]
        last = np.r_[fk[1:] != fk[:-1], True]  # the last of each run of equal keys
        fk, order = fk[last], order[last]
        ids, ok = self._joined("flow_id")[order], self._joined("flow_ok")[order]
        at = np.minimum(np.searchsorted(fk, queries), len(fk) - 1)
        found = (fk[at] == queries) & ok[at]
        return ids[at], found

    def add(self, events: list[Any]) -> None:
        rows, is_x, meta, flow_events, other, phases = _partition(events)
        del events
        for ph, count in phases.items():
            self.phases[ph] = self.phases.get(ph, 0) + count
        for seen, evs in zip(self.other_names, (meta, flow_events, other)):
            seen.update(map(_NAME, evs))
        self.threads |= _thread_labels(meta)
        del meta, other
        self._keep_flows(flow_events)
        del flow_events
        n = len(rows)
        cat_code = self.cat(map(_CAT, rows), n)
        cat_uniq = self.cat.values
        is_device = np.array([c in DEVICE_CATS for c in cat_uniq], dtype=bool)[cat_code]
        args = np.fromiter(map(_ARGS, rows), dtype=object, count=n)
        self._keep(name=self.name(map(_NAME, rows), n), cat=cat_code, is_x=is_x,
                   pid=self.pid(map(_PID, rows), n), tid=self.tid(map(_TID, rows), n),
                   # None -> nan: `finish` words it
                   ts=np.fromiter(map(_TS, rows), dtype=np.float64, count=n),
                   dur=np.fromiter(map(_DUR, rows), dtype=np.float64, count=n))
        del rows
        arg_rows = np.flatnonzero(np.fromiter(map(is_not, args, repeat(None)), dtype=bool,
                                              count=n))
        external = np.full(n, -1, dtype=np.int64)
        correlation = np.full(n, -1, dtype=np.int64)
        present = args[arg_rows].tolist()
        self._keep(**_raw_codes(present, arg_rows, n, self.raw))
        dev_idx = np.flatnonzero(is_device)
        dargs = args[dev_idx].tolist()  # where a device row runs, read before args are dropped
        if None in dargs:
            self._keep(dev_device=self.device([None if a is None else a.device for a in dargs]),
                       dev_stream=self.stream([None if a is None else a.stream for a in dargs]))
        else:
            self._keep(dev_device=self.device(map(_DEVICE, dargs), len(dargs)),
                       dev_stream=self.stream(map(_STREAM, dargs), len(dargs)))
        del dargs
        if len(arg_rows):
            ext = _ids(present, _EXT)
            old = np.flatnonzero(ext < 0)  # the older spelling, read where the usual one lacks
            if len(old):
                ext[old] = _ids([present[j] for j in old.tolist()], _EXT_OLD)
            external[arg_rows] = ext
            correlation[arg_rows] = _ids(present, _CORR)
            keep_cat = np.array([c in _KEEP_ARGS_CATS for c in cat_uniq], dtype=bool)[cat_code]
            _drop_spent(args, arg_rows, present, is_device, keep_cat)
        del present
        self._keep(args=args, external=external, correlation=correlation)

    def _joined(self, key: str, dtype: Any = None) -> np.ndarray:
        parts = self.parts.pop(key, [])
        if not parts:
            return np.empty(0, dtype=dtype if dtype is not None else np.float64)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def finish(self, path: Path, sha: str, size: int, distributed_info: Any,
               device_properties: Any) -> RawFile:
        n_uniq = self.name.values
        check_steps(path, chain(n_uniq, *self.other_names))
        thread_names = _thread_names(self.threads)
        n_code = self._joined("name", np.int64)
        n = len(n_code)
        if n == 0:
            raise TraceFormatError(
                f"{path}: no complete (ph \"X\") or instant (ph \"i\") events; "
                "the trace is empty — profile at least one active step"
            )
        is_x = self._joined("is_x", bool)
        ts = self._joined("ts")
        if np.isnan(ts).any():
            i = int(np.flatnonzero(np.isnan(ts))[0])
            raise TraceFormatError(
                f"{path}: event {i} ({n_uniq[n_code[i]]!r}) has no \"ts\"; fix or re-export "
                "the trace"
            )
        dur = self._joined("dur")
        dur[np.isnan(dur) & ~is_x] = 0.0
        if np.isnan(dur).any():
            i = int(np.flatnonzero(np.isnan(dur))[0])
            raise TraceFormatError(
                f"{path}: complete event {i} ({n_uniq[n_code[i]]!r}) has no \"dur\"; fix or "
                "re-export the trace"
            )
        if (dur < 0).any():
            bad = np.flatnonzero(dur < 0)
            i = int(bad[0])
            raise TraceFormatError(
                f"{path}: {len(bad)} events have negative durations (first: "
                f"{n_uniq[n_code[i]]!r}, dur {dur[i]}); the trace is corrupt — re-export it"
            )

        cat_code = self._joined("cat", np.int64)
        cat_uniq = [c if isinstance(c, str) else None for c in self.cat.values]
        is_device = np.array([c in DEVICE_CATS for c in cat_uniq], dtype=bool)[cat_code]
        is_runtime = np.array([c in RUNTIME_CATS for c in cat_uniq], dtype=bool)[cat_code]
        pids: Coded = (self._joined("pid", np.int64), self.pid.values)
        tids: Coded = (self._joined("tid", np.int64), self.tid.values)
        correlation = self._joined("correlation", np.int64)

        # flows fill correlation ids the args lack (older traces, MTIA DMA requests): a
        # device row's flow ends where it starts, a runtime call's flow starts where it starts
        missing = np.flatnonzero((correlation < 0) & (is_device | is_runtime))
        if len(missing):
            fid, found = self._flow_ids(is_device[missing], pids[0][missing], tids[0][missing],
                                        ts[missing])
            correlation[missing[found]] = fid[found]
        for k in [k for k in self.parts if k.startswith("flow_")]:
            del self.parts[k]

        track, track_labels, device, stream = _tracks(
            pids, tids, np.flatnonzero(is_device),
            (self._joined("dev_device", np.int64), self.device.values),
            (self._joined("dev_stream", np.int64), self.stream.values), thread_names)

        di = distributed_info or {}
        rank = _as_int(di.get("rank")) if isinstance(di, dict) else None
        if rank is None and isinstance(di, dict) and di.get("rank") is not None:
            raise TraceFormatError(f"{path}: distributedInfo.rank = {str(di['rank'])[:40]!r} is "
                                   "not a rank number; fix it or remove it to take the rank from "
                                   "the name")
        if rank is None:
            rank = rank_from_name(path)
        phases = self.phases
        info = FileInfo(
            path=str(path), rank=rank if rank is not None else -1, sha256=sha, bytes=size,
            n_events=n, distributed_info=di if isinstance(di, dict) else {},
            device_properties=device_properties or [], phase_counts=dict(phases),
            thread_names=thread_names,
        )
        warnings = []
        other_ph = {p: c for p, c in phases.items() if p not in ("X", "i", "I", "M", "s", "f")}
        if other_ph:
            warnings.append(f"{path}: events with phases {other_ph} are not rows (only X and i "
                            "are)")
        cols = {
            "name": n_code.astype(np.int32),
            "cat": cat_code.astype(np.int32),
            "ph": (~is_x).astype(np.int32),  # codes into _PHASES
            "track": track,
            "is_device": is_device,
            "device": device,
            "stream": stream,
            "ts_us": ts,
            "dur_us": dur,
            "correlation": correlation,
            "external_id": self._joined("external", np.int64),
            **{f: self._joined(f, np.int32) for f in RAW_FIELDS},
        }
        values = {"name": n_uniq, "cat": cat_uniq, "ph": _PHASES, "track": track_labels,
                  "raw": list(self.raw)}
        return RawFile(info=info, cols=cols, args=self._joined("args", object), values=values,
                       warnings=warnings)


def read_file(path: Path) -> RawFile:
    """Parse one file; raise TraceFormatError with a one-line message on bad input.

    The file is decoded a piece at a time (`decode.Pieces`); one the pieces cannot read is
    read whole, with the phased decode or, where it refuses the input, the plain one."""
    cols = _Columns()
    pieces = Pieces(path)
    try:
        for events in pieces:
            cols.add(events)
            del events  # before the next piece is decoded
        return cols.finish(path, pieces.sha256, pieces.size, pieces.distributedInfo,
                           pieces.deviceProperties)
    except NotStreamable:
        pass
    del cols, pieces
    digest = hashlib.sha256()  # of the file as stored: what sha256sum prints
    raw = read_bytes(path, digest)
    sha = digest.hexdigest()
    size = len(raw)
    doc = decode(path, raw)
    del raw
    cols = _Columns()
    cols.add(doc.traceEvents)
    doc.traceEvents = []
    return cols.finish(path, sha, size, doc.distributedInfo, doc.deviceProperties)
