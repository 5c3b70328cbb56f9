"""Known answers, derived by hand, for wrong answers that would otherwise pass every test: queue
time told apart from peer wait, a what-if on an annotation reaching what it contains and
launches, the launch latency a trace's faster launches keep, the old run surviving a failed
replace, and two process groups with the same sequence numbers kept apart."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from mtia_trace import storage
from mtia_trace.storage import open_run, write_run
from replay.costs import AsMeasured
from replay.diff import match_events
from replay.graph import build_graph
from replay.pipeline import modelled_lags
from replay.run import replay_events
from replay.whatif import parse_whatif
from tests.known_traces import (
    OnePerRankPool,
    annotated_launch,
    launches_faster_and_slower,
    two_collectives_one_late_rank,
    two_groups_same_sequence,
)
from tests.runfixture import tiny_meta, tiny_tables

PARTS = ("collective_us", "peer_wait_us", "queue_us", "host_us", "idle_us", "compute_us")


def _steps(res) -> dict[int, dict[str, float]]:
    s = res.steps.to_pylist()
    return {r["rank"]: {k: r[k] for k in ("total_us", *PARTS)} for r in s}


def _device(res, name: str) -> list[tuple[int, float, float, float]]:
    """(rank, start, end, queue) of the replayed device events named ``name``."""
    ev = res.events.to_pandas()
    ev = ev[ev["is_device"] & (ev["name"] == name)].sort_values("rank")
    return list(zip(ev["rank"], ev["start_us"], ev["end_us"], ev["queue_us"]))


# ---- queue vs peer wait -------------------------------------------------------------------------

def test_queue_and_peer_wait_as_measured() -> None:
    """No pool: A (ready at 1 on rank 0, 21 on rank 1) runs 21-41; B (ready at 3 and 26) runs
    26-36 beside it. Rank 0's step (0-41.5) ends 0.5 after A: A's 20 us, 20 us waiting for
    rank 1 (1 -> 21), 1 us launch lag and the 0.5 us synchronize return are host."""
    res = replay_events(two_collectives_one_late_rank(), AsMeasured())
    assert _steps(res)[0] == pytest.approx({"total_us": 41.5, "collective_us": 20.0,
                                            "peer_wait_us": 20.0, "queue_us": 0.0,
                                            "host_us": 1.5, "idle_us": 0.0, "compute_us": 0.0})
    assert _steps(res)[1]["peer_wait_us"] == 0.0 and _steps(res)[1]["queue_us"] == 0.0


def test_queue_on_the_critical_path_is_queue_not_peer_wait() -> None:
    """One collective at a time per rank: B's peers are ready at 26 (rank 1's launch at 25 +
    1), but A holds the unit until 41, so B runs 41-51 on both ranks and the step ends at 51.5.
    Rank 0's path back from 51.5: 0.5 synchronize return (host), B's 10 us (collective), 15 us
    for the unit (41 - 26: queue), 23 us for rank 1 (26 - 3: peer wait), then 1 us launch lag
    and 2 us of host before B's launch call (host 3.5). Rank 1 reached B last: no peer wait,
    the same 15 us queue, and 25 + 1 + 0.5 us host."""
    res = replay_events(two_collectives_one_late_rank(), OnePerRankPool())
    assert _device(res, "nccl:0:1") == [(0, 41.0, 51.0, 15.0), (1, 41.0, 51.0, 15.0)]
    st = _steps(res)
    assert st[0] == pytest.approx({"total_us": 51.5, "collective_us": 10.0,
                                   "peer_wait_us": 23.0, "queue_us": 15.0, "host_us": 3.5,
                                   "idle_us": 0.0, "compute_us": 0.0})
    assert st[1] == pytest.approx({"total_us": 51.5, "collective_us": 10.0,
                                   "peer_wait_us": 0.0, "queue_us": 15.0, "host_us": 26.5,
                                   "idle_us": 0.0, "compute_us": 0.0})


# ---- a what-if on an annotation scales what it contains and launches ----------------------------

def test_scaling_an_annotation_scales_its_ops_and_their_kernels() -> None:
    """``## forward ##:x0.5`` halves aten::mm's self time (5 + 4 us -> 2.5 + 2), its launch
    call (1 -> 0.5) and the 80 us kernel it launches (-> 40); the 1 us ready lag stays. The
    launch call starts at 2.5, the kernel at 3.5 and ends at 43.5; the synchronize returns 0.5
    us later: a 44 us step (86.5 measured)."""
    ev = annotated_launch()
    base = replay_events(ev)
    assert _steps(base)[0]["total_us"] == pytest.approx(86.5)
    res = replay_events(ev, whatifs=[parse_whatif("kind=annotation,name=## forward ##:x0.5")])
    assert _steps(res)[0]["total_us"] == pytest.approx(44.0)
    assert _device(res, "kgemm") == [(0, 3.5, 43.5, 0.0)]


# ---- the explained launch latency is capped by the measured lag ---------------------------------

def test_a_launch_faster_than_the_source_latency_is_scaled_not_raised() -> None:
    """Source latency 4 us, target 8 us. Kernel 0 started 1 us after its launch (faster than
    the source's 4: a graph-like launch): all of it is explained, none unexplained, and on the
    target it takes 1 x 8/4 = 2 us. Kernel 1 started 6 us after: 4 explained, 2 unexplained,
    8 + 2 = 10 us on the target."""
    ev = launches_faster_and_slower()
    g = build_graph(ev)
    k = np.flatnonzero(ev.column("is_device").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(g.ready_lag[k], [1.0, 6.0])
    g2, _ = modelled_lags(g, 4.0, 8.0)
    np.testing.assert_allclose(g2.ready_lag[k], [2.0, 10.0])
    np.testing.assert_allclose(g2.unexplained_lag[k], [0.0, 2.0])


# ---- atomic replace ----------------------------------------------------------------------------

def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("failing", ["new-into-place", "old-aside"])
def test_a_failed_replace_keeps_the_old_run_byte_for_byte(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """Without an atomic exchange (renameat2 unsupported), --force moves the old run aside,
    the new one in, then deletes the old. Either rename failing leaves the old run where it
    was, every byte of it, and nothing else beside it."""
    tables = tiny_tables()
    dest = tmp_path / "r"
    write_run(tables, dest, tiny_meta())
    before = _snapshot(dest)
    monkeypatch.setattr(storage, "_exchange", lambda a, b: False)
    real_rename = os.rename

    def rename(src, dst):  # noqa: ANN001, ANN202
        # the new run (a hidden temporary) into place, or the old run aside
        new_in = Path(dst) == dest and not Path(src).name.startswith(".r.old")
        if (failing == "new-into-place" and new_in) or (failing == "old-aside" and Path(src) == dest):
            raise OSError("injected rename failure")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="injected"):
        write_run(tables, dest, {**tiny_meta(), "seed": 99}, force=True)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
    assert _snapshot(dest) == before
    assert open_run(dest).meta.seed != 99


# ---- two process groups with the same sequence numbers -----------------------------------------

def test_collectives_of_two_groups_with_the_same_sequence_are_apart() -> None:
    """A and B are both sequence 0, in groups "A" and "B". Matched by group, B runs 3-15 on
    both ranks without waiting, and A 50-60 (rank 0 waits 49 us for rank 1). Rank 0's step:
    0.5 synchronize return + A's 10 + 49 peer wait + 1 launch lag = 60.5."""
    res = replay_events(two_groups_same_sequence())
    assert _device(res, "nccl:B:0") == [(0, 3.0, 15.0, 0.0), (1, 3.0, 15.0, 0.0)]
    assert _device(res, "nccl:A:0") == [(0, 50.0, 60.0, 0.0), (1, 50.0, 60.0, 0.0)]
    assert _steps(res)[0] == pytest.approx({"total_us": 60.5, "collective_us": 10.0,
                                            "peer_wait_us": 49.0, "queue_us": 0.0,
                                            "host_us": 1.5, "idle_us": 0.0, "compute_us": 0.0})
    coll = sorted((r["pg"], r["ranks"]) for r in res.collectives.to_pylist())
    assert coll == [("A", 2), ("B", 2)]


def test_diff_matches_collectives_by_group_and_sequence() -> None:
    """BASE and NEW both run group A's and group B's collective 0, in the opposite order on the
    same host thread: each is matched to the one of its own group."""
    from tests.replay_tables import host, table

    def run(first: str, second: str):  # noqa: ANN202
        return table([host(0, 0, 30, name="ProfilerStep#1", kind="annotation", step=1),
                      host(0, 0, 10, name="c10d::allreduce_", kind="collective", depth=1,
                           pg=first, coll_seq=0, coll_op="all_reduce", step=1),
                      host(0, 15, 10, name="c10d::allreduce_", kind="collective", depth=1,
                           pg=second, coll_seq=0, coll_op="all_reduce", step=1)])

    base, new = run("A", "B"), run("B", "A")
    m = match_events(base, new)
    pg_b = base.column("pg").to_pylist()
    pg_n = new.column("pg").to_pylist()
    pairs = [(pg_b[b], pg_n[n]) for b, n in zip(m.base.tolist(), m.new.tolist())
             if pg_b[b] is not None]
    assert sorted(pairs) == [("A", "A"), ("B", "B")]
