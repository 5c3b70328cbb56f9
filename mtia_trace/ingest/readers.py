"""Read a trace's files, on several processes when there is enough work to share.

A multi-rank trace is one file per rank, and each file is decoded into its columns on its own
(`kineto.read_file`), so the files are read on a pool of processes, one per CPU, and handed back
in file order: the events table is the same whichever way they were read. The readers are forked
(Linux only; elsewhere the files are read serially), which takes a fraction of a second, so
small traces (under `PARALLEL_MIN_BYTES` of JSON in all) and single files are read here. Each
reader holds one file's columns and one piece of its decode at a time (`decode.Pieces`), so a
parallel read holds one of each per process: ``MTIA_TRACE_INGEST_WORKERS=1`` reads serially
where memory is short.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from mtia_trace.errors import MtiaTraceError
from mtia_trace.ingest.decode import json_bytes
from mtia_trace.ingest.kineto import RawFile, read_file

#: Environment variable: the number of processes reading trace files (1: read them serially).
WORKERS_ENV = "MTIA_TRACE_INGEST_WORKERS"
#: Below this much JSON in all (gunzipped), the files are read serially.
PARALLEL_MIN_BYTES = 64 * 2**20
#: Tasks per worker: files go out in about this many batches each, for balance and progress.
_BATCHES_PER_WORKER = 8


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def workers_wanted() -> int:
    """Reader processes: ``MTIA_TRACE_INGEST_WORKERS`` if set, else one per usable CPU."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if not text:
        return _cpus()
    if not text.isdigit() or int(text) < 1:
        raise MtiaTraceError(f"{WORKERS_ENV}={text}: not a process count; give a whole number "
                             "of 1 or more (1 reads the files serially)")
    return int(text)


def workers_for(files: list[Path]) -> int:
    """How many processes should read ``files`` (1: here, serially)."""
    want = min(workers_wanted(), len(files))
    # fork is Linux's; a daemon process (e.g. a Dask worker) may not have children
    if want < 2 or not sys.platform.startswith("linux") or mp.current_process().daemon:
        return 1
    if sum(json_bytes(f) for f in files) < PARALLEL_MIN_BYTES:
        return 1
    return want


def _pool(n: int) -> Executor:
    # fork: the readers start at once with everything imported, and need not re-import the
    # caller's script (spawn and forkserver do, which breaks unguarded scripts). The threads a
    # fork leaves behind (numpy's BLAS pool, a DuckDB or Dask client) are never touched by
    # `read_file`, which decodes with msgspec and numpy only.
    return ProcessPoolExecutor(n, mp_context=mp.get_context("fork"), initializer=gc.disable)


def read_all(files: list[Path], progress: Callable[[str, int, int], None] | None = None
             ) -> tuple[list[RawFile], int]:
    """(every file read, in order; the number of processes that read them).

    :param progress: called as ``progress(path, i, n)`` before each file is read (in parallel:
        before its result is waited for).
    """
    n = workers_for(files)
    pool = _pool(n) if n > 1 else None
    try:
        results: Iterator[RawFile]
        if pool is None:
            results = map(read_file, files)  # lazy: each file is read when its turn comes
        else:
            chunk = max(1, len(files) // (n * _BATCHES_PER_WORKER))
            with warnings.catch_warnings():  # Python >= 3.12 warns on a fork of a threaded process
                warnings.filterwarnings("ignore", category=DeprecationWarning,
                                        message=r".*use of fork\(\) may lead to deadlocks")
                results = pool.map(read_file, files, chunksize=chunk)
        raws = []
        for i, f in enumerate(files):
            if progress is not None:
                progress(str(f), i, len(files))
            raws.append(next(results))
    except BrokenProcessPool:
        raise MtiaTraceError(
            f"a trace-reading process died (out of memory?); rerun with {WORKERS_ENV}=1 to read "
            "the files one at a time") from None
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return raws, n


__all__ = ["PARALLEL_MIN_BYTES", "WORKERS_ENV", "read_all", "workers_for"]
