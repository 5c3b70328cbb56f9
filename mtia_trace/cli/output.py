"""Printing result tables: the shared ``--format`` / ``-o`` options and their renderers."""

from __future__ import annotations

import io
import math
import sys
from enum import Enum
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import typer

from analyzers.report.fmt import NOISE_US
from mtia_trace.destinations import write_file, write_with
from mtia_trace.errors import UsageError


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"
    markdown = "md"


#: Earlier spellings still accepted (not listed in --help).
FORMAT_ALIASES = {"markdown": Format.markdown}


def parse_format(value: object) -> Format:
    """``--format`` value -> `Format` (old spellings accepted); a usage error for anything else."""
    if isinstance(value, Format):
        return value
    text = str(value).strip().lower()
    if text in FORMAT_ALIASES:
        return FORMAT_ALIASES[text]
    try:
        return Format(text)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not one of "
                                 f"{', '.join(f.value for f in Format)}") from None


FORMAT_OPTION = typer.Option("table", "--format", metavar="<" + "|".join(f.value for f in Format)
                             + ">", callback=parse_format, help="Output format.",
                             show_default=True)
OUTPUT_OPTION = typer.Option(None, "-o", "--output",
                             help="Write to this file instead of stdout (needed for parquet).")


#: Float noise of sums that cancel: below this a value shows as 0. Columns in µs (named
#: ``*_us``) use `NOISE_US` (1 ps, far below any timed event); other columns (fractions, rates
#: such as a 1e-7 loss rate) keep everything above 1e-9.
NOISE = 1e-9


def _cell(value: object, noise: float = NOISE) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if abs(value) < noise:
            return "0"
        if abs(value) >= 1e15 or abs(value) < 1e-3:
            return f"{value:.4g}"
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    return str(value)


#: Longest text cell in a terminal table (kernel names can run to hundreds of characters).
MAX_CELL = 64


def _clip(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else text[:width - 1] + "…"


def _cells(table: pa.Table, max_rows: int | None,
           width: int | None = None) -> tuple[list[list[str]], int]:
    shown = table if max_rows is None else table.slice(0, max_rows)
    cols = [[_clip(_cell(v, NOISE_US if name.endswith("_us") else NOISE), width)
             for v in c.to_pylist()] for name, c in zip(shown.column_names, shown.columns,
                                                         strict=True)]
    rows = [list(r) for r in zip(*cols, strict=True)] if cols else []
    return rows, table.num_rows - shown.num_rows


_LABELS = {"", "...", "mean", "total", "all"}


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return text in _LABELS
    return True


def _numeric(table: pa.Table) -> list[bool]:
    """Columns to right-align: numbers, and text columns holding only numbers and row labels."""
    out = []
    for f, col in zip(table.schema, table.columns, strict=True):
        if pa.types.is_integer(f.type) or pa.types.is_floating(f.type):
            out.append(True)
        elif pa.types.is_string(f.type) and table.num_rows:
            out.append(all(_is_number(v or "") for v in col.to_pylist()))
        else:
            out.append(False)
    return out


def render_table(table: pa.Table, *, max_rows: int | None = None) -> str:
    """Aligned plain-text columns (numbers right-aligned)."""
    if table.num_columns == 0:
        return "(no columns)\n"
    rows, hidden = _cells(table, max_rows, MAX_CELL)
    header = table.column_names
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    num = _numeric(table)

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w)
                         for c, w, n in zip(cells, widths, num, strict=True)).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    if not rows:
        out.append("(no rows)")
    if hidden:
        out.append(more_rows(Format.table, hidden))
    return "\n".join(out) + "\n"


def render_markdown(table: pa.Table, *, max_rows: int | None = None) -> str:
    rows, hidden = _cells(table, max_rows)
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(map(esc, table.column_names)) + " |",
           "|" + "|".join("---:" if n else "---" for n in _numeric(table)) + "|"]
    out += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    if hidden:
        out.append(more_rows(Format.markdown, hidden))
    return "\n".join(out) + "\n"


def more_rows(fmt: Format, hidden: int) -> str:
    """The line under a terminal table or markdown that left ``hidden`` rows out."""
    if fmt is Format.markdown:
        return f"\n_{hidden:,} more rows not shown._"
    return f"... {hidden:,} more rows (use --format csv or -o to get them all)"


def _as_text(col: pa.ChunkedArray) -> pa.Array:
    """A column's values as JSON text (lists, structs, maps, unions, intervals)."""
    return pa.array([None if v is None else orjson.dumps(v, default=str).decode()
                     for v in col.to_pylist()], type=pa.string())


def _nested(t: pa.DataType) -> bool:
    return pa.types.is_nested(t) or pa.types.is_union(t) or pa.types.is_interval(t)


def unique_names(table: pa.Table) -> pa.Table:
    """Duplicate column names made unique (``a``, ``a_2``, ...), so no column is dropped."""
    seen: dict[str, int] = {}
    names = []
    for n in table.column_names:
        seen[n] = seen.get(n, 0) + 1
        names.append(n if seen[n] == 1 else f"{n}_{seen[n]}")
    return table if names == table.column_names else table.rename_columns(names)


def for_file(table: pa.Table, fmt: Format) -> pa.Table:
    """``table`` in a form ``fmt`` can hold: CSV gets nested values as JSON text, Parquet gets
    unions and intervals as JSON text; JSON and Parquet get unique column names."""
    if fmt in (Format.json, Format.parquet):
        table = unique_names(table)
    if fmt is Format.csv:
        bad = [i for i, f in enumerate(table.schema) if _nested(f.type)]
    elif fmt is Format.parquet:
        bad = [i for i, f in enumerate(table.schema)
               if pa.types.is_union(f.type) or pa.types.is_interval(f.type)
               or (pa.types.is_nested(f.type) and "interval" in str(f.type))
               or (pa.types.is_nested(f.type) and "union" in str(f.type))]
    else:
        bad = []
    for i in bad:
        table = table.set_column(i, table.column_names[i], _as_text(table.column(i)))
    return table


def render_csv(table: pa.Table) -> str:
    buf = io.BytesIO()
    pacsv.write_csv(for_file(table, Format.csv), buf)
    return buf.getvalue().decode()


def render_json(table: pa.Table) -> str:
    return orjson.dumps(for_file(table, Format.json).to_pylist(),
                        option=orjson.OPT_SERIALIZE_NUMPY, default=str).decode() + "\n"


def render(table: pa.Table, fmt: Format, *, max_rows: int | None = None) -> str:
    """Text rendering of ``table`` in ``fmt`` (any format but parquet)."""
    if fmt is Format.table:
        return render_table(table, max_rows=max_rows)
    if fmt is Format.markdown:
        return render_markdown(table, max_rows=max_rows)
    if fmt is Format.csv:
        return render_csv(table)
    if fmt is Format.json:
        return render_json(table)
    raise AssertionError(f"no text rendering for {fmt}")


def emit(table: pa.Table, fmt: Format, out: Path | None, *, max_rows: int | None = None,
         force: bool = False) -> None:
    """Write ``table`` to ``out`` (or stdout) in ``fmt`` (see `mtia_trace.destinations`)."""
    if fmt is Format.parquet:
        if out is None:
            raise UsageError("--format parquet: needs an output file; add -o RESULT.parquet")
        flat = for_file(table, fmt)
        write_with(out, lambda tmp: pq.write_table(flat, tmp, compression="zstd"), force=force)
        return
    text = render(table, fmt, max_rows=None if out else max_rows)
    if out is None:
        sys.stdout.write(text)
    else:
        write_file(text, out, force=force)



def emit_batches(reader: pa.RecordBatchReader, fmt: Format, out: Path | None, *,
                 max_rows: int | None = None, force: bool = False) -> None:
    """`emit` for a stream of batches, never holding the whole result: CSV, JSON and Parquet
    are written batch by batch (to ``out`` or stdout); on a terminal, a table or markdown shows
    the first ``max_rows`` rows and counts the rest. A table or markdown file holds every row
    (its column widths need them all)."""
    if fmt is Format.parquet:
        if out is None:
            raise UsageError("--format parquet: needs an output file; add -o RESULT.parquet")
        write_with(out, lambda tmp: _write_parquet(reader, tmp), force=force)
        return
    if fmt in (Format.table, Format.markdown):
        if out is not None or max_rows is None:
            emit(reader.read_all(), fmt, out, force=force)
            return
        head, hidden = _head(reader, max_rows)
        text = render(head, fmt)
        sys.stdout.write(text + (more_rows(fmt, hidden) + "\n" if hidden else ""))
        return
    chunks = _csv_chunks(reader) if fmt is Format.csv else _json_chunks(reader)
    if out is None:
        for chunk in chunks:
            sys.stdout.write(chunk.decode())
        return

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)

    write_with(out, write, force=force)


def _head(reader: pa.RecordBatchReader, n: int) -> tuple[pa.Table, int]:
    """The first ``n`` rows, and how many rows follow them (counted, not kept)."""
    kept: list[pa.RecordBatch] = []
    rows = hidden = 0
    for b in reader:
        take = max(0, min(b.num_rows, n - rows))
        if take:
            kept.append(b.slice(0, take))
            rows += take
        hidden += b.num_rows - take
    return pa.Table.from_batches(kept, schema=reader.schema), hidden


def _tables(reader: pa.RecordBatchReader):  # noqa: ANN202 - a generator of tables
    empty = True
    for b in reader:
        empty = False
        yield pa.Table.from_batches([b])
    if empty:
        yield reader.schema.empty_table()


def _csv_chunks(reader: pa.RecordBatchReader):  # noqa: ANN202
    for i, t in enumerate(_tables(reader)):
        buf = io.BytesIO()
        pacsv.write_csv(for_file(t, Format.csv), buf,
                        pacsv.WriteOptions(include_header=i == 0))
        yield buf.getvalue()


def _json_chunks(reader: pa.RecordBatchReader):  # noqa: ANN202
    yield b"["
    first = True
    for t in _tables(reader):
        if t.num_rows:
            rows = orjson.dumps(for_file(t, Format.json).to_pylist(),
                                option=orjson.OPT_SERIALIZE_NUMPY, default=str)[1:-1]
            yield rows if first else b"," + rows
            first = False
    yield b"]\n"


def _write_parquet(reader: pa.RecordBatchReader, tmp: Path) -> None:
    writer = None
    try:
        for t in _tables(reader):
            flat = for_file(t, Format.parquet)
            if writer is None:
                writer = pq.ParquetWriter(tmp, flat.schema, compression="zstd")
            writer.write_table(flat)
    finally:
        if writer is not None:
            writer.close()
