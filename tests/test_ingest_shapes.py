"""FLOPs/bytes from shapes, kernel inheritance, nesting and launch links on hand-made traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtia_trace import schema
from mtia_trace.ingest import load
from mtia_trace.ingest.nesting import parents

F = "float"


def _op(name: str, dims: list, types: list, ts: float, dur: float, ext: int, **args: object) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"External id": ext, "Input Dims": dims, "Input type": types, **args}}


def _load(tmp: Path, events: list[dict]) -> dict[str, dict]:
    p = tmp / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    trace = load(p)
    schema.validate_events(trace.events)
    return {r["name"]: r for r in trace.events.to_pylist()}


def test_flops_from_shapes(tmp_path: Path) -> None:
    ev = _load(tmp_path, [
        _op("aten::mm", [[8, 16], [16, 4]], [F, F], 0, 1, 1),
        _op("aten::addmm", [[4], [8, 16], [16, 4], [], []], [F, F, F, "Scalar", "Scalar"], 10, 1, 2),
        _op("aten::bmm", [[3, 8, 16], [3, 16, 4]], [F, F], 20, 1, 3),
        _op("aten::baddbmm", [[3, 8, 4], [3, 8, 16], [3, 16, 4]], [F, F, F], 25, 1, 9),
        _op("aten::linear", [[32, 8, 16], [4, 16], [4]], [F, F, F], 30, 1, 4),
        _op("aten::conv2d", [[2, 3, 10, 10], [6, 3, 3, 3], [6], [], [], [], []],
            [F, F, F, "ScalarList", "ScalarList", "ScalarList", "Scalar"], 40, 1, 5,
            **{"Concrete Inputs": ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"]}),
        _op("aten::embedding_bag", [[1000, 8], [50], [10], [], [], [], [], [], []],
            [F, "long int", "long int", "Scalar", "Scalar", "Scalar", "", "Scalar", ""], 50, 1, 6),
        _op("aten::add", [[4, 5], [4, 5], []], [F, F, "Scalar"], 60, 1, 7),
        _op("aten::matmul", [[2, 8, 16], [16, 4]], ["c10::BFloat16", "c10::BFloat16"], 70, 1, 8),
        _op("my::custom", [[4, 4]], [F], 80, 1, 10, flops=123.0),
    ])
    assert ev["aten::mm"]["flops"] == 2 * 8 * 16 * 4
    assert ev["aten::mm"]["bytes_read"] == (8 * 16 + 16 * 4) * 4
    assert ev["aten::mm"]["bytes_written"] == 8 * 4 * 4
    assert ev["aten::addmm"]["flops"] == 2 * 8 * 16 * 4
    assert ev["aten::bmm"]["flops"] == 2 * 3 * 8 * 16 * 4
    assert ev["aten::baddbmm"]["flops"] == 2 * 3 * 8 * 16 * 4
    assert ev["aten::linear"]["flops"] == 2 * 32 * 8 * 16 * 4
    assert ev["aten::conv2d"]["flops"] == 2 * 2 * 6 * 3 * 9 * 8 * 8  # 10x10 -> 8x8, no padding
    assert ev["aten::embedding_bag"]["flops"] == 50 * 8
    assert ev["aten::embedding_bag"]["bytes_read"] == 50 * 8 * 4 + 50 * 8
    assert ev["aten::embedding_bag"]["bytes_written"] == 10 * 8 * 4
    assert ev["aten::add"]["flops"] == 20 and ev["aten::add"]["kind"] == "elementwise"
    assert ev["aten::matmul"]["flops"] == 2 * 2 * 8 * 16 * 4
    assert ev["aten::matmul"]["dtype"] == "c10::BFloat16"
    assert ev["aten::matmul"]["bytes_read"] == (2 * 8 * 16 + 16 * 4) * 2
    assert ev["my::custom"]["flops"] == 123.0
    assert {ev[n]["kind"] for n in ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear")} == {"gemm"}
    assert ev["aten::conv2d"]["kind"] == "conv" and ev["aten::embedding_bag"]["kind"] == "embedding"


def test_kernel_inherits_from_launching_op_and_work_is_counted_once(tmp_path: Path) -> None:
    lin = _op("aten::linear", [[8, 16], [4, 16], [4]], [F, F, F], 0, 100, 1)
    addmm = _op("aten::addmm", [[4], [8, 16], [16, 4], [], []], [F, F, F, "Scalar", "Scalar"], 10, 50, 2)
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
              "ts": 20, "dur": 5, "args": {"External id": 2, "correlation": 77}}
    launch2 = dict(launch, ts=30, args={"External id": 2, "correlation": 78})
    k1 = {"ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm_f32", "pid": 0, "tid": 7, "ts": 40,
          "dur": 3, "args": {"External id": 2, "correlation": 77, "device": 0, "stream": 7}}
    k2 = {"ph": "X", "cat": "kernel", "name": "splitKreduce_kernel", "pid": 0, "tid": 7, "ts": 44,
          "dur": 1, "args": {"correlation": 78, "device": 0, "stream": 7}}
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 1, "tid": 1,
            "ts": -1, "dur": 200}
    ev = _load(tmp_path, [lin, addmm, launch, launch2, k1, k2, step])
    flops = 2 * 8 * 16 * 4
    assert ev["aten::linear"]["flops"] == 0  # its child addmm carries the work
    assert ev["aten::addmm"]["flops"] == flops
    assert ev["sm80_xmma_gemm_f32"]["flops"] == flops  # the gemm kernel takes it all
    assert ev["splitKreduce_kernel"]["flops"] == 0
    assert ev["sm80_xmma_gemm_f32"]["dtype"] == "float"
    assert ev["sm80_xmma_gemm_f32"]["launch_id"] == ev["cudaLaunchKernel"]["event_id"] or \
        ev["sm80_xmma_gemm_f32"]["launch_id"] >= 0
    assert ev["sm80_xmma_gemm_f32"]["step"] == 5 and ev["sm80_xmma_gemm_f32"]["track"] == "dev:0:7"
    assert ev["aten::addmm"]["parent_id"] == ev["aten::linear"]["event_id"]
    assert ev["aten::addmm"]["depth"] == 2 and ev["ProfilerStep#5"]["depth"] == 0


def test_memcpy_bytes_and_flow_links(tmp_path: Path) -> None:
    rt = {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 0,
          "dur": 2, "args": {"external id": 3}}
    cp = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 5,
          "dur": 2, "args": {"bytes": 4096, "device": 0, "stream": 7}}
    flows = [{"ph": "s", "cat": "async_gpu", "name": "x", "id": 9, "pid": 1, "tid": 1, "ts": 0},
             {"ph": "f", "cat": "async_gpu", "name": "x", "id": 9, "pid": 0, "tid": 7, "ts": 5, "bp": "e"}]
    ev = _load(tmp_path, [rt, cp, *flows])
    assert ev["Memcpy HtoD"]["bytes_read"] == 4096 == ev["Memcpy HtoD"]["bytes_written"]
    assert ev["Memcpy HtoD"]["launch_id"] == ev["cudaMemcpyAsync"]["event_id"]
    assert ev["cudaMemcpyAsync"]["external_id"] == 3 and ev["Memcpy HtoD"]["kind"] == "memcpy"


def _stack_parents(ts: np.ndarray, dur: np.ndarray, start: np.ndarray, cap: np.ndarray) -> np.ndarray:
    out, stack, end = np.full(len(ts), -1), [], ts + dur
    for i in range(len(ts)):
        if i == start[i]:
            stack = []
        k = len(stack) - 1
        while k >= 0 and end[stack[k]] + 1e-3 < end[i]:
            k -= 1
        if cap[i]:
            del stack[k + 1:]
        out[i] = stack[k] if k >= 0 else -1
        if cap[i]:
            stack.append(i)
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 30), st.booleans()),
                min_size=1, max_size=80))
def test_vectorized_nesting_matches_a_stack(rows: list[tuple[int, int, int, bool]]) -> None:
    track = np.array([r[0] for r in rows])
    ts = np.array([r[1] for r in rows], dtype=float)
    dur = np.array([r[2] for r in rows], dtype=float)
    cap = np.array([r[3] for r in rows])
    o = np.lexsort((-dur, ts, track))
    track, ts, dur, cap = track[o], ts[o], dur[o], cap[o]
    start = np.searchsorted(track, track, side="left")
    parent, depth = parents(start, ts, dur, cap)
    assert (parent == _stack_parents(ts, dur, start, cap)).all()
    assert ((parent < 0) == (depth == 0)).all()


def test_instants_and_metadata(tmp_path: Path) -> None:
    meta = {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}
    inst = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
            "ts": 3.0005, "s": "t", "args": {"Bytes": 64}}
    ev = _load(tmp_path, [meta] * 50 + [inst, _op("aten::mm", [[1, 1], [1, 1]], [F, F], 0, 10, 1)])
    assert len(ev) == 2
    assert ev["[memory]"]["kind"] == "instant" and ev["[memory]"]["dur_us"] == 0
    assert ev["[memory]"]["ts_us"] == pytest.approx(3.0005)
    assert ev["[memory]"]["parent_id"] == ev["aten::mm"]["event_id"]


def test_bytes_arg_is_total_traffic(tmp_path: Path) -> None:
    """A recorded `bytes` arg: shape-derived output bytes are written, the rest read."""
    ev = _load(tmp_path, [
        _op("fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function",
            [[1000], [3], [50], [9]], [F, "long int", "long int", "long int"], 0, 1, 1,
            flops=800, bytes=7000),
        _op("optimizer.step#SGD.step", [], [], 10, 1, 2, bytes=1234),
        _op("aten::mm", [[8, 16], [16, 4]], [F, F], 20, 1, 3, bytes=100),
    ])
    tbe = ev["fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function"]
    assert (tbe["flops"], tbe["bytes_read"], tbe["bytes_written"]) == (800, 7000, 0)
    opt = ev["optimizer.step#SGD.step"]
    assert (opt["bytes_read"], opt["bytes_written"]) == (1234, 0)
    mm = ev["aten::mm"]   # output 8x4 floats = 128 B > the recorded total: capped
    assert (mm["bytes_read"], mm["bytes_written"]) == (0, 100)


def test_tbe_bytes_from_shapes(tmp_path: Path) -> None:
    """FBGEMM lookup without a bytes arg: rows gathered from indices x mean dim x dtype size."""
    # (dev_weights, uvm_weights, weights_offsets, D_offsets, total_D, max_D, hash_size_cumsum,
    #  total_hash_size_bits, indices, offsets): T = 2 tables, total_D = 96, B = 4
    dims = [[5000], [0], [2], [3], [], [], [3], [], [40], [9]]
    types = ["c10::Half", "c10::Half", "long int", "int", "Scalar", "Scalar", "long int",
             "Scalar", "long int", "long int"]
    conc = ["", "", "", "", "96", "64", "", "17", "", ""]
    ev = _load(tmp_path, [_op("fbgemm::split_embedding_codegen_lookup_sgd_function", dims, types,
                              0, 1, 1, **{"Concrete Inputs": conc})])
    tbe = ev["fbgemm::split_embedding_codegen_lookup_sgd_function"]
    dim = 96 / 2
    assert tbe["bytes_read"] == pytest.approx(40 * dim * 2 + 40 * 8 + 9 * 8)
    assert tbe["bytes_written"] == pytest.approx(4 * 96 * 2)
    assert tbe["flops"] == pytest.approx(40 * dim)
    assert tbe["dtype"] == "c10::Half"


def _mtia(name: str, tid: int, ts: float, dur: float, **args: object) -> dict:
    return {"ph": "X", "cat": "mtia_ccp_events", "name": name, "pid": 9, "tid": tid, "ts": ts,
            "dur": dur, "args": args}


def test_mtia_job_dmas_and_event_waits_link(tmp_path: Path) -> None:
    """Descriptor DMA bursts take their job's launch; event_wait finds its record by seq_num."""
    run = {"ph": "X", "cat": "mtia_runtime", "name": "runFunction - job_prep_and_submit_for_execution",
           "pid": 1, "tid": 1, "ts": 0, "dur": 30, "args": {"correlation": 7}}
    events = [
        run,
        _mtia("dma_request", 4, 1, 5, stream=1, packet_ptr=300, size=4096, direction="DEVICE_TO_HOST"),
        _mtia("dma_request", 4, 10, 5, stream=1, packet_ptr=112, size=1068, direction="HOST_TO_DEVICE"),
        _mtia("dma_request", 4, 12, 5, stream=1, packet_ptr=112, size=784, direction="HOST_TO_DEVICE"),
        _mtia("fc-dtype_Float", 4, 20, 50, stream=1, correlation=7),
        {"ph": "X", "cat": "mtia_runtime", "name": "recordEvent", "pid": 1, "tid": 1, "ts": 40,
         "dur": 1, "args": {"correlation": 8}},
        _mtia("event_record", 4, 71, 0.2, stream=1, seq_num=55, correlation=8),
        _mtia("event_wait", 5, 60, 15, stream=2, wait_on_stream=1, seq_num=55),
    ]
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"traceEvents": events}))
    t = load(p).events.to_pandas()
    dma = t[t.name == "dma_request"].sort_values("ts_us")
    assert dma.launch_id.tolist()[0] == -1              # bulk copy: nothing names its host call
    assert (t.name[dma.launch_id.tolist()[1:]] == run["name"]).all()
    assert dma.correlation.tolist() == [-1, 7, 7]
    assert dma.bytes_read.tolist() == [4096, 1068, 784]
    wait = t[t.name == "event_wait"].iloc[0]
    assert (wait.sync_stream, wait.sync_corr) == (1, 8)


def test_untyped_inputs_are_float_tensors_but_not_index_types() -> None:
    """Inputs past the recorded types count as float tensors; an embedding's index type, when
    unrecorded, stays the 8-byte default (the float fill is not read as its type)."""
    from mtia_trace.ingest.shapes import op_cost

    # add: second input untyped -> float tensor of 6 elements
    assert op_cost("elementwise", "aten::add", [[2, 3], [2, 3]], ["c10::Half"], None) == \
        (6.0, 6 * 2 + 6 * 4, 6 * 2, "c10::Half")
    assert op_cost("reduction", "aten::sum", [[4, 5], []], ["float", "Scalar"], None) == \
        (20.0, 80.0, 0.0, "float")
    # embedding [rows=10, dim=4] float weights, 6 indices of unrecorded type: 8 bytes each
    assert op_cost("embedding", "aten::embedding", [[10, 4], [6]], ["float"], None) == \
        (0.0, 6 * 4 * 4 + 6 * 8, 6 * 4 * 4, "float")
    assert op_cost("gemm", "aten::mm", [[2, 3], [3, 5]], [], None)[0] == 2 * 2 * 3 * 5
    assert op_cost("other", "aten::foo", [[2], 1.5], ["Scalar", "float"], None) == \
        (0.0, 0.0, 0.0, None)
