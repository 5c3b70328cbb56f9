"""`mtia-trace diff`: the causal diff of two traces of one program — what changed the step."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import orjson
import pyarrow as pa
import typer

from mtia_trace.cli.options import OLD_FORMAT_SHORT
from mtia_trace.cli.output import render_markdown, render_table
from mtia_trace.cli.report_cmd import write_output
from mtia_trace.escape import md_code
from mtia_trace.progress import Progress
from mtia_trace.whatif_job import diff_trace_files
from replay.diff import DiffResult

#: Unmatched names listed per side.
MAX_UNMATCHED = 8


class DiffFormat(str, Enum):
    text = "text"
    md = "md"
    json = "json"


def render_diff(r: DiffResult, base: Path, new: Path, *, md: bool = False) -> str:
    """The diff as text for a terminal, or as Markdown for a PR (``md``: names inert)."""
    table = (lambda t: render_markdown(t)) if md else render_table  # noqa: E731
    lines = ([f"BASE {md_code(str(base))}", "", f"NEW {md_code(str(new))}", ""] if md
             else [f"BASE {base}", f"NEW  {new}", ""])
    summary = pa.table({
        "": ["measured BASE", "replayed BASE", "measured NEW", "predicted NEW", "error"],
        "mean step (us)": [f"{r.base_step_us:,.1f}", f"{r.base_replayed_us:,.1f}",
                           f"{r.new_step_us:,.1f}", f"{r.predicted_step_us:,.1f}",
                           f"{r.error:+.1%}"],
    })
    lines.append(table(summary).rstrip("\n"))
    lines.append("")
    if r.predicted_steps:
        per = pa.table({
            "step": [str(i) for i in range(len(r.predicted_steps))],
            "measured BASE (us)": [f"{v:,.1f}" for v in r.base_steps],
            "measured NEW (us)": [f"{v:,.1f}" for v in r.new_steps],
            "predicted NEW (us)": [f"{v:,.1f}" for v in r.predicted_steps],
            "error": [f"{e:+.1%}" for e in r.step_errors],
        })
        lines.append("per step (k-th step of BASE with the k-th of NEW, mean over ranks)")
        lines.append(render_table(per).rstrip("\n"))
        lines.append("")
    lines.append(noise_line(r))
    lines.append("")
    lines.append(f"matched {r.matched:,} events ({r.matched_fraction:.1%} of both traces)")
    for side, um in (("BASE", r.unmatched_base), ("NEW", r.unmatched_new)):
        if um:
            top = ", ".join(f"{md_code(n) if md else n} x{c}"
                            for n, c in um.most_common(MAX_UNMATCHED))
            more = f" (+{len(um) - MAX_UNMATCHED} more names)" if len(um) > MAX_UNMATCHED else ""
            lines.append(f"unmatched in {side}: {sum(um.values())} events: {top}{more}")
    k = int(r.notes.get("new_only_collective_events", 0))  # type: ignore[call-overload]
    if k:
        added = int(r.notes.get("new_only_events_added", 0))  # type: ignore[call-overload]
        lines.append(f"NEW issues {k} collective events BASE does not (such as another DDP "
                     f"bucket): the prediction replays them, with the {added} events only NEW "
                     "has in all, on NEW's dependencies among BASE's events")
    k = int(r.notes.get("base_only_collective_events", 0))  # type: ignore[call-overload]
    if k:
        lines.append(f"BASE issues {k} collective events NEW does not: in the prediction BASE's "
                     "events without a partner take no time")
    lines.append("")
    change = r.predicted_step_us - r.base_replayed_us
    lines.append(f"predicted change {change:+,.1f} us by {r.group_by} ({r.scheme} attribution: "
                 "each group's NEW durations applied in turn, largest busy-time change first; "
                 "the parts add up to the predicted change)")
    contrib = pa.table({"group": [g for g, _ in r.contributions],
                        "delta_us": [d for _, d in r.contributions]})
    lines += [""] if md else []
    lines.append(table(contrib).rstrip("\n"))
    return "\n".join(lines) + "\n"


def noise_line(r: DiffResult) -> str:
    """The measured step-to-step spread of both runs, and whether the predicted change is
    within it."""
    def pct(us: float, of: float) -> str:
        return f"{us / of:.1%}" if of else "-"

    text = (f"step-to-step spread (standard deviation over steps): BASE {r.base_spread_us:,.1f} us "
            f"({pct(r.base_spread_us, r.base_step_us)}), NEW {r.new_spread_us:,.1f} us "
            f"({pct(r.new_spread_us, r.new_step_us)})")
    if min(len(r.base_steps), len(r.new_steps)) < 2:
        return text + "; too few steps to say what is noise"
    change = r.predicted_step_us - r.base_replayed_us
    verdict = ("within the measured noise: these runs cannot tell it from no change"
               if r.change_within_noise else "beyond the measured noise")
    return (f"{text}; the predicted change {change:+,.1f} us is {verdict} "
            f"(±{r.noise_us:,.1f} us, two standard errors of the difference of the mean steps)")


def diff(
    base: Path = typer.Argument(..., help="BASE trace (file or folder with one per rank)."),
    new: Path = typer.Argument(..., help="NEW trace of the same program."),
    group_by: str = typer.Option("scope", "--group-by",
                                 help="Attribution groups: scope (outermost user annotation), "
                                      "kind, name, rank or rank-scope."),
    fmt: DiffFormat = typer.Option(DiffFormat.text, "--format", help="Output format."),
    fmt_short: DiffFormat = typer.Option(None, OLD_FORMAT_SHORT, hidden=True,
                                     help="Old spelling of --format."),
    output: Path = typer.Option(None, "-o", "--output", help="Write here instead of stdout."),
    force: bool = typer.Option(False, "--force", help="Overwrite the output file if it exists."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
) -> None:
    """Causal diff of two traces of the same program (a regression, a config change).

    Matches events (per rank, step and track, by name sequence; collectives by group and
    sequence number), replays BASE's graph (its dependencies, ready lags and waits) with NEW's
    durations of the matched work (ops and their self time, kernels, the transfer part of
    collectives) and NEW's gaps where NEW has the same gap, and prints measured BASE, measured
    NEW, predicted NEW and the error, per step too, the measured step-to-step spread of both runs
    (and whether the predicted change is within it), then the predicted change attributed to
    groups. Traces of different programs are
    refused (exit 2). --format json prints one object (base_step_us, new_step_us,
    predicted_step_us, error, matched_fraction, contributions, ...).

    Example: mtia-trace diff traces/main traces/pr --format json
    """
    fmt = fmt_short or fmt
    with Progress("diff", quiet=quiet) as progress:
        r = diff_trace_files(base, new, group_by=group_by, progress=progress)
    if fmt is DiffFormat.json:
        text = (orjson.dumps(r.to_dict(), option=orjson.OPT_INDENT_2) + b"\n").decode()
    else:
        text = render_diff(r, base, new, md=fmt is DiffFormat.md)
    write_output(text, output, force=force)
