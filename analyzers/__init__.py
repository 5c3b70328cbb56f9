"""Named analyses over a stored run.

Each analyzer is a module exposing ``NAME``, a one-line ``DESCRIPTION`` and
``run(con) -> pyarrow.Table``, where ``con`` is a DuckDB connection with the run's views
(`mtia_trace.runs.connect`). `ANALYZERS` is the one explicit list the CLI, the docs and the
tests iterate over.
"""

from __future__ import annotations

from typing import Protocol

import duckdb
import pyarrow as pa

from analyzers import (
    critical_path,
    device_time,
    fetch_stalls,
    idle,
    kernel_launches,
    overlap,
    queueing,
    rank_collective_ops,
    rank_collectives,
    step_breakdown,
    stragglers,
    stream_queues,
    top_ops,
    unoverlapped_comm,
    user_annotations,
)
from mtia_trace.errors import UsageError


class Analyzer(Protocol):
    NAME: str
    DESCRIPTION: str

    def run(self, con: duckdb.DuckDBPyConnection) -> pa.Table: ...


ANALYZERS: dict[str, Analyzer] = {
    a.NAME: a  # type: ignore[misc]
    for a in (step_breakdown, top_ops, unoverlapped_comm, overlap, stragglers, queueing, fetch_stalls,
              critical_path, idle, device_time, rank_collectives, rank_collective_ops, kernel_launches,
              stream_queues, user_annotations)
}

#: The events columns the analyzers read (with the derived views they query): a caller that has
#: read the events table for them needs only these. A query naming another column fails to bind
#: ("Referenced column ... not found"), it does not read a different number.
EVENT_COLUMNS: tuple[str, ...] = (
    "rank", "event_id", "name", "kind", "ph", "track", "is_device", "step", "correlation",
    "parent_id", "launch_id", "bytes_read", "bytes_written", "coll_op", "coll_bytes_in",
    "group_size", "pg", "start_us", "end_us", "fetch_us", "collective_us", "retry_us", "host_us",
    "queue_us", "bound_by", "critical", "critical_us", "peer_wait_us")


def select(names: list[str] | None) -> list[Analyzer]:
    """The analyzers named (all when none), refusing unknown names."""
    if not names:
        return list(ANALYZERS.values())
    unknown = [n for n in names if n not in ANALYZERS]
    if unknown:
        raise UsageError(f"{', '.join(unknown)}: unknown analyzer; choose from "
                         f"{', '.join(ANALYZERS)}")
    return [ANALYZERS[n] for n in names]


def run_all(con: duckdb.DuckDBPyConnection, names: list[str] | None = None) -> dict[str, pa.Table]:
    """Run the named analyzers (all by default) and return their tables by name."""
    return {a.NAME: a.run(con) for a in select(names)}
