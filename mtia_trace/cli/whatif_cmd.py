"""`mtia-trace whatif`: the causal profile of a trace — what to optimize first."""

from __future__ import annotations

from pathlib import Path

import typer

from mtia_trace.cli.options import FORCE_OPTION, SOURCE_HW_OPTION, TRACE_ARGUMENT
from mtia_trace.cli.output import FORMAT_OPTION, OUTPUT_OPTION, Format, emit, parse_format
from mtia_trace.destinations import check_file
from mtia_trace.progress import Progress
from mtia_trace.replay_job import AS_MEASURED
from mtia_trace.whatif_job import parse_group_by, profile_trace


def whatif(
    trace: Path = TRACE_ARGUMENT,
    hw: str = typer.Option(AS_MEASURED, "--hw", help="Target hardware (default: as-measured)."),
    top: int = typer.Option(20, "--top", min=1, help="Groups ranked (the most busy ones)."),
    by: str = typer.Option("kind,name,scope,rank", "--by",
                           help="Group dimensions, comma-separated: kind, name, scope "
                                "(user annotations), rank."),
    speedup: float = typer.Option(2.0, "--speedup", help="How much faster each group gets."),
    source_hw: str = SOURCE_HW_OPTION,
    fmt: str = FORMAT_OPTION,  # a `Format` once parsed
    out: Path = OUTPUT_OPTION,
    force: bool = FORCE_OPTION,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
) -> None:
    """Causal profile: the op groups that would shorten the step most if they were faster.

    For the op groups with the most busy time (by kind, name, annotation scope and rank), the
    predicted mean step if the group were --speedup times faster and if it took no time, sorted
    by gain. The graph is built once; each row is a replay with that
    group's costs (and the self time of its ops) scaled. Busy work off the critical path gains
    nothing. Each group is a --whatif selector you can pass to `replay`.

    Columns (us): busy_us is the group's busy time per step (all ranks), step_us the replayed
    mean step, step_2x_us / gain_2x_us with the group 2x faster, step_zero_us / gain_zero_us
    with it at zero.

    Example: mtia-trace whatif sample_traces/torch_cpu_dlrm --top 10
    """
    fmt = parse_format(fmt)  # the callback's Format, for the type checker
    if out is not None:
        check_file(out, force=force)  # before the replays, not after
    with Progress("whatif", quiet=quiet) as progress:
        table, base = profile_trace(trace, hw=hw, top=top, by=parse_group_by(by),
                                    speedup=speedup, source_hw=source_hw, progress=progress)
    if fmt is Format.table and out is None and not quiet:
        typer.echo(f"replayed mean step on {hw}: {base:,.1f} us; groups by gain when "
                   f"{speedup:g}x faster")
    emit(table, fmt, out, force=force)
