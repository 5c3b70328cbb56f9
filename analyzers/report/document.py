"""The report's structure, independent of output format: a flat list of blocks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from analyzers.report import fmt


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str  # may use **bold** and `code`; renderers translate


@dataclass(frozen=True)
class Items:
    items: list[str]
    ordered: bool = False


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[str]]
    #: "l" or "r" per column; numbers right-aligned
    align: list[Literal["l", "r"]] = field(default_factory=list)
    note: str = ""  # e.g. "showing 10 of 64 rows"
    legend: str = ""  # what the columns mean, one line (glossary.legend)
    #: columns of prose (sources): wrapped by the reader, never clipped like long names
    prose: tuple[int, ...] = ()


@dataclass(frozen=True)
class Figure:
    caption: str
    png: bytes
    alt: str = ""


@dataclass(frozen=True)
class Timeline:
    """An interactive timeline (HTML only): ``data`` is what `figures.timeline_data` returns."""

    caption: str
    data: dict


Block = Heading | Paragraph | Items | Table | Figure | Timeline


def table_from_arrow(table: object, *, limit: int = 10, cell=None) -> Table:
    """A document table from a pyarrow table: the first ``limit`` rows, cells formatted."""
    import pyarrow as pa

    assert isinstance(table, pa.Table)
    cell = cell or fmt.cell
    shown = table.slice(0, limit).to_pylist()
    numeric = [pa.types.is_integer(f.type) or pa.types.is_floating(f.type) for f in table.schema]
    rows = [[cell(r[c]) for c in table.column_names] for r in shown]
    note = f"showing {len(shown)} of {table.num_rows} rows" if table.num_rows > limit else ""
    return Table(list(table.column_names), rows, ["r" if n else "l" for n in numeric], note)
