"""Counterfactual jobs as a library: the causal profile of one trace (`mtia-trace whatif`) and
the causal diff of two (`mtia-trace diff`). The CLI commands are thin shells over these."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from mtia_trace.errors import UsageError
from mtia_trace.ingest import load
from mtia_trace.replay_job import AS_MEASURED, ReplayOptions, cost_model
from replay.counterfactual import GROUP_BY, causal_profile, prepare
from replay.diff import DIFF_GROUP_BY, DiffResult, diff_traces
from replay.hardware.source import with_source


def parse_group_by(text: str) -> tuple[str, ...]:
    dims = tuple(d.strip() for d in text.split(",") if d.strip())
    bad = [d for d in dims if d not in GROUP_BY]
    if bad or not dims:
        raise UsageError(f"--by {text!r}: use one or more of {', '.join(GROUP_BY)} "
                         "(comma-separated)")
    return dims


def profile_trace(trace: Path, *, hw: str = AS_MEASURED, top: int = 20,
                  by: tuple[str, ...] = GROUP_BY, speedup: float = 2.0,
                  source_hw: str | None = None,
                  progress: Callable[[str], None] | None = None) -> tuple[pa.Table, float]:
    """(profile table, replayed mean step us) of ``trace`` on ``hw``."""
    say = progress or (lambda _m: None)
    if speedup <= 1.0:
        raise UsageError(f"--speedup {speedup:g}: use a factor > 1 (2 = twice as fast)")
    model, _, _ = cost_model(hw, ReplayOptions(hws=[hw], source_hw=source_hw))
    say(f"ingesting {trace}")
    events, _, _ = with_source(load(trace), source_hw)
    say("building the graph and costing (once)")
    p = prepare(events, model)  # type: ignore[arg-type]
    say(f"replaying the top {top} groups {speedup:g}x faster and at zero")
    return causal_profile(p, top=top, by=by, speedup=speedup), p.step_mean()


def diff_trace_files(base: Path, new: Path, *, group_by: str = "scope",
                     progress: Callable[[str], None] | None = None) -> DiffResult:
    say = progress or (lambda _m: None)
    if group_by not in DIFF_GROUP_BY:
        raise UsageError(f"--group-by {group_by!r}: use one of {', '.join(DIFF_GROUP_BY)}")
    say(f"ingesting {base}")
    eb = load(base).events
    say(f"ingesting {new}")
    en = load(new).events
    say("matching events and replaying BASE with NEW's work")
    return diff_traces(eb, en, group_by=group_by, labels=(str(base), str(new)))
