"""`mtia-trace validate`: replay a trace as measured and compare it with the trace (`replay.validation`)."""

from __future__ import annotations

import numpy as np
import typer

from mtia_trace.cli.json_output import print_json
from mtia_trace.cli.options import PRINT_FORMAT_OPTION, PrintFormat
from mtia_trace.errors import UsageError
from mtia_trace.ingest import load
from replay.graph.cycles import cycle_warning
from replay.hardware import load_spec
from replay.hardware.source import with_source
from replay.validation import KEPT_MEASURED, validate_events


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
                                  help="Largest allowed |replayed - measured| / measured per step, "
                                       "and largest allowed 90th percentile of |replayed - "
                                       "measured| device start / mean step."),
    strict: bool = typer.Option(False, "--strict",
                                help="Check the strict replay (every measured lag the model "
                                     "predicts replaced by its modelled value) against "
                                     "--max-error."),
    fmt: PrintFormat = PRINT_FORMAT_OPTION,
) -> None:
    """Replay a trace as measured and compare it with the trace: step times and device starts.

    Two replays: the default keeps every measured gap and lag (it checks that the graph and the
    scheduler reproduce the trace: a consistency check); ``strict`` replaces every measured lag
    the model predicts by the modelled value (a device event's ready lag by the launch latency of
    the hardware the trace was measured on, 0 when unknown; a CPU collective's dispatch lag by
    0), so a start the graph does not explain shows up as error: that figure tests the graph.
    What strict keeps as measured is printed. Per replay: the step error, and the device-schedule
    error: median and 90th percentile of |replayed - measured| start of device events (kernels,
    copies, collectives) as a share of the mean step. ``unexplained_us``: step time on the
    critical path no dependency and no modelled latency explains (host gaps outside every op,
    ready lags beyond the launch latency). Exits 1 when the worst step error or the device-start
    90th percentile (the strict ones with --strict) exceeds --max-error. What the trace does not
    let the graph reproduce (device events without a launching call, device starts more than
    1 ms after every input) is counted.

    Example: mtia-trace validate traces/rank0.json.gz --max-error 1% --strict
    """
    limit = parse_percent(max_error)
    tr = load(trace if len(trace) > 1 else trace[0])
    events, source, _why = with_source(tr, None)
    latency = float(load_spec(source).value("host.kernel_launch_us")) if source else None
    v = validate_events(events, latency, source)
    steps = v.steps
    if steps.num_rows == 0:
        raise UsageError(f"{trace[0]}: no events to replay; pass a PyTorch profiler trace")
    checked = v.strict_error if strict else v.error
    passed = v.passed(limit, strict)
    which = "strict" if strict else "error"
    if fmt is PrintFormat.json:
        print_json(v.as_dict(limit, strict))
        if not passed:
            raise typer.Exit(1)
        return
    typer.echo(f"{'rank':>5} {'step':>6} {'measured_us':>14} {'replayed_us':>14} {'error':>9} "
               f"{'strict':>9} {'unexplained_us':>15}")
    for r, st, m, p, e, se, u, c in zip(*(steps.column(k).to_pylist() for k in (
            "rank", "step", "measured_us", "replayed_us", "error", "strict_error",
            "unexplained_us")), checked, strict=True):
        flag = "  !" if abs(c) > limit else ""
        typer.echo(f"{r:>5} {st:>6} {m:>14.3f} {p:>14.3f} {e:>+8.3%} {se:>+8.3%} {u:>15.3f}{flag}")
    err, serr = v.error, v.strict_error
    typer.echo(f"median |error| {float(np.median(np.abs(err))):.3%}, worst {v.worst():.3%}; "
               f"strict: median {float(np.median(np.abs(serr))):.3%}, worst "
               f"{v.worst(strict=True):.3%} (limit {limit:.3%} on {which})")
    for label, d in (("device starts", v.device_start), ("strict device starts",
                                                           v.strict_device_start)):
        if d.events:
            typer.echo(f"{label}: |replayed - measured| median {d.median:.3%}, p90 {d.p90:.3%} "
                       f"of the mean step ({d.median_us:,.1f} / {d.p90_us:,.1f} us over "
                       f"{d.events:,} device events)")
    lat = f"{latency:g} us ({source})" if latency is not None else "unknown (0 us modelled)"
    typer.echo(f"unexplained: {v.unexplained_fraction:.1%} of replayed step time (launch latency "
               f"{lat})")
    typer.echo("strict keeps as measured: " + "; ".join(KEPT_MEASURED))
    for line in v.gaps():
        typer.echo(f"note: {line}")
    cyc = cycle_warning(v.notes)
    if cyc:
        typer.echo(f"mtia-trace: warning: {cyc}", err=True)
    if not passed:
        words = {"step": "step error", "device_start_p90": "device-start p90"}
        failed = [f"{words[k]} {val:.3%}" for k, val in v.checked(strict).items() if val > limit]
        typer.echo(f"validate: FAIL: {which} {', '.join(failed)} exceeds {limit:.3%}", err=True)
        raise typer.Exit(1)
