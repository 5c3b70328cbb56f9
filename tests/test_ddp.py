"""Asynchronous collectives (DDP): a bucket all-reduce issued on a gloo worker thread while
backward goes on is waited on where DDP's reducer waits on its work object (its finalize), not
at the first gap after the transfer; ``diff`` prints the error per step and the measured noise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from mtia_trace.ingest import load
from replay.diff import diff_traces, match_events
from replay.graph import EDGE_CODE, build_graph
from tests.conftest import DATA, REAL, invoke_cli
from tests.ddp_shape import write_trace


def test_bucket_waits_land_at_the_reducers_finalize(tmp_path: Path) -> None:
    # GIVEN bucket 1's transfer ending while backward still runs (inside the second hook)
    ev = load(write_trace(tmp_path / "a")).events
    g = build_graph(ev)
    names = np.array(ev.column("name").to_pylist(), dtype=object)
    ts = ev.column("ts_us").to_numpy()
    # WHEN the graph places the waits on the transfers
    m = (g.etype == EDGE_CODE["sync"]) & (names[g.src_pt // 2] == "gloo:all_reduce")
    dst = g.dst_pt[m]
    # THEN every wait is in the finalize, not in backward: bucket k's at the views before its
    # copy (the reducer waits on the buckets in order, each right before copying it out)
    assert m.sum() == 8  # 2 buckets x 2 steps x 2 ranks
    assert (dst % 2 == 0).all() and set(names[dst // 2]) == {"aten::as_strided"}
    step_start = 1000.0 + np.floor((ts[dst // 2] - 1000.0) / 3000.0) * 3000.0
    src = g.src_pt[m] // 2
    bucket2 = ts[src] - step_start > 400.0
    np.testing.assert_allclose(ts[dst // 2] - step_start, np.where(bucket2, 1030.0, 1010.0))
    assert g.notes["collective_waits_at_consumers"] == 8


def test_diff_of_ddp_runs_where_nothing_changed(tmp_path: Path) -> None:
    """NEW's bucket 1 transfer takes longer but still ends while backward runs: the step is the
    same, and so is the prediction (a wait at the first gap after the transfer would delay the
    second hook, and everything after it, by the slower transfer)."""
    a = load(write_trace(tmp_path / "a")).events
    b = load(write_trace(tmp_path / "b", bucket1_end=800.0)).events
    r = diff_traces(a, b)
    assert r.new_step_us == pytest.approx(r.base_step_us)
    assert abs(r.error) < 0.03
    assert all(abs(e) < 0.03 for e in r.step_errors) and len(r.step_errors) == 2


def test_diff_of_a_trace_with_itself_is_exact(tmp_path: Path) -> None:
    """Consistency check: BASE's graph with BASE's own durations is BASE's replay."""
    a = load(write_trace(tmp_path / "a", bucket1_end=800.0)).events
    r = diff_traces(a, a)
    assert r.predicted_step_us == pytest.approx(r.base_replayed_us, rel=1e-9)


def test_diff_prints_per_step_error_and_noise(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    a = write_trace(tmp_path / "a", steps=3)
    b = write_trace(tmp_path / "b", bucket1_end=800.0, steps=3)
    code, out, _err = invoke_cli(["diff", a, b, "-q"], capsys)
    assert code == 0
    assert "per step" in out and out.count("+0.0%") >= 3
    assert "step-to-step spread" in out and "beyond the measured noise" not in out
    code, out, _err = invoke_cli(["diff", a, b, "-q", "--format", "json"], capsys)
    d = orjson.loads(out)
    assert len(d["steps"]) == 3 and {"base_us", "new_us", "predicted_us", "error"} <= set(d["steps"][0])
    assert d["base_spread_us"] == 0.0 and d["change_within_noise"] is True


def test_a_transfer_waits_for_any_free_worker_thread(tmp_path: Path) -> None:
    """gloo's worker threads take work from one queue: in BASE bucket 2 ran on bucket 1's
    thread after bucket 1 ended; in NEW bucket 1 takes longer and bucket 2 runs beside it on
    the other thread. BASE's graph with NEW's durations starts bucket 2 when it is enqueued
    (a worker is free), not after bucket 1 on the thread BASE happened to run it on."""
    # BASE: step 1 runs bucket 2 on bucket 1's thread, step 2 on the other one (the trace shows
    # both worker threads)
    a = load(write_trace(tmp_path / "a", bucket1_end=400.0,
                         bucket2=[(435.0, 900.0, 2), (435.0, 900.0, 3)])).events
    b = load(write_trace(tmp_path / "b", bucket1_end=800.0)).events
    g = build_graph(a)
    assert g.notes["worker_pools"] == 2 and g.notes["worker_threads"] == 4  # 2 per rank
    r = diff_traces(a, b)
    assert r.base_replayed_us == pytest.approx(r.base_step_us)
    assert r.new_step_us == pytest.approx(r.base_step_us)
    assert abs(r.error) < 0.01, f"{r.error:+.1%}"


def test_a_transfer_range_closing_after_its_wait_keeps_the_wait_in_bucket_order(
        tmp_path: Path) -> None:
    """Bucket 2's range on its worker thread closes (t+1100) after DDP's finalize copied it out
    (t+1030, the completion was signalled first): its wait is still the finalize's second
    bucket (the views before the second copy), with the lag back to the range's end, and the
    replay keeps the measured step."""
    ev = load(write_trace(tmp_path / "a", bucket2=(435.0, 1100.0, 3))).events
    g = build_graph(ev)
    names = np.array(ev.column("name").to_pylist(), dtype=object)
    ts = ev.column("ts_us").to_numpy()
    end = ts + ev.column("dur_us").to_numpy()
    m = (g.etype == EDGE_CODE["sync"]) & (names[g.src_pt // 2] == "gloo:all_reduce")
    src, dst = g.src_pt[m] // 2, g.dst_pt[m] // 2
    late = end[src] > ts[dst]
    assert late.sum() == 4  # bucket 2, 2 steps x 2 ranks
    assert set(names[dst[late]]) == {"aten::as_strided"}
    step_start = 1000.0 + np.floor((ts[dst[late]] - 1000.0) / 3000.0) * 3000.0
    np.testing.assert_allclose(ts[dst[late]] - step_start, 1030.0)
    np.testing.assert_allclose(g.lag[m][late], -70.0)
    r = diff_traces(ev, ev)
    assert r.base_replayed_us == pytest.approx(r.base_step_us)


def test_diff_matches_collectives_when_new_issues_one_more(tmp_path: Path) -> None:
    """NEW issues one more all-reduce in step 1 (after backward), so each later collective's
    sequence number is one higher: the collectives both runs issue still match (by where each
    is enqueued), and the extra one stays unmatched instead of taking the place of BASE's next
    all-reduce."""
    a = load(write_trace(tmp_path / "a")).events
    b = load(write_trace(tmp_path / "b", extra_in=(1,))).events
    m = match_events(a, b)
    assert len(m.base) == a.num_rows  # every BASE event has its partner
    assert dict(m.unmatched_new) == {"c10d::allreduce_": 2, "gloo:all_reduce": 2}  # 2 ranks
    ta, tb = a.column("ts_us").to_numpy(), b.column("ts_us").to_numpy()
    np.testing.assert_array_equal(ta[m.base], tb[m.new])  # each with its own partner
    assert diff_traces(a, b).notes["new_only_collective_events"] == 4


def test_diff_replays_the_bucket_only_new_sends(tmp_path: Path) -> None:
    """NEW sends a third bucket (enqueued by the second hook, its transfer running until
    +1300) that DDP's finalize waits on and copies out: backward, and the step, end 270 us
    later. BASE's graph has no place for it; the prediction adds NEW's unmatched events (the
    enqueue, the transfer, the finalize's third copy) with their dependencies as NEW's graph
    has them, so the wait lengthens the predicted step as it did the measured one."""
    a = load(write_trace(tmp_path / "a")).events
    b = load(write_trace(tmp_path / "b", bucket3_end=1300.0)).events
    r = diff_traces(a, b)
    assert r.new_step_us - r.base_step_us == pytest.approx(270.0)
    assert r.notes["new_only_collective_events"] == 8  # enqueue + transfer, 2 steps x 2 ranks
    assert abs(r.error) < 0.01, f"{r.error:+.1%}"
    assert all(abs(e) < 0.01 for e in r.step_errors) and len(r.step_errors) == 2
    assert dict(r.contributions)["(events only NEW has)"] > 0.0


def test_diff_drops_the_bucket_only_base_sends(tmp_path: Path) -> None:
    """The other way round: BASE sends the third bucket, NEW does not. BASE's events without a
    partner (the enqueue, the transfer, the third copy) take no time in the prediction, so the
    finalize no longer waits for a transfer NEW does not run."""
    a = load(write_trace(tmp_path / "a", bucket3_end=1300.0)).events
    b = load(write_trace(tmp_path / "b")).events
    # the collectives NEW lacks are one of the two the second hook enqueues in each step
    # (matched by the hook that enqueues them), not the last two of the trace
    m = match_events(a, b)
    um = np.setdiff1d(np.arange(a.num_rows), m.base)
    names = np.array(a.column("name").to_pylist(), dtype=object)
    ts = a.column("ts_us").to_numpy()
    enq = um[names[um] == "c10d::allreduce_"]
    assert set(((ts[enq] - 1000.0) % 3000.0).tolist()) <= {420.0, 432.0}
    assert len(enq) == 4 and sorted(a.column("step").to_numpy()[enq].tolist()) == [1, 1, 2, 2]
    r = diff_traces(a, b)
    assert r.notes["base_only_collective_events"] == 8
    assert abs(r.error) < 0.01, f"{r.error:+.1%}"


def test_diff_takes_when_each_rank_began_recording_from_new(tmp_path: Path) -> None:
    """BASE's rank 1 began recording 800 us before its first step (a long op before it), NEW's
    90 us: the prediction starts rank 1 where NEW did (like a gap, measured), not where BASE
    did (its first step would begin 800 us early and wait for rank 0 in its first
    all-reduce)."""
    a = load(write_trace(tmp_path / "a", lead={1: 100.0})).events
    b = load(write_trace(tmp_path / "b", lead={1: 900.0})).events
    r = diff_traces(a, b)
    assert r.predicted_step_us == pytest.approx(r.new_step_us)
    assert r.predicted_steps == pytest.approx(r.new_steps)


#: 4-rank DDP pairs: the full corpus's when present, and the vendored ones (tests/data)
DDP_DIRS = list(dict.fromkeys(d for d in (REAL / "ddp_pairs", DATA / "real" / "ddp_pairs")
                              if d.is_dir()))
DDP_PAIRS = [p for d in DDP_DIRS for p in sorted(d.iterdir()) if (p / "a").is_dir()]


@pytest.mark.real
@pytest.mark.skipif(not DDP_PAIRS, reason="optional data absent: no 4-rank DDP pairs")
@pytest.mark.parametrize("pair", DDP_PAIRS, ids=[f"{p.parent.parent.name}/{p.name}"
                                                 for p in DDP_PAIRS])
def test_real_ddp_pairs_within_three_percent(pair: Path) -> None:
    """Recorded with `sample_traces/make_pairs.py --ranks 4 --dp ddp` (torch CPU, gloo)."""
    r = diff_traces(load(pair / "a").events, load(pair / "b").events)
    assert r.matched_fraction > 0.95
    assert abs(r.error) < 0.03, f"{pair.name}: {r.error:+.1%}"


def test_compare_says_when_the_runs_steps_overlap(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    runs = {}
    for name, tails in (("a", (0.0, 200.0)), ("b", (100.0, 300.0)), ("c", (1000.0, 1200.0))):
        trace = write_trace(tmp_path / name, tails=tails)
        code, _out, err = invoke_cli(["replay", trace, "-o", tmp_path / f"run_{name}", "-q"],
                                     capsys)
        assert code == 0, err
        runs[name] = tmp_path / f"run_{name}"
    _code, out, _err = invoke_cli(["compare", runs["a"], runs["b"]], capsys)
    assert "step times overlap (baseline 1,400.0–1,600.0 µs, new 1,500.0–1,700.0 µs" in out
    _code, out, _err = invoke_cli(["compare", runs["a"], runs["c"]], capsys)
    assert "overlap" not in out
