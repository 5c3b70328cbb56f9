"""`mtia-trace hw`: list the bundled hardware specs, show one with every number's source, and
price collectives nccl-tests style (`hw collective`)."""

from __future__ import annotations

import csv
import io
import json
import re
import textwrap
from enum import Enum

import typer

from mtia_trace.cli.json_output import print_json
from mtia_trace.cli.options import PRINT_FORMAT_OPTION, PrintFormat
from mtia_trace.errors import UsageError
from replay.hardware import (
    NCCL_TESTS_OPS,
    collective_differences,
    collective_rows,
    list_specs,
    load_spec,
    model_for,
)

app = typer.Typer(help="Hardware specs: list them, show one with sources and confidence.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None)


@app.command("list")
def list_cmd(fmt: PrintFormat = PRINT_FORMAT_OPTION) -> None:
    """List the bundled hardware specs.

    Example: mtia-trace hw list
    """
    rows = []
    for name in list_specs():
        spec = load_spec(name)
        rows.append({"name": name, "family": spec.family, "assumed": len(spec.assumed()),
                     "description": spec.description})
    if fmt is PrintFormat.json:
        print_json(rows)
        return
    cols = ("name", "family", "assumed", "description")
    cells = [[str(r[c]) for c in cols] for r in rows]
    width = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]

    def line(row: list[str] | tuple[str, ...]) -> str:
        return "  ".join(v.rjust(w) if c == "assumed" else v.ljust(w)
                         for v, w, c in zip(row, width, cols, strict=True)).rstrip()

    typer.echo(line(cols))
    typer.echo("  ".join("-" * w for w in width))
    for row in cells:
        typer.echo(line(row))


@app.command("show")
def show(
    name: str = typer.Argument(..., help="Bundled spec name or a .toml path."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                        help="Override a value (repeatable), shown as 'override'."),
    assumed_only: bool = typer.Option(False, "--assumed", help="Show only calibrated, assumed and overridden values."),
    vs: str = typer.Option(None, "--vs", metavar="SPEC",
                           help="Also list the collective-model values that differ from SPEC "
                                "(what drives a comparison between the two)."),
    fmt: PrintFormat = PRINT_FORMAT_OPTION,
) -> None:
    """Print every number of a spec with its source and confidence.

    Examples: mtia-trace hw show mtia300 --set comm.message_engines=8;
    mtia-trace hw show mtia300 --vs h100
    """
    spec = load_spec(name, list(overrides or []))
    keys = spec.assumed() if assumed_only else spec.keys()
    model = model_for(spec)
    if fmt is PrintFormat.json:
        print_json({"name": spec.name, "family": spec.family, "description": spec.description,
                    "origin": spec.origin,
                    "values": [{"key": k, "value": spec.value(k), "confidence": spec.confidence(k),
                                "source": spec.source(k)} for k in keys],
                    "model": {"overlap_slowdown": model.overlap_slowdown(),
                              "concurrent_collectives_per_rank": model.pool_capacity(),
                              "assumed_values": len(spec.assumed())},
                    "differences": None if not vs else [
                        {"key": k, "value": a, "other": b, "confidence": c}
                        for k, a, b, c in collective_differences(spec, load_spec(vs))]})
        return
    typer.echo(f"{spec.name} ({spec.family}): {spec.description}")
    typer.echo(f"from {spec.origin}\n")
    width = max((len(k) for k in keys), default=10)
    vwidth = max((len(str(spec.value(k))) for k in keys), default=5)
    for key in keys:
        head = f"{key:<{width}}  {str(spec.value(key)):>{vwidth}}  {spec.confidence(key):<9}  "
        src = textwrap.wrap(spec.source(key), width=max(40, 100 - len(head))) or [""]
        typer.echo(head + src[0])
        for line in src[1:]:
            typer.echo(" " * len(head) + line)
    typer.echo(f"\nmodel: compute slowdown when overlapping communication "
               f"{model.overlap_slowdown():.1%}; {model.pool_capacity()} concurrent collective(s) "
               f"per rank; {len(spec.assumed())} assumed value(s)")

    if vs:
        other = load_spec(vs)
        diffs = collective_differences(spec, other)
        typer.echo(f"\ncollective model: {spec.name} vs {other.name} "
                   f"({len(diffs)} value(s) differ; the rest of the machinery is the same)")
        kw = max((len(d[0]) for d in diffs), default=10)
        for key, mine, theirs, conf in diffs:
            typer.echo(f"  {key:<{kw}}  {mine!s:>10}  vs {theirs!s:>10}  ({conf})")


class CollectiveFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^(\d+)([KMG]?)B?$", re.IGNORECASE)


def parse_sizes(text: str) -> list[int]:
    """``8,1K,4M`` or ``A:B`` (a doubling range, both ends included) -> sizes in bytes."""
    def one(tok: str) -> int:
        m = _SIZE.match(tok.strip())
        if not m:
            raise UsageError(f"--bytes {text}: {tok.strip()!r} is not a size; use bytes with an "
                             f"optional K/M/G suffix, e.g. 8,1K,4M or 1K:1G")
        return int(m.group(1)) * _SUFFIX[m.group(2).upper()]

    out: list[int] = []
    for part in (p for p in text.split(",") if p.strip()):
        if ":" in part:
            lo_s, _, hi_s = part.partition(":")
            lo, hi = one(lo_s), one(hi_s)
            if lo <= 0 or hi < lo:
                raise UsageError(f"--bytes {text}: range {part.strip()!r} needs 0 < A <= B")
            x = lo
            while x <= hi:
                out.append(x)
                x *= 2
        else:
            out.append(one(part))
    if not out:
        raise UsageError(f"--bytes {text!r}: no sizes; e.g. --bytes 8:1G")
    if len(out) > 4096:
        raise UsageError(f"--bytes {text}: {len(out)} sizes; give at most 4096")
    return out


@app.command("collective")
def collective(
    spec_name: str = typer.Argument(..., metavar="SPEC", help="Bundled spec name or a .toml path."),
    op: str = typer.Option(..., "--op", help=f"One of {', '.join(NCCL_TESTS_OPS)}."),
    ranks: int = typer.Option(..., "--ranks", help="Ranks in the collective."),
    ranks_per_node: int = typer.Option(None, "--ranks-per-node",
                                       help="Ranks per node (rack); default: the spec's."),
    sizes: str = typer.Option("8:8G", "--bytes", metavar="LIST",
                              help="Sizes as nccl-tests prints them (the whole buffer for "
                                   "all_gather / reduce_scatter): 8,1K,4M or A:B doubling."),
    gpus_per_thread: int = typer.Option(
        1, "--gpus-per-thread", metavar="G",
        help="nccl-tests' -g: GPUs one host thread drives; an iteration then takes at least "
             "G x the spec's host.kernel_launch_us (bound = launch)."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                        help="Override a spec value (repeatable)."),
    fmt: CollectiveFormat = typer.Option(CollectiveFormat.table, "--format", help="Output format."),
) -> None:
    """Predicted nccl-tests table: time, algbw and busbw per size, with the algorithm and
    protocol the model picks (the fastest, as NCCL's tuner does). To compare with a table
    from a single-process run (`all_reduce_perf -g 8`), pass --gpus-per-thread 8.

    Example: mtia-trace hw collective h100 --op all_reduce --ranks 16 --ranks-per-node 8 --bytes 8:8G
    """
    if op not in NCCL_TESTS_OPS:
        raise UsageError(f"--op {op}: unknown collective; use one of {', '.join(NCCL_TESTS_OPS)}")
    if ranks < 2:
        raise UsageError(f"--ranks {ranks}: a collective needs at least 2 ranks")
    if ranks_per_node is not None and ranks_per_node < 1:
        raise UsageError(f"--ranks-per-node {ranks_per_node}: must be >= 1")
    if gpus_per_thread < 1:
        raise UsageError(f"--gpus-per-thread {gpus_per_thread}: must be >= 1")
    sets = list(overrides or [])
    if ranks_per_node is not None:
        sets.append(f"network.ranks_per_node={ranks_per_node}")
    spec = load_spec(spec_name, sets)
    rows = [dict(zip(_COLUMNS, (r.bytes, r.time_us, r.algbw_GBps, r.busbw_GBps, r.algorithm,
                                r.protocol, r.bound)))
            for r in collective_rows(spec, op, ranks, parse_sizes(sizes), gpus_per_thread)]
    if fmt is CollectiveFormat.json:
        typer.echo(json.dumps(rows))
    elif fmt is CollectiveFormat.csv:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        typer.echo(buf.getvalue(), nl=False)
    else:
        cells = [[_fmt(r[c]) for c in _COLUMNS] for r in rows]
        width = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(_COLUMNS)]
        line = lambda xs: "  ".join(x.rjust(w) if i < 4 else x.ljust(w)  # noqa: E731
                                    for i, (x, w) in enumerate(zip(xs, width))).rstrip()
        typer.echo("\n".join([line(list(_COLUMNS)), line(["-" * w for w in width]),
                              *(line(x) for x in cells)]))


_COLUMNS = ("bytes", "time_us", "algbw_GBps", "busbw_GBps", "algorithm", "protocol", "bound")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e-3 and v != 0 else f"{v:,.3f}".rstrip("0").rstrip(".")
    return str(v)
