"""Report figures (matplotlib, Agg backend), each returned as PNG bytes."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from analyzers.report.run_data import RunData  # noqa: E402
from mtia_trace.schema import ATTRIBUTION  # noqa: E402

#: One colour per attribution component, used by every figure.
COLORS: dict[str, str] = {
    "compute": "#3b6fd4", "fetch": "#2aa198", "collective": "#d94848", "peer_wait": "#f08080",
    "queue": "#e8a33d",
    "retry": "#8e44ad", "host": "#7f8c8d", "idle": "#d5d9e0",
}
#: Timeline colour per event kind group.
KIND_COLORS: dict[str, str] = {
    "collective": "#d94848", "p2p": "#d94848", "gemm": "#3b6fd4", "conv": "#3b6fd4",
    "attention": "#3b6fd4", "embedding": "#2aa198", "memcpy": "#16a085", "memset": "#16a085",
    "elementwise": "#5dade2", "reduction": "#5dade2", "optimizer": "#9b59b6",
    "runtime": "#b0b6c0", "host_op": "#95a5a6", "sync": "#f1c40f",
}
MAX_TIMELINE_TRACKS = 48
MAX_TIMELINE_EVENTS = 20_000
DPI = 100


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _np(t: pa.Table, c: str) -> np.ndarray:
    return t.column(c).to_numpy(zero_copy_only=False)


def _stack(ax: plt.Axes, labels: list[str], parts: dict[str, np.ndarray], title: str) -> None:
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for c in ATTRIBUTION:
        ax.bar(x, parts[c], bottom=bottom, color=COLORS[c], label=c, width=0.8)
        bottom += parts[c]
    ax.set_title(title, fontsize=10)
    ax.set_ylabel("µs")
    step = max(1, len(labels) // 24)
    ax.set_xticks(x[::step], labels[::step], fontsize=8, rotation=0 if len(labels) < 12 else 60)
    ax.grid(axis="y", alpha=0.3)


def attribution_bars(run: RunData) -> bytes | None:
    """Stacked attribution per step (mean over ranks) and per rank (mean over steps)."""
    steps = run.steps
    if steps.num_rows == 0:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, key, title in ((a1, "step", "per step (mean over ranks)"),
                           (a2, "rank", "per rank (mean over steps)")):
        g = steps.group_by(key).aggregate([(f"{c}_us", "mean") for c in ATTRIBUTION]).sort_by(key)
        parts = {c: _np(g, f"{c}_us_mean") for c in ATTRIBUTION}
        _stack(ax, [str(v) for v in _np(g, key)], parts, f"Step time attribution {title}")
        ax.set_xlabel(key)
    a2.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _png(fig)


def busy_vs_critical(run: RunData) -> bytes | None:
    """Busy time (all work, overlapped or not) beside critical-path time, per component and rank-step."""
    if run.summary.num_rows == 0 or run.steps.num_rows == 0:
        return None
    n = run.steps.num_rows
    comp = _np(run.summary, "component").astype(str)
    busy = np.array([_np(run.summary, "busy_us")[comp == c].sum() / n for c in ATTRIBUTION])
    critical = np.array([_np(run.summary, "critical_us")[comp == c].sum() / n for c in ATTRIBUTION])
    fig, ax = plt.subplots(figsize=(8, 3.4))
    y = np.arange(len(ATTRIBUTION))
    ax.barh(y - 0.2, busy, height=0.4, color=[COLORS[c] for c in ATTRIBUTION], alpha=0.45,
            label="busy (incl. hidden)")
    ax.barh(y + 0.2, critical, height=0.4, color=[COLORS[c] for c in ATTRIBUTION],
            label="critical (on the critical path)")
    ax.set_yticks(y, list(ATTRIBUTION))
    ax.invert_yaxis()
    ax.set_xlabel("µs per rank-step")
    ax.set_title("Busy vs critical-path time per component", fontsize=10)
    ax.legend(handles=[Patch(color="#888", alpha=0.45, label="busy (incl. overlapped)"),
                       Patch(color="#888", label="critical (on the critical path)")],
              fontsize=8, frameon=False, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def _median_step(run: RunData) -> int | None:
    steps = run.steps
    if steps.num_rows == 0:
        return None
    g = steps.group_by("step").aggregate([("total_us", "max")]).sort_by("step")
    s, t = _np(g, "step"), _np(g, "total_us_max")
    return int(s[np.argsort(t, kind="stable")[len(t) // 2]])


def step_timeline(run: RunData) -> tuple[bytes, int] | None:
    """Gantt chart of one step (the median one) across ranks and streams; collectives in red."""
    step = _median_step(run)
    ev = run.events
    if step is None or ev.num_rows == 0:
        return None
    kind = _np(ev, "kind").astype(str)
    keep = (_np(ev, "step") == step) & ~np.isin(kind, ["annotation", "instant"]) \
        & (_np(ev, "ph").astype(str) == "X")
    sub = ev.filter(pa.array(keep))
    if sub.num_rows == 0:
        return None
    if sub.num_rows > MAX_TIMELINE_EVENTS:
        dur = _np(sub, "end_us") - _np(sub, "start_us")
        sub = sub.take(pa.array(np.sort(np.argsort(-dur, kind="stable")[:MAX_TIMELINE_EVENTS])))
    labels = pc.binary_join_element_wise(
        pc.cast(sub.column("rank"), pa.string()), sub.column("track"), " ")
    rank = _np(sub, "rank")
    is_dev = _np(sub, "is_device").astype(bool)
    lab = labels.to_numpy(zero_copy_only=False).astype(str)
    # order: rank, then device streams before host threads, then name
    keys = sorted(set(zip(rank.tolist(), (~is_dev).tolist(), lab.tolist())))
    if len(keys) > MAX_TIMELINE_TRACKS:
        keys = keys[:MAX_TIMELINE_TRACKS]
    row_of = {k[2]: i for i, k in enumerate(keys)}
    row = np.array([row_of.get(x, -1) for x in lab])
    shown = row >= 0
    start, end = _np(sub, "start_us")[shown], _np(sub, "end_us")[shown]
    t0 = start.min()
    k = _np(sub, "kind").astype(str)[shown]
    colors = np.array([KIND_COLORS.get(x, "#34495e") for x in k])
    fig, ax = plt.subplots(figsize=(11, max(2.5, 0.32 * len(keys) + 1.2)))
    ax.barh(row[shown], np.maximum(end - start, 0.0), left=start - t0, height=0.7, color=colors,
            edgecolor="none")
    coll = np.isin(k, ["collective", "p2p"])
    if coll.any():
        ax.barh(row[shown][coll], (end - start)[coll], left=(start - t0)[coll], height=0.7,
                fill=False, edgecolor="#8b0000", linewidth=0.8)
    ax.set_yticks(np.arange(len(keys)), [f"rank {k[0]} · {k[2].split(' ', 1)[1]}" for k in keys],
                  fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"µs since the start of step {step}")
    ax.set_title(f"Timeline of step {step} (replayed); collectives outlined in dark red",
                 fontsize=10)
    present = [x for x in KIND_COLORS if x in set(k) and x != "p2p"]
    ax.legend(handles=[Patch(color=KIND_COLORS[x], label=x) for x in present], fontsize=7,
              frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.3)
    return _png(fig), step


def _axis_values(values: list[str]) -> tuple[np.ndarray, list[str]]:
    """Positions and labels for swept values: numeric when every value parses, else categories."""
    uniq = list(dict.fromkeys(values))
    try:
        nums = sorted({float(v) for v in uniq})
        labels = sorted(uniq, key=float)
        return np.array(nums), labels
    except ValueError:
        return np.arange(len(uniq), dtype=float), uniq


def sweep_figure(table: pa.Table, axes: list[str]) -> bytes | None:
    """Step time over the swept parameters: a line (stacked attribution) for one axis, a heat map
    for two (further axes at their first value), bars per point otherwise."""
    if table.num_rows == 0:
        return None
    step = _np(table, "step_us")
    if len(axes) == 1:
        vals = [str(v) for v in table.column(axes[0]).to_pylist()]
        pos, labels = _axis_values(vals)
        order = [labels.index(v) for v in vals]
        idx = np.argsort(order, kind="stable")
        x = pos[np.array(order)[idx]]
        fig, ax = plt.subplots(figsize=(8, 3.6))
        ax.stackplot(x, *[_np(table, f"{c}_us")[idx] for c in ATTRIBUTION],
                     colors=[COLORS[c] for c in ATTRIBUTION], labels=list(ATTRIBUTION), alpha=0.85)
        ax.plot(x, step[idx], color="black", marker="o", linewidth=1.2, label="step time")
        ax.set_xlabel(axes[0])
        ax.set_ylabel("µs per rank-step")
        if not all(lbl.replace(".", "", 1).lstrip("-").isdigit() for lbl in labels):
            ax.set_xticks(pos, labels)
        ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_title(f"Step time over {axes[0]}", fontsize=10)
        ax.grid(alpha=0.3)
        return _png(fig)
    if len(axes) >= 2:
        a0, a1 = axes[0], axes[1]
        v0 = [str(v) for v in table.column(a0).to_pylist()]
        v1 = [str(v) for v in table.column(a1).to_pylist()]
        keep = np.ones(table.num_rows, dtype=bool)
        for other in axes[2:]:
            col = [str(v) for v in table.column(other).to_pylist()]
            keep &= np.array([c == col[0] for c in col])
        _, l0 = _axis_values(v0)
        _, l1 = _axis_values(v1)
        grid = np.full((len(l0), len(l1)), np.nan)
        for i in np.flatnonzero(keep):
            grid[l0.index(v0[i]), l1.index(v1[i])] = step[i]
        fig, ax = plt.subplots(figsize=(1.2 + 0.8 * len(l1) + 2, 1.0 + 0.5 * len(l0) + 1))
        im = ax.imshow(grid, cmap="viridis_r", aspect="auto")
        ax.set_xticks(np.arange(len(l1)), l1, fontsize=8)
        ax.set_yticks(np.arange(len(l0)), l0, fontsize=8)
        ax.set_xlabel(a1)
        ax.set_ylabel(a0)
        lo, hi = np.nanmin(grid), np.nanmax(grid)
        for (r, c), v in np.ndenumerate(grid):
            if not np.isnan(v):  # dark text on the light (fast) end of the colour map
                light = hi == lo or (v - lo) / (hi - lo) < 0.5
                ax.text(c, r, f"{v:,.0f}", ha="center", va="center", fontsize=7,
                        color="black" if light else "white")
        fig.colorbar(im, ax=ax, label="step µs")
        ax.set_title("Step time (µs) over " + " × ".join(axes[:2]), fontsize=10)
        return _png(fig)
    return None
