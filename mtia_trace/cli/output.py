"""Printing result tables: the shared ``--format`` / ``-o`` options and their renderers."""

from __future__ import annotations

import io
import math
import os
import shutil
import sys
from enum import Enum
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import typer
from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from analyzers.report import fmt
from analyzers.report.fmt import NOISE_US
from mtia_trace.destinations import write_file, write_with
from mtia_trace.errors import UsageError
from mtia_trace.escape import md_cell, terminal


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
    """One value as text, on its own (CSV-like; tables format whole columns, `_column`)."""
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


def _is_bytes(name: str) -> bool:
    return name == "bytes" or name.endswith("_bytes") or name.startswith("bytes_")


def _decimals(top: float) -> int:
    """Decimals that show a column whose largest value is ``top`` to three or four digits."""
    if 0 < top < 1:  # 0.848, 0.00374 (a few us in a table of milliseconds)
        return min(6, 2 - math.floor(math.log10(top)))
    return 3 if top < 10 else 2 if top < 100 else 1 if top < 1e5 else 0


def _unit(table: pa.Table) -> tuple[float, str]:
    """(scale, suffix) of the table's durations (``*_us`` columns): one unit for all of them
    (parts that add up to a step read in the step's unit), the largest that the longest
    duration fills: ``s`` for 13-second steps, ``ms``, else ``us``."""
    top = 0.0
    for f, c in zip(table.schema, table.columns, strict=True):
        if f.name.endswith("_us") and pa.types.is_floating(f.type) and len(c):
            m = pc.max(pc.abs(c)).as_py()
            top = max(top, m if m is not None and not math.isnan(m) else 0.0)
    for unit, k in (("s", 1e6), ("ms", 1e3)):
        if top >= k:
            return k, unit
    return 1.0, "us"


def _column(name: str, typ: pa.DataType, values: list,
            unit: tuple[float, str] = (1.0, "us")) -> tuple[str, list[str]]:
    """(header, cells) of one column, formatted as a whole: durations (``*_us``) in the table's
    unit (`_unit`: ``step_s`` for 13-second steps), every cell with the same decimals (so they
    align); bytes with their unit (``10.7 MB``); counts with separators; float noise as 0; text
    with controls shown escaped (`mtia_trace.escape.terminal`)."""
    if pa.types.is_integer(typ):
        return name, ["" if v is None else f"{v:,}" for v in values]
    if pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        vals = [None if v is None else float(v) for v in values]
        if _is_bytes(name):
            return name, ["" if v is None else "nan" if math.isnan(v) else fmt.nbytes(v)
                          for v in vals]
        dur = name.endswith("_us")
        noise = NOISE_US if dur else NOISE
        real = [abs(v) for v in vals if v is not None and not math.isnan(v) and abs(v) >= noise]
        top = max(real, default=0.0)
        scale, header = 1.0, name
        if dur:
            scale, header = unit[0], name[:-3] + "_" + unit[1]
        if real and all(v == round(v) for v in real) and scale == 1.0:
            return header, ["" if v is None else "nan" if math.isnan(v) else
                            "0" if abs(v) < noise else f"{v:,.0f}" for v in vals]
        if real and top < 1e-3:  # rates and probabilities: significant digits
            return header, ["" if v is None else "nan" if math.isnan(v) else
                            "0" if abs(v) < noise else f"{v:.3g}" for v in vals]
        d = _decimals(top / scale)
        return header, ["" if v is None else "nan" if math.isnan(v) else
                        f"{(0.0 if abs(v) < noise else v) / scale:,.{d}f}" for v in vals]
    text = [("" if v is None else terminal(str(v), cells=True)) for v in values]
    return name, [_clip(t, MAX_CELL) for t in text]


def _cells(table: pa.Table, max_rows: int | None) -> tuple[list[str], list[list[str]], int]:
    """(header, rows, rows left out) of ``table`` formatted column by column."""
    shown = table if max_rows is None else table.slice(0, max_rows)
    header, cols = [], []
    unit = _unit(shown)
    for f, c in zip(shown.schema, shown.columns, strict=True):
        h, cells = _column(f.name, f.type, c.to_pylist(), unit)
        header.append(terminal(h, cells=True))
        cols.append(cells)
    rows = [list(r) for r in zip(*cols, strict=True)] if cols else []
    return header, rows, table.num_rows - shown.num_rows


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


def _groups(widths: list[int], width: int | None) -> list[list[int]]:
    """Columns split into groups that each fit ``width`` characters, the first column repeated
    in every group (a wide table printed as several narrower ones, not wrapped mid-row)."""
    if width is None or sum(widths) + 2 * (len(widths) - 1) <= width or len(widths) < 3:
        return [list(range(len(widths)))]
    out, cur, used = [], [0], widths[0]
    for i in range(1, len(widths)):
        if len(cur) > 1 and used + 2 + widths[i] > width:
            out.append(cur)
            cur, used = [0], widths[0]
        cur.append(i)
        used += 2 + widths[i]
    out.append(cur)
    return out


def terminal_width() -> int | None:
    """The width of the terminal stdout is on, None when stdout is not a terminal."""
    if not _isatty(sys.stdout):
        return None
    return shutil.get_terminal_size((100, 24)).columns


def _isatty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def colour() -> bool:
    """Colour on stdout: a terminal, and no ``NO_COLOR`` (no-color.org) in the environment."""
    return _isatty(sys.stdout) and not os.environ.get("NO_COLOR") \
        and os.environ.get("TERM") != "dumb"


def render_table(table: pa.Table, *, max_rows: int | None = None,
                 width: int | None | bool = True, styled: bool | None = None) -> str:
    """Aligned columns (numbers right-aligned, each column in one unit and format). ``width``:
    split the columns into groups that fit (True: the terminal's width when stdout is one).
    ``styled``: a rich table with a bold header (default: when stdout is a colour terminal)."""
    if table.num_columns == 0:
        return "(no columns)\n"
    header, rows, hidden = _cells(table, max_rows)
    width = terminal_width() if width is True else (width or None)
    styled = colour() if styled is None else styled
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    num = _numeric(table)
    out: list[str] = []
    for k, cols in enumerate(_groups(widths, width)):
        if k:
            out.append("")
        if styled:
            out.append(_rich(header, rows, num, cols).rstrip("\n"))
            continue

        def line(cells: list[str], cols: list[int] = cols) -> str:
            return "  ".join(cells[i].rjust(widths[i]) if num[i] else cells[i].ljust(widths[i])
                             for i in cols).rstrip()

        out += [line(header), "  ".join("-" * widths[i] for i in cols)]
        out += [line(r) for r in rows]
    if not rows:
        out.append("(no rows)")
    if hidden:
        out.append(more_rows(Format.table, hidden))
    return "\n".join(out) + "\n"


def _rich(header: list[str], rows: list[list[str]], num: list[bool], cols: list[int]) -> str:
    """One column group as a rich table (bold header rule, no frame), rendered to text."""
    t = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold",
                  collapse_padding=True)
    for i in cols:
        t.add_column(Text(header[i]), justify="right" if num[i] else "left", no_wrap=True,
                     style="cyan" if i == 0 and not num[i] else None)
    for r in rows:
        t.add_row(*[Text(r[i]) for i in cols])
    buf = io.StringIO()
    Console(file=buf, force_terminal=True, width=100_000, color_system="standard",
            highlight=False, no_color=False).print(t)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def render_markdown(table: pa.Table, *, max_rows: int | None = None) -> str:
    """A GitHub-flavoured Markdown table: names inert (`mtia_trace.escape.md_cell`), long ones
    clipped, numbers formatted as in `render_table`."""
    header, rows, hidden = _cells(table, max_rows)
    esc = md_cell
    out = ["| " + " | ".join(map(esc, header)) + " |",
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
