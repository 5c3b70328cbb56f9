"""`mtia-trace sweep`: replay one trace on a grid of what-if spec values."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import typer

from mtia_trace.cli.json_output import print_json
from mtia_trace.cli.options import (
    LOSS_RATE_OPTION,
    OLD_OUT_OPTION,
    PRINT_FORMAT_OPTION,
    SEED_OPTION,
    SOURCE_HW_OPTION,
    TRACE_ARGUMENT,
    PrintFormat,
)
from mtia_trace.cli.output import render_table
from mtia_trace.destinations import check_file, write_with
from mtia_trace.errors import UsageError
from mtia_trace.ingest import load
from mtia_trace.progress import Progress
from mtia_trace.replay_job import trace_stem
from replay.hardware.source import with_source
from replay.sweep import parse_vary
from replay.sweep import sweep as run_sweep


def sweep(
    trace: Path = TRACE_ARGUMENT,
    hw: str = typer.Option(..., "--hw", help="Target hardware: a bundled spec name or a .toml path."),
    vary: list[str] = typer.Option(None, "--vary", metavar="KEY=V1,V2,...",
                                   help="A spec key and its values (repeatable; axes multiply)."),
    whatif: list[str] = typer.Option(
        None, "--whatif", metavar="SELECTOR:CHANGE",
        help="One value of the what-if axis (repeatable; the axis starts with no what-if), "
             "e.g. 'kind=embedding:x0.5'."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                        help="Fixed override applied at every point (repeatable)."),
    mode: str = typer.Option("auto", "--mode", help="Compute costing: auto, roofline or scaled."),
    loss_rate: float = LOSS_RATE_OPTION,
    seed: int = SEED_OPTION,
    source_hw: str = SOURCE_HW_OPTION,
    out: Path = typer.Option(None, "-o", "--output", help="Parquet file for the table "
                             "(default runs/<trace>-<hw>-sweep.parquet)."),
    old_out: Path = OLD_OUT_OPTION,
    force: bool = typer.Option(False, "--force", help="Replace an existing output file."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only where the table was written."),
    fmt: PrintFormat = PRINT_FORMAT_OPTION,
) -> None:
    """Replay a trace at every point of a grid of spec values; print and store step time and
    attribution (mean over ranks and steps, us) per point.

    --whatif adds an axis of op-level what-ifs (its first value is no what-if).

    Example: mtia-trace sweep trace_dir --hw mtia300 --vary comm.message_engines=4,8,16,32
    """
    if mode not in ("auto", "roofline", "scaled"):
        raise UsageError(f"--mode {mode}: use auto, roofline or scaled")
    if not vary and not whatif:
        raise UsageError("sweep: nothing to vary; pass --vary KEY=V1,V2,... and/or "
                         "--whatif SELECTOR:CHANGE")
    out = out if out is not None else old_out
    axes = parse_vary(list(vary or []))
    label = Path(hw).stem if hw.endswith(".toml") else hw
    dest = out if out is not None else Path("runs") / f"{trace_stem(trace)}-{label}-sweep.parquet"
    check_file(dest, force=force, flag="--output")
    with Progress("sweep", quiet=quiet) as progress:
        progress(f"ingesting {trace}")
        events, src, why = with_source(load(trace), source_hw)
        progress(f"source hardware: {src or 'unknown'} ({why})")
        table = run_sweep(events, hw, axes, list(overrides or []), mode=mode,
                          loss_rate=loss_rate, seed=seed, whatifs=list(whatif or []),
                          progress=progress)
    write_with(dest, lambda tmp: pq.write_table(table, tmp), force=force, flag="--output")
    if fmt is PrintFormat.json:
        print_json({"path": str(dest), "hardware": hw, "axes": [a for a, _ in axes],
                    "points": table.to_pylist()})
        return
    if not quiet:
        typer.echo(render_table(table))
    typer.echo(f"sweep written to {dest}")
