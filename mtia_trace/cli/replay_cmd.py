"""`mtia-trace replay`: ingest a trace, replay it on one or more targets, store each run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import typer

from analyzers.report.headline import identical_reason
from analyzers.report.run_data import load_run
from mtia_trace import schema
from mtia_trace.cli.json_output import print_json
from mtia_trace.cli.options import (
    LOSS_RATE_OPTION,
    OLD_OUT_OPTION,
    PRINT_FORMAT_OPTION,
    SEED_OPTION,
    SET_OPTION,
    SOURCE_HW_OPTION,
    TRACE_ARGUMENT,
    WHATIF_OPTION,
    PrintFormat,
)
from mtia_trace.cli.output import render_table
from mtia_trace.progress import Progress
from mtia_trace.replay_job import Mode, ReplayOptions, destinations, replay_trace, split_hw

#: Steps printed in the attribution table before eliding the middle.
MAX_STEP_ROWS = 12


def step_table(steps: pa.Table) -> pa.Table:
    """Attribution per step, mean over ranks, with a final mean-over-steps row."""
    cols = (["total_us", "measured_us"] + [f"{a}_us" for a in schema.ATTRIBUTION]
            + ["unexplained_us"])
    g = steps.group_by("step").aggregate([("rank", "count")] + [(c, "mean") for c in cols])
    g = g.sort_by("step")
    out = {"step": [str(s) for s in g.column("step").to_pylist()],
           "ranks": g.column("rank_count").to_pylist()}
    for c in cols:
        out[c] = g.column(f"{c}_mean").to_pylist()
    n = len(out["step"])
    if n > MAX_STEP_ROWS:
        keep = list(range(MAX_STEP_ROWS // 2)) + list(range(n - MAX_STEP_ROWS // 2, n))
        trimmed = {k: [v[i] for i in keep] for k, v in out.items()}
        for k in trimmed:
            trimmed[k].insert(MAX_STEP_ROWS // 2, "..." if k == "step" else None)
    else:
        trimmed = {k: list(v) for k, v in out.items()}
    if n > 1:
        trimmed["step"].append("mean")
        trimmed["ranks"].append(None)
        for c in cols:
            vals = [v for v in out[c] if v is not None]
            trimmed[c].append(sum(vals) / len(vals) if vals else None)
    return pa.table(trimmed)


def step_rows(steps: pa.Table) -> list[dict]:
    """Attribution per step, mean over ranks: the ``--format json`` rows (every step)."""
    cols = ["total_us", "measured_us"] + [f"{a}_us" for a in schema.ATTRIBUTION]
    g = steps.group_by("step").aggregate([("rank", "count")] + [(c, "mean") for c in cols])
    g = g.sort_by("step")
    return [{"step": r["step"], "ranks": r["rank_count"], **{c: r[f"{c}_mean"] for c in cols}}
            for r in g.to_pylist()]


def replay(
    trace: Path = TRACE_ARGUMENT,
    hw: list[str] = typer.Option(None, "--hw", help="Target hardware: a bundled spec name or a "
                                 ".toml path; repeat or comma-separate for several "
                                 "(default: as-measured)."),
    overrides: list[str] = SET_OPTION,
    whatif: list[str] = WHATIF_OPTION,
    mode: Mode = typer.Option(Mode.auto, "--mode", help="Compute costing: roofline from "
                              "flops/bytes, scaled from measured times, or auto."),
    loss_rate: float = LOSS_RATE_OPTION,
    seed: int = SEED_OPTION,
    source_hw: str = SOURCE_HW_OPTION,
    out: Path = typer.Option(None, "-o", "--output",
                             help="Folder for the runs, one per target: <folder>/<trace>-<hw> "
                             "(default folder: runs)."),
    old_out: Path = OLD_OUT_OPTION,
    force: bool = typer.Option(False, "--force", help="Replace existing run directories."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only where runs were written."),
    scheduler: str = typer.Option(None, "--scheduler", metavar="tcp://HOST:PORT",
                                  help="Replay on an existing Dask cluster (mtia-trace[distributed])."),
    workers: int = typer.Option(None, "--workers", min=1,
                                help="Replay on a local Dask cluster of N worker processes: for "
                                "a trace whose replay does not fit one process's memory (on one "
                                "machine it is slower than the default single process)."),
    fmt: PrintFormat = PRINT_FORMAT_OPTION,
) -> None:
    """Replay a trace on target hardware and store the run (Parquet + run.json).

    Prints the attribution per step (mean over ranks, us) and the run directory; query it with
    `mtia-trace query`, `analyze` or `report`.

    A multi-rank trace of 64 MB of JSON or more is read on one process per CPU (Linux);
    MTIA_TRACE_INGEST_WORKERS=<n> sets how many (1: one file at a time, the least memory).

    Example: mtia-trace replay sample_traces/synth/dcnv2_train_2rank --hw mtia300,h100
    """
    hws = split_hw(hw)
    opts = ReplayOptions(hws=hws, overrides=list(overrides or []), mode=mode, loss_rate=loss_rate,
                         seed=seed, source_hw=source_hw, force=force, scheduler=scheduler,
                         workers=workers, whatifs=list(whatif or []))
    out = out if out is not None else old_out
    dests = destinations(trace, hws, out)
    warnings: list[str] = []

    def warn(w: str) -> None:
        warnings.append(w)
        if not quiet and fmt is not PrintFormat.json:
            typer.echo(f"mtia-trace: warning: {w}", err=True)

    with Progress("replay", quiet=quiet) as progress:
        steps = replay_trace(trace, dests, opts, progress=progress, warn=warn)
    same = identical_targets(steps, hws, dests)
    if fmt is PrintFormat.json:
        print_json({"runs": [{"hardware": h, "path": str(dests[h]),
                              "steps": step_rows(steps[h])} for h in hws],
                    "identical_targets": same, "warnings": warnings})
        return
    for h in hws:
        if not quiet:
            typer.echo(f"\n{h}: attribution per step (mean over ranks)")
            typer.echo(render_table(step_table(steps[h])), nl=False)
        typer.echo(f"run written to {dests[h]}")
    if same:
        typer.echo(f"mtia-trace: warning: {same}", err=True)


#: Targets whose every (rank, step) time and component agree to this relative tolerance (of the
#: step time) are the same result up to float summation order.
SAME_REL = 1e-9


def identical_targets(steps: dict[str, pa.Table], hws: list[str],
                      dests: dict[str, Path] | None = None) -> str | None:
    """The loud sentence for targets whose step attributions are identical, else None; with
    the runs' ``dests`` it says why (`analyzers.report.headline.identical_reason`)."""
    if len(hws) < 2:
        return None
    cols = ["total_us"] + [f"{a}_us" for a in schema.ATTRIBUTION]

    def arr(h: str) -> np.ndarray:
        t = steps[h].sort_by([("rank", "ascending"), ("step", "ascending")])
        return np.stack([t.column(c).to_numpy() for c in cols]) if t.num_rows else np.empty(0)

    first = arr(hws[0])
    if first.size == 0:
        return None
    tol = SAME_REL * np.abs(first[0]).max()
    if not all(arr(h).shape == first.shape and np.abs(arr(h) - first).max() <= tol
               for h in hws[1:]):
        return None
    if dests is None:
        return f"{' and '.join(hws)} give identical step times and attribution"
    runs = [load_run(dests[h], analyses=False) for h in hws]
    return identical_reason(runs[0], runs[1:])
