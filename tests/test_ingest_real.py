"""Every real third-party trace ingests faithfully (skipped when the traces are absent)."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import msgspec
import numpy as np
import pyarrow.compute as pc
import pytest

from mtia_trace import schema
from mtia_trace.ingest import load
from tests.conftest import REAL, real_file, real_traces, requires_real

pytestmark = [requires_real, pytest.mark.real]
TRACES = real_traces()
_IDS = [str(p.relative_to(REAL)) if REAL.is_dir() else p.name for p in TRACES]


@cache
def _ingest(path: Path):
    return load(path)


class _Ev(msgspec.Struct):
    ph: str = ""
    name: str = ""


class _Doc(msgspec.Struct):
    traceEvents: list[_Ev]
    distributedInfo: dict | None = None


def _raw(path: Path) -> _Doc:
    """An independent count of the file's events (only ph and name decoded)."""
    data = gzip.open(path).read() if path.name.endswith(".gz") else path.read_bytes()
    return msgspec.json.decode(data, type=_Doc)


@pytest.mark.parametrize("path", TRACES, ids=_IDS)
def test_every_complete_and_instant_event_is_a_row(path: Path) -> None:
    raw = _raw(path)
    expected = sum(1 for e in raw.traceEvents if e.ph in ("X", "i", "I"))
    trace = _ingest(path)
    schema.validate_events(trace.events)
    assert trace.events.num_rows == expected
    assert sum(trace.counts.values()) == expected
    rank = (raw.distributedInfo or {}).get("rank", 0)
    assert trace.ranks == [rank]
    # rows sorted by (rank, track, ts, -dur)
    t = trace.events.select(["track", "ts_us"]).to_pandas()
    same = t["track"].to_numpy()[1:] == t["track"].to_numpy()[:-1]
    assert (np.diff(t["ts_us"].to_numpy())[same] >= 0).all()
    # steps: the ProfilerStep numbers of the file, or one step 0
    steps = {e.name for e in raw.traceEvents if e.name.startswith("ProfilerStep#")}
    got = set(pc.unique(trace.events.column("step")).to_pylist()) - {-1}
    if steps:
        assert got == {int(s.split("#")[1]) for s in steps}
    else:
        assert got == {0}


def test_torch_cpu_ranks_and_steps_match_manifest() -> None:
    folder = REAL / "torch_cpu"
    manifest = json.loads((folder / "manifest.json").read_text())
    for run in manifest["runs"].values():
        trace = load([folder / f for f in run["files"]])
        assert trace.ranks == list(range(run["config"]["world"]))
        ev = trace.events.to_pandas()
        for info in run["traces"]:
            rank = (info["distributedInfo"] or {}).get("rank", 0)
            got = ev[(ev["rank"] == rank) & ev["name"].str.startswith("ProfilerStep#")]
            want = [(s["name"], s["dur_us"]) for s in info["profiler_steps"]]
            assert list(zip(got["name"], got["dur_us"].round(3))) == want
            assert sorted(got["step"]) == [int(n.split("#")[1]) for n, _ in want]


def test_gloo_collectives_pair_and_match_across_ranks() -> None:
    folder = REAL / "torch_cpu"
    trace = load(sorted(folder.glob("dev_rank2_small_rank*.json.gz")))
    ev = trace.events.to_pandas()
    gloo = ev[ev["name"].str.startswith("gloo:")]
    assert len(gloo) == 24 and (gloo["coll_seq"] >= 0).all()
    # the same (pg, seq) names the same op on both ranks
    per = gloo.groupby(["pg", "coll_seq"])["coll_op"].agg(lambda s: tuple(sorted(set(s))))
    assert all(len(v) == 1 for v in per) and len(per) == 12
    a2a = ev[ev["name"] == "c10d::alltoall_base_"]
    assert (a2a["coll_bytes_in"] == 32768 * 4).all() and (a2a["group_size"] == 2).all()
    ar = ev[(ev["name"] == "c10d::allreduce_")]
    assert sorted(set(ar["coll_bytes_in"])) == [4.0, 27969 * 4.0]
    assert not any("could not be paired" in w for w in trace.warnings)


def test_mtia_training_trace_has_device_ops_dma_and_collectives() -> None:
    trace = _ingest(real_file("hta/mtia_trace_single_rank/mtia_rank_0.json.gz"))
    ev = trace.events.select(["name", "kind", "is_device", "bytes_read", "launch_id", "coll_op",
                              "flops", "dtype", "track"]).to_pandas()
    dev = ev[ev["is_device"]]
    assert len(dev) == 25814
    dma = dev[dev["name"] == "dma_request"]
    assert len(dma) > 0 and (dma["kind"] == "memcpy").all() and (dma["bytes_read"] > 0).all()
    ops = dev[dev["name"] != "dma_request"]
    assert (ops["launch_id"] >= 0).mean() > 0.99
    assert {"gemm", "embedding", "elementwise"} <= set(ops["kind"])
    assert ops["dtype"].notna().mean() > 0.9
    hccl = ev[ev["name"].str.startswith("hccl:")]
    assert len(hccl) and (hccl["kind"] == "collective").all() and hccl["coll_op"].notna().all()


def test_mtia_job_descriptor_dmas_link_to_their_run_function() -> None:
    """Each job's 3 descriptor DMAs (one packet_ptr, right before its kernel) share its launch."""
    ev = _ingest(real_file("hta/mtia_trace_single_rank/mtia_rank_0.json.gz")).events.to_pandas()
    dma = ev[ev["name"] == "dma_request"]
    linked = dma[dma["launch_id"] >= 0]
    kernels = ev[ev["is_device"] & (ev["name"] != "dma_request") & (ev["launch_id"] >= 0)]
    assert len(linked) == 3 * len(kernels)
    assert (ev["name"].to_numpy()[linked["launch_id"]] ==
            "runFunction - job_prep_and_submit_for_execution").all()
    assert (linked.groupby("launch_id").size() == 3).all()
    assert set(linked["launch_id"]) == set(kernels["launch_id"])
    # the only overlaps on a device queue are DMAs of one job's burst running concurrently
    dev = ev[ev["is_device"]].sort_values(["track", "ts_us"])
    same = dev["track"].to_numpy()[1:] == dev["track"].to_numpy()[:-1]
    end = (dev["ts_us"] + dev["dur_us"]).to_numpy()
    over = np.flatnonzero(same & (dev["ts_us"].to_numpy()[1:] < end[:-1] - 1e-3))
    launch = dev["launch_id"].to_numpy()
    assert len(over) == len(kernels)
    assert (launch[over] == launch[over + 1]).all() and (launch[over] >= 0).all()


def test_mtia_tbe_bytes_from_shapes() -> None:
    """split_embedding_codegen_forward_cpu: T=6 tables, total_D=648, 73087 indices, B=1024."""
    ev = _ingest(real_file("hta/mtia_trace_single_rank/mtia_rank_0.json.gz")).events.to_pandas()
    op = ev[(ev["name"] == "fbgemm::split_embedding_codegen_forward_cpu") & (ev["bytes_read"] > 1.6e7)]
    assert len(op)
    r = op.iloc[0]
    assert r["bytes_read"] == 73087 * 108 * 2 + 73087 * 8 + 6145 * 8
    assert r["bytes_written"] == 1024 * 648 * 2


def test_mtia_inference_trace_syncs_and_dma() -> None:
    trace = _ingest(real_file("hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"))
    ev = trace.events.to_pandas()
    waits = ev[ev["name"] == "event_wait"]
    assert len(waits) and (waits["kind"] == "sync").all() and (waits["sync_stream"] >= 0).all()
    # a wait names the record with its seq_num on the waited stream: same stream, earlier-or-equal
    linked = waits[waits["sync_corr"] >= 0]
    assert len(linked) >= 0.75 * len(waits)
    recs = ev[ev["is_device"] & (ev["name"] == "event_record")].set_index("correlation")
    assert (recs.loc[linked["sync_corr"], "stream"].to_numpy() == linked["sync_stream"].to_numpy()).all()
    dma = ev[ev["name"] == "dma_request"]
    assert (dma["bytes_read"] > 0).all() and (dma["launch_id"] >= 0).mean() > 0.5
    host_sync = ev[ev["name"] == "synchronizeStream"]
    assert (host_sync["sync_stream"] >= 0).all()
    assert set(ev["step"]) == {0}


@pytest.mark.parametrize("rel", [
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/triton_example/triton_example.json.gz",
    "hta/trace_file_list/inference_rank_1.json.gz",
    "hta/trace_diff/control/control.json.gz",
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta/negative_queue_length_values_check/rank0.json.gz",
])
def test_kernels_link_to_their_launch(rel: str) -> None:
    trace = _ingest(real_file(rel))
    ev = trace.events.select(["kind", "is_device", "launch_id", "step", "cat"]).to_pandas()
    kern = ev[ev["cat"].isin(["kernel", "Kernel"])]
    assert len(kern) and (kern["launch_id"] >= 0).mean() > 0.85
    launch = ev.loc[kern.loc[kern["launch_id"] >= 0, "launch_id"]]
    assert (launch["kind"] == "runtime").all() and (~launch["is_device"]).all()
    assert (kern.loc[kern["launch_id"] >= 0, "step"].to_numpy() == launch["step"].to_numpy()).all()


def test_cuda_sync_streams() -> None:
    trace = _ingest(real_file("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"))
    ev = trace.events.to_pandas()
    assert (ev.loc[ev["name"] == "cudaDeviceSynchronize", "sync_stream"] == -2).all()
    wait = ev[ev["name"] == "cudaStreamWaitEvent"]
    linked = wait[wait["sync_stream"] >= 0]  # waits whose device-side record was captured
    assert len(linked) >= len(wait) // 2 and (linked["sync_corr"] >= 0).all()
    assert (ev.loc[ev["name"] == "cudaStreamSynchronize", "sync_stream"] >= 0).all()


def test_nccl_collectives_from_record_param_comms() -> None:
    trace = _ingest(real_file("hta/nccl_parser_config/nccl_data.json.gz"))
    ev = trace.events.to_pandas()
    k = ev[ev["name"].str.startswith("ncclKernel_AllReduce")]
    assert len(k) == 15 and (k["coll_op"] == "all_reduce").all()
    assert (k["coll_seq"] >= 0).all() and k["coll_seq"].is_unique
    assert (k["group_size"] == 2).all() and (k["pg"] == "0").all() and (k["coll_bytes_in"] > 0).all()


def test_gemm_kernels_inherit_flops_from_their_op() -> None:
    trace = _ingest(real_file("hta/trace_filter/sampled_rank-0.json.gz"))
    ev = trace.events.to_pandas()
    gemm_k = ev[ev["is_device"] & (ev["kind"] == "gemm")]
    assert (gemm_k["flops"] > 0).mean() > 0.5
