"""Where the time went, in numbers and in words: the attribution per step and the top bottlenecks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzers.report import fmt
from analyzers.report.run_data import RunData
from mtia_trace.schema import ATTRIBUTION

#: Plain-words name of each attribution component.
WORDS: dict[str, str] = {
    "compute": "compute",
    "fetch": "memory fetch (HBM, embedding gathers, copies)",
    "collective": "collective transfers",
    "peer_wait": "waiting for peers at collectives",
    "queue": "queueing for busy message engines / links",
    "retry": "retransmission after packet loss",
    "host": "host overhead (CPU ops, launches, doorbells)",
    "idle": "idle time (nothing on the critical path)",
}

#: What to look at next, per finding.
HINTS: dict[str, str] = {
    "compute": "check kernel efficiency and precision (bf16 → fp8), or shard the dense part wider",
    "fetch": "fuse memory-bound ops and improve embedding-row locality (caching, prefetch)",
    "collective": "overlap it with compute, shrink the messages (quantized comms) or pick a "
                  "better algorithm / topology",
    "straggler": "look at what the late ranks do before the collective (host gaps, data "
                 "loading, uneven embedding shards)",
    "peer_wait": "look at what the late ranks do before the collective (host gaps, data "
                 "loading, uneven embedding shards)",
    "queue": "spread collectives out over time or give them more engines / links",
    "retry": "lower the loss rate or switch go-back-N to selective repeat",
    "host": "batch launches (graphs), trim Python overhead between ops",
    "idle": "look for data-loader stalls and host synchronizations between steps",
}

#: Findings smaller than this share of the step are not called bottlenecks.
MIN_SHARE = 0.01


@dataclass(frozen=True)
class Attribution:
    """Mean microseconds per rank-step for each component; they sum to `step_us`."""

    per_step_us: dict[str, float]
    busy_per_step_us: dict[str, float]
    step_us: float
    step_min_us: float
    step_max_us: float
    measured_us: float
    ranks: int
    steps: int
    rank_steps: int

    def share(self, component: str) -> float:
        return self.per_step_us[component] / self.step_us if self.step_us > 0 else float("nan")


def _np(table: pa.Table, col: str) -> np.ndarray:
    return table.column(col).to_numpy(zero_copy_only=False)


def attribution(run: RunData) -> Attribution:
    steps = run.steps
    n = steps.num_rows
    if n == 0:
        zero = {c: 0.0 for c in ATTRIBUTION}
        return Attribution(zero, dict(zero), 0.0, 0.0, 0.0, 0.0, 0, 0, 0)
    total = _np(steps, "total_us")
    per = {c: float(_np(steps, f"{c}_us").mean()) for c in ATTRIBUTION}
    busy = {c: 0.0 for c in ATTRIBUTION}
    if run.summary.num_rows:
        comp = _np(run.summary, "component").astype(str)
        b = _np(run.summary, "busy_us")
        for c in ATTRIBUTION:
            busy[c] = float(b[comp == c].sum()) / n
    return Attribution(
        per_step_us=per, busy_per_step_us=busy, step_us=float(total.mean()),
        step_min_us=float(total.min()), step_max_us=float(total.max()),
        measured_us=float(np.nanmean(_np(steps, "measured_us"))),
        ranks=len(np.unique(_np(steps, "rank"))), steps=len(np.unique(_np(steps, "step"))),
        rank_steps=n)


@dataclass(frozen=True)
class Finding:
    key: str            # an ATTRIBUTION component or "straggler"
    us_per_step: float  # exposed microseconds per rank-step this finding explains
    share: float        # us_per_step / step time
    text: str           # one sentence with the numbers
    hint: str           # what to look at next


def _critical_device(run: RunData) -> pa.Table:
    ev = run.events
    if ev.num_rows == 0 or "critical" not in ev.column_names:
        return ev.slice(0, 0)
    mask = pc.and_(pc.fill_null(ev.column("critical"), False),
                   pc.invert(pc.is_in(ev.column("kind"), pa.array(["annotation", "instant"]))))
    return ev.filter(mask)


def _top_group(table: pa.Table, keys: list[str], value: np.ndarray) -> tuple[tuple, float, float]:
    """(key values, sum of value, fraction of total) of the largest group, or ((), 0, 0)."""
    if table.num_rows == 0 or value.sum() <= 0:
        return (), 0.0, 0.0
    grouped = (pa.table({**{k: table.column(k) for k in keys}, "v": value})
               .group_by(keys).aggregate([("v", "sum")]).sort_by([("v_sum", "descending")]))
    top = grouped.slice(0, 1).to_pylist()[0]
    return tuple(top[k] for k in keys), float(top["v_sum"]), float(top["v_sum"] / value.sum())


def _collective_text(run: RunData, a: Attribution) -> str:
    """Names the (op, process group) with most critical-path collective time and apportions the
    exposed collective time to it by that share."""
    total = a.per_step_us["collective"]
    base = (f"exposed {WORDS['collective']} are {fmt.pct(a.share('collective'))} of the step "
            f"({fmt.us(total)} µs per rank-step)")
    crit = _critical_device(run)
    kind = _np(crit, "kind").astype(str) if crit.num_rows else np.array([], dtype=str)
    coll = crit.filter(pa.array(np.isin(kind, ["collective", "p2p"])))
    if coll.num_rows == 0:
        return base
    dur = _np(coll, "end_us") - _np(coll, "start_us")
    filled = pa.table({"coll_op": pc.fill_null(coll.column("coll_op"), "collective"),
                       "pg": pc.fill_null(coll.column("pg"), "?")})
    key, _, frac = _top_group(filled, ["coll_op", "pg"], dur)
    if not key:
        return base
    op, pg = key
    if frac > 0.999:
        return f"exposed {op} on pg {pg} is {fmt.pct(a.share('collective'))} of the step " \
               f"({fmt.us(total)} µs per rank-step, all of the exposed collective time)"
    return (f"exposed {op} on pg {pg} is {fmt.pct(frac * a.share('collective'))} of the step "
            f"({fmt.us(frac * total)} µs per rank-step, {fmt.pct(frac)} of the exposed "
            f"collective time by critical-path share); all {base}")


def _top_name_text(run: RunData, component: str, a: Attribution) -> str:
    text = (f"{WORDS[component]} is {fmt.pct(a.share(component))} of the step "
            f"({fmt.us(a.per_step_us[component])} µs per rank-step)")
    crit = _critical_device(run)
    col = f"{component}_us"
    if crit.num_rows == 0 or col not in crit.column_names:
        return text
    key, total, frac = _top_group(crit, ["name"], _np(crit, col))
    if total <= 0:
        return text
    name = key[0]
    return f"{text}; the largest part is `{_short(name)}` ({fmt.pct(frac)} of critical-path {component})"


def _short(name: str, limit: int = 60) -> str:
    name = str(name).replace("|", "/").replace("`", "'")
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _straggler(run: RunData, a: Attribution) -> Finding | None:
    wait = a.per_step_us["peer_wait"]
    colls = run.collectives
    if wait <= 0 or colls.num_rows == 0 or a.step_us <= 0:
        return None
    skew = _np(colls, "skew_us")
    late = _np(colls, "late_rank")
    significant = (skew >= max(1.0, MIN_SHARE * a.step_us)) & (late >= 0)
    if not significant.any():
        return None
    ranks, counts = np.unique(late[significant], return_counts=True)
    order = np.argsort(-counts, kind="stable")
    named = ", ".join(f"rank {int(ranks[i])} last in {int(counts[i])} of {len(skew)}"
                      for i in order[:3])
    text = (f"{len(ranks)} of {a.ranks} ranks arrive late at collectives by ≥ "
            f"{fmt.us(float(skew[significant].min()))} µs ({named}); waiting for them costs "
            f"{fmt.pct(wait / a.step_us)} of the step ({fmt.us(wait)} µs per rank-step)")
    return Finding("straggler", wait, wait / a.step_us, text, HINTS["straggler"])


def findings(run: RunData, a: Attribution | None = None) -> list[Finding]:
    """Every candidate bottleneck above `MIN_SHARE`, largest first."""
    a = a or attribution(run)
    if a.step_us <= 0:
        return []
    out: list[Finding] = []
    s = _straggler(run, a)
    for c in ATTRIBUTION:
        us_ = a.per_step_us[c]
        if us_ / a.step_us < MIN_SHARE or (c == "peer_wait" and s is not None):
            continue
        if c == "collective":
            text = _collective_text(run, a)
        elif c in ("compute", "fetch", "host"):
            text = _top_name_text(run, c, a)
        else:
            text = (f"{WORDS[c]} is {fmt.pct(a.share(c))} of the step "
                    f"({fmt.us(us_)} µs per rank-step)")
        out.append(Finding(c, us_, us_ / a.step_us, text[0].upper() + text[1:], HINTS[c]))
    if s is not None:
        out.append(Finding(s.key, s.us_per_step, s.share, s.text[0].upper() + s.text[1:], s.hint))
    return sorted(out, key=lambda f: (-f.us_per_step, f.key))


def top_bottlenecks(run: RunData, n: int = 3) -> list[Finding]:
    return findings(run)[:n]
