"""A run as the renderers see it: the stored tables, run.json and the analyzers' results."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from analyzers import ANALYZERS
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


def _analyzer_tables(run: storage.Run, tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Every registered analyzer's table over ``run``, whose ``tables`` are already read."""
    con = connect([run], loaded=[tables])
    try:
        return {name: mod.run(con) for name, mod in ANALYZERS.items()}
    finally:
        con.close()


def load_run(path: str | Path, *, analyses: bool = True) -> RunData:
    """Read a run directory (raises `RunNotFoundError` for anything that isn't one)."""
    run = storage.open_run(path)
    tables = {name: run.read(name) for name in storage.TABLES}
    return RunData(name=run.name, meta=run.meta, path=run.path,
                   analyses=_analyzer_tables(run, tables) if analyses else {}, **tables)


def run_from_result(result: object, *, name: str, meta: RunMeta | None = None) -> RunData:
    """A `RunData` from an in-memory `replay.result.ReplayResult` (no analyzers)."""
    if meta is None:
        meta = RunMeta(hardware=str(getattr(result, "hardware", AS_MEASURED)),
                       assumptions=Assumptions(model=dict(getattr(result, "notes", {}) or {})))
    return RunData(name=name, meta=meta,
                   **{t: getattr(result, t) for t in storage.TABLES})
