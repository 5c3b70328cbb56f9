"""Two runs side by side: deltas per component and per analyzer table, and the CI verdict.

The first run is the baseline. A metric regresses when the new value exceeds the baseline by more
than ``threshold`` (a fraction of the baseline value); a metric that was zero regresses on any
increase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from analyzers.report import fmt
from analyzers.report.document import Block, Heading, Items, Paragraph, Table
from analyzers.report.headline import Attribution, attribution, findings
from analyzers.report.render_markdown import render_markdown
from analyzers.report.run_data import RunData
from mtia_trace.errors import UsageError
from mtia_trace.schema import ATTRIBUTION

#: Metrics `compare --metric` can gate on (all in µs per rank-step; larger is worse).
METRICS: tuple[str, ...] = ("step_time", *ATTRIBUTION)
#: GitHub caps a job summary at 1 MiB; stay well below it.
MARKDOWN_LIMIT = 1024 * 1024
MAX_ANALYSIS_ROWS = 20


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
    analyses: list[Delta]    # summed µs columns of the analyzer tables, largest |delta| first

    @property
    def regressed(self) -> bool:
        return self.gate.delta > 0 and self.gate.rel > self.threshold


#: µs columns that are instants or per-row statistics: summing them over rows means nothing.
_NOT_ADDITIVE = ("at_us", "start_us", "end_us", "ts_us", "arrival_us")
_STAT_PREFIXES = ("mean_", "avg_", "max_", "min_", "p50_", "p90_", "p99_", "median_", "first_",
                  "last_")


def _additive(name: str) -> bool:
    return (name.endswith("_us") and not name.endswith(_NOT_ADDITIVE)
            and not name.startswith(_STAT_PREFIXES))


def _sum_us_columns(table: pa.Table) -> dict[str, float]:
    """Sum over rows of each duration column (µs) of an analyzer table."""
    out = {}
    for f in table.schema:
        if _additive(f.name) and pa.types.is_floating(f.type):
            out[f.name] = float(np.nansum(table.column(f.name).to_numpy(zero_copy_only=False)))
    return out


def _by_size(deltas: list[Delta]) -> list[Delta]:
    return sorted(deltas, key=lambda d: (-abs(d.delta), d.name))


def compare_runs(base: RunData, new: RunData, *, metric: str = "step_time",
                 threshold: float = 0.05) -> Comparison:
    check_metric(metric)
    aa, ab = attribution(base), attribution(new)
    comps = [Delta(m, metric_value(aa, m), metric_value(ab, m)) for m in METRICS]
    analyses = []
    for name in sorted(set(base.analyses) & set(new.analyses)):
        sa, sb = _sum_us_columns(base.analyses[name]), _sum_us_columns(new.analyses[name])
        analyses += [Delta(f"{name}.{col}", sa[col], sb[col]) for col in sa
                     if col in sb and (sa[col] or sb[col])]
    gate = next(d for d in comps if d.name == metric)
    return Comparison(base, new, metric, threshold, gate, _by_size(comps), _by_size(analyses))


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
    blocks: list[Block] = [
        Heading(2, f"mtia-trace compare: {a_name} → {b_name}"),
        Paragraph(verdict(c)),
        Paragraph(f"Baseline **{a_name}** on {c.base.hardware}; new **{b_name}** on "
                  f"{c.new.hardware}. Values are µs per rank-step; the last column is the change "
                  "as a share of the baseline step time. Largest changes first."),
        Table(["component", a_name, b_name, "Δ µs", "ratio", "Δ / base step"],
              [_delta_row(d, step_a) for d in c.components], ["l", "r", "r", "r", "r", "r"]),
    ]
    if c.analyses:
        shown = c.analyses[:MAX_ANALYSIS_ROWS]
        note = (f"showing {len(shown)} of {len(c.analyses)} columns"
                if len(c.analyses) > len(shown) else "")
        blocks += [Heading(3, "Analyzer tables (µs columns summed over rows)"),
                   Table(["analyzer.column", a_name, b_name, "Δ µs", "ratio", "change"],
                         [_delta_row(d, step_a)[:5] + [fmt.us_rel(d.a, d.b)] for d in shown],
                         ["l", "r", "r", "r", "r", "r"],
                         note)]
    for label, run in ((a_name, c.base), (b_name, c.new)):
        top = findings(run)[:3]
        if top:
            blocks += [Heading(3, f"Top bottlenecks: {label}"),
                       Items([f.text + "." for f in top], ordered=True)]
    return blocks


def render_compare_markdown(c: Comparison) -> str:
    text = render_markdown(compare_blocks(c))
    if len(text.encode()) > MARKDOWN_LIMIT:  # only reachable with absurd analyzer outputs
        text = render_markdown(compare_blocks(Comparison(c.base, c.new, c.metric, c.threshold,
                                                         c.gate, c.components, [])))
    return text


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
        "analyses": [row(d) for d in c.analyses],
        "bottlenecks": {"baseline": [f.text for f in findings(c.base)[:3]],
                        "new": [f.text for f in findings(c.new)[:3]]},
    }
