"""`mtia-trace validate`: replay a trace as measured and compare step times with the trace."""

from __future__ import annotations

import numpy as np
import typer

from mtia_trace.cli.json_output import print_json
from mtia_trace.cli.options import PRINT_FORMAT_OPTION, PrintFormat
from mtia_trace.errors import UsageError
from mtia_trace.ingest import load
from replay.run import replay_events


def parse_percent(text: str) -> float:
    """'2%' or '0.02' -> 0.02."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise UsageError(f"--max-error {text!r}: not a number; use e.g. 2% or 0.02") from None
    if not np.isfinite(v) or v < 0:
        raise UsageError(f"--max-error {text!r}: must be a non-negative number; use e.g. 2%")
    return v


def validate(
    trace: list[str] = typer.Argument(..., metavar="TRACE...",
                                      help="Trace file(s) or a directory with one file per rank."),
    max_error: str = typer.Option("2%", "--max-error",
                                  help="Largest allowed |replayed - measured| / measured per step."),
    fmt: PrintFormat = PRINT_FORMAT_OPTION,
) -> None:
    """Replay a trace as measured and print measured vs replayed time per rank and step.

    Exits 1 when any step's error exceeds --max-error. Device events without a launch link are
    reported: their starts cannot come out of the graph.

    Example: mtia-trace validate traces/rank0.json.gz --max-error 1%
    """
    limit = parse_percent(max_error)
    events = load(trace if len(trace) > 1 else trace[0]).events
    result = replay_events(events)
    steps = result.steps
    if steps.num_rows == 0:
        raise UsageError(f"{trace[0]}: no events to replay; pass a PyTorch profiler trace")
    meas = steps.column("measured_us").to_numpy()
    rep = steps.column("total_us").to_numpy()
    err = np.where(meas > 0, (rep - meas) / np.where(meas > 0, meas, 1.0), 0.0)
    worst = float(np.abs(err).max())
    med = float(np.median(np.abs(err)))
    n = result.notes.get("device_events_without_launch", 0)
    unlinked = int(n) if isinstance(n, int | float) else 0
    if fmt is PrintFormat.json:
        print_json({
            "steps": [{"rank": r, "step": s, "measured_us": float(m), "replayed_us": float(p),
                       "error": float(e), "over_limit": bool(abs(e) > limit)}
                      for r, s, m, p, e in zip(steps.column("rank").to_pylist(),
                                               steps.column("step").to_pylist(), meas, rep, err,
                                               strict=True)],
            "median_abs_error": med, "worst_abs_error": worst, "max_error": limit,
            "passed": worst <= limit, "device_events_without_launch": unlinked})
        if worst > limit:
            raise typer.Exit(1)
        return
    typer.echo(f"{'rank':>5} {'step':>6} {'measured_us':>14} {'replayed_us':>14} {'error':>9}")
    for r, s, m, p, e in zip(steps.column("rank").to_pylist(), steps.column("step").to_pylist(),
                             meas, rep, err):
        flag = "  !" if abs(e) > limit else ""
        typer.echo(f"{r:>5} {s:>6} {m:>14.3f} {p:>14.3f} {e:>+8.3%}{flag}")
    typer.echo(f"median |error| {med:.3%}, worst {worst:.3%} (limit {limit:.3%})")
    if unlinked:
        typer.echo(f"note: {unlinked} device events have no launch link in the trace; "
                   "their starts follow only their stream")
    if worst > limit:
        typer.echo(f"validate: FAIL: worst step error {worst:.3%} exceeds {limit:.3%}", err=True)
        raise typer.Exit(1)
