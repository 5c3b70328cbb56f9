"""A run as the renderers see it: the stored tables, run.json and the analyzers' results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from analyzers import ANALYZERS, EVENT_COLUMNS
from mtia_trace import storage
from mtia_trace.run_meta import AS_MEASURED, Assumptions, RunMeta
from mtia_trace.runs import connect


@dataclass
class RunData:
    name: str
    meta: RunMeta
    events: pa.Table
    edges: pa.Table
    steps: pa.Table
    collectives: pa.Table
    summary: pa.Table
    #: analyzer name -> result table (empty when no analyzers are registered)
    analyses: dict[str, pa.Table] = field(default_factory=dict)
    path: Path | None = None

    @property
    def hardware(self) -> str:
        return self.meta.hardware


#: DuckDB threads of a report's analyzers. They scan one run's tables (10^5 rows for the MTIA
#: training trace): one thread runs all fifteen in about the time two do (0.47 s vs 0.40 s,
#: medians of 5), and holds one thread's working memory instead of one per core (a report's
#: peak 11 MB lower there).
ANALYZER_THREADS = 1


def _analyzer_tables(run: storage.Run, tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Every registered analyzer's table over ``run``, whose ``tables`` are already read."""
    con = connect([run], loaded=[tables], threads=ANALYZER_THREADS)
    try:
        return {name: mod.run(con) for name, mod in ANALYZERS.items()}
    finally:
        con.close()


def _events(run: storage.Run, columns: Sequence[str], held: pa.Table | None) -> pa.Table:
    """``run``'s events with ``columns`` (in that order): those ``held`` has taken from it, the
    others read now."""
    have = set(held.column_names) if held is not None else set()
    rest = [c for c in columns if c not in have]
    if held is None or len(rest) == len(columns):
        return run.read("events", columns)
    read = run.read("events", rest) if rest else held
    src = {c: held if c in have else read for c in columns}
    schema = pa.schema([src[c].schema.field(c) for c in columns], metadata=held.schema.metadata)
    return pa.Table.from_arrays([src[c].column(c) for c in columns], schema=schema)


def load_run(path: str | Path, *, analyses: bool = True,
             events_columns: Sequence[str] | None = None) -> RunData:
    """Read a run directory (raises `RunNotFoundError` for anything that isn't one).

    With ``events_columns``, ``events`` holds only those columns: the analyzers' columns
    (`analyzers.EVENT_COLUMNS`) are read for them and dropped once they ran, but for those in
    ``events_columns``, and the rest read then (no column is decoded twice)."""
    run = storage.open_run(path)
    tables = {name: run.read(name) for name in storage.TABLES if name != "events"}
    scanned = None
    if analyses:
        scanned = run.read("events", None if events_columns is None else EVENT_COLUMNS)
    found = _analyzer_tables(run, {**tables, "events": scanned}) if scanned is not None else {}
    if events_columns is None:
        events = scanned if scanned is not None else run.read("events")
    else:
        events = _events(run, events_columns, scanned)
    return RunData(name=run.name, meta=run.meta, path=run.path, analyses=found, events=events,
                   **tables)


def run_from_result(result: object, *, name: str, meta: RunMeta | None = None) -> RunData:
    """A `RunData` from an in-memory `replay.result.ReplayResult` (no analyzers)."""
    if meta is None:
        meta = RunMeta(hardware=str(getattr(result, "hardware", AS_MEASURED)),
                       assumptions=Assumptions(model=dict(getattr(result, "notes", {}) or {})))
    return RunData(name=name, meta=meta,
                   **{t: getattr(result, t) for t in storage.TABLES})
