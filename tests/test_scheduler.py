from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.attribution import check_attribution
from replay.costs import AsMeasured, split_by_kind
from replay.graph import EDGE_CODE, Graph, build_graph
from replay.run import replay_events
from replay.scheduler import (
    BOUND_RESOURCE,
    SchedulePlan,
    _segment_cummax,
    schedule,
    schedule_many,
    schedules_many,
)
from tests.replay_tables import dev, host, table


def _reference_inputs(g, dur):
    from replay.scheduler import chain_lags

    w = chain_lags(g, dur)
    prev = {}
    for t in range(len(g.track_ptr) - 1):
        pts = g.order[g.track_ptr[t]:g.track_ptr[t + 1]]
        for k in range(1, len(pts)):
            prev[int(pts[k])] = (int(pts[k - 1]), w[g.track_ptr[t] + k])
    ins: dict[int, list[tuple[int, float, bool]]] = {}
    for s, d, lag, e in zip(g.src_pt.tolist(), g.dst_pt.tolist(), g.lag.tolist(),
                            g.etype.tolist()):
        ins.setdefault(d, []).append((s, lag, e == EDGE_CODE["collective"]))
    return prev, ins


def reference_schedule(g, dur):
    """Event-by-event: repeatedly settle any point whose inputs are all settled."""
    prev, ins = _reference_inputs(g, dur)
    T = dict.fromkeys(range(2 * g.n), -np.inf)
    changed = True
    while changed:  # Bellman-Ford style longest path: settle until nothing moves
        changed = False
        for p in g.order.tolist():
            v = g.base[p]
            if p in prev:
                q, lag = prev[p]
                v = max(v, T[q] + lag)
            for s, lag, _ in ins.get(p, ()):
                v = max(v, T[s] + lag)
            if v > T[p] + 1e-12:
                T[p] = v
                changed = True
    return np.array([T[p] for p in range(2 * g.n)])


def reference_pool_schedule(g, dur, resource, capacity):
    """One pool event at a time: schedule with the waits settled so far; the unsettled pool
    event ready first (inputs done and peers arrived; ties by event id) takes, with the other
    instances of its collective, the unit of its pool freed first by the events before it."""
    prev, ins = _reference_inputs(g, dur)
    g2 = copy.copy(g)
    g2.base = g.base.copy()
    fifo: dict[int, list[int]] = {}
    left = set(np.flatnonzero(resource >= 0).tolist())
    while True:
        T = reference_schedule(g2, dur)
        if not left:
            return T, g2.base
        own = np.full(g.n, -np.inf)
        for i in range(g.n):
            p = 2 * i
            v = g2.base[p]
            if p in prev:
                q, lag = prev[p]
                v = max(v, T[q] + lag)
            for s, lag, coll in ins.get(p, ()):
                if not coll:
                    v = max(v, T[s] + lag)
            own[i] = v
        peer = own.copy()
        for grp in set(g.coll_group.tolist()) - {-1}:
            m = g.coll_group == grp
            peer[m] = own[m].max()
        i = min(left, key=lambda j: (peer[j], j))
        unit = ([j for j in left if g.coll_group[j] == g.coll_group[i]]
                if g.coll_group[i] >= 0 else [i])
        for m in unit:
            p = int(resource[m])
            units = [-np.inf] * int(capacity[p])
            for j in fifo.get(p, []):
                units[int(np.argmin(units))] = T[2 * j + 1]
            g2.base[2 * m] = max(g2.base[2 * m], min(units))
            fifo.setdefault(p, []).append(m)
            left.discard(m)


@st.composite
def traces(draw):
    """Consistent measured traces: launches, kernels on two streams, an optional cross-rank
    collective (the last kernel on stream 7), a device synchronize and a ProfilerStep."""
    ranks = draw(st.integers(1, 3))
    nk = draw(st.integers(1, 6))
    with_coll = ranks > 1 and draw(st.booleans())
    rows, state = [], []
    for r in range(ranks):
        t = draw(st.floats(0, 20))
        step_start = t
        stream_free = {7: -1e9, 9: -1e9}
        last_end = 0.0
        for k in range(nk):
            t += draw(st.floats(0.5, 30))
            ldur = draw(st.floats(0.5, 8))
            corr = 100 * r + k
            rows.append(host(r, t, ldur, name=f"launch{k}", kind="runtime", depth=1,
                             correlation=corr, step=1))
            coll = with_coll and k == nk - 1
            s = 7 if coll else draw(st.sampled_from([7, 9]))
            ks = max(t + draw(st.floats(0.5, 10)), stream_free[s] + draw(st.floats(0, 2)))
            kd = draw(st.floats(1, 80))
            extra = ({"kind": "collective", "pg": "0", "coll_seq": 1, "coll_op": "all_reduce"}
                     if coll else {})
            rows.append(dev(r, ks, kd, stream=s, correlation=corr, step=1, **extra))
            stream_free[s] = ks + kd
            last_end = max(last_end, ks + kd)
            t += ldur
        state.append((r, t, step_start, last_end))
    coll = [x for x in rows if x.get("kind") == "collective"]
    if coll:
        done = max(x["ts_us"] for x in coll) + draw(st.floats(1, 40))
        for x in coll:
            x["dur_us"] = done - x["ts_us"]
    for r, t, step_start, last_end in state:
        last_end = max([last_end] + [x["ts_us"] + x["dur_us"] for x in coll if x["rank"] == r])
        sync_ts = t + draw(st.floats(0.5, 5))
        r_lat = draw(st.floats(0.5, 5))
        sync_end = max(sync_ts + r_lat, last_end + r_lat)
        rows.append(host(r, sync_ts, sync_end - sync_ts, name="cudaDeviceSynchronize",
                         kind="runtime", depth=1, step=1))
        rows.append(host(r, step_start, sync_end + draw(st.floats(0, 10)) - step_start,
                         name="ProfilerStep#1", kind="annotation", step=1))
    return rows


def graph_and_durations(rows, data):  # noqa: ANN001, ANN201
    """The graph of a drawn trace and its measured durations scaled by drawn factors."""
    t = table(rows)
    g = build_graph(t, max_ready_lag_us=None)
    dur = t.column("dur_us").to_numpy() * np.array(
        data.draw(st.lists(st.floats(0.2, 3.0), min_size=t.num_rows, max_size=t.num_rows)))
    return g, dur


@settings(max_examples=60, deadline=None)
@given(traces(), st.data())
def test_vectorized_schedule_equals_reference(rows, data):
    g, dur = graph_and_durations(rows, data)
    s = schedule(g, dur)
    ref = reference_schedule(g, dur)
    assert np.allclose(s.T, ref, rtol=0, atol=1e-9)
    # no event starts before its inputs end (plus lag)
    assert (s.T[g.dst_pt] >= s.T[g.src_pt] + g.lag - 1e-9).all()
    assert (s.T[1::2] >= s.T[0::2] - 1e-9).all()


@settings(max_examples=40, deadline=None)
@given(traces())
def test_as_measured_replay_is_exact_and_attribution_sums(rows):
    t = table(rows)
    res = replay_events(t)
    ev = res.events
    # every event ends when it ended in the trace (device starts come out of the graph)
    meas_end = ev.column("ts_us").to_numpy() + ev.column("dur_us").to_numpy()
    assert np.allclose(ev.column("end_us").to_numpy(), meas_end, rtol=0, atol=1e-9)
    steps = res.steps
    assert np.allclose(steps.column("total_us").to_numpy(), steps.column("measured_us").to_numpy(),
                       rtol=1e-9)
    check_attribution(steps)


@settings(max_examples=30, deadline=None)
@given(traces(), st.floats(0.1, 3.0))
def test_costed_replay_attribution_sums(rows, scale):
    class Scaled:
        name = "scaled"

        def cost(self, events):
            return split_by_kind(events, events.column("dur_us").to_numpy() * scale)

        def overlap_slowdown(self):
            return 0.0

    res = replay_events(table(rows), Scaled())
    check_attribution(res.steps)
    assert AsMeasured().name == "as-measured"


def _solver(g, dur):
    from replay.scheduler import _Solver, chain_lags

    pos = np.empty(2 * g.n, dtype=np.int64)
    pos[g.order] = np.arange(len(g.order))
    return _Solver(g, chain_lags(g, dur), pos)


@settings(max_examples=40, deadline=None)
@given(traces(), st.data())
def test_worklist_equals_rescans_bit_for_bit(rows, data):
    # every time depends only on its track's inputs, not on how the work was split
    g, dur = graph_and_durations(rows, data)
    sv = _solver(g, dur)
    T1, _ = sv.run(sv.base_pos, 2 * g.n)
    M1 = sv.M.copy()
    T2, _ = sv._rescan(2 * g.n)
    assert np.array_equal(T1, T2)
    assert np.array_equal(M1, sv.M)


@settings(max_examples=60, deadline=None)
@given(traces(), st.integers(1, 2), st.data())
def test_resource_pools(rows, cap, data):
    """Device events of a rank share a pool of ``cap`` units: never more than ``cap`` of them run
    at once, each waits FIFO for the earliest free unit, and the schedule equals the event-by-event
    reference with pools."""
    t = table(rows)
    g = build_graph(t, max_ready_lag_us=None)
    n = t.num_rows
    dur = t.column("dur_us").to_numpy() * np.array(
        data.draw(st.lists(st.floats(0.2, 3.0), min_size=n, max_size=n)))
    is_dev = t.column("is_device").to_numpy(zero_copy_only=False)
    rank = t.column("rank").to_numpy()
    pooled = is_dev & np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    resource = np.where(pooled, rank, -1).astype(np.int32)
    capacity = np.full(int(rank.max()) + 1, cap, dtype=np.int32)
    s = schedule(g, dur, resource, capacity)
    start, end = s.T[0::2], s.T[1::2]
    assert (s.T[g.dst_pt] >= s.T[g.src_pt] + g.lag - 1e-9).all()
    assert (s.queue[~pooled] == 0).all()
    assert (s.queue >= 0).all()
    # capacity: at every pool event's start, at most cap pool events hold a unit
    for r in np.unique(rank[pooled]).tolist():
        ids = np.flatnonzero(pooled & (rank == r))
        for i in ids.tolist():
            busy = (start[ids] <= start[i] + 1e-9) & (end[ids] > start[i] + 1e-9)
            assert busy.sum() <= cap, (r, i, start[ids], end[ids])
    ref, ref_base = reference_pool_schedule(g, dur, resource, capacity)
    assert np.allclose(s.T, ref, rtol=0, atol=1e-9)
    # queueing is the wait past ready (inputs and peers) where a unit was not free
    waited = ref_base[0::2] > s.peer_ready[0::2] + 1e-7
    assert np.allclose(s.queue, (start - s.peer_ready[0::2]).clip(0) * waited, atol=1e-9)
    assert (s.bound[0::2][waited] == BOUND_RESOURCE).all()
    # every time is the same however the tracks were worked through
    sv = _solver(g, dur)
    xb = ref_base[g.order]
    T1, _ = sv.run(xb, 2 * g.n)
    sv.xb = xb
    T2, _ = sv._rescan(2 * g.n)
    assert np.array_equal(T1, T2)


def test_pool_of_one_serializes_and_queues_fifo():
    # three kernels on three streams of one rank, launched 1 us apart, each 10 us; one unit
    rows = []
    for k in range(3):
        rows.append(host(0, 1.0 * k, 0.5, name=f"launch{k}", kind="runtime", correlation=k))
        rows.append(dev(0, 1.0 * k + 1, 10.0, stream=7 + k, correlation=k))
    t = table(rows)
    g = build_graph(t, max_ready_lag_us=None)
    dur = t.column("dur_us").to_numpy()
    is_dev = t.column("is_device").to_numpy(zero_copy_only=False)
    s = schedule(g, dur, np.where(is_dev, 0, -1).astype(np.int32), np.array([1], dtype=np.int32))
    d = np.flatnonzero(is_dev)
    assert np.allclose(s.T[2 * d], [1.0, 11.0, 21.0])
    assert np.allclose(s.queue[d], [0.0, 9.0, 18.0])
    assert (s.bound[2 * d[1:]] == BOUND_RESOURCE).all()


def _two_tracks(lag_back: float) -> Graph:
    """Two host tracks of one event each, joined in a cycle: end of 0 -> start of 1 and end of
    1 -> start of 0 (with lag_back)."""
    return Graph(n=2, order=np.arange(4), track_ptr=np.array([0, 2, 4]),
                 track_is_device=np.zeros(2, dtype=bool), gap=np.zeros(4),
                 leaf_end=np.array([False, True, False, True]),
                 base=np.array([0.0, -np.inf, 5.0, -np.inf]),
                 src_pt=np.array([1, 3]), dst_pt=np.array([2, 0]), lag=np.array([0.0, lag_back]),
                 etype=np.zeros(2, dtype=np.int8), ready_lag=np.zeros(2), sync_lag=np.full(2, np.nan),
                 coll_group=np.full(2, -1), transfer_us=np.full(2, np.nan), t0=0.0)


def test_cycle_through_track_chains():
    g = _two_tracks(0.0)
    s = schedule(g, np.zeros(2))  # a zero-weight cycle: settles by rescans
    assert np.array_equal(s.T, reference_schedule(g, np.zeros(2)))
    assert np.array_equal(s.T, [5.0, 5.0, 5.0, 5.0])
    with pytest.raises(AssertionError, match="cycle"):
        schedule(g, np.ones(2), max_passes=50)
    with pytest.raises(AssertionError, match="cycle"):
        schedule(_two_tracks(1.0), np.zeros(2), max_passes=50)


def _ping_pong(rounds: int):
    """Two ranks; each round: a launch, a collective on the device (matched across ranks) and a
    device synchronize on the host, so the host and device tracks hand over every round."""
    rows = []
    for r in (0, 1):
        for i in range(rounds):
            t0 = 100.0 * i
            rows.append(host(r, t0, 5, name="L", kind="runtime", correlation=i + 1))
            rows.append(dev(r, t0 + 10 + 5 * r, 40, kind="collective", correlation=i + 1,
                            pg="0", coll_seq=i, coll_op="all_reduce"))
            rows.append(host(r, t0 + 6, 60, name="cudaDeviceSynchronize", kind="runtime"))
    return table(rows)


def test_worklist_work_per_round_does_not_grow_with_the_trace(monkeypatch):
    # each track blocks on one point at a time: a waiting track is registered once, so the
    # number of track advances per round is the same for 8 and 64 rounds (it grew with the
    # number of rounds when every block appended another waiter entry)
    from replay.scheduler import _Solver

    calls = {"n": 0}
    orig = _Solver._advance

    def counted(self, t):
        calls["n"] += 1
        return orig(self, t)

    monkeypatch.setattr(_Solver, "_advance", counted)
    per_round = []
    for rounds in (8, 64):
        calls["n"] = 0
        t = _ping_pong(rounds)
        g = build_graph(t)
        schedule(g, t.column("dur_us").to_numpy())
        per_round.append(calls["n"] / rounds)
    assert per_round[1] <= 1.25 * per_round[0], per_round


def test_pool_rounds_do_not_grow_with_the_trace(monkeypatch):
    # collectives one after another on a pool no event waits for: settling one without a wait
    # moves nothing, so the next is final in the same round; one round for 8 and for 256 of
    # them (it was one round per collective, each round a pass over every pool event)
    from replay.scheduler import _Pools

    rounds = {}
    orig = _Pools.commit

    def counted(self, s, res_x):
        out = orig(self, s, res_x)
        rounds[n] = self.rounds
        return out

    monkeypatch.setattr(_Pools, "commit", counted)
    for n in (8, 256):
        t = _ping_pong(n)
        g = build_graph(t)
        dur = t.column("dur_us").to_numpy()
        is_dev = t.column("is_device").to_numpy(zero_copy_only=False)
        rank = t.column("rank").to_numpy()
        resource = np.where(is_dev, rank, -1).astype(np.int32)
        capacity = np.ones(2, dtype=np.int32)
        s = schedule(g, dur, resource, capacity)
        ref, _ = reference_pool_schedule(g, dur, resource, capacity) if n == 8 else (s.T, None)
        assert np.allclose(s.T, ref, rtol=0, atol=1e-9)
        assert (s.queue == 0).all()
    assert rounds[256] == rounds[8] == 1, rounds


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 150), min_size=1, max_size=40), st.data())
def test_segment_running_maximum(lens, data):
    # back-to-back segments (a few: one by one; many: short ones scanned together, long ones
    # one by one): each is the running maximum of its own values only, in a 2-D array too
    vals = np.array(data.draw(st.lists(st.floats(-1e6, 1e6), min_size=sum(lens),
                                       max_size=sum(lens))))
    lens_a = np.array(lens)
    starts = np.cumsum(lens_a) - lens_a
    m = vals.copy()
    _segment_cummax(m, starts, lens_a)
    want = np.concatenate([np.maximum.accumulate(vals[a:a + n]) for a, n in zip(starts, lens)])
    assert np.array_equal(m, want)
    m2 = np.stack([vals, -vals], axis=1)
    _segment_cummax(m2, starts, lens_a)
    assert np.array_equal(m2[:, 0], want)
    assert np.array_equal(m2[:, 1], np.concatenate([np.maximum.accumulate(-vals[a:a + n])
                                                    for a, n in zip(starts, lens)]))


@settings(max_examples=40, deadline=None)
@given(traces(), st.data())
def test_recorded_rounds_replay_other_costs_bit_for_bit(rows, data):
    # which tracks advance how far does not depend on the costs: a plan recorded with one set of
    # durations schedules another exactly as a fresh worklist does, pools and bindings included
    g, dur1 = graph_and_durations(rows, data)
    _, dur2 = graph_and_durations(rows, data)
    t = table(rows)
    rank = t.column("rank").to_numpy()
    # a pool of one unit per rank for its device events
    resource = np.where(t.column("is_device").to_numpy(zero_copy_only=False), rank, -1)
    resource = resource.astype(np.int32)
    cap = np.ones(int(rank.max()) + 1, dtype=np.int32)
    plan = SchedulePlan()
    schedule(g, dur1, resource, cap, plan=plan)
    assert plan.steps is not None or plan.rescan
    fresh, replayed = schedule(g, dur2, resource, cap), schedule(g, dur2, resource, cap, plan=plan)
    for f in ("T", "ready", "bound", "bound_src", "queue", "coll_wait", "peer_ready"):
        assert np.array_equal(getattr(fresh, f), getattr(replayed, f)), f


@settings(max_examples=40, deadline=None)
@given(traces(), st.data(), st.booleans())
def test_many_scenarios_in_one_pass_schedule_as_each_alone(rows, data, pools):
    # columns of durations and chain gaps scheduled together are, bit for bit, what each one
    # gives by itself (resource pools, settled per column, included)
    g, _ = graph_and_durations(rows, data)
    t = table(rows)
    rank = t.column("rank").to_numpy()
    resource = cap = None
    if pools:
        resource = np.where(t.column("is_device").to_numpy(zero_copy_only=False), rank, -1)
        resource = resource.astype(np.int32)
        cap = np.ones(int(rank.max()) + 1, dtype=np.int32)
    durs = np.stack([graph_and_durations(rows, data)[1] for _ in range(4)], axis=1)
    gaps = np.stack([g.gap * np.array(data.draw(st.lists(st.floats(0.0, 3.0), min_size=len(
        g.gap), max_size=len(g.gap)))) for _ in range(4)], axis=1)
    lags = ready = None
    if data.draw(st.booleans()):  # edge and ready lags per scenario too
        lags = np.stack([g.lag * np.array(data.draw(st.lists(st.floats(0.0, 3.0), min_size=len(
            g.lag), max_size=len(g.lag)))) for _ in range(4)], axis=1)
        ready = np.stack([g.ready_lag * data.draw(st.floats(0.0, 3.0)) for _ in range(4)], axis=1)
    plan = SchedulePlan()
    schedule(g, durs[:, 0], resource, cap, plan=plan)  # records the rounds
    T = schedule_many(g, durs, gaps, resource, cap, plan=plan, lag=lags, ready_lag=ready)
    full = schedules_many(g, durs, gaps, resource, cap, plan=plan, lag=lags, ready_lag=ready)
    for j in range(durs.shape[1]):
        gj = dataclasses.replace(g, gap=gaps[:, j].copy())
        if lags is not None and ready is not None:
            gj = dataclasses.replace(gj, lag=lags[:, j].copy(), ready_lag=ready[:, j].copy())
        alone = schedule(gj, durs[:, j].copy(), resource, cap)
        assert np.array_equal(T[:, j], alone.T), j
        for f in ("T", "ready", "bound", "bound_src", "queue", "coll_wait", "peer_ready"):
            assert np.array_equal(getattr(full[j], f), getattr(alone, f)), (j, f)


def test_a_plan_is_recorded_again_for_another_graph():
    t1, t2 = _ping_pong(2), _ping_pong(3)
    g1, g2 = build_graph(t1), build_graph(t2)
    plan = SchedulePlan()
    schedule(g1, t1.column("dur_us").to_numpy(), plan=plan)
    steps1 = plan.steps
    s2 = schedule(g2, t2.column("dur_us").to_numpy(), plan=plan)
    assert plan.steps is not steps1 and plan.key[0] is g2.order
    assert np.array_equal(s2.T, schedule(g2, t2.column("dur_us").to_numpy()).T)
