"""Build a one-run report: document blocks for Markdown/HTML, a plain dict for JSON."""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzers.report import fmt
from analyzers.report.document import (
    Block,
    Figure,
    Heading,
    Items,
    Paragraph,
    Table,
    Timeline,
    table_from_arrow,
)
from analyzers.report.glossary import COMPONENTS, legend
from analyzers.report.headline import (
    WORDS,
    Attribution,
    Finding,
    attribution,
    collective_sentence,
    device_share,
    findings,
    host_bound,
    host_split,
    per_rank_collectives,
    verdict,
)
from analyzers.report.run_data import RunData
from mtia_trace.escape import md_code
from mtia_trace.run_meta import RunMeta
from mtia_trace.schema import ATTRIBUTION

MAX_RANK_ROWS = 16
MAX_STEP_ROWS = 20
MAX_ANALYSIS_ROWS = 10
MAX_SPEC_ROWS = 80


def _np(t: pa.Table, c: str) -> np.ndarray:
    return t.column(c).to_numpy(zero_copy_only=False)


def spec_rows(meta: RunMeta) -> list[list[str]]:
    """(parameter, value, unit, source, confidence) rows from the hardware spec in run.json."""
    spec = meta.spec or None
    rows: list[list[str]] = []

    def walk(prefix: str, node: object) -> None:
        if isinstance(node, dict) and "value" in node:
            rows.append([prefix.removeprefix("values."), fmt.cell(node["value"]),
                         str(node.get("unit", "")), str(node.get("source", "")),
                         str(node.get("confidence", ""))])
        elif isinstance(node, dict):
            for k in node:
                walk(f"{prefix}.{k}" if prefix else str(k), node[k])
        elif isinstance(node, list) and not all(isinstance(x, int | float | str) for x in node):
            for i, x in enumerate(node):
                walk(f"{prefix}[{i}]", x)
        else:
            rows.append([prefix, fmt.cell(node) if not isinstance(node, list)
                         else ", ".join(map(str, node)), "", "", ""])

    if spec is not None:
        walk("", spec)
    return rows


def flatten(node: object, prefix: str = "") -> list[list[str]]:
    """(dotted key, value) rows of nested run.json data; lists of scalars joined by commas."""
    if isinstance(node, dict):
        rows: list[list[str]] = []
        for k, v in node.items():
            rows += flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return rows
    if isinstance(node, list):
        if all(not isinstance(x, dict | list) for x in node):
            return [[prefix, ", ".join(fmt.cell(x) for x in node) or "(none)"]]
        return [r for i, x in enumerate(node) for r in flatten(x, f"{prefix}[{i}]")]
    return [[prefix, fmt.cell(node)]]


def assumptions(meta: RunMeta) -> list[list[str]]:
    """The run's assumptions as (key, value) rows."""
    return flatten(msgspec.to_builtins(meta.assumptions))


def attribution_table(a: Attribution) -> Table:
    rows = [[c, fmt.us(a.per_step_us[c]), fmt.pct(a.share(c)), fmt.us(a.busy_per_step_us[c])]
            for c in ATTRIBUTION]
    rows.append(["**total**", fmt.us(a.step_us), fmt.pct(1.0 if a.step_us else float("nan")), ""])
    return Table(["component", "critical µs / rank-step", "share of step", "busy µs / rank-step"],
                 rows, ["l", "r", "r", "r"],
                 legend="critical: time on the critical path, sums to the step time; busy: time "
                        "the component's work ran, overlapped with other work or not")


def _grouped_table(steps: pa.Table, key: str, limit: int) -> Table:
    g = steps.group_by(key).aggregate(
        [("total_us", "mean")] + [(f"{c}_us", "mean") for c in ATTRIBUTION]).sort_by(key)
    rows = [[str(r[key]), fmt.us(r["total_us_mean"])] + [fmt.us(r[f"{c}_us_mean"]) for c in ATTRIBUTION]
            for r in g.slice(0, limit).to_pylist()]
    note = f"showing {min(limit, g.num_rows)} of {g.num_rows} {key}s" if g.num_rows > limit else ""
    return Table([key, "step µs"] + list(ATTRIBUTION), rows, ["r"] * (len(ATTRIBUTION) + 2), note,
                 legend=f"step µs: replayed step wall time; {COMPONENTS}")


def collectives_table(run: RunData) -> Table | None:
    c = run.collectives
    if c.num_rows == 0:
        return None
    g = c.group_by(["coll_op", "pg"]).aggregate(
        [("coll_seq", "count"), ("bytes", "mean"), ("transfer_us", "mean"), ("skew_us", "mean"),
         ("skew_us", "max"), ("queue_us", "mean"), ("retry_us", "mean")])
    g = g.sort_by([("transfer_us_mean", "descending"), ("coll_op", "ascending"), ("pg", "ascending")])
    rows = [[str(r["coll_op"]), str(r["pg"]), str(r["coll_seq_count"]), fmt.nbytes(r["bytes_mean"]),
             fmt.us(r["transfer_us_mean"]), fmt.us(r["skew_us_mean"]), fmt.us(r["skew_us_max"]),
             fmt.us(r["queue_us_mean"]), fmt.us(r["retry_us_mean"])] for r in g.to_pylist()]
    return Table(["op", "pg", "count", "bytes / rank", "transfer µs", "mean skew µs",
                  "max skew µs", "queue µs", "retry µs"], rows,
                 ["l", "l", "r", "r", "r", "r", "r", "r", "r"],
                 legend="means per instance; " + legend(["transfer_us", "skew_us", "queue_us",
                                                          "retry_us"]))


def _overview(run: RunData, a: Attribution) -> str:
    traces = run.meta.trace_names
    parts = [f"Hardware **{run.hardware}**"]
    parts.append(f"{a.ranks} {'rank' if a.ranks == 1 else 'ranks'} × {a.steps} "
                 f"{'step' if a.steps == 1 else 'steps'}")
    if traces:
        shown = ", ".join(f"`{t}`" for t in traces[:4])
        parts.append("trace " + shown + (f" and {len(traces) - 4} more" if len(traces) > 4 else ""))
    return " · ".join(parts) + "."


def _step_sentence(a: Attribution) -> str:
    text = (f"Step time **{fmt.duration(a.step_us)}** (mean over ranks and steps; "
            f"min {fmt.duration(a.step_min_us)}, max {fmt.duration(a.step_max_us)})")
    if a.measured_us > 0 and not np.isnan(a.measured_us):
        text += (f"; measured in the trace {fmt.duration(a.measured_us)} "
                 f"(replayed / measured {fmt.ratio(a.step_us / a.measured_us)})")
    return text + "."


#: run.json's model-note text ahead of the coverage figure, dropped when the figure is printed.
_COVERAGE_TAIL = re.compile(r";? ?events with flops/bytes cover (\d+)% of device-work time")


def costing(meta: RunMeta) -> dict:
    """The effective costing mode, why it was chosen and its coverage, from run.json."""
    model = meta.assumptions.model or {}
    requested = meta.options.mode
    mode = model.get("mode") or ("as-measured" if model.get("costing") == "as-measured" else None)
    reason = str(model.get("mode_reason") or "")
    frac = model.get("priced_work_time_fraction")
    m = _COVERAGE_TAIL.search(reason)
    if frac is None and m:
        frac = int(m.group(1)) / 100.0
    return {"mode": mode, "requested": requested, "reason": _COVERAGE_TAIL.sub("", reason) or None,
            "priced_work_time_fraction": frac, "source_hw": model.get("source_hw"),
            "cpu_only": model.get("cpu_only")}


def costing_line(meta: RunMeta) -> str | None:
    """``Costing: **roofline** ...`` for the report header, or None when run.json has no notes."""
    c = costing(meta)
    mode = c["mode"]
    if mode is None:
        return None
    if mode == "as-measured":
        return ("Costing: **as measured**: no target hardware, every event keeps its measured "
                "duration.")
    if c["cpu_only"]:
        return f"Costing: **host ops as measured**: {c['cpu_only']}."
    how = {"roofline": "device work timed from its flops and bytes",
           "scaled": f"measured durations × target/{c['source_hw'] or 'source'} roofline ratio"}
    text = f"Costing: **{mode}** ({how.get(mode, mode)}"
    if c["requested"] == "auto" and c["reason"]:
        text += f"; `--mode auto` chose it: {c['reason']})"
    elif c["requested"] and c["requested"] != "auto":
        text += f"; `--mode {c['requested']}`)"
    else:
        text += ")"
    frac = c["priced_work_time_fraction"]
    if frac is not None:
        rest = ("keep their measured durations" if mode == "roofline"
                else "are scaled by their kind's peak ratio")
        text += (f". Events with flops/bytes cover **{fmt.pct(frac)}** of device-work time; "
                 f"the other {fmt.pct(1 - frac)} {rest}")
    return text + "."


def device_busy(run: RunData) -> pa.Table | None:
    """The device_time analyzer's all-streams rows, when the run's analyses include it."""
    t = run.analyses.get("device_time")
    if t is None or t.num_rows == 0:
        return None
    return t.filter(pc.equal(t.column("stream"), "all"))


def _device_sentence(run: RunData, a: Attribution) -> str | None:
    rows = device_busy(run)
    if rows is None or rows.num_rows == 0:
        return None
    w = float(np.sum(_np(rows, "window_us")))
    if w <= 0:
        return None

    def share(col: str) -> str:
        return fmt.pct(float(np.sum(_np(rows, col))) / w)

    return (f"Devices busy **{share('busy_us')}** of the step wall time (any stream running: "
            f"kernels {share('kernel_us')}, collectives {share('collective_us')}, copies "
            f"{share('copy_us')}), idle {share('idle_us')}, per stream in the device_time "
            f"table; the critical path spends {fmt.pct(device_share(a))} of the step in device "
            "work and communication.")


def _headline_items(found: list[Finding]) -> list[str]:
    """The top three findings, plus the straggler finding when it is further down (it names the
    late ranks)."""
    shown = found[:3] + [f for f in found[3:] if f.key == "straggler"]
    return [f"{f.text}. Try: {f.hint}." for f in shown]


def build_report(run: RunData, *, with_figures: bool = True,
                 progress: Callable[[str], None] | None = None) -> list[Block]:
    """The report's blocks; figures are rendered only when ``with_figures``."""
    tick = progress or (lambda _msg: None)
    a = attribution(run)
    blocks: list[Block] = [Heading(1, f"mtia-trace report: {run.name}"),
                           Paragraph(_overview(run, a))]
    mode = costing_line(run.meta)
    if mode:
        blocks.append(Paragraph(mode))
    blocks += [Heading(2, "Headline"), Paragraph(_step_sentence(a))]
    if a.rank_steps == 0:
        blocks.append(Paragraph("The run has no steps; nothing to attribute."))
    if a.rank_steps:
        blocks.append(Paragraph(verdict(run, a).sentence()))
    for text in (_device_sentence(run, a), collective_sentence(run, a)):
        if text:
            blocks.append(Paragraph(text))
    warned = list(getattr(run.meta, "warnings", None) or [])
    if warned:  # what the ingest found wrong with the trace: the numbers below depend on it
        blocks += [Heading(3, f"Trace warnings ({len(warned)})"), Items(warned)]
    found = findings(run, a)
    if found:
        blocks += [Heading(3, "Top bottlenecks (shares of the step)"),
                   Items(_headline_items(found), ordered=True)]
    blocks += [Heading(3, "Where the time went"), attribution_table(a)]
    if with_figures:
        # imported here for startup cost only: matplotlib takes ~1 s to import, and a report
        # without figures (Markdown, JSON) never needs it
        from analyzers.report import figures as figs

        tick("figures")
        png = figs.attribution_bars(run)
        if png:
            blocks.append(Figure("Step-time attribution per step and per rank.", png))
        # one picture of the step: the interactive timeline, the static one only without it
        data = figs.timeline_data(run)
        if data:
            blocks.append(Timeline(f"Interactive timeline of step {data['step']} "
                                   f"({data['selection']}).", data))
        else:
            tl = figs.step_timeline(run)
            if tl:
                blocks.append(Figure(f"Replayed timeline of step {tl[1]} ({tl[2]}; a row per "
                                     "thread / stream).", tl[0]))
        png = figs.busy_vs_critical(run)
        if png:
            blocks.append(Figure("Busy vs critical-path time per component.", png))
    if a.rank_steps:
        blocks += [Heading(2, "Per rank"), _grouped_table(run.steps, "rank", MAX_RANK_ROWS),
                   Heading(2, "Per step"), _grouped_table(run.steps, "step", MAX_STEP_ROWS)]
    ct = collectives_table(run)
    if ct:
        blocks += [Heading(2, "Collectives"), ct]
    if run.analyses:
        tick("analyses")
        blocks.append(Heading(2, "Analyses"))
        for name in sorted(run.analyses):
            table = run.analyses[name]
            if "run" in table.column_names:
                table = table.drop_columns(["run"])
            t = table_from_arrow(table, limit=MAX_ANALYSIS_ROWS)
            blocks += [Heading(3, name),
                       Table(t.columns, t.rows, t.align, t.note, legend(table.column_names))]
    blocks += _hardware_blocks(run)
    return blocks


def _hardware_blocks(run: RunData) -> list[Block]:
    out: list[Block] = [Heading(2, "Hardware and assumptions")]
    rows = spec_rows(run.meta)
    # the spec's own description (name, family, ...) is a sentence; its values are the table
    about = [r for r in rows if "." not in r[0] and not r[3] and not r[4]]
    rows = [r for r in rows if r not in about]
    if about:
        out.append(Paragraph("; ".join(f"{k}: {md_code(v) if k == 'overrides' and v else v}"
                                       for k, v, *_ in about if v)))
    if rows:
        note = f"showing {MAX_SPEC_ROWS} of {len(rows)} parameters" if len(rows) > MAX_SPEC_ROWS else ""
        cols = ["parameter", "value", "unit", "source", "confidence"]
        keep = [i for i in range(5) if i != 2 or any(r[2] for r in rows)]  # no empty unit column
        out.append(Table([cols[i] for i in keep], [[r[i] for i in keep] for r in rows[:MAX_SPEC_ROWS]],
                         ["r" if i == 1 else "l" for i in keep], note,
                         prose=(keep.index(3),)))
    else:
        out.append(Paragraph(f"Hardware **{run.hardware}**; run.json records no spec details."))
    opts = msgspec.to_builtins(run.meta.options)
    if opts:
        out += [Heading(3, "Options"), Table(["option", "value"], flatten(opts), ["l", "l"])]
    a = assumptions(run.meta)
    if a and all(k == "" for k, _ in a):
        out += [Heading(3, "Assumptions"), Items([v for _, v in a])]
    elif a:
        out += [Heading(3, "Assumptions"), Table(["key", "value"], a, ["l", "l"])]
    return out


def _verdict_dict(run: RunData, a: Attribution) -> dict | None:
    if not a.rank_steps:
        return None
    v = verdict(run, a)
    return {"label": v.label, "critical_share": v.critical, "devices_busy": v.devices_busy,
            "max_queued": v.max_queued, "queue_full": v.queue_full,
            "blocked_launches": v.blocked_launches, "thread_waits": v.thread_waits,
            "conflicts": list(v.conflicts), "hardware_neutral": v.hardware_neutral,
            "windows": "requests" if v.requests else "steps", "requests": v.requests,
            "text": v.sentence()}


def report_dict(run: RunData) -> dict:
    """Everything the report says, as plain data for machines."""
    a = attribution(run)
    steps = run.steps
    per_rank = steps.group_by("rank").aggregate(
        [("total_us", "mean")] + [(f"{c}_us", "mean") for c in ATTRIBUTION]).sort_by("rank")
    hs = host_split(run, a)
    return {
        "run": run.name,
        "hardware": run.hardware,
        "tool_version": run.meta.tool_version,
        "traces": run.meta.trace_names,
        "warnings": list(getattr(run.meta, "warnings", None) or []),
        "ranks": a.ranks,
        "steps": a.steps,
        "step_time_us": {"mean": a.step_us, "min": a.step_min_us, "max": a.step_max_us,
                         "measured_mean": a.measured_us},
        "attribution_us_per_rank_step": a.per_step_us,
        "attribution_share": {c: a.share(c) for c in ATTRIBUTION},
        "busy_us_per_rank_step": a.busy_per_step_us,
        "costing": costing(run.meta),
        "host_bound": host_bound(a),
        "verdict": _verdict_dict(run, a),
        "device_share_of_critical_path": device_share(a) if a.step_us > 0 else None,
        "host_split_us_per_rank_step": {"ops": hs.ops_us, "unexplained": hs.untracked_us,
                                        "wait": hs.wait_us},
        "rank_collectives_us_per_rank_step": per_rank_collectives(run),
        "bottlenecks": [{"key": f.key, "us_per_rank_step": f.us_per_step, "share": f.share,
                         "text": f.text, "hint": f.hint} for f in findings(run, a)[:3]],
        "per_rank": [{"rank": r["rank"], "step_us": r["total_us_mean"],
                      **{c: r[f"{c}_us_mean"] for c in ATTRIBUTION}}
                     for r in per_rank.to_pylist()],
        "analyses": {name: t.to_pylist() for name, t in sorted(run.analyses.items())},
        "components": {c: WORDS[c] for c in ATTRIBUTION},
        "assumptions": msgspec.to_builtins(run.meta.assumptions),
        "options": msgspec.to_builtins(run.meta.options),
    }
