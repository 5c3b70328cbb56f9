"""`mtia-trace validate`: replay a trace as measured and compare step times with the trace."""

from __future__ import annotations

import numpy as np
import typer

from mtia_trace.cli.json_output import print_json
from mtia_trace.cli.options import PRINT_FORMAT_OPTION, PrintFormat
from mtia_trace.errors import UsageError
from mtia_trace.ingest import load
from replay.costs import AsMeasured
from replay.graph import build_graph
from replay.graph.cycles import cycle_warning
from replay.hardware import load_spec
from replay.hardware.source import with_source
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


def _errors(steps) -> np.ndarray:  # noqa: ANN001
    meas = steps.column("measured_us").to_numpy()
    rep = steps.column("total_us").to_numpy()
    return np.where(meas > 0, (rep - meas) / np.where(meas > 0, meas, 1.0), 0.0)


def validate(
    trace: list[str] = typer.Argument(..., metavar="TRACE...",
                                      help="Trace file(s) or a directory with one file per rank."),
    max_error: str = typer.Option("2%", "--max-error",
                                  help="Largest allowed |replayed - measured| / measured per step."),
    strict: bool = typer.Option(False, "--strict",
                                help="Check the strict error (device ready lags replaced by the "
                                     "modelled launch latency) against --max-error."),
    fmt: PrintFormat = PRINT_FORMAT_OPTION,
) -> None:
    """Replay a trace as measured and print measured vs replayed time per rank and step.

    Two errors per step: ``error`` keeps every measured gap and device ready lag (it checks that
    the graph and scheduler reproduce the trace); ``strict`` replaces each device ready lag by
    the modelled launch latency of the hardware the trace was measured on (0 when unknown), so
    a start the graph does not explain shows up as error: that figure tests the graph.
    ``unexplained_us``: step time on the critical path that no dependency and no modelled
    latency explains (host gaps outside every op, ready lags beyond the launch latency).
    Exits 1 when any step's error (the strict one with --strict) exceeds --max-error. Device
    events without a launch link are reported: their starts cannot come out of the graph.

    Example: mtia-trace validate traces/rank0.json.gz --max-error 1%
    """
    limit = parse_percent(max_error)
    tr = load(trace if len(trace) > 1 else trace[0])
    events, source, _why = with_source(tr, None)
    latency = float(load_spec(source).value("host.kernel_launch_us")) if source else None
    model = AsMeasured(source_launch_us=latency)
    g = build_graph(events)
    result = replay_events(events, model, graph=g)
    steps = result.steps
    if steps.num_rows == 0:
        raise UsageError(f"{trace[0]}: no events to replay; pass a PyTorch profiler trace")
    strict_steps = replay_events(events, model, graph=g, strict=True).steps
    meas = steps.column("measured_us").to_numpy()
    rep = steps.column("total_us").to_numpy()
    err, serr = _errors(steps), _errors(strict_steps)
    unx = steps.column("unexplained_us").to_numpy()
    checked = serr if strict else err
    worst = float(np.abs(checked).max())
    med = float(np.median(np.abs(err)))
    share = float(unx.sum() / rep.sum()) if rep.sum() > 0 else 0.0
    n = result.notes.get("device_events_without_launch", 0)
    unlinked = int(n) if isinstance(n, int | float) else 0
    if fmt is PrintFormat.json:
        print_json({
            "steps": [{"rank": r, "step": st, "measured_us": float(m), "replayed_us": float(p),
                       "error": float(e), "strict_error": float(se), "unexplained_us": float(u),
                       "over_limit": bool(abs(c) > limit)}
                      for r, st, m, p, e, se, u, c in zip(steps.column("rank").to_pylist(),
                                                          steps.column("step").to_pylist(), meas,
                                                          rep, err, serr, unx, checked,
                                                          strict=True)],
            "median_abs_error": med, "worst_abs_error": float(np.abs(err).max()),
            "strict_median_abs_error": float(np.median(np.abs(serr))),
            "strict_worst_abs_error": float(np.abs(serr).max()),
            "checked": "strict" if strict else "error", "max_error": limit,
            "passed": worst <= limit, "unexplained_fraction": share,
            "device_events_without_launch": unlinked})
        if worst > limit:
            raise typer.Exit(1)
        return
    typer.echo(f"{'rank':>5} {'step':>6} {'measured_us':>14} {'replayed_us':>14} {'error':>9} "
               f"{'strict':>9} {'unexplained_us':>15}")
    for r, st, m, p, e, se, u, c in zip(steps.column("rank").to_pylist(),
                                        steps.column("step").to_pylist(),
                                        meas, rep, err, serr, unx, checked):
        flag = "  !" if abs(c) > limit else ""
        typer.echo(f"{r:>5} {st:>6} {m:>14.3f} {p:>14.3f} {e:>+8.3%} {se:>+8.3%} {u:>15.3f}{flag}")
    typer.echo(f"median |error| {med:.3%}, worst "
               f"{float(np.abs(err).max()):.3%}; strict: median {float(np.median(np.abs(serr))):.3%}"
               f", worst {float(np.abs(serr).max()):.3%} (limit {limit:.3%} on "
               f"{'strict' if strict else 'error'})")
    lat = f"{latency:g} us ({source})" if latency is not None else "unknown (0 us modelled)"
    typer.echo(f"unexplained: {share:.1%} of replayed step time (launch latency {lat})")
    if unlinked:
        typer.echo(f"note: {unlinked} device events have no launch link in the trace; "
                   "their starts follow only their stream")
    cyc = cycle_warning(g.notes)
    if cyc:
        typer.echo(f"mtia-trace: warning: {cyc}", err=True)
    if worst > limit:
        which = "strict step error" if strict else "worst step error"
        typer.echo(f"validate: FAIL: {which} {worst:.3%} exceeds {limit:.3%}", err=True)
        raise typer.Exit(1)
