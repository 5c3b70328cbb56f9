"""Report figures (matplotlib, Agg backend), each returned as PNG bytes."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from analyzers.report import event_columns  # noqa: E402
from analyzers.report.headline import attribution, late_ranks  # noqa: E402
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
#: Host ops in two greys by nesting depth, so device work (coloured by kind) stands out.
HOST_COLORS = ("#9aa3ad", "#c3c9d0")
MAX_TIMELINE_TRACKS = 48
MAX_TIMELINE_EVENTS = 200_000
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


def time_unit(span_us: float) -> tuple[str, float]:
    """The unit that fits a span: (label, µs per unit)."""
    if span_us >= 2e6:
        return "s", 1e6
    if span_us >= 2e3:
        return "ms", 1e3
    return "µs", 1.0


def timeline_ranks(run: RunData, limit: int) -> tuple[list[int], str]:
    """Ranks the timeline draws (all when they fit their track budget) and how they were chosen:
    the late ranks the headline names (`headline.late_ranks`, most often late first) and the
    slowest rank, then the rest in order."""
    steps = run.steps
    ranks = sorted(set(_np(steps, "rank").tolist())) if steps.num_rows else []
    if len(ranks) <= limit:
        return ranks, "every rank"
    # the ranks the headline names as late, in its order (most often late first)
    first: list[int] = [r for r, _ in late_ranks(run, attribution(run))]
    g = steps.group_by("rank").aggregate([("total_us", "mean")]).sort_by(
        [("total_us_mean", "descending"), ("rank", "ascending")])
    first += [int(x) for x in _np(g, "rank")[:1]]
    chosen = list(dict.fromkeys(first))[:limit]
    chosen += [r for r in ranks if r not in chosen][:limit - len(chosen)]
    return sorted(chosen), (f"{len(chosen)} of {len(ranks)} ranks: the late ranks of "
                            "collectives and the slowest rank first, then the lowest-numbered")


def _track_label(track: str) -> str:
    parts = track.split(":")
    if parts[0] == "dev" and len(parts) == 3:
        return f"device {parts[1]} stream {parts[2]}"
    if parts[0] == "host" and len(parts) == 3:
        return f"host thread {parts[2]}"
    return track


def _timeline_events(run: RunData) -> tuple[int, pa.Table, np.ndarray, list[int], str] | None:
    """The median step's timed work events (no annotations or instants) of the ranks a timeline
    shows (`timeline_ranks`, sized so all their tracks fit): (step, the events' timeline
    columns, the rows of those events, ranks, selection). Rows, not a copy: a timeline draws
    a few thousand of a step's events, and a copy of them all would outlive the report's peak."""
    step = _median_step(run)
    ev = run.events
    if step is None or ev.num_rows == 0:
        return None
    ev = ev.select([c for c in ev.column_names if c in event_columns.TIMELINE])
    # Arrow's masks, not numpy's over Python strings: a string column's to_numpy makes an
    # object per row
    keep = pc.and_(pc.and_(pc.fill_null(pc.equal(ev.column("step"), step), False),
                           pc.invert(pc.is_in(ev.column("kind"),
                                              pa.array(["annotation", "instant"])))),
                   pc.fill_null(pc.equal(ev.column("ph"), "X"), False))
    rows = np.flatnonzero(keep.to_numpy(zero_copy_only=False))
    if len(rows) == 0:
        return None
    pairs = ev.select(["rank", "track"]).take(rows).group_by(["rank", "track"]).aggregate([])
    n_ranks = pc.count_distinct(pairs.column("rank"), mode="all").as_py()
    per_rank = max(-(-pairs.num_rows // max(n_ranks, 1)), 1)
    ranks, selection = timeline_ranks(run, max(1, MAX_TIMELINE_TRACKS // per_rank))
    rows = rows[np.isin(_np(ev, "rank")[rows], ranks)]
    return step, ev, rows, ranks, selection


def step_timeline(run: RunData) -> tuple[bytes, int, str] | None:
    """Gantt chart of one step (the median one): a row per rank and thread/stream, host ops in
    greys (nested ones thinner), device work coloured by kind, collectives outlined; drawn as one
    collection. Returns (PNG, step, which ranks it shows)."""
    picked = _timeline_events(run)
    if picked is None:
        return None
    step, ev, rows, ranks, selection = picked
    sub = ev.take(rows)
    if sub.num_rows > MAX_TIMELINE_EVENTS:
        dur = _np(sub, "end_us") - _np(sub, "start_us")
        sub = sub.take(pa.array(np.sort(np.argsort(-dur, kind="stable")[:MAX_TIMELINE_EVENTS])))
        selection += f"; the {MAX_TIMELINE_EVENTS:,} longest events"
    rank = _np(sub, "rank")
    enc = sub.column("track").combine_chunks().dictionary_encode()
    names = enc.dictionary.to_pylist()
    tcode = enc.indices.to_numpy()
    is_dev = _np(sub, "is_device").astype(bool)
    # one row per (rank, track): device streams before host threads, then by name
    pair = rank.astype(np.int64) * len(names) + tcode
    upair, first, inv = np.unique(pair, return_index=True, return_inverse=True)
    keys = sorted(((int(rank[i]), not bool(is_dev[i]), str(names[tcode[i]]), j)
                   for j, i in enumerate(first.tolist())))[:MAX_TIMELINE_TRACKS]
    row_of_pair = np.full(len(upair), -1)
    row_of_pair[[kk[3] for kk in keys]] = np.arange(len(keys))
    row = row_of_pair[inv.ravel()]
    shown = row >= 0
    start, end = _np(sub, "start_us")[shown], _np(sub, "end_us")[shown]
    row, k, dev = row[shown], _np(sub, "kind").astype(str)[shown], is_dev[shown]
    depth = np.where(dev, 0, _np(sub, "depth")[shown]).astype(float)
    t0 = float(start.min())
    unit, scale = time_unit(float(end.max()) - t0)
    x0, x1 = (start - t0) / scale, (end - t0) / scale
    half = np.where(dev, 0.38, 0.38 * 0.8 ** np.minimum(depth, 6))
    verts = np.stack([np.c_[x0, row - half], np.c_[x0, row + half], np.c_[x1, row + half],
                      np.c_[x1, row - half]], axis=1)
    ukind, kinv = np.unique(k, return_inverse=True)
    kind_color = np.array([KIND_COLORS.get(x, "#34495e") for x in ukind.tolist()], dtype=object)
    colors = np.where(dev, kind_color[kinv.ravel()],
                      np.where(depth % 2 == 0, HOST_COLORS[0], HOST_COLORS[1]))
    coll = np.isin(k, ["collective", "p2p"]) & dev
    fig, ax = plt.subplots(figsize=(11, max(2.5, 0.32 * len(keys) + 1.2)))
    order = np.argsort(depth, kind="stable")  # parents under their children
    # an (N, 4, 2) array is a valid sequence of polygons (the stubs want a Sequence)
    ax.add_collection(PolyCollection(verts[order], facecolors=colors[order],  # type: ignore[arg-type]
                                     edgecolors="none"))
    if coll.any():
        ax.add_collection(PolyCollection(verts[coll], facecolors="none",  # type: ignore[arg-type]
                                         edgecolors="#8b0000",
                                         linewidths=0.8))
    ax.set_xlim(0, max(float(x1.max()), 1e-9))
    ax.set_ylim(len(keys) - 0.5, -0.5)
    ax.set_yticks(np.arange(len(keys)), [f"rank {kk[0]} · {_track_label(kk[2])}" for kk in keys],
                  fontsize=7)
    ax.set_xlabel(f"{unit} since the start of step {step}")
    ax.set_title(f"Timeline of step {step} (replayed): host ops grey (nested thinner), device "
                 "work by kind, collectives outlined", fontsize=9)
    present = [x for x in KIND_COLORS if x in set(k[dev]) and x != "p2p"]
    handles = [Patch(color=HOST_COLORS[0], label="host op")] if (~dev).any() else []
    handles += [Patch(color=KIND_COLORS[x], label=f"device {x}") for x in present]
    ax.legend(handles=handles, fontsize=7, frameon=False, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.3)
    return _png(fig), step, selection


#: The heat map's colour scale spans at least this fraction of the mean step time, so a spread
#: of a few hundredths of a percent shows as nearly one colour instead of full contrast.
MIN_COLOUR_SPAN = 0.05


def colour_range(lo: float, hi: float) -> tuple[float, float]:
    """(vmin, vmax) for step times in [lo, hi]: the data's range, widened around its middle to
    at least `MIN_COLOUR_SPAN` of it."""
    mid = (lo + hi) / 2
    half = max((hi - lo) / 2, MIN_COLOUR_SPAN * abs(mid) / 2, 1e-12)
    return mid - half, mid + half


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
        lo, hi = np.nanmin(grid), np.nanmax(grid)
        vmin, vmax = colour_range(lo, hi)
        im = ax.imshow(grid, cmap="viridis_r", aspect="auto", vmin=vmin, vmax=vmax)
        ax.set_xticks(np.arange(len(l1)), l1, fontsize=8)
        ax.set_yticks(np.arange(len(l0)), l0, fontsize=8)
        ax.set_xlabel(a1)
        ax.set_ylabel(a0)
        for (r, c), v in np.ndenumerate(grid):
            if not np.isnan(v):  # dark text on the light (fast) end of the colour map
                light = (v - vmin) / (vmax - vmin) < 0.5
                ax.text(c, r, f"{v:,.0f}", ha="center", va="center", fontsize=7,
                        color="black" if light else "white")
        fig.colorbar(im, ax=ax, label="step µs")
        ax.set_title("Step time (µs) over " + " × ".join(axes[:2]), fontsize=10)
        return _png(fig)
    return None


#: Events the interactive timeline embeds (the longest ones), to keep the page small.
MAX_INTERACTIVE_EVENTS = 5_000


def timeline_data(run: RunData) -> dict | None:
    """The interactive timeline's data for the median step: rows (rank · thread/stream) and per
    event its row, start and duration (µs from the step's first event), kind and name. The same
    rank selection as `step_timeline`; the `MAX_INTERACTIVE_EVENTS` longest events."""
    picked = _timeline_events(run)
    if picked is None:
        return None
    step, ev, idx, ranks, selection = picked
    start, end = _np(ev, "start_us")[idx], _np(ev, "end_us")[idx]
    t0 = float(start.min())
    span = float(end.max()) - t0
    if len(idx) > MAX_INTERACTIVE_EVENTS:
        idx = idx[np.sort(np.argsort(-(end - start), kind="stable")[:MAX_INTERACTIVE_EVENTS])]
        selection += f"; the {MAX_INTERACTIVE_EVENTS:,} longest events"
    sub = ev.take(idx)
    dur = _np(sub, "end_us") - _np(sub, "start_us")
    rank = _np(sub, "rank").tolist()
    track = sub.column("track").to_pylist()
    dev = _np(sub, "is_device").astype(bool).tolist()
    keys = sorted({(r, not d, t) for r, d, t in zip(rank, dev, track, strict=True)})
    keys = keys[:MAX_TIMELINE_TRACKS]
    row_of = {(k[0], k[2]): i for i, k in enumerate(keys)}
    rows = [row_of.get((r, t), -1) for r, t in zip(rank, track, strict=True)]
    kinds = sub.column("kind").to_pylist()
    names = sub.column("name").to_pylist()
    start = _np(sub, "start_us").tolist()
    durs = dur.tolist()
    crit = (sub.column("critical").to_pylist() if "critical" in sub.column_names
            else [False] * len(rows))
    shown = [i for i, r in enumerate(rows) if r >= 0]
    unit, scale = time_unit(span)
    return {
        "step": step, "selection": selection, "unit": unit, "scale": scale, "span": span,
        "rows": [f"rank {k[0]} · {_track_label(k[2])}" for k in keys],
        "row": [rows[i] for i in shown],
        "start": [round(start[i] - t0, 3) for i in shown],
        "dur": [round(durs[i], 3) for i in shown],
        "kind": [kinds[i] if dev[i] else "host" for i in shown],
        "name": [str(names[i])[:120] for i in shown],
        "critical": [bool(crit[i]) for i in shown],
        "colors": {**KIND_COLORS, "host": HOST_COLORS[0]},
    }
