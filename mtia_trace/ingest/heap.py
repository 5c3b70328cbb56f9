"""Give the memory the ingest has freed back to the operating system.

The ingest frees most of what it allocates along the way (each file's columns once joined, the
unsorted copies once sorted, the decoded args once read), but glibc's allocator keeps freed
heap pages, and it serves even large arrays from the heap once a large block has been freed
(its mmap threshold adapts upwards). Those pages stay in the process's resident set, so the
peak grows by everything freed so far. ``malloc_trim(0)`` returns them (tens of milliseconds
at millions of rows; Dask's workers do the same). Elsewhere than glibc it does nothing.

Arrow's default pool (mimalloc) keeps the pages of what it frees for reuse as well, and the
ingest's Arrow temporaries (string columns taken from their distinct values, the checks'
encodings) would stay in the resident set beside the table: `system_arrow_pool` has Arrow
allocate from the system allocator while the ingest runs, whose freed pages `release` returns.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import pyarrow as pa


@cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # the process's own symbols, as storage's rename does (ctypes.util.find_library would
        # fork ldconfig from a process this large)
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None  # glibc only (not musl)


def release() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim``); a no-op elsewhere."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@contextmanager
def system_arrow_pool() -> Iterator[None]:
    """Arrow's default memory pool is the system allocator meanwhile (see above); buffers keep
    the pool they came from, so the table outlives the switch. The pool is process-wide: Arrow
    work on other threads meanwhile allocates from it too, which changes where, not what."""
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)
