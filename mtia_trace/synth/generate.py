"""Generate a synthetic multi-rank trace directory: model -> sharding -> program -> timeline -> files."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from mtia_trace.destinations import check_dir, temporary_dir
from mtia_trace.errors import UsageError
from mtia_trace.synth.costing import SourceHardware
from mtia_trace.synth.estimate import Estimate, check, estimate
from mtia_trace.synth.model import FRAMEWORKS, HOST_OVERHEADS, SHARDINGS, Model
from mtia_trace.synth.model_file import load_model_file
from mtia_trace.synth.presets import PRESETS
from mtia_trace.synth.sharding import host_groups, plan
from mtia_trace.synth.timeline import HOST_PID, T0_NS, Timeline, overlap_stretch
from mtia_trace.synth.workload import Program, build_program
from mtia_trace.synth.writer import RankWriter, write_trace

MODES = ("train", "infer")
BASE_TIME_NS = 1_767_225_600_000_000_000  # fixed, so files are reproducible


@dataclass(frozen=True)
class SynthOptions:
    """What `mtia-trace synth` takes; ``None`` means the model's default."""

    preset: str | None = "dlrm-dcnv2"
    model_file: str | None = None
    ranks: int | None = None
    steps: int = 2
    batch: int | None = None
    sharding: str | None = None
    mode: str = "train"
    seed: int = 0
    source_hw: str = "h100"
    zipf: float = 0.0
    host_overhead: str | None = None
    framework: str | None = None
    compress_level: int = 6


@dataclass(frozen=True)
class SynthResult:
    out_dir: Path
    files: tuple[Path, ...]
    events: int              # trace events written, all ranks (metadata included)
    bytes: int               # compressed bytes, all ranks
    model: Model
    estimate: Estimate
    #: per-rank embedding work (elements gathered per step) of the sharding plan
    rank_load: tuple[int, ...] = ()

    @property
    def load_imbalance(self) -> float:
        """Most-loaded rank's embedding work over the mean (1.0: even)."""
        mean = sum(self.rank_load) / len(self.rank_load) if self.rank_load else 0.0
        return max(self.rank_load) / mean if mean > 0 else 1.0


def resolve_model(opts: SynthOptions) -> Model:
    if opts.model_file:
        m = load_model_file(opts.model_file)
    else:
        if opts.preset not in PRESETS:
            raise UsageError(f"--preset {opts.preset!r} is unknown; allowed: {', '.join(PRESETS)}")
        m = PRESETS[opts.preset]
    for name, v in (("--ranks", opts.ranks), ("--batch", opts.batch), ("--steps", opts.steps)):
        if v is not None and v <= 0:
            raise UsageError(f"{name} {v} must be a positive integer")
    if opts.mode not in MODES:
        raise UsageError(f"--mode {opts.mode!r} is unknown; allowed: {', '.join(MODES)}")
    if opts.sharding is not None and opts.sharding not in SHARDINGS:
        raise UsageError(f"--sharding {opts.sharding!r} is unknown; allowed: {', '.join(SHARDINGS)}")
    if not (np.isfinite(opts.zipf) and opts.zipf >= 0):
        raise UsageError(f"--zipf {opts.zipf} must be a finite number >= 0 (0 = uniform ids)")
    if not 0 <= opts.compress_level <= 9:
        raise UsageError(f"compress level {opts.compress_level} must be in 0..9")
    if opts.host_overhead is not None and opts.host_overhead not in HOST_OVERHEADS:
        raise UsageError(f"--host-overhead {opts.host_overhead!r} is unknown; allowed: "
                         f"{', '.join(HOST_OVERHEADS)}")
    if opts.framework is not None and opts.framework not in FRAMEWORKS:
        raise UsageError(f"--framework {opts.framework!r} is unknown; allowed: {', '.join(FRAMEWORKS)}")
    m = replace(m, ranks=opts.ranks or m.ranks, batch=opts.batch or m.batch,
                sharding=opts.sharding or m.sharding,
                host_overhead=opts.host_overhead or m.host_overhead,
                framework=opts.framework or m.framework)
    return m.validate("--preset " + m.name if not opts.model_file else opts.model_file)


def synthesize(opts: SynthOptions, out_dir: str | Path, force: bool = False,
               on_estimate: Callable[[Estimate], None] | None = None) -> SynthResult:
    """Write one ``rank<N>.pt.trace.json.gz`` per rank into ``out_dir`` (atomically).

    The cost is estimated first (`estimate.estimate`) and a request past the limits refused
    (`estimate.check`) before anything is generated; ``on_estimate`` is told the estimate.
    """
    out = Path(out_dir)
    check_dir(out, force=force, flag="-o", replaceable=is_trace_dir,
              what="a folder of synthetic traces")
    model = resolve_model(opts)
    hw = SourceHardware.load(opts.source_hw)
    train = opts.mode == "train"
    est = estimate(model, hw, opts.steps, train, opts.zipf, opts.compress_level)
    check(est)
    if on_estimate is not None:
        on_estimate(est)
    p = plan(model, model.ranks, model.sharding, model.batch, hw.ranks_per_node, opts.zipf, train)
    prog = build_program(model, p, train)
    tl = _schedule(hw, model, prog, opts)
    check_dir(out, force=force, flag="-o", replaceable=is_trace_dir,
              what="a folder of synthetic traces")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_dir(out)
    try:
        files, total, nev = _write_all(tmp, tl, model, hw, opts)
        mask = os.umask(0)
        os.umask(mask)
        tmp.chmod(0o777 & ~mask)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return SynthResult(out, tuple(out / f.name for f in files), nev, total, model, est,
                       tuple(int(x) for x in p.tbe_gather))


def is_trace_dir(path: Path) -> bool:
    """A folder `synthesize` may replace with --force: empty, or holding only trace files."""
    return all(f.is_file() and f.name.endswith((".json", ".json.gz")) for f in path.iterdir())


def _schedule(hw: SourceHardware, model: Model, prog: Program, opts: SynthOptions) -> Timeline:
    """Schedule the steps; then, where compute overlaps communication and the source hardware
    has an overlap slowdown, once more with those kernels stretched (`timeline.overlap_stretch`;
    the same seed, so the same jitter)."""
    def run(stretch: np.ndarray | None) -> Timeline:
        tl = Timeline(hw, model.ranks, model.dtype != "float", opts.seed, stretch,
                      model.host_overhead)
        for s in range(opts.steps):
            tl.step(prog, s + 1)
        return tl

    tl = run(None)
    stretch = overlap_stretch(tl)
    return tl if stretch is None else run(stretch)


def _write_all(tmp: Path, tl: Timeline, model: Model, hw: SourceHardware,
               opts: SynthOptions) -> tuple[list[Path], int, int]:
    R = model.ranks
    w = RankWriter(tl.recs, R, hw.ranks_per_node)
    pgs = _pg_config(model, hw)
    width = len(str(R - 1))
    streams = sorted(tl.free)
    gen = {k: v for k, v in asdict(opts).items() if k != "compress_level"}
    gen.update(model=model.name, ranks=R, batch=model.batch, sharding=model.sharding,
               host_overhead=model.host_overhead, framework=model.framework)
    files, total, nev = [], 0, 0
    for r in range(R):
        dev = r % hw.ranks_per_node
        header = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": d, "name": hw.device_name,
                                  "totalGlobalMem": int(hw.hbm_bytes)}
                                 for d in range(min(R, hw.ranks_per_node))],
            "distributedInfo": {"backend": "nccl", "rank": r, "world_size": R,
                                "pg_count": len(pgs), "pg_config": pgs, "nccl_version": "2.21.5"},
            "record_shapes": 1, "with_flops": 1, "profile_memory": 0,
            "displayTimeUnit": "ms", "baseTimeNanoseconds": BASE_TIME_NS,
            "traceName": f"rank{r:0{width}d}.pt.trace.json", "synth": gen,
        }
        meta = _metadata(HOST_PID + r, dev, streams, r)
        path = tmp / f"rank{r:0{width}d}.pt.trace.json.gz"
        total += write_trace(path, header, meta, w.events(r), opts.compress_level)
        nev += len(tl.recs) + len(meta)
        files.append(path)
    return files, total, nev


def _pg_config(model: Model, hw: SourceHardware) -> list[dict]:
    R = model.ranks
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": R,
            "ranks": list(range(R))}]
    if model.sharding == "twrw" and R > 1:
        per = min(hw.ranks_per_node, R)
        for g in host_groups(R, per):
            pgs += [{"pg_name": n, "pg_desc": g.desc, "backend_config": "cuda:nccl",
                     "pg_size": len(m), "ranks": m.tolist()} for n, m in zip(g.names, g.members)]
    return pgs


def _metadata(pid: int, dev: int, streams: list[int], rank: int) -> list[dict]:
    ts = T0_NS / 1000.0
    m: list[dict] = []
    for p, label, sort in ((pid, "CPU", pid), (dev, f"GPU {dev}", 16777216 + dev)):
        m += [{"name": "process_name", "ph": "M", "ts": ts, "pid": p, "tid": 0,
               "args": {"name": f"python3.11 (rank {rank})" if label == "CPU" else "python3.11"}},
              {"name": "process_labels", "ph": "M", "ts": ts, "pid": p, "tid": 0,
               "args": {"labels": label}},
              {"name": "process_sort_index", "ph": "M", "ts": ts, "pid": p, "tid": 0,
               "args": {"sort_index": sort}}]
    m.append({"name": "thread_name", "ph": "M", "ts": ts, "pid": pid, "tid": pid,
              "args": {"name": f"thread {pid} (pt_main_thread)"}})
    for s in streams:
        m += [{"name": "thread_name", "ph": "M", "ts": ts, "pid": dev, "tid": s,
               "args": {"name": f"stream {s} "}},
              {"name": "thread_sort_index", "ph": "M", "ts": ts, "pid": dev, "tid": s,
               "args": {"sort_index": s}}]
    return m


__all__ = ["SynthOptions", "SynthResult", "resolve_model", "synthesize"]
