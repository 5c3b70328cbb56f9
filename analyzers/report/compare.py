"""Two runs side by side: deltas per component, per collective op and per changed op, the CI verdict.

The first run is the baseline. A metric regresses when the new value exceeds the baseline by more
than ``threshold`` (a fraction of the baseline value); a metric that was zero regresses on any
increase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzers.report import fmt
from analyzers.report.document import Block, Heading, Items, Paragraph, Table
from analyzers.report.headline import (
    Attribution,
    attribution,
    findings,
    identical_reason,
    per_rank_collectives,
)
from analyzers.report.render_html import render_html
from analyzers.report.render_markdown import render_markdown
from analyzers.report.run_data import RunData
from mtia_trace.errors import UsageError
from mtia_trace.schema import ATTRIBUTION

#: Metrics `compare --metric` can gate on (all in µs per rank-step; larger is worse).
METRICS: tuple[str, ...] = ("step_time", *ATTRIBUTION)
#: GitHub caps a job summary at 1 MiB; stay well below it.
MARKDOWN_LIMIT = 1024 * 1024


def parse_threshold(text: str) -> float:
    """``"5%"`` or ``"0.05"`` -> 0.05."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"--threshold {text!r}: not a number; pass a percentage like 5% "
                         "or a fraction like 0.05") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--threshold {text!r}: must be a non-negative percentage, e.g. 5%")
    return value


def check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise UsageError(f"--metric {metric!r}: unknown; choose one of {', '.join(METRICS)}")
    return metric


@dataclass(frozen=True)
class Delta:
    name: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        return self.b - self.a

    @property
    def ratio(self) -> float:
        return self.b / self.a if self.a else (1.0 if self.b == 0 else math.inf)

    @property
    def rel(self) -> float:
        return self.delta / self.a if self.a else (0.0 if self.b == 0 else math.inf)


def metric_value(a: Attribution, metric: str) -> float:
    if metric == "step_time":
        return a.step_us
    return a.per_step_us[metric]


@dataclass(frozen=True)
class Comparison:
    base: RunData
    new: RunData
    metric: str
    threshold: float
    gate: Delta
    components: list[Delta]  # step time and each component, largest |delta| first
    rank_collectives: list[Delta]  # per-rank collective time and its parts, µs per rank-step
    collectives: list[Delta]  # per-rank collective µs per rank-step of each op, largest first
    top_ops: list[Delta]     # critical µs per rank-step of the ops that changed most
    warnings: list[str]      # what makes the two runs not like for like

    @property
    def regressed(self) -> bool:
        return self.gate.delta > 0 and self.gate.rel > self.threshold


#: Ops whose critical time changed most, kept in the comparison.
MAX_TOP_OPS = 10


def _per_rank_step(run: RunData) -> int:
    return max(run.steps.num_rows, 1)


def _collective_us(run: RunData) -> dict[str, float]:
    """Per-rank collective time of each operation and group size, µs per rank-step (the
    rank_collective_ops analyzer: a rank's own time in its instances, summed over ranks and
    steps and divided by the rank-steps, so concurrent groups do not add up)."""
    t = run.analyses.get("rank_collective_ops")
    if t is None or t.num_rows == 0:
        return {}
    return {f"{r['coll_op']} ({r['ranks']} ranks)": float(r["busy_us"])
            for r in t.select(["coll_op", "ranks", "busy_us"]).to_pylist()}


#: The per-rank collective rows of a comparison: (name, rank_collectives column), headline first.
RANK_COLLECTIVE_ROWS: tuple[tuple[str, str], ...] = (
    ("per-rank collective time (transfer + post)", "busy_us"),
    ("exposed collective time (critical path)", "critical_us"),
    ("queued for engines / links", "queue_us"),
    ("waited for peers", "peer_wait_us"),
)


def _rank_collectives(base: RunData, new: RunData) -> list[Delta]:
    """Per-rank collective time and its exposed part in both runs, µs per rank-step; empty when
    neither run has collectives."""
    a, b = per_rank_collectives(base), per_rank_collectives(new)
    if a is None and b is None:
        return []
    return [Delta(name, (a or {}).get(col, 0.0), (b or {}).get(col, 0.0))
            for name, col in RANK_COLLECTIVE_ROWS]


def _critical_ops(run: RunData) -> dict[str, float]:
    """Critical µs per rank-step of each op (name and side), from the top_ops analyzer."""
    t = run.analyses.get("top_ops")
    if t is None or t.num_rows == 0:
        return {}
    n = _per_rank_step(run)
    out: dict[str, float] = {}
    for r in t.select(["name", "side", "critical_us"]).to_pylist():
        key = f"{r['name']} ({r['side']})"
        out[key] = out.get(key, 0.0) + float(r["critical_us"]) / n
    return out


def _deltas(a: dict[str, float], b: dict[str, float]) -> list[Delta]:
    return _by_size([Delta(k, a.get(k, 0.0), b.get(k, 0.0)) for k in sorted(set(a) | set(b))
                     if not (fmt.is_noise_us(a.get(k, 0.0)) and fmt.is_noise_us(b.get(k, 0.0)))])


def _trace_ids(run: RunData) -> list[str]:
    return sorted(str(t.sha256 or t.path) for t in run.meta.traces)


def like_for_like(base: RunData, new: RunData) -> list[str]:
    """Why the two runs are not the same experiment on different settings, one line each."""
    out = []
    ta, tb = _trace_ids(base), _trace_ids(new)
    if ta and tb and ta != tb:
        out.append("the runs come from different traces (their sha256 differ): deltas mix the "
                   "workload change with the hardware / setting change")
    ra = len(set(base.steps.column("rank").to_pylist())) if base.steps.num_rows else 0
    rb = len(set(new.steps.column("rank").to_pylist())) if new.steps.num_rows else 0
    if ra != rb:
        out.append(f"rank counts differ ({ra} vs {rb}): per rank-step means average different "
                   "sets of ranks")
    oa = base.meta.options.overrides or []
    ob = new.meta.options.overrides or []
    if sorted(map(str, oa)) != sorted(map(str, ob)):
        out.append(f"spec overrides differ ({', '.join(map(str, oa)) or 'none'} vs "
                   f"{', '.join(map(str, ob)) or 'none'})")
    va, vb = base.meta.tool_version, new.meta.tool_version
    if va and vb and va != vb:
        out.append(f"tool versions differ ({va} vs {vb}): the model may have changed between them")
    return out


def _by_size(deltas: list[Delta]) -> list[Delta]:
    return sorted(deltas, key=lambda d: (-abs(d.delta), d.name))


def compare_runs(base: RunData, new: RunData, *, metric: str = "step_time",
                 threshold: float = 0.05) -> Comparison:
    check_metric(metric)
    aa, ab = attribution(base), attribution(new)
    comps = [Delta(m, metric_value(aa, m), metric_value(ab, m)) for m in METRICS]
    ops = _deltas(_critical_ops(base), _critical_ops(new))
    ops = [d for d in ops if not fmt.is_noise_us(d.delta)][:MAX_TOP_OPS]
    gate = next(d for d in comps if d.name == metric)
    return Comparison(base, new, metric, threshold, gate, _by_size(comps),
                      _rank_collectives(base, new), _deltas(_collective_us(base), _collective_us(new)), ops,
                      like_for_like(base, new))


def verdict(c: Comparison) -> str:
    g = c.gate
    limit = f"threshold {fmt.pct(c.threshold)}"
    change = f"{fmt.us(g.a)} → {fmt.us(g.b)} µs ({fmt.us_rel(g.a, g.b)})"
    if c.regressed:
        return f"❌ **Regression**: {c.metric} {change} exceeds the {limit}."
    return f"✅ **No regression**: {c.metric} {change} is within the {limit}."


def _delta_row(d: Delta, step_us: float) -> list[str]:
    return [d.name, fmt.us(d.a), fmt.us(d.b), fmt.signed_us(d.delta), fmt.us_ratio(d.a, d.b),
            fmt.signed_pct(d.delta / step_us) if step_us else "–"]


def compare_blocks(c: Comparison) -> list[Block]:
    a_name, b_name = c.base.name, c.new.name
    if a_name == b_name:
        a_name, b_name = f"{a_name} ({c.base.hardware})", f"{b_name} ({c.new.hardware})"
    step_a = metric_value(attribution(c.base), "step_time")

    def deltas(first: str, rows: list, legend: str = "") -> Table:
        """One table of deltas: a name column, both runs, the change, ratio and share."""
        return Table([first, a_name, b_name, "Δ µs", "ratio", "Δ / base step"],
                     [_delta_row(d, step_a) for d in rows], ["l", "r", "r", "r", "r", "r"],
                     legend=legend)

    blocks: list[Block] = [
        Heading(2, f"mtia-trace compare: {a_name} → {b_name}"),
        Paragraph(verdict(c)),
        *([Paragraph("**Not like for like:**"), Items([w + "." for w in c.warnings])]
          if c.warnings else list[Block]()),
        *([Paragraph(f"**{identical_reason(c.base, [c.new])}.**")]
          if c.base.hardware != c.new.hardware and _same(c) else list[Block]()),
        Paragraph(f"Baseline **{a_name}** on {c.base.hardware}; new **{b_name}** on "
                  f"{c.new.hardware}. Values are µs per rank-step; the last column is the change "
                  "as a share of the baseline step time. Largest changes first."),
        deltas("component", c.components),
    ]
    if c.rank_collectives:
        blocks += [Heading(3, "Per-rank collective time (µs per rank-step)"),
                   deltas("", c.rank_collectives,
                          "per-rank collective time: the time a rank spends in its own "
                          "collectives (transfer + retransmission + post), mean over ranks and "
                          "steps; exposed: the part on the critical path; the waits come before "
                          "a collective starts and are not in it (rank_collectives view)")]
    if c.collectives:
        blocks += [Heading(3, "Per-rank collective time per op (µs per rank-step)"),
                   deltas("op (group size)", c.collectives,
                          "a rank's own time in the op's instances (transfer + retransmission + "
                          "post), summed over ranks and steps and divided by the rank-steps: the "
                          "rows add up to the per-rank collective time above (rank_collective_ops "
                          "analyzer)")]
    if c.top_ops:
        blocks += [Heading(3, "Ops whose critical time changed most (µs per rank-step)"),
                   deltas("op (side)", c.top_ops,
                          "critical: the op's time on the critical path (top_ops analyzer)")]
    for label, run in ((a_name, c.base), (b_name, c.new)):
        top = findings(run)[:3]
        if top:
            blocks += [Heading(3, f"Top bottlenecks: {label}"),
                       Items([f.text + "." for f in top], ordered=True)]
    return blocks


def _same(c: Comparison) -> bool:
    """Every component agrees to 1e-9 of the baseline step."""
    tol = 1e-9 * max(abs(c.gate.a), 1.0) if c.metric == "step_time" else 1e-9
    return all(abs(d.delta) <= max(tol, fmt.NOISE_US) for d in c.components)


def render_compare_markdown(c: Comparison) -> str:
    text = render_markdown(compare_blocks(c))
    if len(text.encode()) > MARKDOWN_LIMIT:  # only reachable with absurd op names
        text = render_markdown(compare_blocks(Comparison(c.base, c.new, c.metric, c.threshold,
                                                         c.gate, c.components,
                                                         c.rank_collectives, [], [],
                                                         c.warnings)))
    return text


def render_compare_html(c: Comparison) -> str:
    return render_html(compare_blocks(c), title=f"mtia-trace compare: {c.base.name} → {c.new.name}")


def _num(x: float) -> float | None:
    return None if (x is None or math.isnan(x) or math.isinf(x)) else x


def compare_dict(c: Comparison) -> dict:
    def row(d: Delta) -> dict:
        return {"name": d.name, "a": d.a, "b": d.b, "delta": d.delta, "ratio": _num(d.ratio),
                "rel": _num(d.rel)}

    return {
        "baseline": {"run": c.base.name, "hardware": c.base.hardware},
        "new": {"run": c.new.name, "hardware": c.new.hardware},
        "metric": c.metric, "threshold": c.threshold, "regressed": c.regressed,
        "gate": row(c.gate),
        "components": [row(d) for d in c.components],
        "warnings": c.warnings,
        "rank_collectives": [{**row(d), "column": col}
                             for d, (_, col) in zip(c.rank_collectives, RANK_COLLECTIVE_ROWS,
                                                    strict=False)],
        "collectives": [row(d) for d in c.collectives],
        "top_ops": [row(d) for d in c.top_ops],
        "bottlenecks": {"baseline": [f.text for f in findings(c.base)[:3]],
                        "new": [f.text for f in findings(c.new)[:3]]},
    }
