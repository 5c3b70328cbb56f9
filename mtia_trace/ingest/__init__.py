"""Kineto trace ingest: files -> the canonical events table (`schema.EVENTS_SCHEMA`).

    trace = load("traces/")          # a file, a directory of per-rank files, or a list of paths
    trace.events                     # pa.Table, all ranks, event_id == row position
    trace.files, trace.warnings, trace.counts
"""

from __future__ import annotations

import gc
import gzip
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.errors import TraceFormatError
from mtia_trace.ingest import anomalies, consistency, heap, oddities
from mtia_trace.ingest.assemble import build
from mtia_trace.ingest.decode import MAX_STEP, not_regular
from mtia_trace.ingest.kineto import FileInfo, RawFile
from mtia_trace.ingest.readers import read_all

__all__ = ["FILE_FIELDS", "FileInfo", "Trace", "file_facts", "load", "trace_files"]

TRACE_SUFFIXES = (".json", ".json.gz")
#: Ranks whose same-numbered steps start further apart than this are reported as clock skew.
CLOCK_SKEW_WARN_US = 1_000_000.0


@dataclass
class Trace:
    """The ingested trace: the events table plus per-file facts and warnings."""

    events: pa.Table
    files: list[FileInfo]
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    readers: int = 1                   # processes that read the files (`readers.read_all`)
    #: with ``load(..., cross_rank=False)``: what the checks across ranks need, for
    #: `cross_rank_warnings` once every rank's trace is read (a distributed ingest)
    cross: consistency.Facts | None = None

    @property
    def ranks(self) -> list[int]:
        return sorted(f.rank for f in self.files)


#: Facts per trace file kept in run.json.
FILE_FIELDS = ("path", "rank", "sha256", "bytes", "n_events")


def file_facts(trace: Trace) -> list[dict]:
    """Per-file facts of an ingested trace (`FILE_FIELDS` and the devices it names), for run.json."""
    out = []
    for f in getattr(trace, "files", None) or []:
        d = {k: getattr(f, k, None) for k in FILE_FIELDS}
        d["path"] = str(d["path"])
        devices = getattr(f, "device_properties", None) or []
        d["devices"] = sorted({str(p.get("name")) for p in devices if isinstance(p, dict)})
        out.append(d)
    return out


#: Bytes read from the start of a file to tell a PyTorch execution trace from a Kineto trace.
_HEAD_BYTES = 1 << 16


def is_execution_trace(path: Path) -> bool:
    """A PyTorch execution trace (``ExecutionTraceObserver``: top-level ``schema`` and
    ``nodes``, no ``traceEvents``), which sits next to the Kineto trace it was recorded with."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return False  # the reader words the error
    nodes = re.search(rb'"nodes"\s*:\s*\[', head)
    events = head.find(b'"traceEvents"')
    if nodes is None or b'"schema"' not in head:
        return False
    return events < 0 or events > nodes.start()


def skipped_execution_traces(path: Path) -> list[Path]:
    """The PyTorch execution traces a trace folder holds (skipped by `trace_files`)."""
    if not path.is_dir():
        return []
    return [p for p in sorted(path.iterdir()) if p.name.endswith(TRACE_SUFFIXES)
            and p.is_file() and is_execution_trace(p)]


def trace_files(path: Path) -> list[Path]:
    """The trace files a directory holds (sorted; PyTorch execution traces left out), or the
    path itself."""
    if path.is_dir():
        skip = set(skipped_execution_traces(path))
        files = sorted(p for p in path.iterdir()
                       if p.name.endswith(TRACE_SUFFIXES) and p.name != "manifest.json"
                       and p not in skip)
        for p in files:
            why = not_regular(p)
            if why is not None:
                raise TraceFormatError(
                    f"{p}: {why}; every *.json / *.json.gz in a trace folder is read as a rank's "
                    "trace, remove or move it")
        if not files:
            raise TraceFormatError(
                f"{path}: directory holds no trace files (*.json, *.json.gz); "
                "point to a Kineto trace or a folder of per-rank traces"
            )
        return files
    if not path.exists():
        raise TraceFormatError(f"{path}: no such file or directory; check the path")
    return [path]


def load(paths: str | Path | Iterable[str | Path],
         progress: Callable[[str, int, int], None] | None = None, *,
         cross_rank: bool = True) -> Trace:
    """Read one or more Kineto traces (one per rank) into a `Trace`.

    :param progress: called as ``progress(path, i, n)`` before each file is read.
    :param cross_rank: run the checks across ranks (world size, clock skew, `consistency`);
        False when these are some of the job's ranks: `Trace.cross` then holds what the checks
        need, and `cross_rank_warnings` runs them on those of every part.
    """
    items = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    if not items:
        raise TraceFormatError("no trace given; pass a Kineto .json/.json.gz file or a directory")
    files = [f for p in items for f in trace_files(p)]
    skipped = [f"{e}: a PyTorch execution trace, not a Kineto trace; skipped (the Kineto "
               "trace beside it is read)" for p in items for e in skipped_execution_traces(p)]
    # the cyclic GC would rescan the millions of decoded objects on every collection; the
    # ingest creates no reference cycles, so it runs with collection paused
    gc_was_on = gc.isenabled()
    gc.disable()
    with heap.system_arrow_pool():
        try:
            raws, readers = read_all(files, progress)
            warnings = _assign_ranks(raws)
            if cross_rank:
                warnings += _world_size_count({r.info.rank: r.info.distributed_info
                                               for r in raws})
            events, more = build(raws)
        finally:
            if gc_was_on:
                gc.enable()
        warnings += more + skipped
        # a single rank's own load needs no facts across ranks
        cross = consistency.facts(events, [r.info for r in raws]) \
            if len(raws) > 1 or not cross_rank else None
        if cross is not None and cross_rank:
            warnings += _clock_skew(cross.steps, len(pc.unique(events.column("rank"))))
        warnings += anomalies.check(events)
        warnings += oddities.check(events)
        if cross is not None and cross_rank:
            warnings += consistency.check_facts(cross)
    heap.release()  # the columns the table consumed, the checks' intermediates
    kinds = events.column("kind").value_counts()
    counts = {d["values"]: d["counts"] for d in kinds.to_pylist()}
    return Trace(events=events, files=[r.info for r in raws], warnings=warnings,
                 counts=dict(sorted(counts.items(), key=lambda kv: -kv[1])), readers=readers,
                 cross=None if cross_rank else cross)


def cross_rank_warnings(parts: list[consistency.Facts]) -> list[str]:
    """The checks across ranks that ``load(..., cross_rank=False)`` left out, on the
    `Trace.cross` of every part of the job (disjoint sets of ranks): the warnings ``load``
    gives when it reads all of them at once."""
    if not parts:
        return []
    f = consistency.combine(parts)
    return (_world_size_count(f.dist) + _clock_skew(f.steps, len(f.dist))
            + consistency.check_facts(f))


def _assign_ranks(raws: list[RawFile]) -> list[str]:
    warnings = []
    unknown = [r for r in raws if r.info.rank < 0]
    if unknown:
        if len(raws) == 1:
            raws[0].info.rank = 0
        else:
            taken = {r.info.rank for r in raws if r.info.rank >= 0}
            free = (k for k in range(len(raws) * 2) if k not in taken)
            for r in unknown:
                r.info.rank = next(free)
            warnings.append(
                f"{len(unknown)} files carry no rank (no distributedInfo.rank, no 'rank<N>' in "
                "the name); ranks were assigned in file-name order"
            )
    seen: dict[int, str] = {}
    for r in raws:
        if not 0 <= r.info.rank <= MAX_STEP:
            raise TraceFormatError(
                f"{r.info.path}: rank {r.info.rank} is out of range (0..{MAX_STEP}); fix "
                "distributedInfo.rank or the rank in the file name")
        if r.info.rank in seen:
            raise TraceFormatError(
                f"{r.info.path}: rank {r.info.rank} also comes from {seen[r.info.rank]}; "
                "pass one trace per rank (remove duplicates or traces of other runs)"
            )
        seen[r.info.rank] = r.info.path
    return warnings


def _world_size_count(dist: dict[int, dict]) -> list[str]:
    """A world_size the ranks agree on that is not the number of ranks given."""
    if len(dist) > 1:
        sizes = {d.get("world_size") for d in dist.values()} - {None}
        if len(sizes) == 1 and (ws := sizes.pop()) != len(dist):
            return [f"world_size is {ws} but {len(dist)} rank traces were given; "
                    "collectives with absent ranks cannot be matched"]
    return []


def _clock_skew(steps: pd.DataFrame, nranks: int) -> list[str]:
    """Compare the start of the same ProfilerStep across ``nranks`` ranks (``steps``: rank,
    name, ts_us of the ProfilerStep annotations)."""
    if nranks < 2 or steps.empty:
        return []
    spread = steps.groupby("name")["ts_us"].agg(lambda s: float(np.ptp(s.to_numpy())))
    worst = float(spread.max()) if len(spread) else 0.0
    if worst > CLOCK_SKEW_WARN_US:
        return [f"ranks start the same step up to {worst / 1e3:.1f} ms apart: clocks are "
                "skewed or the traces come from different runs; cross-rank waits are unreliable"]
    return []
