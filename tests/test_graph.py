from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import replay.graph.sync as sync
from replay.graph import build_graph
from tests.replay_tables import by_name, dev, host, table


def _edges(t):
    e = build_graph(t).edges
    return set(zip(e.column("src").to_pylist(), e.column("dst").to_pylist(),
                   e.column("type").to_pylist()))


def test_launch_stream_host_and_sync_edges():
    rows = [host(0, 0, 100, name="ProfilerStep#1", kind="annotation", step=1),
            host(0, 10, 5, name="L1", kind="runtime", depth=1, correlation=1),
            host(0, 20, 5, name="L2", kind="runtime", depth=1, correlation=2),
            host(0, 30, 60, name="cudaStreamSynchronize", kind="runtime", depth=1),
            dev(0, 18, 32, name="kA", correlation=1),
            dev(0, 50, 30, name="kB", correlation=2)]
    t = table(rows)
    e = _edges(t)
    ids = {n: by_name(t, n) for n in ("L1", "L2", "kA", "kB", "cudaStreamSynchronize")}
    assert (ids["L1"], ids["kA"], "launch") in e  # recovered from the correlation id
    assert (ids["L2"], ids["kB"], "launch") in e
    assert (ids["kA"], ids["kB"], "stream") in e
    assert (ids["kB"], ids["cudaStreamSynchronize"], "sync") in e


def test_sync_ignores_work_still_running_when_call_returned():
    rows = [host(0, 0, 5, name="L1", kind="runtime", correlation=1),
            host(0, 10, 5, name="cudaDeviceSynchronize", kind="runtime"),
            dev(0, 6, 100, name="long", correlation=1)]
    t = table(rows)
    assert not any(ty == "sync" for *_, ty in _edges(t))


def test_collectives_matched_across_ranks_and_wait_removed_from_transfer():
    rows = []
    for r, arrive in ((0, 10.0), (1, 40.0)):
        rows.append(host(r, 0, 5, name="L", kind="runtime", correlation=9))
        rows.append(dev(r, arrive, 100 - arrive, kind="collective", correlation=9, pg="0",
                        coll_seq=3, coll_op="all_reduce"))
    g = build_graph(table(rows))
    members = (g.coll_group >= 0).nonzero()[0]
    assert len(members) == 2
    assert sorted(g.transfer_us[members].tolist()) == [60.0, 60.0]
    types = g.edges.column("type").to_pylist()
    assert types.count("collective") == 2


def test_device_wait_event_links_recorded_stream():
    rows = [host(0, 0, 2, name="L1", kind="runtime", correlation=1),
            host(0, 3, 1, name="cudaEventRecord", kind="runtime", correlation=5),
            host(0, 5, 1, name="cudaStreamWaitEvent", kind="runtime", correlation=6),
            host(0, 7, 2, name="L2", kind="runtime", correlation=2),
            dev(0, 4, 50, stream=7, name="producer", correlation=1),
            dev(0, 54, 0.5, stream=9, kind="sync", name="Wait Event", correlation=6,
                sync_stream=7, sync_corr=5),
            dev(0, 55, 10, stream=9, name="consumer", correlation=2)]
    t = table(rows)
    e = _edges(t)
    assert (by_name(t, "producer"), by_name(t, "Wait Event"), "sync") in e


def test_stream_wait_recorded_only_on_the_host_links_the_streams():
    # older Kineto: a cudaStreamWaitEvent call and no device-side wait marker; the consumer on
    # stream 9 started when the producer on stream 7 ended
    rows = [host(0, 0, 2, name="L1", kind="runtime", correlation=1),
            host(0, 3, 1, name="cudaStreamWaitEvent", kind="runtime", correlation=6),
            host(0, 5, 2, name="L2", kind="runtime", correlation=2),
            dev(0, 4, 50, stream=7, name="producer", correlation=1),
            dev(0, 54, 10, stream=9, name="consumer", correlation=2)]
    t = table(rows)
    assert (by_name(t, "producer"), by_name(t, "consumer"), "sync") in _edges(t)
    g = build_graph(t)
    assert g.notes["host_stream_waits"] == 1
    # the consumer's start is explained by the wait, not a 47 us ready lag
    assert g.ready_lag[by_name(t, "consumer")] == 0.0


# ---- composite keys: stream ids that share low bits are different streams ------------------


def test_stream_sync_on_stream_4103_is_not_wired_to_stream_7():
    # 4103 = 4096 + 7: a 12-bit stream field aliases the two
    # k7 is launched last: an aliased key would wire the sync to it
    rows = [host(0, 0, 2, name="L4103", kind="runtime", correlation=2),
            host(0, 3, 2, name="L7", kind="runtime", correlation=1),
            host(0, 10, 200, name="cudaStreamSynchronize", kind="runtime", sync_stream=4103),
            dev(0, 4, 150, stream=7, name="k7", correlation=1),
            dev(0, 2, 20, stream=4103, name="k4103", correlation=2)]
    t = table(rows)
    e = _edges(t)
    sync = by_name(t, "cudaStreamSynchronize")
    assert (by_name(t, "k4103"), sync, "sync") in e
    assert (by_name(t, "k7"), sync, "sync") not in e


def test_wait_event_on_stream_4103_is_not_wired_to_stream_7():
    rows = [host(0, 0, 2, name="L4103", kind="runtime", correlation=2),
            host(0, 3, 2, name="L7", kind="runtime", correlation=1),
            host(0, 6, 1, name="cudaStreamWaitEvent", kind="runtime", correlation=6),
            host(0, 8, 2, name="L9", kind="runtime", correlation=3),
            dev(0, 4, 150, stream=7, name="k7", correlation=1),
            dev(0, 2, 20, stream=4103, name="k4103", correlation=2),
            dev(0, 30, 0.5, stream=9, kind="sync", name="Wait Event", correlation=6,
                sync_stream=4103),
            dev(0, 31, 10, stream=9, name="consumer", correlation=3)]
    t = table(rows)
    e = _edges(t)
    wait = by_name(t, "Wait Event")
    assert (by_name(t, "k4103"), wait, "sync") in e
    assert (by_name(t, "k7"), wait, "sync") not in e


def _streams(members: list[list[tuple[int, int]]]):
    """A `Streams` of the given streams: per stream, (launch key, end key) of its members in
    launch order; event ids numbered stream by stream."""
    launch = np.array([k for s in members for k, _ in s], dtype=np.int64)
    end = np.array([e for s in members for _, e in s], dtype=np.int64)
    bounds = np.cumsum([0] + [len(s) for s in members])
    return sync.Streams(ids=np.arange(len(launch)), keys=np.arange(len(members)) * 10,
                   starts=bounds[:-1], bounds=bounds, waits=np.zeros(0, dtype=np.int64),
                   wait_keys=np.zeros(0, dtype=np.int64), launch_k=launch, end_k=end)


def _last_brute(members, j, q_ts, q_end):
    """The last member of stream j launched at or before q_ts that ended by q_end, looking back
    over at most 64 members (the walk's bound)."""
    if j < 0:
        return -1
    base = sum(len(s) for s in members[:j])
    cand = [i for i, (k, _) in enumerate(members[j]) if k <= q_ts]
    for i in reversed(cand[-64:]):
        if members[j][i][1] <= q_end:
            return base + i
    return -1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 30)), min_size=1,
                         max_size=8), min_size=1, max_size=5),
       st.lists(st.tuples(st.integers(-1, 4), st.integers(-5, 60), st.integers(0, 90)),
                max_size=20),
       st.booleans())
def test_last_launched_before_matches_one_by_one(raw, queries, one_by_one):
    # the last op of a stream launched before a query that had ended by its end: one search
    # over all streams (keys shifted per stream) or stream by stream, the same answers
    members = [sorted((k, k + d) for k, d in s) for s in raw]
    stt = _streams(members)
    j = np.array([min(q[0], len(members) - 1) for q in queries], dtype=np.int64)
    q_ts = np.array([q[1] for q in queries], dtype=np.int64)
    q_end = np.array([q[2] for q in queries], dtype=np.int64)
    old = sync._FLAT_LIMIT
    sync._FLAT_LIMIT = 0.0 if one_by_one else old
    try:
        got = stt.last(j, q_ts, q_end)
    finally:
        sync._FLAT_LIMIT = old
    want = [_last_brute(members, a, b, c) for a, b, c in zip(j.tolist(), q_ts.tolist(),
                                                              q_end.tolist())]
    assert got.tolist() == want
