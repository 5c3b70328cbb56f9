"""`mtia-trace report`: one run as Markdown, self-contained HTML or JSON."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

import orjson
import typer

from analyzers.report import event_columns
from analyzers.report.build import build_report, report_dict
from analyzers.report.render_html import render_html
from analyzers.report.render_markdown import render_markdown
from analyzers.report.run_data import load_run
from analyzers.report.sweep_report import build_sweep_report, is_sweep, load_sweep, sweep_dict
from mtia_trace.cli.options import FORCE_OPTION, OLD_FORMAT_SHORT, QUIET_OPTION
from mtia_trace.cli.output import terminal_width
from mtia_trace.destinations import check_file, write_file
from mtia_trace.progress import Progress


class ReportFormat(str, Enum):
    md = "md"
    html = "html"
    json = "json"




def write_output(text: str | bytes, output: Path | None, *, force: bool) -> None:
    """Write to ``output`` (see `mtia_trace.destinations`) or to stdout."""
    if output is None:
        typer.echo(text.decode() if isinstance(text, bytes) else text, nl=False)
        return
    write_file(text, output, force=force)


def report(
    run: Path = typer.Argument(..., help="Run directory written by `mtia-trace replay`."),
    fmt: ReportFormat = typer.Option(ReportFormat.md, "--format", help="Output format."),
    fmt_short: ReportFormat = typer.Option(None, OLD_FORMAT_SHORT, hidden=True,
                                     help="Old spelling of --format."),
    output: Path = typer.Option(None, "-o", "--output", help="Write here instead of stdout."),
    force: bool = FORCE_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Render one run: step time, attribution, top bottlenecks, analyzer tables, hardware used.

    Given a table written by `mtia-trace sweep` instead, renders step time over the swept
    parameters (a line for one axis, a heat map for two).

    HTML adds figures (attribution per step and rank, a timeline of one step, busy vs critical)
    embedded in one file that opens without network access.

    Example: mtia-trace report runs/demo-mtia300 --format html -o report.html
    """
    fmt = fmt_short or fmt
    if output is not None:
        check_file(output, force=force)
    if is_sweep(run):
        _sweep_report(run, fmt, output, force=force)
        return
    with Progress("report", total=3, quiet=quiet) as p:
        p.update("reading run")
        data = load_run(run, events_columns=event_columns.REPORT)
        p.update("analyzing")
        if fmt is ReportFormat.json:
            text: str | bytes = orjson.dumps(report_dict(data), option=orjson.OPT_INDENT_2
                                             | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        else:
            blocks = build_report(data, with_figures=fmt is ReportFormat.html,
                                  progress=lambda msg: p.update(msg, advance=0))
            text = (render_html(blocks, title=f"mtia-trace report: {data.name}")
                    if fmt is ReportFormat.html else render_markdown(blocks))
        p.update("writing")
    if output is None and fmt is ReportFormat.md and isinstance(text, str) \
            and terminal_width() is not None:
        show_markdown(text)
        return
    write_output(text, output, force=force)
    if output is not None and not quiet:
        typer.echo(f"report written to {output}", err=True)


def show_markdown(text: str) -> None:
    """A Markdown report rendered for the terminal (rich), with how to get the Markdown itself."""
    from rich.console import Console
    from rich.markdown import Markdown as RichMarkdown  # markdown-it: only a terminal pays it
    from rich.text import Text

    stream = getattr(sys.stdout, "raw_terminal", sys.stdout)
    console = Console(file=stream, highlight=False, width=min(terminal_width() or 100, 120))
    console.print(RichMarkdown(text, hyperlinks=False))
    console.print(Text("rendered for the terminal; `-o report.md` (or a pipe) writes the "
                       "Markdown itself, `--format html -o report.html` adds the figures",
                       style="dim"))


def _sweep_report(path: Path, fmt: ReportFormat, output: Path | None, *, force: bool) -> None:
    table = load_sweep(path)
    name = path.name.removesuffix(".parquet")
    if fmt is ReportFormat.json:
        text: str | bytes = orjson.dumps(sweep_dict(table, name), option=orjson.OPT_INDENT_2) + b"\n"
    else:
        blocks = build_sweep_report(table, name, with_figures=fmt is ReportFormat.html)
        text = (render_html(blocks, title=f"mtia-trace sweep report: {name}")
                if fmt is ReportFormat.html else render_markdown(blocks))
    write_output(text, output, force=force)
