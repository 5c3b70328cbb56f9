"""Measured waits do not survive into target replays: exact time ties in the graph.

A host event that ends where the next one starts must tie exactly, or the host chain nests the
next call under the previous one and the call keeps its measured duration (a synchronize call then
replays its measured wait on any target).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from mtia_trace import schema
from mtia_trace.ingest import load
from replay.graph import EDGE_CODE, build_graph, event_times, time_keys
from replay.hardware import load_spec, model_for
from replay.hardware.source import with_source
from replay.run import replay_events
from tests.conftest import SAMPLES

#: 10x the h100's peak FLOPs (every dtype) and HBM bandwidth
FASTER_H100 = ["compute.peak_tflops_bf16=9894", "compute.peak_tflops_fp32=4947",
               "compute.peak_tflops_fp8=19789", "hbm.bandwidth_GBps=33500"]
BUNDLED = sorted(p for p in (SAMPLES / "synth").iterdir() if p.is_dir()) + [SAMPLES / "torch_cpu_dlrm"]
#: every synth preset, at few ranks (the ties appear from 4 ranks on)
PRESETS = [("dlrm-kaggle", 1), ("dlrm-dcnv2", 4), ("rec-150b", 4)]


@cache
def _synth(preset: str, ranks: int) -> pa.Table:
    import tempfile

    from mtia_trace.synth import SynthOptions, synthesize

    with tempfile.TemporaryDirectory() as d:
        synthesize(SynthOptions(preset=preset, ranks=ranks, steps=2, seed=0), Path(d) / "t")
        tr = load(Path(d) / "t")
        return with_source(tr, None)[0]


@cache
def _bundled(path: Path) -> pa.Table:
    return with_source(load(path), None)[0]


def test_time_keys_tie_exactly() -> None:
    # fractional microseconds whose float sums land off the next start (0.1 + 0.2 > 0.3)
    ts = np.array([1e6 + 0.1, 1e6 + 0.3, 1e6 + 0.7])
    dur = np.array([0.2, 0.4, 0.1])
    ev = schema.from_columns({"rank": [0, 0, 0], "ts_us": ts, "dur_us": dur}, schema.EVENTS_SCHEMA)
    _t0, start, end = event_times(ev)
    assert (end[:2] != start[1:]).any()  # the float rounding the keys avoid
    ks, ke = time_keys(ev)
    np.testing.assert_array_equal(ke[:2], ks[1:])
    np.testing.assert_array_equal(ks, [0, 200, 600])


def _sync_calls_keeping_wait(events: pa.Table, hw: str) -> tuple[int, int]:
    """(host synchronize calls, those whose replayed duration exceeds what the replay explains:
    the later of its start and its device inputs' replayed ends, plus its return latency)."""
    g = build_graph(events)
    res = replay_events(events, model_for(load_spec(hw)), graph=g)
    start = res.events.column("start_us").to_numpy() - g.t0
    end = res.events.column("end_us").to_numpy() - g.t0
    sync = np.flatnonzero(np.isfinite(g.sync_lag))
    into_end = (g.etype == EDGE_CODE["sync"]) & (g.dst_pt % 2 == 1)
    dep = np.full(g.n, -np.inf)
    np.maximum.at(dep, g.dst_pt[into_end] // 2, end[g.src_pt[into_end] // 2])
    explained = np.maximum(start[sync], dep[sync]) + g.sync_lag[sync]
    return len(sync), int((end[sync] > explained + 1e-6).sum())


@pytest.mark.parametrize("hw", ["h100", "mtia300"])
@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.name)
def test_bundled_sync_calls_do_not_keep_measured_wait(path: Path, hw: str) -> None:
    _n, kept = _sync_calls_keeping_wait(_bundled(path), hw)
    assert kept == 0


@pytest.mark.parametrize("hw", ["h100", "mtia300"])
@pytest.mark.parametrize(("preset", "ranks"), PRESETS)
def test_preset_sync_calls_do_not_keep_measured_wait(preset: str, ranks: int, hw: str) -> None:
    n, kept = _sync_calls_keeping_wait(_synth(preset, ranks), hw)
    assert n >= ranks  # one end-of-step synchronize per rank and step at least
    assert kept == 0


def test_faster_device_shortens_device_bound_step() -> None:
    ev = _synth("dlrm-dcnv2", 4)
    base = replay_events(ev, model_for(load_spec("h100"))).steps
    fast = replay_events(ev, model_for(load_spec("h100", FASTER_H100))).steps
    b_total = base.column("total_us").to_numpy()
    device = base.column("compute_us").to_numpy() + base.column("fetch_us").to_numpy()
    assert (device > 0.5 * b_total).all(), "the step is device-bound on h100"
    f_total = fast.column("total_us").to_numpy()
    # compute and memory 10x faster, the network unchanged: the step must lose most of its device time
    assert (f_total < b_total - 0.5 * device).all()
