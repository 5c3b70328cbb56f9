"""`mtia-trace replay`: ingest a trace, replay it on one or more targets, store each run."""

from __future__ import annotations

import sys
import time
from enum import Enum
from pathlib import Path

import pyarrow as pa
import typer

from mtia_trace import schema
from mtia_trace.cli.output import render_table
from mtia_trace.errors import UsageError
from mtia_trace.storage import TABLES, check_destination, write_run

AS_MEASURED = "as-measured"
#: Steps printed in the attribution table before eliding the middle.
MAX_STEP_ROWS = 12


class Mode(str, Enum):
    auto = "auto"
    roofline = "roofline"
    scaled = "scaled"


def trace_stem(path: Path) -> str:
    """`runs/<stem>-<hw>`: the trace's name without .json/.gz/.pt.trace suffixes."""
    name = path.resolve().name if path.is_dir() else path.name
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name or "trace"


def split_hw(values: list[str] | None) -> list[str]:
    names = [v.strip() for item in values or [] for v in item.split(",") if v.strip()]
    names = list(dict.fromkeys(names)) or [AS_MEASURED]
    return names


def destinations(trace: Path, hws: list[str], out: Path | None) -> dict[str, Path]:
    """Run directory per target: ``--out`` itself for one target, ``<out>/<stem>-<hw>`` for several."""
    stem = trace_stem(trace)
    label = {hw: Path(hw).stem if hw.endswith(".toml") else hw for hw in hws}
    if len(hws) == 1 and out is not None:
        return {hws[0]: out}
    parent = out if out is not None else Path("runs")
    return {hw: parent / f"{stem}-{label[hw]}" for hw in hws}


class Progress:
    """Stage messages on stderr when it is a terminal (and not --quiet)."""

    def __init__(self, quiet: bool) -> None:
        self.on = not quiet and sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def __call__(self, message: str) -> None:
        if self.on:
            typer.echo(f"[{time.perf_counter() - self.t0:6.1f}s] {message}", err=True)


def _model(hw: str, overrides: list[str], mode: Mode, loss_rate: float, seed: int):  # noqa: ANN202
    """(cost model, spec dict for run.json, assumed keys) for one target."""
    from replay.costs import AsMeasured

    if hw == AS_MEASURED:
        if overrides:
            raise UsageError("--set: as-measured replay has no hardware spec to override; "
                             "add --hw mtia300 (or another spec)")
        if loss_rate:
            raise UsageError("--loss-rate: as-measured replay keeps measured durations; "
                             "add --hw mtia300 (or another spec)")
        return AsMeasured(), {"name": AS_MEASURED}, []
    from replay.hardware import load_spec, model_for

    spec = load_spec(hw, overrides)
    model = model_for(spec, mode=mode.value, loss_rate=loss_rate, seed=seed)
    assumed = {k: spec.value(k) for k in spec.assumed()}
    return model, spec.to_dict(), assumed


#: Facts per trace file kept in run.json.
FILE_FIELDS = ("path", "rank", "sha256", "bytes", "n_events")


def _files(trace: object) -> list[dict]:
    out = []
    for f in getattr(trace, "files", None) or []:
        d = {k: getattr(f, k, None) for k in FILE_FIELDS}
        d["path"] = str(d["path"])
        devices = getattr(f, "device_properties", None) or []
        d["devices"] = sorted({str(p.get("name")) for p in devices if isinstance(p, dict)})
        out.append(d)
    return out


def step_table(steps: pa.Table) -> pa.Table:
    """Attribution per step, mean over ranks, with a final mean-over-steps row."""
    cols = ["total_us", "measured_us"] + [f"{a}_us" for a in schema.ATTRIBUTION]
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


def replay(
    trace: Path = typer.Argument(..., help="Kineto trace (.json / .json.gz) or a folder with one per rank."),
    hw: list[str] = typer.Option(None, "--hw", help="Target hardware: a bundled spec name or a "
                                 ".toml path; repeat or comma-separate for several "
                                 "(default: as-measured)."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                        help="Override a spec value (repeatable)."),
    mode: Mode = typer.Option(Mode.auto, "--mode", help="Compute costing: roofline from "
                              "flops/bytes, scaled from measured times, or auto."),
    loss_rate: float = typer.Option(0.0, "--loss-rate", min=0.0, max=1.0,
                                    help="Packet loss probability for retransmissions."),
    seed: int = typer.Option(0, "--seed", help="Seed for the loss draws."),
    source_hw: str = typer.Option(None, "--source-hw", help="Hardware the trace was measured on "
                                  "(for --mode scaled; default: detected from deviceProperties)."),
    out: Path = typer.Option(None, "--out", help="Run directory (default runs/<trace>-<hw>); "
                             "with several --hw, the folder that holds one run per target."),
    force: bool = typer.Option(False, "--force", help="Replace existing run directories."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only where runs were written."),
) -> None:
    """Replay a trace on target hardware and store the run (Parquet + run.json).

    Prints the attribution per step (mean over ranks, us) and the run directory; query it with
    `mtia-trace query`, `analyze` or `report`.

    Example: mtia-trace replay sample_traces/demo --hw mtia300,h100
    """
    from mtia_trace.ingest import load
    from replay.run import replay_events

    progress = Progress(quiet)
    hws = split_hw(hw)
    dests = destinations(trace, hws, out)
    for d in dests.values():  # fail before the slow part
        check_destination(d, force)
    models = {h: _model(h, list(overrides or []), mode, loss_rate, seed) for h in hws}

    progress(f"ingesting {trace}")
    t0 = time.perf_counter()
    tr = load(trace, progress=lambda f, i, n: progress(f"reading {f} ({i + 1}/{n})"))
    t_ingest = time.perf_counter() - t0
    warnings = [str(w) for w in getattr(tr, "warnings", []) or []]
    if not quiet:
        for w in warnings:
            typer.echo(f"mtia-trace: warning: {w}", err=True)
    progress(f"{tr.events.num_rows:,} events from {len(_files(tr)) or 1} file(s)")
    from replay.hardware.source import with_source
    # (`compare` calls this function directly and leaves --source-hw at its typer default)
    events, _, _ = with_source(tr, source_hw if isinstance(source_hw, str) else None)

    for h in hws:
        model, spec, assumed = models[h]
        progress(f"replaying on {h}")
        t0 = time.perf_counter()
        result = replay_events(events, model, progress=progress)
        t_replay = time.perf_counter() - t0
        progress(f"writing {dests[h]}")
        meta = {
            "hardware": h,
            "spec": spec,
            "options": {"hw": h, "mode": mode.value, "loss_rate": loss_rate, "seed": seed,
                        "overrides": list(overrides or [])},
            "seed": seed,
            "traces": _files(tr) or [{"path": str(trace)}],
            "assumptions": {"spec": assumed, "model": dict(getattr(result, "notes", {}) or {})},
            "warnings": warnings,
            "timings_s": {"ingest": round(t_ingest, 4), "replay": round(t_replay, 4)},
        }
        write_run({t: getattr(result, t) for t in TABLES}, dests[h], meta, force=force)
        if not quiet:
            typer.echo(f"\n{h}: attribution per step (mean over ranks, us)")
            typer.echo(render_table(step_table(result.steps)), nl=False)
        typer.echo(f"run written to {dests[h]}")
