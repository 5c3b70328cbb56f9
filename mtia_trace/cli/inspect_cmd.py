"""`mtia-trace inspect TRACE`: the one screen to read first about a trace."""

from __future__ import annotations

from pathlib import Path

import typer

from mtia_trace.cli.json_output import print_json, records
from mtia_trace.cli.options import PRINT_FORMAT_OPTION, PrintFormat
from mtia_trace.ingest import load
from mtia_trace.trace_summary import Summary, summarize
from replay.graph import build_graph
from replay.graph.cycles import cycle_warning


def _bytes(b: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(b) < 1024 or unit == "TB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return f"{b:.1f} TB"


def render(s: Summary) -> str:
    out: list[str] = []
    add = out.append
    add(f"ranks: {len(s.ranks)} ({', '.join(map(str, s.ranks))})")
    for f in s.files:
        extra = f", backend {f['backend']}, world_size {f['world_size']}" if f["backend"] else ""
        add(f"  rank {f['rank']}: {Path(f['path']).name}, {f['events']:,} events{extra}")
    add("")
    add("steps (measured):")
    for rank, g in s.steps.groupby("rank"):
        parts = [f"#{int(r.step)} {r.measured_us / 1e3:.2f} ms" for r in g.itertuples()]
        add(f"  rank {rank}: " + ", ".join(parts))
    add("")
    if len(s.streams):
        add("device streams:")
        for r in s.streams.itertuples():
            add(f"  rank {r.rank} {r.track}: {r.events:,} events, busy {r.busy_us / 1e3:.2f} ms")
    else:
        add("device streams: none (CPU-only trace: host ops are the work)")
    add("")
    add("events by kind: " + ", ".join(f"{k} {v:,}" for k, v in s.counts.items()))
    add("")
    what = "device time" if s.device else "host self time"
    add(f"top ops by {what}:")
    for r in s.top_ops.itertuples():
        name = r.name if len(r.name) <= 60 else r.name[:57] + "..."
        add(f"  {r.total_us / 1e3:9.3f} ms {r.share:6.1%} {r.calls:7,}x  {r.kind:<11} {name}")
    add("")
    if len(s.collectives):
        add("collectives (per rank instances, bytes summed over ranks):")
        for r in s.collectives.itertuples():
            pg = r.pg if isinstance(r.pg, str) else "?"
            add(f"  {r.coll_op:<15} pg {pg:<4} {r.count:5,}x  in {_bytes(r.bytes_in)}, out {_bytes(r.bytes_out)}")
    else:
        add("collectives: none")
    add("")
    if s.warnings:
        add(f"warnings ({len(s.warnings)}):")
        for w in s.warnings:
            add(f"  - {w}")
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
