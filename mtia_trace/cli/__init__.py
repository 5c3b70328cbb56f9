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
    """The explicit list of commands (one module each)."""
    from mtia_trace.cli import inspect_cmd

    app.command("inspect")(inspect_cmd.inspect)


_register()


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        app(args=argv, standalone_mode=False)
    except MtiaTraceError as exc:
        typer.echo(f"mtia-trace: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("mtia-trace: aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        typer.echo("mtia-trace: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
