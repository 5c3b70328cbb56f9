"""What-if sweeps: replay one trace on a grid of spec overrides, one row per grid point.

``--vary comm.message_engines=4,8,16`` gives one axis; several axes form their product;
``--whatif`` adds an axis of op-level what-ifs (none first). Every
point is validated before any replay runs, so a typo fails fast with the spec's one-line error.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from mtia_trace.errors import UsageError
from mtia_trace.schema import ATTRIBUTION
from replay.graph import build_graph
from replay.hardware import load_spec, model_for
from replay.run import replay_events
from replay.whatif import WhatIf, parse_whatifs

#: Grid size beyond which a sweep is refused (each point is a full replay).
MAX_POINTS = 4096


def parse_vary(items: list[str]) -> list[tuple[str, list[str]]]:
    """``["key=a,b,c", ...]`` -> ``[("key", ["a", "b", "c"]), ...]``."""
    axes: list[tuple[str, list[str]]] = []
    for item in items:
        key, sep, values = item.partition("=")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or not vals:
            raise UsageError(f"--vary {item!r}: expected KEY=V1,V2,..., e.g. "
                             "comm.message_engines=4,8,16,32")
        if any(k == key.strip() for k, _ in axes):
            raise UsageError(f"--vary {key.strip()}: given twice; list all its values in one --vary")
        axes.append((key.strip(), vals))
    return axes


def grid(axes: list[tuple[str, list[str]]]) -> list[list[str]]:
    """The overrides of every grid point (product of the axes, first axis slowest)."""
    n = int(np.prod([len(v) for _, v in axes])) if axes else 1
    if n > MAX_POINTS:
        raise UsageError(f"--vary: {n} grid points; at most {MAX_POINTS}, vary fewer values")
    return [[f"{k}={v}" for (k, _), v in zip(axes, combo)]
            for combo in itertools.product(*[vals for _, vals in axes])]


def step_means(steps: pa.Table) -> dict[str, float]:
    """Mean over (rank, step) rows of the step time and its attribution (whole steps only)."""
    step = steps.column("step").to_numpy()
    keep = step >= 0 if (step >= 0).any() else np.ones(len(step), dtype=bool)
    out = {"step_us": float(steps.column("total_us").to_numpy()[keep].mean()) if keep.any() else 0.0}
    for a in ATTRIBUTION:
        col = steps.column(f"{a}_us").to_numpy()[keep]
        out[f"{a}_us"] = float(col.mean()) if len(col) else 0.0
    return out


def _time_left(t0: float, done: int, total: int) -> str:
    """`` (about 12 min left)`` from the pace of the points done so far (none before the first)."""
    if not done:
        return ""
    left = (time.perf_counter() - t0) / done * (total - done)
    return f" (about {left / 60:.0f} min left)" if left >= 90 else f" (about {left:.0f} s left)"


def sweep(events: pa.Table, hw: str, axes: list[tuple[str, list[str]]],
          base_overrides: list[str] | None = None, *, mode: str = "auto",
          loss_rate: float = 0.0, seed: int = 0, whatifs: list[str] | None = None,
          progress: Callable[[str], None] | None = None) -> pa.Table:
    """Replay ``events`` at every grid point; returns one row per point.

    ``whatifs``: an extra axis ``whatif`` whose values are no what-if (``none``, first) and each
    ``SELECTOR:CHANGE`` given (`replay.whatif`)."""
    base = list(base_overrides or [])
    spec_points = grid(axes)
    wi_axis: list[WhatIf | None] = [None, *parse_whatifs(whatifs)] if whatifs else [None]
    if len(spec_points) * len(wi_axis) > MAX_POINTS:
        raise UsageError(f"--vary/--whatif: {len(spec_points) * len(wi_axis)} grid points; at "
                         f"most {MAX_POINTS}, vary fewer values")
    points = [(p, w) for p in spec_points for w in wi_axis]
    specs = {tuple(p): load_spec(hw, base + p) for p in spec_points}  # validate the grid first
    rows: dict[str, list] = {"point": [], "hw": []}
    for k, _ in axes:
        rows[k] = []
    if whatifs:
        rows["whatif"] = []
    graph = build_graph(events)  # the graph depends on the trace only: built once per sweep
    t0 = time.perf_counter()
    for i, (p, w) in enumerate(points):
        spec = specs[tuple(p)]
        if progress:
            label = " ".join(p + ([w.text] if w else [])) or "(base spec)"
            progress(f"point {i + 1}/{len(points)}{_time_left(t0, i, len(points))}: {label}")
        result = replay_events(events, model_for(spec, mode=mode, loss_rate=loss_rate, seed=seed),
                               graph=graph, whatifs=[w] if w else None)
        rows["point"].append(i)
        rows["hw"].append(spec.name)
        for (k, _), item in zip(axes, p):
            rows[k].append(item.partition("=")[2])
        if whatifs:
            rows["whatif"].append(w.text if w else "none")
        for name, value in step_means(result.steps).items():
            rows.setdefault(name, []).append(value)
    table = pa.table(rows)
    first = table.column("step_us").to_numpy()[0] if table.num_rows else 1.0
    return table.append_column("speedup_vs_point0",
                               pa.array(first / np.maximum(table.column("step_us").to_numpy(), 1e-12)))
