"""`mtia-trace analyze`: the named analyses over a stored run."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

import analyzers
from mtia_trace.cli.options import FORCE_OPTION
from mtia_trace.cli.output import FORMAT_OPTION, OUTPUT_OPTION, Format, emit, parse_format, render
from mtia_trace.destinations import check_dir, check_file, write_file
from mtia_trace.errors import UsageError
from mtia_trace.runs import connect, reading
from mtia_trace.storage import open_run

#: Rows per analyzer printed on a terminal table; other formats and -o get every row.
MAX_ROWS = 40


def analyze(
    run: Path = typer.Argument(..., help="Run directory written by `mtia-trace replay`."),
    names: list[str] = typer.Argument(None, metavar="[NAME]...",
                                      help="Analyzers to run (default: all)."),
    fmt: str = FORMAT_OPTION,  # a `Format` once parsed
    out: Path = OUTPUT_OPTION,
    force: bool = FORCE_OPTION,
) -> None:
    fmt = parse_format(fmt)  # the callback's Format, for the type checker
    chosen = analyzers.select(names)
    if fmt is Format.parquet:
        if out is None:
            raise UsageError("--format parquet: needs an output directory; add -o DIR")
        if out.is_dir():
            check_dir(out.parent / out.name / "x", force=True)  # not inside a run
        else:
            check_dir(out, force=force)
        for a in chosen:
            check_file(out / f"{a.NAME}.parquet", force=force)
    elif out is not None:
        check_file(out, force=force)
    con = connect([open_run(run)])
    with reading():
        tables = {a.NAME: a.run(con) for a in chosen}
    if fmt is Format.parquet:
        for name, t in tables.items():
            emit(t, fmt, out / f"{name}.parquet", force=force)
        return
    if len(tables) == 1 and fmt is not Format.json:
        emit(next(iter(tables.values())), fmt, out, max_rows=MAX_ROWS, force=force)
        return
    if fmt is Format.json:  # one shape for one analyzer or several: {name: rows}
        text = orjson.dumps({n: t.to_pylist() for n, t in tables.items()},
                            option=orjson.OPT_INDENT_2, default=str).decode() + "\n"
    else:
        limit = None if out else MAX_ROWS
        parts = []
        for a in chosen:
            body = render(tables[a.NAME], fmt, max_rows=limit)
            head = {Format.markdown: f"## {a.NAME}\n\n{a.DESCRIPTION}\n\n",
                    Format.csv: f"# {a.NAME}: {a.DESCRIPTION}\n"}.get(
                        fmt, f"== {a.NAME}: {a.DESCRIPTION}\n")
            parts.append(head + body)
        text = "\n".join(parts)
    if out is None:
        typer.echo(text, nl=False)
    else:
        write_file(text, out, force=force)


analyze.__doc__ = (
    "Run named analyses over a stored run and print their tables.\n\n"
    "Analyzers:\n\n"
    + "\n\n".join(f"  {n}: {a.DESCRIPTION}" for n, a in analyzers.ANALYZERS.items())
    + "\n\nExample: mtia-trace analyze runs/demo-mtia300 step_breakdown top_ops"
)
