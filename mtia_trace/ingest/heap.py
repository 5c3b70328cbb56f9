"""Give the memory the ingest has freed back to the operating system.

The ingest frees most of what it allocates along the way (each file's columns once joined, the
unsorted copies once sorted, the decoded args once read), but glibc's allocator keeps freed
heap pages, and it serves even large arrays from the heap once a large block has been freed
(its mmap threshold adapts upwards). Those pages stay in the process's resident set, so the
peak grows by everything freed so far. ``malloc_trim(0)`` returns them (tens of milliseconds
at millions of rows; Dask's workers do the same). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from functools import cache
from typing import Any


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
