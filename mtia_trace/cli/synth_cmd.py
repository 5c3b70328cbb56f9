"""`mtia-trace synth`: write synthetic DLRM-style multi-rank Kineto traces."""

from __future__ import annotations

from pathlib import Path

import typer

from mtia_trace.cli.json_output import print_json
from mtia_trace.cli.options import OLD_OUT_OPTION, PRINT_FORMAT_OPTION, SEED_MAX, PrintFormat
from mtia_trace.errors import UsageError
from mtia_trace.progress import Progress
from mtia_trace.synth import PRESETS, SynthOptions, synthesize
from mtia_trace.synth import estimate as budget

_PRESETS_HELP = "; ".join(f"{n}: {m.doc}" for n, m in PRESETS.items())


def synth(
    out: Path = typer.Option(None, "-o", "--output",
                             help="Output directory (one .json.gz per rank; required)."),
    old_out: Path = OLD_OUT_OPTION,
    preset: str = typer.Option("dlrm-dcnv2", "--preset", help=f"Built-in model. {_PRESETS_HELP}."),
    model: Path | None = typer.Option(None, "--model", help="Custom model file (TOML/JSON: tables "
                                      "[rows, dim, pooling], bottom_mlp, top_mlp, batch); overrides --preset."),
    ranks: int | None = typer.Option(None, "--ranks", help="Ranks (default: the model's)."),
    steps: int = typer.Option(2, "--steps", help="Profiler steps per rank."),
    batch: int | None = typer.Option(None, "--batch", help="Global batch per step (default: the model's)."),
    sharding: str | None = typer.Option(None, "--sharding", help="Embedding sharding: auto (tables "
                                        "balanced by lookup bytes, the heaviest split column-wise), "
                                        "tw (whole tables, naive), rw, cw, twrw or dp (default: the "
                                        "model's)."),
    phase: str = typer.Option("train", "--phase",
                              help="train, or infer (forward only)."),
    old_mode: str = typer.Option(None, "--mode", hidden=True,
                                 help="Old spelling of --phase (--mode is costing in replay)."),
    seed: int = typer.Option(0, "--seed", min=0, max=SEED_MAX, help="Seed of the duration jitter."),
    source_hw: str = typer.Option("h100", "--source-hw", help="Hardware spec the durations come from."),
    zipf: float = typer.Option(0.0, "--zipf", help="Embedding id skew (Zipf exponent; 0 = uniform)."),
    host_overhead: str | None = typer.Option(
        None, "--host-overhead", help="Host overhead per kernel: eager (PyTorch dispatch and a "
        "launch call per kernel) or graph (a captured CUDA graph: graph-node launches); default: "
        "the model's."),
    framework: str | None = typer.Option(
        None, "--framework", help="The training program: torchrec (PyTorch DDP: input all-to-all "
        "at the step's start, gradient buckets all-reduced during the backward, one aten kernel per "
        "ReLU, bias gradient and DCN multiply/add) or hugectr (HugeCTR as the MLPerf DLRM-DCNv2 "
        "submissions run it: input distributed a step ahead, bottom MLP beside the pooled-embedding "
        "exchange, one dense all-reduce after the backward, ReLU and bias in GEMM epilogues, fused "
        "DCN element-wise kernels); default: the model's."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output directory."),
    fmt: PrintFormat = PRINT_FORMAT_OPTION,
) -> None:
    out = out if out is not None else old_out
    mode = old_mode if old_mode is not None else phase
    if out is None:
        raise UsageError("synth: no output directory; add -o DIR")
    opts = SynthOptions(preset=preset, model_file=str(model) if model else None, ranks=ranks,
                        steps=steps, batch=batch, sharding=sharding, mode=mode, seed=seed,
                        source_hw=source_hw, zipf=zipf, host_overhead=host_overhead,
                        framework=framework)
    with Progress("synth") as p:
        res = synthesize(opts, out, force=force,
                         on_estimate=lambda e: p(f"generating {e.describe()}"))
    m = res.model
    if fmt is PrintFormat.json:
        print_json({"out_dir": res.out_dir, "files": [f.name for f in res.files],
                    "model": m.name, "ranks": m.ranks, "sharding": m.sharding, "batch": m.batch,
                    "host_overhead": m.host_overhead, "events": res.events, "bytes": res.bytes,
                    "rank_load": list(res.rank_load), "load_imbalance": res.load_imbalance})
        return
    typer.echo(f"wrote {len(res.files)} trace(s) to {res.out_dir}: {m.name}, {m.ranks} ranks,"
               f" {m.sharding}, batch {m.batch}, {m.host_overhead} host overhead, {res.events}"
               f" events, {res.bytes / 1e6:.2f} MB")
    if m.ranks > 1:
        typer.echo(f"embedding load per rank (elements gathered per step): max / mean"
                   f" {res.load_imbalance:.3f} (min {min(res.rank_load):,}, max"
                   f" {max(res.rank_load):,})")


synth.__doc__ = (
    "Generate synthetic DLRM-style training or inference traces, one Kineto file per rank.\n\n"
    "The events, trace bytes and peak memory are estimated before anything is generated (shown "
    "as progress on a terminal); a request needing more than "
    f"{budget.DEFAULT_MAX_MEMORY // 2**30} GiB of memory or "
    f"{budget.DEFAULT_MAX_BYTES // 2**30} GiB of traces is refused: raise the limits with "
    f"{budget.MAX_MEMORY_ENV}=<size> and {budget.MAX_BYTES_ENV}=<size> (e.g. 32G).\n\n"
    "Example: mtia-trace synth --preset dlrm-dcnv2 --ranks 8 --steps 2 -o traces/dcnv2"
)
