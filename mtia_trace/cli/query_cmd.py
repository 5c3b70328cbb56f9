"""`mtia-trace query`: SQL over one or more stored runs."""

from __future__ import annotations

from pathlib import Path

import typer

from mtia_trace.cli.options import FORCE_OPTION
from mtia_trace.cli.output import (
    FORMAT_OPTION,
    OUTPUT_OPTION,
    Format,
    emit_batches,
    parse_format,
)
from mtia_trace.destinations import check_file
from mtia_trace.errors import UsageError
from mtia_trace.runs import QUERY_TIMEOUT_S, connect, query_batches
from mtia_trace.storage import find_runs, views_sql


def query(
    args: list[str] = typer.Argument(
        ..., metavar="RUN... [SQL]",
        help="Run directories (or folders of runs), then the SQL unless -f or --views is given."),
    sql_file: Path = typer.Option(None, "--file", help="Read the SQL from this file."),
    sql_file_short: Path = typer.Option(None, "-f", hidden=True,
                                        help="Old spelling of --file (-f is --format elsewhere)."),
    views: bool = typer.Option(False, "--views",
                               help="Print the CREATE VIEW statements over the runs and exit."),
    fmt: str = FORMAT_OPTION,  # a `Format` once parsed
    out: Path = OUTPUT_OPTION,
    force: bool = FORCE_OPTION,
    max_rows: int = typer.Option(200, "--max-rows", min=0,
                                 help="Rows a table or markdown on the terminal shows (0: all); "
                                 "csv, json and -o get every row, streamed."),
    timeout: float = typer.Option(QUERY_TIMEOUT_S, "--timeout", min=0, metavar="SECONDS",
                                  help="Stop a query running longer than this (0: no limit)."),
) -> None:
    """Run SQL over stored runs with DuckDB (read-only).

    Views: events, edges, steps, collectives, summary (each with a leading `run` column) and
    runs (one row of metadata per run). Several runs, or a folder of runs, stack into the same
    views.

    Example: mtia-trace query runs/demo-mtia300 "SELECT step, avg(total_us) FROM steps GROUP BY 1"
    """
    fmt = parse_format(fmt)  # the callback's Format, for the type checker
    sql_file = sql_file if sql_file is not None else sql_file_short
    if out is not None:
        check_file(out, force=force)
    paths = list(args)
    sql = None
    # unknown options reach here as arguments (so SQL may start with `--`): outside the SQL
    # they are mistakes
    typo = next((p for p in paths[:-1] if p.startswith("-")), None)
    if typo is not None:
        raise UsageError(f"No such option: {typo.split('=')[0]}; see mtia-trace query --help")
    if not views:
        if sql_file is not None:
            try:
                sql = sql_file.read_text()
            except OSError as exc:
                raise UsageError(f"{sql_file}: cannot read ({exc.strerror}); pass an existing "
                                 ".sql file to -f") from None
        elif len(paths) >= 2:
            sql = paths.pop()
        else:
            raise UsageError("query: no SQL given; pass RUN... \"SQL\" or -f FILE.sql")
    runs = find_runs(paths)
    if views:
        typer.echo(views_sql(runs), nl=False)
        return
    assert sql is not None  # set above unless --views
    con = connect(runs)
    emit_batches(query_batches(con, sql, source=str(sql_file) if sql_file else "SQL",
                               timeout_s=timeout or None,
                               binary_as_text=fmt is not Format.parquet), fmt,
                 out, max_rows=max_rows or None, force=force)


#: An argument starting with ``-`` that is no option is taken as an argument (SQL beginning
#: with a ``--`` comment); `query` refuses those outside the SQL.
CONTEXT_SETTINGS = {"ignore_unknown_options": True}
