"""The replay pipeline as a library: ingest a trace, replay it on each target, store each run.

`mtia-trace replay` and `mtia-trace compare TRACE --hw A --hw B` are thin shells over
`replay_trace`; a notebook can call it the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import pyarrow as pa

from mtia_trace import ingest
from mtia_trace.destinations import claimed
from mtia_trace.errors import UsageError
from mtia_trace.storage import TABLES, check_destination, write_run
from replay.attribution import unexplained_summary
from replay.costs import AsMeasured
from replay.distributed import driver
from replay.graph.cycles import cycle_warning
from replay.hardware import load_spec, model_for
from replay.hardware.source import with_source
from replay.run import replay_events
from replay.whatif import parse_whatifs

AS_MEASURED = "as-measured"


class Mode(str, Enum):
    auto = "auto"
    roofline = "roofline"
    scaled = "scaled"


@dataclass
class ReplayOptions:
    """What `replay_trace` needs besides the trace and where to write."""

    hws: list[str] = field(default_factory=lambda: [AS_MEASURED])
    overrides: list[str] = field(default_factory=list)
    mode: Mode = Mode.auto
    loss_rate: float = 0.0
    seed: int = 0
    source_hw: str | None = None
    force: bool = False
    #: Dask: address of an existing scheduler, or the number of local workers to start
    scheduler: str | None = None
    workers: int | None = None
    #: op-level what-ifs, ``SELECTOR:CHANGE`` (replay.whatif)
    whatifs: list[str] = field(default_factory=list)


def trace_stem(path: Path) -> str:
    """`runs/<stem>-<hw>`: the trace's name without .json/.gz/.pt.trace suffixes."""
    name = path.resolve().name if path.is_dir() else path.name
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name or "trace"


def split_hw(values: list[str] | None) -> list[str]:
    """`--hw a --hw b,c` → [a, b, c] (deduplicated); none → as-measured."""
    names = [v.strip() for item in values or [] for v in item.split(",") if v.strip()]
    if values and not names:
        raise UsageError(f"--hw {values[0]!r}: names no hardware; give a spec name (e.g. "
                         "mtia300) or a .toml path, or leave --hw out for as-measured")
    return list(dict.fromkeys(names)) or [AS_MEASURED]


def destinations(trace: Path, hws: list[str], out: Path | None) -> dict[str, Path]:
    """Run directory per target: ``<out>/<stem>-<hw>``, whatever the number of targets
    (``out``: ``-o/--output``, default ``runs``)."""
    stem = trace_stem(trace)
    label = {hw: Path(hw).stem if hw.endswith(".toml") else hw for hw in hws}
    parent = out if out is not None else Path("runs")
    return {hw: parent / f"{stem}-{label[hw]}" for hw in hws}


def cost_model(hw: str, opts: ReplayOptions) -> tuple[object, dict, dict]:
    """(cost model, spec dict for run.json, assumed values) for one target."""
    if hw == AS_MEASURED:
        if opts.overrides:
            raise UsageError("--set: as-measured replay has no hardware spec to override; "
                             "add --hw mtia300 (or another spec)")
        if opts.loss_rate:
            raise UsageError("--loss-rate: as-measured replay keeps measured durations; "
                             "add --hw mtia300 (or another spec)")
        return AsMeasured(), {"name": AS_MEASURED}, {}
    spec = load_spec(hw, opts.overrides)
    model = model_for(spec, mode=opts.mode.value, loss_rate=opts.loss_rate, seed=opts.seed)
    return model, spec.to_dict(), {k: spec.value(k) for k in spec.assumed()}


def _options_meta(hw: str, opts: ReplayOptions) -> dict:
    return {"hw": hw, "mode": opts.mode.value, "loss_rate": opts.loss_rate, "seed": opts.seed,
            "overrides": list(opts.overrides), "source_hw": opts.source_hw,
            "whatif": list(opts.whatifs) or None}


def replay_trace(trace: Path, dests: dict[str, Path], opts: ReplayOptions, *,
                 progress: Callable[[str], None] | None = None,
                 warn: Callable[[str], None] | None = None) -> dict[str, pa.Table]:
    """Replay ``trace`` on every target of ``opts.hws`` and write one run per target.

    Destinations are checked and specs loaded before the slow part, so a typo fails fast.
    Returns each target's steps table (attribution per rank and step).
    """
    with ExitStack() as held:
        for d in dests.values():
            check_destination(d, opts.force)
            held.enter_context(claimed(d))  # a concurrent writer is refused now, not at the end
        return _replay_trace(trace, dests, opts, progress, warn)


def _replay_trace(trace: Path, dests: dict[str, Path], opts: ReplayOptions,
                  progress: Callable[[str], None] | None,
                  warn: Callable[[str], None] | None) -> dict[str, pa.Table]:
    say = progress or (lambda _m: None)
    models = {h: cost_model(h, opts) for h in opts.hws}
    whatifs = parse_whatifs(opts.whatifs)
    if opts.scheduler or opts.workers:
        if whatifs:
            raise UsageError("--whatif: not yet applied on Dask workers; replay what-ifs "
                             "without --scheduler/--workers")
        return _replay_distributed(trace, dests, models, opts, say, warn)

    say(f"ingesting {trace}")
    t0 = time.perf_counter()
    tr = ingest.load(trace, progress=lambda f, i, n: say(f"reading {f} ({i + 1}/{n})"))
    t_ingest = time.perf_counter() - t0
    warnings = [str(w) for w in getattr(tr, "warnings", []) or []]
    for w in warnings:
        if warn is not None:
            warn(w)
    on = f", read on {tr.readers} processes" if getattr(tr, "readers", 1) > 1 else ""
    say(f"{tr.events.num_rows:,} events from {len(tr.files) or 1} file(s){on}")
    events, _, _ = with_source(tr, opts.source_hw)

    steps: dict[str, pa.Table] = {}
    for h in opts.hws:
        model, spec, assumed = models[h]
        say(f"replaying on {h}")
        t0 = time.perf_counter()
        result = replay_events(events, model, progress=say, whatifs=whatifs)
        t_replay = time.perf_counter() - t0
        notes = getattr(result, "notes", {}) or {}
        for said in (notes.get("cpu_only"), cycle_warning(notes)):
            if said and warn is not None:
                warn(f"{h}: {said}")
        say(f"writing {dests[h]}")
        meta = {
            "hardware": h,
            "spec": spec,
            "options": _options_meta(h, opts),
            "seed": opts.seed,
            "traces": ingest.file_facts(tr) or [{"path": str(trace)}],
            "assumptions": {"spec": assumed, "model": dict(getattr(result, "notes", {}) or {})},
            "warnings": warnings,
            "timings_s": {"ingest": round(t_ingest, 4), "replay": round(t_replay, 4)},
            "unexplained": unexplained_summary(result.steps),
        }
        write_run({t: getattr(result, t) for t in TABLES}, dests[h], meta, force=opts.force)
        steps[h] = result.steps
    return steps


def _replay_distributed(trace: Path, dests: dict[str, Path], models: dict, opts: ReplayOptions,
                        say: Callable[[str], None],
                        warn: Callable[[str], None] | None = None) -> dict[str, pa.Table]:
    """`replay_trace` on Dask: one run per target, events/edges partitioned by rank."""
    if opts.loss_rate:
        raise UsageError("--loss-rate: loss draws are not yet partitioned across workers; "
                         "replay with loss without --scheduler/--workers")
    steps: dict[str, pa.Table] = {}
    with driver.session(opts.scheduler, opts.workers) as client:
        for h in opts.hws:
            model, spec, assumed = models[h]
            say(f"replaying on {h} (distributed)")
            meta = {"hardware": h, "spec": spec, "seed": opts.seed,
                    "options": _options_meta(h, opts), "assumptions": {"spec": assumed}}
            steps[h], full = driver.replay_distributed(trace, model, dests[h], meta,
                                                       client=client, force=opts.force,
                                                       source_hw=opts.source_hw, progress=say)
            if warn is not None and h == opts.hws[0]:  # the trace's: said once, as locally
                for w in full.get("warnings", []):
                    warn(w)
    return steps
