"""`mtia-trace compare`: two runs (or one trace on two hardware specs) side by side, for CI."""

from __future__ import annotations

import tempfile
from enum import Enum
from pathlib import Path

import orjson
import typer

from analyzers.report.compare import (
    METRICS,
    check_metric,
    compare_dict,
    compare_runs,
    parse_threshold,
    render_compare_html,
    render_compare_markdown,
)
from analyzers.report.run_data import RunData, load_run
from mtia_trace.cli.options import FORCE_OPTION, OLD_FORMAT_SHORT, QUIET_OPTION, WHATIF_OPTION
from mtia_trace.cli.report_cmd import write_output
from mtia_trace.destinations import check_file
from mtia_trace.errors import BaselineMissingError, UsageError
from mtia_trace.progress import Progress
from mtia_trace.replay_job import ReplayOptions, destinations, replay_trace


class CompareFormat(str, Enum):
    md = "md"
    html = "html"
    json = "json"


def _load_baseline(path: Path) -> RunData:
    if not path.exists():
        raise BaselineMissingError(
            f"{path}: baseline run not found; write it first with `mtia-trace replay ... -o "
            f"{path}` (or restore it from the baseline artifact)")
    return load_run(path)


def _replay_pair(trace: Path, hws: list[str], progress: Progress,
                 whatifs: list[str] | None = None) -> tuple[RunData, RunData]:
    """Replay ``trace`` on both specs into a temporary folder and load both runs; with
    ``whatifs``, the second run (on the second spec, or the same one) has them applied."""
    if whatifs:
        hws = [hws[0], hws[-1]]
        progress.update(f"replaying on {hws[0]} and with {len(whatifs)} what-if(s)", advance=0)
        with tempfile.TemporaryDirectory(prefix="mtia-trace-compare-") as tmp:
            d0 = destinations(trace, [hws[0]], Path(tmp) / "base")
            d1 = destinations(trace, [hws[1]], Path(tmp) / "whatif")
            replay_trace(trace, d0, ReplayOptions(hws=[hws[0]]), progress=progress)
            replay_trace(trace, d1, ReplayOptions(hws=[hws[1]], whatifs=list(whatifs)),
                         progress=progress)
            return load_run(d0[hws[0]]), load_run(d1[hws[1]])
    if hws[0] == hws[1]:
        raise UsageError(f"--hw {hws[0]} given twice; pass two different specs, baseline first")
    progress.update(f"replaying on {' and '.join(hws)}", advance=0)
    with tempfile.TemporaryDirectory(prefix="mtia-trace-compare-") as tmp:
        dests = destinations(trace, hws, Path(tmp))
        replay_trace(trace, dests, ReplayOptions(hws=hws), progress=progress)
        base, new = (load_run(dests[h]) for h in hws)
    return base, new


def _trace_hashes(run: RunData) -> set[str]:
    return {t.sha256 for t in run.meta.traces if t.sha256}


def compare(
    inputs: list[Path] = typer.Argument(
        ..., metavar="BASELINE NEW | TRACE",
        help="Two run directories, baseline first; or one trace with two --hw."),
    hw: list[str] = typer.Option(
        [], "--hw", help="With one TRACE: replay it on this spec (give twice; first is the "
                         "baseline)."),
    metric: str = typer.Option("step_time", "--metric",
                               help=f"Metric that gates: {', '.join(METRICS)}."),
    threshold: str = typer.Option("5%", "--threshold",
                                  help="Regression when the metric grows by more than this."),
    fmt: CompareFormat = typer.Option(CompareFormat.md, "--format", help="Output format."),
    fmt_short: CompareFormat = typer.Option(None, OLD_FORMAT_SHORT, hidden=True,
                                     help="Old spelling of --format."),
    output: Path = typer.Option(None, "-o", "--output", help="Write here instead of stdout."),
    whatif: list[str] = WHATIF_OPTION,
    force: bool = FORCE_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Compare two runs: per-component deltas and ratios, largest changes first.

    With one TRACE and --whatif, the baseline is the trace replayed as is (on --hw, default
    as-measured) and the new run the same replay with the what-ifs applied (with two --hw, on
    the second spec).

    Exit codes: 0 no regression, 1 the metric regressed past --threshold, 2 bad input,
    3 baseline run missing. Markdown fits a CI job summary ($GITHUB_STEP_SUMMARY).

    Example: mtia-trace compare runs/main runs/pr --threshold 5% >> "$GITHUB_STEP_SUMMARY"
    """
    fmt = fmt_short or fmt
    if output is not None:
        check_file(output, force=force)
    check_metric(metric)
    limit = parse_threshold(threshold)
    with Progress("compare", quiet=quiet) as p:
        if len(inputs) == 2 and not hw and not whatif:
            base = _load_baseline(inputs[0])
            p.update("reading runs", advance=0)
            new = load_run(inputs[1])
            hb, hn = _trace_hashes(base), _trace_hashes(new)
            if hb and hn and hb != hn and not quiet:
                typer.echo(f"mtia-trace: note: {inputs[0]} and {inputs[1]} replay different "
                           "traces; this compares their replays. To find what changed the step "
                           "between two traces of one program, run `mtia-trace diff BASE_TRACE "
                           "NEW_TRACE`", err=True)
        elif len(inputs) == 1 and (len(hw) == 2 or (whatif and len(hw) <= 1)):
            if not inputs[0].exists():
                raise UsageError(f"{inputs[0]}: trace not found; pass a Kineto trace file or "
                                 "folder to replay on both --hw specs")
            hws = list(hw) or ["as-measured"]
            base, new = _replay_pair(inputs[0], hws, p, list(whatif or []))
        else:
            raise UsageError(
                f"compare: got {len(inputs)} path(s) and {len(hw)} --hw; pass BASELINE NEW "
                "(two runs), TRACE --hw A --hw B, or TRACE [--hw A] --whatif SELECTOR:CHANGE")
        result = compare_runs(base, new, metric=metric, threshold=limit)
    if fmt is CompareFormat.json:
        text = (orjson.dumps(compare_dict(result), option=orjson.OPT_INDENT_2) + b"\n").decode()
    elif fmt is CompareFormat.html:
        text = render_compare_html(result)
    else:
        text = render_compare_markdown(result)
    for w in result.warnings:
        typer.echo(f"mtia-trace: warning: {w}", err=True)
    write_output(text, output, force=force)
    if result.regressed:
        raise typer.Exit(1)
