"""The decoded rows of every file, end to end and in events-table order: the one record the
ingest's steps read (`mtia_trace.ingest.assemble`). Each step takes it plus the columns earlier
steps derived, and returns the columns it derives; none changes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Rows:
    """Columns as decoded (`ingest.kineto.read_file`), sorted by (rank, track, ts_us, longer
    first); arrays with one entry per row (event_id == row)."""

    name: np.ndarray          # object
    cat: np.ndarray           # object
    ph: np.ndarray            # object: "X" or "i"
    track: np.ndarray         # object: host:<pid>:<tid> / dev:<device>:<stream>
    is_device: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    ts_us: np.ndarray
    dur_us: np.ndarray
    correlation: np.ndarray   # as recorded (assemble links MTIA job DMAs to more)
    external_id: np.ndarray
    rank: np.ndarray
    file: np.ndarray          # index of the row's file
    tcode: np.ndarray         # codes of ``track`` into ``track_uniq``, ordered as the names
    track_uniq: np.ndarray
    name_codes: np.ndarray    # codes of ``name`` into ``name_uniq`` (each distinct name once)
    name_uniq: np.ndarray
    cat_codes: np.ndarray     # codes of ``cat`` into ``cat_uniq``
    cat_uniq: np.ndarray
    ph_codes: np.ndarray      # codes of ``ph`` into ``ph_uniq``
    ph_uniq: np.ndarray
    input_dims: np.ndarray    # raw shape args: codes into ``raw`` (-1: absent)
    input_type: np.ndarray
    concrete: np.ndarray
    raw: list[bytes]          # each distinct raw JSON shape arg once

    def __len__(self) -> int:
        return len(self.ts_us)

    def name_mask(self, test: Callable[[str], object]) -> np.ndarray:
        """Per-row boolean of a test on the event name, evaluated once per distinct name."""
        return np.array([bool(test(s)) for s in self.name_uniq], dtype=bool)[self.name_codes]

    def raw_arg(self, codes: np.ndarray, i: int) -> bytes | None:
        """Row ``i``'s raw JSON value of a shape arg column (``input_dims``...), or None."""
        c = int(codes[i])
        return self.raw[c] if c >= 0 else None
