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
from replay.diff import diff_traces
from replay.graph import EDGE_CODE, build_graph
from tests.conftest import REAL, invoke_cli
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
    # THEN every wait is at the start of the finalize's first view of the step, not in backward
    assert m.sum() == 8  # 2 buckets x 2 steps x 2 ranks
    assert (dst % 2 == 0).all() and set(names[dst // 2]) == {"aten::as_strided"}
    step_start = 1000.0 + np.floor((ts[dst // 2] - 1000.0) / 3000.0) * 3000.0
    np.testing.assert_allclose(ts[dst // 2] - step_start, 1010.0)
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


DDP_PAIRS = REAL / "ddp_pairs"


@pytest.mark.skipif(not DDP_PAIRS.is_dir(), reason=f"4-rank DDP pairs not found at {DDP_PAIRS}")
@pytest.mark.parametrize("pair", sorted(p.name for p in DDP_PAIRS.iterdir() if (p / "a").is_dir())
                         if DDP_PAIRS.is_dir() else [])
def test_real_ddp_pairs_within_three_percent(pair: str) -> None:
    """Recorded with `sample_traces/make_pairs.py --ranks 4 --dp ddp` (torch CPU, gloo)."""
    r = diff_traces(load(DDP_PAIRS / pair / "a").events, load(DDP_PAIRS / pair / "b").events)
    assert abs(r.error) < 0.03, f"{pair}: {r.error:+.1%}"


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
