"""Time the trace's dependencies do not explain is counted as unexplained, and kept by the strict
replay where nothing models it, on small hand-made traces: a step marked on a thread with no
ops, a thread whose first op starts late with nothing starting it, device work launched before
the trace began, and a synchronize whose device-side marker ends before the copy it waits for.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from mtia_trace.ingest import load as _load
from replay.graph import EDGE_CODE, build_graph
from replay.validation import validate_events
from tests.stall_faults import STALL_US, host_fault, seen

#: epoch microseconds, as torch.profiler writes them
T = 1_695_835_572_000_000


def load(path: Path) -> pa.Table:
    return _load(path).events


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op", **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": T + ts, "dur": dur,
            "args": args}


def _host_fault_seen(path: Path) -> None:
    events = load(path)
    got = host_fault(events)
    assert got is not None
    faulted, fault = got
    s = seen(events, faulted, fault, None, None)
    assert s.measured_us == pytest.approx(STALL_US)
    assert s.all, {k: (v.carried_us, v.unexplained_us) for k, v in s.replays.items()}


def test_a_host_stall_under_a_step_marked_on_a_thread_without_ops_is_unexplained(
        tmp_path: Path) -> None:
    """The step annotation is alone on its thread (as in torch.compile traces): nothing on that
    thread explains the time it spans, so a stall between two ops of the other thread, which
    lengthens the step, is unexplained time, not carried silently."""
    ev = [_op("ProfilerStep#1", 0, 2000, tid=2, cat="user_annotation"),
          _op("aten::mm", 10, 300), _op("aten::add", 900, 200)]
    _host_fault_seen(_write(tmp_path / "t.json", ev))


def test_a_thread_starting_late_with_nothing_starting_it_is_unexplained(tmp_path: Path) -> None:
    """No step annotation: the window spans the work of two threads. The second thread's first
    op starts at its measured time, after a gap nothing in the trace explains: a stall in that
    gap lengthens the window and is unexplained, not idle time taken as measured."""
    ev = [_op("aten::mm", 0, 300), _op("aten::add", 900, 200, tid=2)]
    _host_fault_seen(_write(tmp_path / "t.json", ev))


def _kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": T + ts,
            "dur": dur, "args": {"correlation": corr, "device": 0, "stream": stream}}


def test_strict_keeps_the_lag_of_device_work_launched_before_the_trace(tmp_path: Path) -> None:
    """Two kernels whose correlation ids are below every runtime call's (launched before the
    profiler started) run 5 ms apart: no launch and no dependency in the trace says why. The
    strict replay keeps that lag (nothing models it) and counts it as unexplained instead of
    re-timing the kernels back to back; the work launched in the trace is still modelled."""
    ev = [_op("ProfilerStep#1", 0, 5600, cat="user_annotation"),
          _kernel("early_a", 10, 100, corr=5), _kernel("early_b", 5110, 100, corr=6),
          _op("cudaLaunchKernel", 20, 10, cat="cuda_runtime", correlation=20),
          _kernel("late", 5215, 100, corr=20),
          _op("cudaDeviceSynchronize", 40, 5280, cat="cuda_runtime", correlation=21),
          _op("aten::add", 5400, 150)]
    events = load(_write(tmp_path / "t.json", ev))
    v = validate_events(events, 3.5, "a100")
    step = v.steps.to_pylist()[0]
    assert abs(step["strict_error"]) < 0.01, step
    assert step["unexplained_us"] >= 5000.0
    g = build_graph(events)
    assert g.notes["device_events_launched_before_trace"] == 2


def test_a_synchronize_waits_on_the_copy_not_on_its_own_marker(tmp_path: Path) -> None:
    """Kineto draws a synchronize call on the stream (``cuda_sync`` Stream Sync). Launched by
    the call itself, that marker is the last thing on the stream launched before the call; when
    it ends before the copy the call waits for (here the copy starts late), it must not stand in
    for the copy: the call's return latency is measured from the copy's end, so the copy's late
    start is unexplained, not return latency of the synchronize."""
    stall = STALL_US
    ev = [_op("ProfilerStep#1", -100, stall + 200, cat="user_annotation"),
          _op("cudaMemcpyAsync", 0, 9, cat="cuda_runtime", correlation=1),
          _op("cudaStreamSynchronize", 9, stall + 12, cat="cuda_runtime", correlation=2),
          {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7,
           "ts": T + 10, "dur": 9, "args": {"cuda_sync_kind": "Stream Sync", "stream": 7,
                                            "correlation": 2, "device": 0}},
          {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
           "tid": 7, "ts": T + stall + 15, "dur": 1,
           "args": {"correlation": 1, "device": 0, "stream": 7}}]
    events = load(_write(tmp_path / "t.json", ev))
    g = build_graph(events)
    names = np.asarray(events.column("name").to_pylist())
    call = int(np.flatnonzero(names == "cudaStreamSynchronize")[0])
    into = (g.etype == EDGE_CODE["sync"]) & (g.dst_pt == 2 * call + 1)
    assert set(names[g.src_pt[into] // 2]) == {"Memcpy HtoD (Pageable -> Device)"}
    assert g.sync_lag[call] == pytest.approx(5.0)
    step = validate_events(events, 3.5, "a100").steps.to_pylist()[0]
    assert step["unexplained_us"] >= stall
