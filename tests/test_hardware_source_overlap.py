"""Scaled mode from a GPU source: measured compute that overlapped communication in the trace
already carries the source's interference, which is taken out before the target's is applied."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from replay.graph import build_graph
from replay.hardware import model_for
from replay.hardware.source import tag_source
from replay.intervals import overlap_fraction
from replay.pipeline import costing_input
from replay.run import replay_events
from tests.replay_tables import dev, table

GEMM_US, AR_US = 500.0, 1000.0


def _events(gemm_ts: float, same_stream: bool = False) -> pa.Table:
    """Two ranks; each runs a 1 GiB all-reduce on stream 20 from t=0 and a gemm (500 us measured)
    on stream 7 (or 20) from ``gemm_ts``. Source hardware: h100."""
    rows = []
    for r in (0, 1):
        rows.append(dev(r, 0.0, AR_US, stream=20, kind="collective", pg="0", coll_seq=0,
                        coll_op="all_reduce", name="ncclAllReduce"))
        rows.append(dev(r, gemm_ts, GEMM_US, stream=20 if same_stream else 7, kind="gemm",
                        name="gemm"))
    t = table(rows)
    gemm = np.array([k == "gemm" for k in t.column("kind").to_pylist()])
    coll = ~gemm
    cols = {"flops": np.where(gemm, 4e11, 0.0),
            "dtype": ["c10::BFloat16" if k else None for k in gemm],
            "coll_bytes_in": np.where(coll, 2.0 ** 30, 0.0),
            "coll_bytes_out": np.where(coll, 2.0 ** 30, 0.0),
            "group_size": np.where(coll, 2, 0).astype(np.int32),
            "pg_ranks": ["[0, 1]" if c else None for c in coll]}
    for name, v in cols.items():
        i = t.schema.get_field_index(name)
        t = t.set_column(i, t.schema.field(i), pa.array(v, type=t.schema.field(i).type))
    return tag_source(t, "h100", "test")


def _gemms(t: pa.Table) -> np.ndarray:
    return np.flatnonzero(np.array([k == "gemm" for k in t.column("kind").to_pylist()]))


def _replayed_frac(r) -> np.ndarray:
    ev = r.events
    return overlap_fraction(ev, ev.column("start_us").to_numpy(), ev.column("end_us").to_numpy())


S_H100 = model_for("h100").overlap_slowdown()


def test_gemm_overlaps_all_reduce_in_the_measured_trace() -> None:
    ev = _events(100.0)
    g = _gemms(ev)
    ts, dur = ev.column("ts_us").to_numpy(), ev.column("dur_us").to_numpy()
    np.testing.assert_allclose(overlap_fraction(ev, ts, ts + dur)[g], 1.0)
    assert S_H100 > 0.1


def test_h100_self_replay_does_not_double_count_the_slowdown() -> None:
    ev = _events(100.0)
    m = model_for("h100", mode="scaled")
    r = replay_events(ev, m)
    g = _gemms(ev)
    # the replayed all-reduce (1 GiB, alpha-beta) still covers the whole gemm: the target's
    # slowdown applies in full, exactly undoing the removed source slowdown
    np.testing.assert_allclose(_replayed_frac(r)[g], 1.0)
    np.testing.assert_allclose(r.events.column("compute_us").to_numpy()[g], GEMM_US, rtol=1e-12)
    assert r.notes["source_overlap_removed_events"] == 2
    assert r.notes["source_overlap_removed_us"] == pytest.approx(
        2 * GEMM_US * S_H100 / (1 + S_H100), rel=1e-12)
    # costing alone: the measured compute without the source's interference
    c = m.cost(costing_input(ev, build_graph(ev)))
    np.testing.assert_allclose(c.compute_us[g], GEMM_US / (1 + S_H100), rtol=1e-12)


def test_mtia300_replay_drops_the_gpu_interference() -> None:
    over, apart = _events(100.0), _events(AR_US + 500.0, same_stream=True)
    m = model_for("mtia300", mode="scaled")
    g = _gemms(over)
    ro, ra = replay_events(over, m), replay_events(apart, m)
    # no overlap anywhere: measured x target/source roofline ratio
    ratio = ra.events.column("compute_us").to_numpy()[_gemms(apart)] / GEMM_US
    assert not np.allclose(ratio, 1.0)
    base = GEMM_US / (1 + S_H100) * ratio
    got = ro.events.column("compute_us").to_numpy()[g]
    s_mtia = m.overlap_slowdown()
    assert s_mtia == pytest.approx(0.005)
    f = _replayed_frac(ro)[g]
    np.testing.assert_allclose(got, base * (1 + s_mtia * f), rtol=1e-12)
    assert np.all(got >= base * (1 - 1e-12)) and np.all(got <= base * 1.005 * (1 + 1e-12))


def test_no_overlap_no_change() -> None:
    ev = _events(AR_US + 500.0)  # separate streams, gemm after the all-reduce in the trace
    ts, dur = ev.column("ts_us").to_numpy(), ev.column("dur_us").to_numpy()
    g = _gemms(ev)
    assert not overlap_fraction(ev, ts, ts + dur)[g].any()
    c = model_for("h100", mode="scaled").cost(costing_input(ev, build_graph(ev)))
    np.testing.assert_array_equal(c.compute_us[g], GEMM_US)
    assert c.notes["source_overlap_removed_events"] == 0
    assert c.notes["source_overlap_removed_us"] == 0.0


def test_roofline_mode_keeps_its_compute() -> None:
    ev = _events(100.0)
    c = model_for("h100", mode="roofline").cost(costing_input(ev, build_graph(ev)))
    assert "source_overlap_removed_us" not in c.notes
