"""`mtia-trace export`: a replayed run as Chrome-trace JSON for Perfetto."""

from __future__ import annotations

from pathlib import Path

import typer

from analyzers.report.perfetto import write_perfetto
from analyzers.report.run_data import load_run
from mtia_trace.cli.options import FORCE_OPTION, QUIET_OPTION
from mtia_trace.destinations import check_file
from mtia_trace.progress import Progress


def export(
    run: Path = typer.Argument(..., help="Run directory written by `mtia-trace replay`."),
    perfetto: Path = typer.Option(..., "--perfetto",
                                  help="Write the replayed timeline here as Chrome-trace JSON."),
    force: bool = FORCE_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Export the replayed timeline for Perfetto (ui.perfetto.dev) or chrome://tracing.

    One process per rank, one thread per host thread or device stream, flow arrows for launches
    and collectives; each slice's args carry its cost components and attribution component.
    Counter tracks per rank: launch queue per stream, waits for engines / links, collectives
    running, the critical path's component; an async track lays out the critical path.

    Example: mtia-trace export runs/demo-mtia300 --perfetto demo.json
    """
    check_file(perfetto, force=force, flag="--perfetto")
    with Progress("export", total=2, quiet=quiet) as p:
        p.update("reading run")
        data = load_run(run, analyses=False)
        p.update("writing")
        write_perfetto(data, perfetto, force=force)
    if not quiet:
        typer.echo(f"timeline written to {perfetto} (open it at ui.perfetto.dev)", err=True)
