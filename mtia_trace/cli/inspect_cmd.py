"""`mtia-trace inspect TRACE`: the one screen to read first about a trace."""

from __future__ import annotations

from pathlib import Path

import typer

from analyzers.report import fmt
from mtia_trace.cli.json_output import print_json, records
from mtia_trace.cli.options import PRINT_FORMAT_OPTION, PrintFormat
from mtia_trace.escape import terminal
from mtia_trace.ingest import load
from mtia_trace.trace_summary import Summary, summarize
from replay.graph import build_graph
from replay.graph.cycles import cycle_warning


def render(s: Summary) -> str:
    out: list[str] = []
    add = out.append
    add(f"ranks: {len(s.ranks)} ({', '.join(map(str, s.ranks))})")
    for f in s.files:
        extra = f", backend {f['backend']}, world_size {f['world_size']}" if f["backend"] else ""
        add(f"  rank {f['rank']}: {terminal(Path(f['path']).name)}, {f['events']:,} events"
            f"{terminal(extra)}")
    add("")
    add("steps (measured):")
    for rank, g in s.steps.groupby("rank"):
        parts = [f"#{int(r.step)} {fmt.duration(r.measured_us)}" for r in g.itertuples()]
        add(f"  rank {rank}: " + ", ".join(parts))
    add("")
    if len(s.streams):
        add("device streams:")
        for r in s.streams.itertuples():
            add(f"  rank {r.rank} {terminal(r.track)}: {r.events:,} events, busy "
                f"{fmt.duration(r.busy_us)}")
    else:
        add("device streams: none (CPU-only trace: host ops are the work)")
    add("")
    add("events by kind: " + ", ".join(f"{k} {v:,}" for k, v in s.counts.items()))
    add("")
    what = "device time" if s.device else "host self time"
    add(f"top ops by {what}:")
    for r in s.top_ops.itertuples():
        name = terminal(r.name, cells=True)
        name = name if len(name) <= 60 else name[:59] + "…"
        add(f"  {fmt.duration(r.total_us):>11} {r.share:6.1%} {r.calls:7,}x  {r.kind:<11} {name}")
    add("")
    if len(s.collectives):
        add("collectives (per rank instances, bytes summed over ranks):")
        for r in s.collectives.itertuples():
            pg = terminal(r.pg, cells=True) if isinstance(r.pg, str) else "?"
            add(f"  {terminal(str(r.coll_op), cells=True):<15} pg {pg:<4} {r.count:5,}x  in "
                f"{fmt.nbytes(r.bytes_in)}, out {fmt.nbytes(r.bytes_out)}")
    else:
        add("collectives: none")
    add("")
    if s.warnings:
        add(f"warnings ({len(s.warnings)}):")
        for w in s.warnings:
            add(f"  - {terminal(w, cells=True)}")
    else:
        add("warnings: none")
    return "\n".join(out)


def inspect(
    trace: Path = typer.Argument(..., help="Kineto trace (.json/.json.gz) or a folder of per-rank traces."),
    top: int = typer.Option(10, "--top", help="How many ops to list by time."),
    fmt: PrintFormat = PRINT_FORMAT_OPTION,
) -> None:
    """Summarise a trace: ranks, steps, streams, event kinds, top ops, collectives, warnings.

    Example: mtia-trace inspect sample_traces/torch_cpu_dlrm
    """
    tr = load(trace)
    s = summarize(tr, top=top)
    w = cycle_warning(build_graph(tr.events).notes)  # what replay and validate will drop
    if w:
        s.warnings.append(w)
    if fmt is PrintFormat.json:
        print_json(summary_dict(s))
    else:
        typer.echo(render(s))


def summary_dict(s: Summary) -> dict:
    """The ``--format json`` shape of `inspect`."""
    return {"ranks": s.ranks, "files": s.files, "steps": records(s.steps),
            "streams": records(s.streams), "events_by_kind": dict(s.counts),
            "top_ops_by": "device time" if s.device else "host self time",
            "top_ops": records(s.top_ops), "collectives": records(s.collectives),
            "warnings": list(s.warnings)}
