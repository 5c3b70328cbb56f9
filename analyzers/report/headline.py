"""Where the time went, in numbers and in words: the attribution per step and the top bottlenecks."""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzers import rank_collectives
from analyzers.report import fmt
from analyzers.report.run_data import RunData
from mtia_trace.run_meta import AS_MEASURED
from mtia_trace.schema import ATTRIBUTION, DEVICE_KINDS
from replay.intervals import covered, union

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
    "host_untracked": "profile the host side (py-spy, record_function ranges around data loading "
                      "and Python between ops): the trace does not say what these gaps are",
    "idle": "look for data-loader stalls and host synchronizations between steps",
    "host_wait": "look at what the waiting thread does after the work ends (CPU contention "
                 "with other ranks and worker threads, descheduling)",
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
    key: str            # an ATTRIBUTION component, "host_untracked", "host_wait", "host_ops"
    #                     or "straggler"
    us_per_step: float  # critical-path microseconds per rank-step this finding explains
    share: float        # us_per_step / step time
    text: str           # one sentence with the numbers, shares always of the step
    hint: str           # what to look at next


#: The events columns the findings read from critical events (filtering only these is several
#: times cheaper than filtering the whole table with its text columns).
_CRITICAL_COLUMNS = ("name", "kind", "is_device", "coll_op", "pg", "critical_us",
                     *(f"{c}_us" for c in ATTRIBUTION))


#: `_critical` of each live events table (the findings read it several times per report),
#: dropped with the table.
_critical_of: dict[int, pa.Table] = {}


def _critical(run: RunData) -> pa.Table:
    """Critical events that are work (not annotations or instants): the columns the findings
    read (`_CRITICAL_COLUMNS`)."""
    ev = run.events
    if id(ev) in _critical_of:
        return _critical_of[id(ev)]
    sel = ev.select([c for c in ev.column_names if c in _CRITICAL_COLUMNS or c == "critical"])
    if sel.num_rows == 0 or "critical" not in sel.column_names:
        out = sel.slice(0, 0)
    else:
        mask = pc.and_(pc.fill_null(sel.column("critical"), False),
                       pc.invert(pc.is_in(sel.column("kind"), pa.array(["annotation", "instant"]))))
        out = sel.filter(mask).drop_columns(["critical"])
    _critical_of[id(ev)] = out
    weakref.finalize(ev, _critical_of.pop, id(ev), None)
    return out


def _top_group(table: pa.Table, keys: list[str], value: np.ndarray) -> tuple[tuple, float]:
    """(key values, sum of value) of the largest group, or ((), 0)."""
    if table.num_rows == 0 or value.sum() <= 0:
        return (), 0.0
    grouped = (pa.table({**{k: table.column(k) for k in keys}, "v": value})
               .group_by(keys).aggregate([("v", "sum")])
               .sort_by([("v_sum", "descending")] + [(k, "ascending") for k in keys]))
    top = grouped.slice(0, 1).to_pylist()[0]
    return tuple(top[k] for k in keys), float(top["v_sum"])


def _of_step(us_per_step: float, a: Attribution, *, inner: bool = False) -> str:
    """``"12.3% of the step (1.23 ms per rank-step)"``; inside parentheses (``inner``)
    ``"12.3% of the step, 1.23 ms per rank-step"``."""
    share = fmt.pct(us_per_step / a.step_us if a.step_us > 0 else float("nan"))
    per = f"{fmt.duration(us_per_step)} per rank-step"
    return f"{share} of the step, {per}" if inner else f"{share} of the step ({per})"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


@dataclass(frozen=True)
class HostSplit:
    """The critical path's host time, per rank-step: the own time of recorded ops (a leaf's run,
    an op's self time), untracked gaps, and the rest (waits past a dependency's end: launch
    latency, the return of a synchronize or ``work.wait()``)."""

    ops_us: float        # own time of host ops on the critical path
    untracked_us: float  # gaps outside every recorded op: the steps' ``unexplained_us``
    wait_us: float       # host time on the path after a dependency ended (launch / return lags)
    top_op: str | None   # the host op with most critical own time
    top_op_us: float


def host_split(run: RunData, a: Attribution) -> HostSplit:
    host = a.per_step_us["host"]
    untracked = (float(np.mean(_np(run.steps, "unexplained_us")))
                 if a.rank_steps and "unexplained_us" in run.steps.column_names else 0.0)
    crit = _critical(run)
    if crit.num_rows == 0 or a.rank_steps == 0 or "critical_us" not in crit.column_names:
        return HostSplit(0.0, untracked, max(host - untracked, 0.0), None, 0.0)
    ops = crit.filter(pc.invert(crit.column("is_device")))
    # the host part of each op's critical own time (a host op's own time is host cost, but a
    # collective on a CPU worker thread is a transfer)
    cost = np.zeros(ops.num_rows)
    for c in ("compute", "fetch", "collective", "retry", "host"):
        cost += _np(ops, f"{c}_us").astype(float)
    hostf = np.divide(_np(ops, "host_us").astype(float), cost, out=np.zeros(len(cost)),
                      where=cost > 0)
    v = _np(ops, "critical_us").astype(float) * hostf
    ops_us = min(float(v.sum()) / a.rank_steps, host)
    key, top = _top_group(ops, ["name"], v)
    return HostSplit(ops_us, untracked, max(host - ops_us - untracked, 0.0),
                     str(key[0]) if key else None, top / a.rank_steps)


def _collective_text(run: RunData, a: Attribution) -> str:
    """Collective transfers on the critical path, naming the (op, process group) with most."""
    total = a.per_step_us["collective"]
    base = f"{_cap(WORDS['collective'])} are {_of_step(total, a)}"
    crit = _critical(run)
    kind = _np(crit, "kind").astype(str) if crit.num_rows else np.array([], dtype=str)
    coll = crit.filter(pa.array(np.isin(kind, ["collective", "p2p"])))
    if coll.num_rows == 0 or "collective_us" not in coll.column_names:
        return base
    filled = pa.table({"coll_op": pc.fill_null(coll.column("coll_op"), "collective"),
                       "pg": pc.fill_null(coll.column("pg"), "?")})
    key, top = _top_group(filled, ["coll_op", "pg"], _np(coll, "collective_us").astype(float))
    if not key:
        return base
    top_us = min(top / a.rank_steps, total)
    if top_us >= 0.999 * total:
        return f"{base}, all of it {key[0]} on pg {key[1]}"
    return (f"{base}; the largest part is {key[0]} on pg {key[1]} "
            f"({_of_step(top_us, a, inner=True)})")


def _top_name_text(run: RunData, component: str, a: Attribution) -> str:
    text = f"{_cap(WORDS[component])} is {_of_step(a.per_step_us[component], a)}"
    crit = _critical(run)
    col = f"{component}_us"
    if crit.num_rows == 0 or col not in crit.column_names:
        return text
    key, top = _top_group(crit, ["name"], _np(crit, col).astype(float))
    if not key or top <= 0:
        return text
    top_us = min(top / a.rank_steps, a.per_step_us[component])
    return f"{text}; the largest part is `{_short(key[0])}` ({_of_step(top_us, a, inner=True)})"


def _short(name: str, limit: int = 60) -> str:
    name = str(name).replace("|", "/").replace("`", "'")
    return name if len(name) <= limit else name[: limit - 1] + "…"


def late_ranks(run: RunData, a: Attribution) -> list[tuple[int, int]]:
    """(rank, collectives it arrived last at by a significant lead), most often late first."""
    colls = run.collectives
    if colls.num_rows == 0 or a.step_us <= 0:
        return []
    skew = _np(colls, "skew_us")
    late = _np(colls, "late_rank")
    significant = (skew >= max(1.0, MIN_SHARE * a.step_us)) & (late >= 0)
    ranks, counts = np.unique(late[significant], return_counts=True)
    order = np.lexsort((ranks, -counts))
    return [(int(ranks[i]), int(counts[i])) for i in order]


def _straggler(run: RunData, a: Attribution) -> Finding | None:
    wait = a.per_step_us["peer_wait"]
    late = late_ranks(run, a)
    if wait <= 0 or not late:
        return None
    n = run.collectives.num_rows
    skew = _np(run.collectives, "skew_us")
    lead = float(skew[skew >= max(1.0, MIN_SHARE * a.step_us)].min())
    named = ", ".join(f"rank {r} last in {c} of {n}" for r, c in late)
    text = (f"Waiting for late peers is {_of_step(wait, a)}: {len(late)} of {a.ranks} ranks "
            f"arrive late at collectives by ≥ {fmt.us(lead)} µs ({named})")
    return Finding("straggler", wait, wait / a.step_us, text, HINTS["straggler"])


#: Below this share of the step the devices' critical-path time is negligible: host-bound.
HOST_BOUND_DEVICE_SHARE = 0.05
DEVICE_COMPONENTS = ("compute", "fetch", "collective", "peer_wait", "queue", "retry")


def device_share(a: Attribution) -> float:
    """Share of the step the critical path spends in device work and communication."""
    if a.step_us <= 0:
        return float("nan")
    return sum(a.per_step_us[c] for c in DEVICE_COMPONENTS) / a.step_us


def host_bound(a: Attribution) -> bool:
    return a.step_us > 0 and device_share(a) < HOST_BOUND_DEVICE_SHARE


#: Measured devices busy more than this share of the step: the step is not host-bound on the
#: measured hardware, whatever the critical path says.
BUSY_DEVICE_SHARE = 0.5
COMM_COMPONENTS = ("collective", "peer_wait", "queue", "retry")
#: Measured devices busy more than this share of the step: a device-bound run, not called
#: host-bound on any target either (assumed).
DEVICE_BOUND_BUSY = 0.8


@dataclass(frozen=True)
class Verdict:
    """The headline verdict: from the replay's critical path, checked against what the trace
    measures before it is printed.

    ``label``: ``host-bound``, ``device-bound`` or ``communication-bound`` (the largest of the
    critical path's host, device-work and communication time), or ``unsettled`` when the
    critical path says host-bound while the trace measures devices busy more than
    `BUSY_DEVICE_SHARE` of the step or a launch queue full, and the replay is as measured, or
    on a target the measured devices were busy more than `DEVICE_BOUND_BUSY`: the replay then
    misses a wait on the device, or host and devices are both near saturation, and no verdict
    is printed as settled (a target replay of a run measured busy between `BUSY_DEVICE_SHARE`
    and `DEVICE_BOUND_BUSY` may be host-bound: that is said, with what the measured run shows). ``hardware_neutral``: the step is
    host-bound with the critical path under `HOST_BOUND_DEVICE_SHARE` in device work and nothing
    measured contradicts it, the only case where the report says the hardware does not change
    the step."""

    label: str
    critical: dict[str, float]      # share of the step on the critical path: host, device, comm
    devices_busy: float | None      # measured: any device stream running, share of step wall
    max_queued: int | None          # measured: most launches outstanding on one stream
    queue_full: bool                # measured: a launch queue filled (launch calls blocked)
    blocked_launches: int
    thread_waits: int               # cross-thread waits the graph inferred
    conflicts: tuple[str, ...]      # measures that contradict the critical path
    hardware_neutral: bool
    requests: dict[str, int] | None = None  # request type -> count when the windows are requests

    def windows(self) -> str:
        """What a step is, when it is not a ``ProfilerStep``: the run's requests."""
        if not self.requests:
            return ""
        n = sum(self.requests.values())
        top = sorted(self.requests.items(), key=lambda kv: -kv[1])[:3]
        kinds = ", ".join(f"{c:,} `{name}`" for name, c in top)
        return (f" The trace has no step annotations: the windows are its {n:,} requests "
                f"({kinds}), and a step is one request's latency.")

    def sentence(self) -> str:
        crit = ", ".join(f"{k} {fmt.pct(v)}" for k, v in self.critical.items())
        measured = []
        if self.devices_busy is not None:
            measured.append(f"devices busy {fmt.pct(self.devices_busy)} of the step")
        if self.max_queued is not None:
            measured.append(f"launch queue up to {self.max_queued:,} deep"
                            + (f", {self.blocked_launches:,} launches blocked on a full queue"
                               if self.queue_full else ""))
        if self.thread_waits:
            measured.append(f"{self.thread_waits:,} cross-thread waits")
        seen = f" The trace measures {', '.join(measured)}." if measured else ""
        seen += self.windows()
        if self.label == "unsettled":
            return (f"**Verdict unsettled.** The replay's critical path is mostly host time "
                    f"({crit}), but {' and '.join(self.conflicts)}: either the host time is "
                    "waiting on the devices in a way the dependency graph does not model (see "
                    "`mtia-trace validate --strict`), or host and devices are both near "
                    "saturation and each shortens the step only with the other (try "
                    f"`--whatif 'track=dev:*:x0.5'`), so it is not called host-bound.{seen}")
        if self.hardware_neutral:
            return (f"**Host-bound: the hardware does not change this step.** The critical path "
                    f"spends only {fmt.pct(self.critical['device'] + self.critical['communication'])}"
                    f" of the step in device work and communication ({crit}); any target gives "
                    f"about the same step time until the host side gets faster.{seen}")
        text = f"**{_cap(self.label)}** on the replay's critical path ({crit})."
        if self.conflicts:
            text += (f" On the measured hardware {' and '.join(self.conflicts)}: this target "
                     "changes the step, the measured run was not host-bound.")
        return text + seen


def _measured_busy(run: RunData) -> float | None:
    """Share of the measured step wall time (per rank and step, from the first to the last
    measured event of the step) in which any device work ran; None without device work."""
    ev = run.events
    if ev.num_rows == 0:
        return None
    in_kinds = pc.fill_null(pc.is_in(ev.column("kind"), pa.array(list(DEVICE_KINDS))), False)
    dev = _np(ev, "is_device").astype(bool) & in_kinds.to_numpy(zero_copy_only=False)
    if not dev.any():
        return None
    rank, step = _np(ev, "rank"), _np(ev, "step")
    ts = _np(ev, "ts_us").astype(float)
    end = ts + np.nan_to_num(_np(ev, "dur_us").astype(float))
    busy = window = 0.0
    for r in np.unique(rank):  # ranks: few
        mine = rank == r
        seg_s, seg_e = union(ts[mine & dev], end[mine & dev])
        st = step[mine]
        inside = st >= 0
        if not inside.any():
            continue
        keys, inv = np.unique(st[inside], return_inverse=True)
        lo = np.full(len(keys), np.inf)
        hi = np.full(len(keys), -np.inf)
        np.minimum.at(lo, inv, ts[mine][inside])
        np.maximum.at(hi, inv, end[mine][inside])
        busy += float(covered(seg_s, seg_e, lo, hi).sum())
        window += float((hi - lo).sum())
    return busy / window if window > 0 else None


def verdict(run: RunData, a: Attribution | None = None) -> Verdict:
    """The checked verdict (`Verdict`)."""
    a = a or attribution(run)
    step = a.step_us if a.step_us > 0 else float("nan")
    dev = sum(a.per_step_us[c] for c in ("compute", "fetch"))
    comm = sum(a.per_step_us[c] for c in COMM_COMPONENTS)
    host = a.per_step_us["host"] + a.per_step_us["idle"]
    critical = {"host": host / step, "device": dev / step, "communication": comm / step}
    label = max(("host-bound", host), ("device-bound", dev), ("communication-bound", comm),
                key=lambda kv: kv[1])[0]
    notes = (run.meta.assumptions.model or {}) if run.meta.assumptions else {}
    lq = notes.get("launch_queue") or {}
    max_q = int(lq["outstanding_max"]) if lq.get("outstanding_max") else None
    blocked = int(lq.get("blocked_launches") or 0)
    full = bool(lq.get("streams_full")) and blocked > 0
    busy = _measured_busy(run)
    thread = 0
    if run.edges.num_rows and "type" in run.edges.column_names:
        thread = int(pc.sum(pc.equal(run.edges.column("type"), "thread")).as_py() or 0)
    conflicts = []
    if busy is not None and busy > BUSY_DEVICE_SHARE:
        conflicts.append(f"the trace measures devices busy {fmt.pct(busy)} of the step")
    if full:
        conflicts.append(f"a launch queue filled ({blocked:,} launch calls blocked)")
    as_measured = run.meta.hardware == AS_MEASURED
    if label != "host-bound":
        conflicts = []
    elif conflicts and (as_measured or (busy is not None and busy > DEVICE_BOUND_BUSY)):
        # as measured; or a device-bound measured run on any target: its host time may be a
        # wait on the devices the graph misses, so it is not called host-bound
        label = "unsettled"
    neutral = (label == "host-bound" and not conflicts and a.step_us > 0
               and device_share(a) < HOST_BOUND_DEVICE_SHARE)
    req = notes.get("requests") or {}
    return Verdict(label, critical, busy, max_q, full, blocked, thread, tuple(conflicts),
                   neutral, dict(req.get("types") or {}) or None)


def findings(run: RunData, a: Attribution | None = None) -> list[Finding]:
    """Every candidate bottleneck above `MIN_SHARE` of the step, largest first."""
    a = a or attribution(run)
    if a.step_us <= 0:
        return []
    out: list[Finding] = []
    s = _straggler(run, a)
    for c in ATTRIBUTION:
        us_ = a.per_step_us[c]
        if us_ / a.step_us < MIN_SHARE or (c == "peer_wait" and s is not None):
            continue
        if c == "host":
            h = host_split(run, a)
            if h.untracked_us / a.step_us >= MIN_SHARE:
                out.append(Finding(
                    "host_untracked", h.untracked_us, h.untracked_us / a.step_us,
                    f"Unexplained time is {_of_step(h.untracked_us, a)}: gaps on the critical "
                    "path outside every recorded op that no dependency explains (Python, data "
                    "loading, waits the trace does not record)", HINTS["host_untracked"]))
            if h.wait_us / a.step_us >= MIN_SHARE:
                out.append(Finding(
                    "host_wait", h.wait_us, h.wait_us / a.step_us,
                    f"Host waits past a dependency's end are {_of_step(h.wait_us, a)}: launch "
                    "latency and the time a synchronize or collective wait took to return "
                    "after the work it waited on ended", HINTS["host_wait"]))
            if h.ops_us / a.step_us >= MIN_SHARE:
                text = f"Host ops on the critical path are {_of_step(h.ops_us, a)}"
                if h.top_op:
                    text += (f"; the largest is `{_short(h.top_op)}` "
                             f"({_of_step(h.top_op_us, a, inner=True)})")
                out.append(Finding("host_ops", h.ops_us, h.ops_us / a.step_us, text,
                                   HINTS["host"]))
            continue
        if c == "collective":
            text = _collective_text(run, a)
        elif c in ("compute", "fetch"):
            text = _top_name_text(run, c, a)
        else:
            text = f"{_cap(WORDS[c])} is {_of_step(us_, a)}"
        out.append(Finding(c, us_, us_ / a.step_us, text, HINTS[c]))
    if s is not None:
        out.append(s)
    return sorted(out, key=lambda f: (-f.us_per_step, f.key))


def per_rank_collectives(run: RunData) -> dict[str, float] | None:
    """Per-rank collective time and its parts, µs per rank-step (the rank_collectives analyzer's
    means), or None when the run's analyses lack it or it has no collective."""
    m = rank_collectives.means(run.analyses.get(rank_collectives.NAME))
    return m if m is not None and m["busy_us"] > 0 else None


def collective_sentence(run: RunData, a: Attribution) -> str | None:
    """The per-rank collective headline: a rank's own collective time with its exposed part."""
    m = per_rank_collectives(run)
    if m is None:
        return None
    waits = []
    if not fmt.is_noise_us(m["queue_us"]):
        waits.append(f"queued {fmt.duration(m['queue_us'])} for busy engines / links")
    if not fmt.is_noise_us(m["peer_wait_us"]):
        waits.append(f"waited {fmt.duration(m['peer_wait_us'])} for peers")
    def share(us_: float) -> str:
        return fmt.pct(us_ / a.step_us) if a.step_us > 0 else "–"

    text = (f"Per-rank collective time **{fmt.duration(m['busy_us'])}** per rank-step (a rank's "
            f"own transfer + post, {share(m['busy_us'])} of the step), of which "
            f"**{fmt.duration(m['critical_us'])}** exposed on the critical path "
            f"({share(m['critical_us'])} of the step)")
    if waits:
        text += "; before starting, its collectives " + " and ".join(waits)
    return text + "."


def top_bottlenecks(run: RunData, n: int = 3) -> list[Finding]:
    return findings(run)[:n]


#: Costing fell back when events with flops/bytes cover less than this share of device-work time.
PRICED_MIN_SHARE = 0.5


def identical_reason(run: RunData, others: list[RunData]) -> str:
    """Why ``run`` and ``others`` (the same trace on other targets) give identical results, in
    one sentence: roofline costing fell back to measured durations (priced work under
    `PRICED_MIN_SHARE` of device time), else the checked verdict."""
    names = " and ".join(r.hardware for r in [run, *others])
    notes = [(r.meta.assumptions.model or {}) if r.meta.assumptions else {}
             for r in [run, *others]]
    # roofline prices only events with flops/bytes; the rest keep their measured durations
    fracs = [float(n["priced_work_time_fraction"]) for n in notes
             if n.get("mode") == "roofline" and n.get("priced_work_time_fraction") is not None]
    if fracs and min(fracs) < PRICED_MIN_SHARE:
        return (f"{names} give identical step times and attribution because costing fell back: "
                f"events with flops/bytes cover only {fmt.pct(min(fracs))} of device-work time "
                f"(under {fmt.pct(PRICED_MIN_SHARE)}), and in roofline mode the rest keeps its "
                "measured duration on every target. To compare targets, name the hardware the "
                "trace was measured on (--source-hw NAME: --mode auto then scales measured "
                "times), use --mode scaled with it, or add a spec for that device "
                "(mtia-trace hw show)")
    v = verdict(run)
    if v.hardware_neutral:
        return (f"{names} give identical step times and attribution: the step is host-bound, "
                "the hardware does not change it (see `mtia-trace report` for where the host "
                "time goes)")
    why = (" and ".join(v.conflicts) if v.conflicts else
           f"the critical path is {fmt.pct(v.critical['host'])} host time")
    return (f"{names} give identical step times and attribution, but {why}: the replay likely "
            "misses a wait on the devices (check `mtia-trace validate --strict`)")
