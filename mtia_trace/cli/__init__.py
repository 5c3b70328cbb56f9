"""The `mtia-trace` command line: a thin shell over the library, one module per command.

`main` is the only place that catches `MtiaTraceError`: it prints one line to stderr and exits
with the error's code. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys

import typer

from mtia_trace import __version__
from mtia_trace.errors import MtiaTraceError

app = typer.Typer(
    name="mtia-trace",
    help="Trace-driven profiler and bottleneck analyzer for recommender training on MTIA 300 and GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    """Trace-driven profiler and bottleneck analyzer for recommender training."""
    if version:
        typer.echo(f"mtia-trace {__version__}")
        raise typer.Exit(0)


def _register() -> None:
    """The explicit list of commands (one module each), in the order `--help` shows them."""
    from mtia_trace.cli import (
        analyze_cmd,
        compare_cmd,
        export_cmd,
        hw_cmd,
        inspect_cmd,
        query_cmd,
        replay_cmd,
        report_cmd,
        sweep_cmd,
        synth_cmd,
        validate_cmd,
    )

    app.command("inspect")(inspect_cmd.inspect)
    app.command("replay")(replay_cmd.replay)
    app.command("validate")(validate_cmd.validate)
    app.command("query")(query_cmd.query)
    app.command("analyze")(analyze_cmd.analyze)
    app.command("report")(report_cmd.report)
    app.command("compare")(compare_cmd.compare)
    app.command("sweep")(sweep_cmd.sweep)
    app.command("synth")(synth_cmd.synth)
    app.command("export")(export_cmd.export)
    app.add_typer(hw_cmd.app, name="hw")


_register()


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Usage errors are reported by typer (exit 2); `MtiaTraceError`s here."""
    try:
        app(args=argv, prog_name="mtia-trace")
    except MtiaTraceError as exc:
        typer.echo(f"mtia-trace: error: {exc}", err=True)
        sys.exit(exc.exit_code)
