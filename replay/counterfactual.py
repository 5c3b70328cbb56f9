"""Many predictions from one trace: the graph and the costs are built once, each what-if only
edits costs and reschedules (`replay.whatif`). Used by the causal profile (`whatif`) and by the
causal diff (`replay.diff`).

The causal profile answers *what to optimize first*: for the op groups with the most busy time
(by kind, by name, by annotation scope, by rank) it predicts the mean step if the group were 2x
faster and if it took no time. Work that is busy but off the critical path gains nothing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.schema import PASSIVE_KINDS
from replay.attribution import StepWindows, window_spans
from replay.costs import COMPONENTS, AsMeasured, CostModel, EventCosts
from replay.graph import Graph, build_graph
from replay.pipeline import (
    Costed,
    costing_input,
    launch_latencies,
    modelled_lags,
    schedule_costs,
    stretch,
)
from replay.scheduler import SchedulePlan, schedule_many, schedules_many
from replay.whatif import (
    ChainOwners,
    WhatIf,
    apply_whatifs,
    chain_owners,
    launcher,
    leaf_mask,
    nested,
    parse_whatif,
    scale_costs,
    select,
    total_cost,
    trace_index,
)

#: Group dimensions of the causal profile, in the order they are listed.
GROUP_BY = ("kind", "name", "scope", "rank")

#: Annotations the profiler itself writes around everything it records (not user scopes):
#: PyTorch's ``PyTorch Profiler (0)``, ``[param|...]`` records, and MTIA's whole-trace spans.
PROFILER_SPANS = r"^(PyTorch Profiler|\[|__MTIA_CCP_events__|MTIA Activity Trace)"


#: what a graph edited for a prediction must share with the trace's graph to be scheduled
#: with the others (`Prepared.step_means`): all but its chain gaps and lags
_STRUCTURE = ("order", "track_ptr", "track_is_device", "leaf_end", "base", "src_pt",
              "dst_pt", "etype", "coll_group", "pool", "pool_capacity")


@dataclass
class Prepared:
    """A trace ready for repeated what-ifs: graph, costs and chain ownership built once."""

    events: pa.Table
    graph: Graph
    costs: EventCosts
    comps: dict[str, np.ndarray]
    slow: float
    leaf: np.ndarray
    owners: ChainOwners
    notes: dict[str, object] = field(default_factory=dict)
    #: the worklist's rounds, recorded by the first prediction and replayed by the others
    plan: SchedulePlan = field(default_factory=SchedulePlan)
    _windows: StepWindows | None = field(default=None, init=False, repr=False)

    def step_times(self, g: Graph | None = None,
                   comps: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """Replayed (rank, step) wall times (whole steps only) with these costs and gaps."""
        g = g if g is not None else self.graph
        c = Costed(comps=comps if comps is not None else self.comps,
                   resource=np.asarray(self.costs.resource),
                   capacity=np.asarray(self.costs.resource_capacity), notes={},
                   interference=self.costs.interference)
        s, _ = schedule_costs(self.events, g, c, self.slow, plan=self.plan)
        return window_times(self.events, g, s.T, self.windows())

    def step_mean(self, g: Graph | None = None,
                  comps: dict[str, np.ndarray] | None = None) -> float:
        t = self.step_times(g, comps)
        return float(t.mean()) if len(t) else 0.0

    def predict(self, whatifs: list[WhatIf]) -> float:
        ed = apply_whatifs(self.events, self.graph, self.comps, whatifs, owners=self.owners,
                           leaf=self.leaf)
        return self.step_mean(ed.graph, ed.comps)

    def predict_scaled(self, items: list[tuple[np.ndarray, float]]) -> list[float]:
        """The mean step of each (events, factor): the events' costs and the self time they own
        scaled by the factor, as `predict` gives, bit for bit, for a scale what-if whose
        selection with what it nests and launches (`replay.whatif.nested`) is those events."""
        g = self.graph

        def edits() -> Iterator[tuple[Graph, dict[str, np.ndarray]]]:
            for m, v in items:
                gap = g.gap.astype(np.float64, copy=True)
                comps = scale_costs(self.comps, gap, np.where(m, v, 1.0), self.leaf, self.owners)
                yield dataclasses.replace(g, gap=gap), comps

        return self.step_means(edits(), len(items))

    def step_means(self, edits: Iterable[tuple[Graph, dict[str, np.ndarray]]],
                   count: int) -> list[float]:
        """`step_mean` of each of ``count`` (graph, costs) (`step_times_many`)."""
        return [float(t.mean()) if len(t) else 0.0 for t in self.step_times_many(edits, count)]

    def step_times_many(self, edits: Iterable[tuple[Graph, dict[str, np.ndarray]]],
                        count: int) -> list[np.ndarray]:
        """`step_times` of each of ``count`` (graph, costs), graphs that differ from this one
        in their chain gaps and lags only: each the same, bit for bit, as one schedule by
        itself, all in passes over the graph's recorded rounds (`scheduler.schedule_many`), a
        column per prediction; with a model that stretches compute overlapping communication,
        the stretched ones in a second pass, as `pipeline.schedule_costs` does."""
        g = self.graph
        it = iter(edits)
        if self.plan.for_graph(g).steps is None:
            return [self.step_times(gk, ck) for gk, ck in it]
        wins = self.windows()
        whole = _whole_steps(wins.step)
        out: list[np.ndarray] = []
        # columns per pass: each (points x columns) array under ~16 MB (measured faster than
        # fewer, larger passes: the arrays stay in cache more), unless the rounds are short
        # (many rounds of a few points: a pass costs their calls, whatever its columns), then
        # up to ~64 MB
        npts = max(2 * g.n, 1)
        steps = self.plan.steps or []
        short = -(-4096 * len(steps) // npts)  # columns for ~4096 values a round
        per = max(1, min(max((1 << 21) // npts, short), (1 << 23) // npts))
        while len(out) < count:
            cols = min(per, count - len(out))
            durs: list[np.ndarray] = []
            comps: list[dict[str, np.ndarray]] = []
            gaps: list[np.ndarray] = []
            lags: list[np.ndarray] = []
            ready: list[np.ndarray] = []
            alone: dict[int, np.ndarray] = {}  # graphs of another structure: scheduled alone
            for j in range(cols):
                gk, ck = next(it)
                if any(getattr(gk, f) is not getattr(g, f) for f in _STRUCTURE):
                    alone[j] = self.step_times(gk, ck)
                    gk, ck = g, self.comps
                d: np.ndarray | int = 0
                for c in ck:  # `Costed.dur`: the components summed in this order
                    d = d + ck[c]
                durs.append(d)  # type: ignore[arg-type]
                comps.append(ck)
                gaps.append(gk.gap)
                lags.append(gk.lag)
                ready.append(gk.ready_lag)
            dur, gap = np.stack(durs, axis=1), np.stack(gaps, axis=1)
            del durs, gaps
            same_lag = all(x is g.lag for x in lags)
            same_ready = all(x is g.ready_lag for x in ready)
            lag = None if same_lag else np.stack(lags, axis=1)
            rl = None if same_ready else np.stack(ready, axis=1)
            res = np.asarray(self.costs.resource)
            cap = np.asarray(self.costs.resource_capacity)
            if self.slow <= 0 and self.costs.interference is None:
                T = schedule_many(g, dur, gap, res, cap, plan=self.plan, lag=lag, ready_lag=rl)
            else:  # `schedule_costs`: compute overlapping communication stretched, again
                T = np.empty((2 * g.n, cols))
                again: list[int] = []
                again_dur: list[np.ndarray] = []
                for j, sj in enumerate(schedules_many(g, dur, gap, res, cap, plan=self.plan,
                                                      lag=lag, ready_lag=rl)):
                    cj = Costed(comps=comps[j], resource=res, capacity=cap, notes={},
                                interference=self.costs.interference)
                    st = stretch(self.events, sj, cj, self.slow)
                    T[:, j] = sj.T
                    if st is not None:
                        again.append(j)
                        again_dur.append(st.dur)
                if again:
                    T[:, again] = schedule_many(
                        g, np.stack(again_dur, axis=1), gap[:, again], res, cap, plan=self.plan,
                        lag=None if lag is None else lag[:, again],
                        ready_lag=None if rl is None else rl[:, again])
            ws, we = wins.spans(T)
            tot = np.ascontiguousarray((we - ws)[whole].T)  # a row per prediction
            times = list(tot)
            for j, v in alone.items():
                times[j] = v
            out.extend(times)
        return out

    def windows(self) -> StepWindows:
        """The graph's (rank, step) windows (`attribution.window_spans`), built once."""
        if self._windows is None:
            self._windows = window_spans(self.events, self.graph)
        return self._windows

    def busy(self, mask: np.ndarray) -> float:
        """Busy time (us) of the events in ``mask``: their costs where the scheduler uses them,
        plus the self time (non-wait gaps) they own on host threads."""
        cost = total_cost(self.comps)
        o = self.owners.owner
        own = self.owners.host_gap & ~self.owners.wait & (o >= 0)
        gaps = float(self.graph.gap[own][mask[o[own]]].sum())
        return float(cost[mask & self.leaf].sum()) + gaps


def _whole_steps(step: np.ndarray) -> np.ndarray:
    """The windows that are whole steps (numbered ones; all when none is numbered)."""
    return step >= 0 if (step >= 0).any() else np.ones(len(step), dtype=bool)


def window_times(events: pa.Table, g: Graph, T: np.ndarray,
                 wins: StepWindows | None = None) -> np.ndarray:
    """Replayed (rank, step) wall times (whole steps only) with point times ``T``; ``wins``:
    the trace's `window_spans`, when built already."""
    wins = wins if wins is not None else window_spans(events, g)
    ws, we = wins.spans(T)
    return (we - ws)[_whole_steps(wins.step)]


def measured_step_times(events: pa.Table, g: Graph) -> np.ndarray:
    """Measured (rank, step) wall times (whole steps only), as the replay's windows define them."""
    wins = window_spans(events, g)
    return wins.measured[_whole_steps(wins.step)]


def prepare(events: pa.Table, model: CostModel | None = None, *,
            graph: Graph | None = None) -> Prepared:
    """Build the graph and price the events once."""
    model = model or AsMeasured()
    g = graph if graph is not None else build_graph(events)
    g, _ = modelled_lags(g, *launch_latencies(model, events), strict=False)
    costs = model.cost(costing_input(events, g))
    comps = {c: np.asarray(getattr(costs, f"{c}_us"), dtype=np.float64) for c in COMPONENTS}
    return Prepared(events=events, graph=g, costs=costs, comps=comps,
                    slow=float(model.overlap_slowdown()), leaf=leaf_mask(events, g),
                    owners=chain_owners(events, g))


# ---- the causal profile ------------------------------------------------------------------------

def glob_escape(name: str) -> str:
    """A literal name as a selector glob (``[``, ``*``, ``?`` escaped; ``|`` and ``,`` kept out
    by falling back to a regex)."""
    if any(c in name for c in "|,/"):
        return "/^" + "".join("\\" + c if not c.isalnum() and c != "_" else c for c in name) + "$/"
    return "".join(f"[{c}]" if c in "[]*?" else c for c in name)


def sorted_codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string column as (per row: its index into the values, the distinct values sorted);
    a null reads ``'None'``, as numpy's ``astype(str)`` reads it."""
    arr = pc.fill_null(col, "None")
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    enc = pc.dictionary_encode(arr)
    vals = np.array(enc.dictionary.to_pylist(), dtype=object)
    o = np.array(sorted(range(len(vals)), key=vals.__getitem__), dtype=np.int64)
    rank = np.empty(len(o), dtype=np.int64)
    rank[o] = np.arange(len(o))
    return rank[enc.indices.to_numpy(zero_copy_only=False)], vals[o]


def candidate_groups(p: Prepared, by: tuple[str, ...] = GROUP_BY) -> list[tuple[str, str]]:
    """(dimension, selector) of every group the profile may rank."""
    ev = p.events
    kcode, kvals = sorted_codes(ev.column("kind"))
    kind_is = {k: i for i, k in enumerate(kvals.tolist())}
    passive = np.isin(kcode, [kind_is[k] for k in PASSIVE_KINDS if k in kind_is])
    # each op's own time: a leaf's cost, an op's self time (a CPU op with children, such as
    # aten::linear around its addmm, does its work in its self time)
    cost = total_cost(p.comps) * p.leaf
    own = p.owners.host_gap & ~p.owners.wait & (p.owners.owner >= 0)
    selft = np.bincount(p.owners.owner[own], weights=p.graph.gap[own], minlength=p.graph.n)
    tot = cost + selft
    work = ~passive & (p.leaf | (tot > 0))
    out: list[tuple[str, str]] = []
    if "kind" in by:
        for k in kvals[np.unique(kcode[work])].tolist():
            out.append(("kind", f"kind={k}"))
    ncode, nvals = sorted_codes(ev.column("name")) if {"name", "scope"} & set(by) \
        else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
    if "name" in by:
        ops = ~passive & (work | (p.events.column("depth").to_numpy() >= 0))
        # names: the 40 with the most own time (cost + self time) are candidates
        present = np.unique(ncode[ops])
        u = nvals[present]
        remap = np.zeros(len(nvals), dtype=np.int64)
        remap[present] = np.arange(len(present))
        per = np.bincount(remap[ncode[ops]], weights=tot[ops], minlength=len(u))
        # launch calls: their kernels are a group of their own (the call's group is its cost)
        lau = launcher(ev, p.graph)
        launches = set(ncode[lau[lau >= 0]].tolist())
        runtime = kcode == kind_is.get("runtime", -1)
        only_runtime = np.bincount(ncode, weights=runtime, minlength=len(nvals)) \
            == np.bincount(ncode, minlength=len(nvals))
        for i in np.argsort(-per)[:40].tolist():
            if per[i] > 0:
                out.append(("name", f"name={glob_escape(u[i])}"))
                if int(present[i]) in launches and only_runtime[present[i]]:
                    out.append(("launched", f"launched_by={glob_escape(u[i])}"))
    if "scope" in by:
        ann = (kcode == kind_is.get("annotation", -1)) \
            & ~ev.column("is_device").to_numpy(zero_copy_only=False)
        skip = pc.starts_with(ev.column("name"), "ProfilerStep#").fill_null(False)
        skip = skip.to_numpy(zero_copy_only=False).astype(bool)
        skip |= pc.match_substring_regex(ev.column("name"), PROFILER_SPANS).fill_null(
            False).to_numpy(zero_copy_only=False).astype(bool)
        for nm in nvals[np.unique(ncode[ann & ~skip])].tolist():
            out.append(("scope", f"kind=annotation,name={glob_escape(nm)}"))
    ranks = np.unique(ev.column("rank").to_numpy()).tolist()
    if "rank" in by and len(ranks) > 1:  # one rank: its row would be "everything"
        for r in ranks:
            out.append(("rank", f"rank={r}"))
    return out


def describe(selector: str, events: pa.Table | None = None) -> str:
    """What a profile group selects, in words: ``kernels launched by cudaLaunchKernel``."""
    terms = dict(parse_whatif(f"{selector}:x1").terms)

    def lit(key: str) -> str:
        v = terms[key][0]
        if v.startswith("/^") and v.endswith("$/"):  # glob_escape's regex form
            return re.sub(r"\\(.)", r"\1", v[2:-2])
        return re.sub(r"\[(.)\]", r"\1", v)

    if "launched_by" in terms:
        return f"kernels launched by {lit('launched_by')}"
    if "kind" in terms and "name" in terms and terms["kind"] == ("annotation",):
        return f"everything inside {lit('name')}"
    if "kind" in terms:
        k = terms["kind"][0]
        return ("runtime calls (own time, not their kernels)" if k == "runtime"
                else f"every {k} event")
    if "name" in terms:
        own = ""
        if events is not None:
            sel = pc.filter(events.column("kind"), pc.equal(events.column("name"), lit("name")))
            if len(sel) and pc.all(pc.equal(sel, "runtime").fill_null(False)).as_py():
                own = " calls (own time)"
        return f"{lit('name')}{own}"
    if "rank" in terms:
        return f"all of rank {terms['rank'][0]}"
    return selector


def causal_profile(p: Prepared, *, top: int = 20, by: tuple[str, ...] = GROUP_BY,
                   speedup: float = 2.0) -> pa.Table:
    """The top ``top`` groups by busy time, each replayed ``speedup``x faster and at zero cost;
    rows sorted by the gain of the speedup (largest first)."""
    base = p.step_mean()
    is_dev = p.events.column("is_device").to_numpy(zero_copy_only=False).astype(bool)
    groups = []
    index = trace_index(p.events, p.graph)
    for dim, sel in candidate_groups(p, by):
        w = parse_whatif(f"{sel}:x1")
        mask = select(p.events, p.graph, w, index)
        if not mask.any():
            continue
        full = nested(p.events, p.graph, mask, index)
        # host ops that bring device work with them (their launches' kernels): say so
        brings = dim != "scope" and bool((full & ~mask & is_dev).any()) \
            and not is_dev[mask].any()
        groups.append((dim, sel, p.busy(full), brings, full))
    step = p.events.column("step").to_numpy()
    nsteps = max(len(np.unique(step[step >= 0])), 1)
    groups.sort(key=lambda t: -t[2])
    groups = groups[:top]
    rows: dict[str, list] = {"group": [], "selects": [], "by": [], "busy_us": [], "step_us": [],
                             f"step_{speedup:g}x_us": [], f"gain_{speedup:g}x_us": [],
                             "step_zero_us": [], "gain_zero_us": []}
    # every group faster and at zero (the selection's nested set, as `predict` scales it), all
    # predictions in one pass
    pred = p.predict_scaled([(full, f) for *_, full in groups for f in (1.0 / speedup, 0.0)])
    for i, (dim, sel, busy, brings, _full) in enumerate(groups):
        fast, zero = pred[2 * i], pred[2 * i + 1]
        rows["group"].append(sel)
        rows["selects"].append(describe(sel, p.events)
                               + (" and the device work they launch" if brings else ""))
        rows["by"].append(dim)
        rows["busy_us"].append(busy / nsteps)
        rows["step_us"].append(base)
        rows[f"step_{speedup:g}x_us"].append(fast)
        rows[f"gain_{speedup:g}x_us"].append(base - fast)
        rows["step_zero_us"].append(zero)
        rows["gain_zero_us"].append(base - zero)
    t = pa.table(rows)
    if t.num_rows:
        t = t.sort_by([(f"gain_{speedup:g}x_us", "descending"), ("busy_us", "descending")])
    return t


__all__ = ["Prepared", "prepare", "causal_profile", "candidate_groups", "window_times",
           "measured_step_times", "glob_escape", "describe", "GROUP_BY", "PROFILER_SPANS"]
