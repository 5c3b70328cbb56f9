"""`mtia-trace hw`: list the bundled hardware specs and show one with every number's source."""

from __future__ import annotations

import textwrap

import typer

from replay.hardware import list_specs, load_spec, model_for

app = typer.Typer(help="Hardware specs: list them, show one with sources and confidence.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None)


@app.command("list")
def list_cmd() -> None:
    """List the bundled hardware specs.

    Example: mtia-trace hw list
    """
    for name in list_specs():
        spec = load_spec(name)
        typer.echo(f"{name:<10} {spec.family:<5} {len(spec.assumed()):>2} assumed  "
                   f"{spec.description}")


@app.command("show")
def show(
    name: str = typer.Argument(..., help="Bundled spec name or a .toml path."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                        help="Override a value (repeatable), shown as 'override'."),
    assumed_only: bool = typer.Option(False, "--assumed", help="Show only assumed / overridden values."),
) -> None:
    """Print every number of a spec with its source and confidence.

    Example: mtia-trace hw show mtia300 --set comm.message_engines=8
    """
    spec = load_spec(name, list(overrides or []))
    typer.echo(f"{spec.name} ({spec.family}): {spec.description}")
    typer.echo(f"from {spec.origin}\n")
    keys = spec.assumed() if assumed_only else spec.keys()
    width = max((len(k) for k in keys), default=10)
    vwidth = max((len(str(spec.value(k))) for k in keys), default=5)
    for key in keys:
        head = f"{key:<{width}}  {str(spec.value(key)):>{vwidth}}  {spec.confidence(key):<9}  "
        src = textwrap.wrap(spec.source(key), width=max(40, 100 - len(head))) or [""]
        typer.echo(head + src[0])
        for line in src[1:]:
            typer.echo(" " * len(head) + line)
    model = model_for(spec)
    typer.echo(f"\nmodel: compute slowdown when overlapping communication "
               f"{model.overlap_slowdown():.1%}; {model.pool_capacity()} concurrent collective(s) "
               f"per rank; {len(spec.assumed())} assumed value(s)")
