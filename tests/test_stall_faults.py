"""Injected faults (tests/stall_faults.py) show in every replay: the default one as unexplained time,
the strict one as error, a target one as either. The full campaign over every real trace and
sample is benchmarks/stall_campaign.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtia_trace.ingest import load
from replay.graph import build_graph
from replay.hardware import load_spec, model_for
from replay.hardware.source import with_source
from tests.conftest import REAL, SAMPLES
from tests.stall_faults import FAULTS, STALL_US, inject, seen
from tests.test_requests import served

#: Samples and real traces (a CUDA, a ROCm, a sampled, a back-pressured, CPU gloo ones, one whose
#: step is marked on a thread without ops, a multi-threaded MTIA inference server, and a pair
#: whose collectives wait for a straggling peer).
TRACES = [
    SAMPLES / "synth" / "dcnv2_infer_1rank",
    SAMPLES / "synth" / "dcnv2_train_2rank",
    SAMPLES / "torch_cpu_dlrm",
    REAL / "hta" / "critical_path" / "alexnet",
    REAL / "hta" / "amd_trace",
    REAL / "hta" / "trace_filter",
    REAL / "hta" / "negative_queue_length_values_check",
    REAL / "hta" / "triton_example",
    REAL / "hta" / "mtia_inference_trace",
    REAL / "pairs" / "dp_dense" / "a",
    REAL / "pairs" / "dp_straggler" / "a",
]

def _ids(p: Path) -> str:
    return str(p.relative_to(REAL if REAL in p.parents else SAMPLES))


@pytest.mark.parametrize("trace", TRACES, ids=_ids)
@pytest.mark.parametrize("fault", FAULTS)
def test_injected_stall_is_seen_in_every_replay(trace: Path, fault: str) -> None:
    if not trace.exists():
        pytest.skip(f"{trace} not found (real traces live in ../shared)")
    events, source, _ = with_source(load(trace), None)
    lat = float(load_spec(source).value("host.kernel_launch_us")) if source else None
    got = inject(fault, events, build_graph(events))
    if got is None:
        pytest.skip(f"no place for a {fault} fault in this trace")
    faulted, where = got
    s = seen(events, faulted, where, lat, model_for(load_spec("h100"), mode="auto"))
    # the whole stall reaches the end of its window (the inference server's: a request that
    # waits on the delayed transfer; no longer the whole recording, which other requests end)
    assert s.measured_us == pytest.approx(STALL_US, abs=1.0)
    assert s.all, (f"{where}: measured +{s.measured_us:.0f} us, not seen by {s.missed()}: "
                   + ", ".join(f"{k} carries {v.carried_us:.0f} us, unexplained "
                               f"{v.unexplained_us:+.0f} us" for k, v in s.replays.items()))


def _epoch_sync_trace(path: Path, stall_us: float) -> Path:
    """A copy launched, then a stream synchronize that waits for it, on epoch-microsecond
    timestamps (as torch.profiler writes them); the launch call ends exactly where the
    synchronize starts. The copy starts ``stall_us`` after the synchronize began."""
    t = 1_695_835_572_955_796
    k = t + 15 + stall_us
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
           "ts": t - 100, "dur": k + 1 + 5 + 100 - t + 10},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1,
           "ts": t, "dur": 9, "args": {"correlation": 1}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1,
           "tid": 1, "ts": t + 9, "dur": k + 1 + 5 - (t + 9), "args": {"correlation": 2}},
          {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0,
           "tid": 7, "ts": k, "dur": 1, "args": {"correlation": 1, "device": 0, "stream": 7}}]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_stall_before_a_synchronized_copy_fails_strict_validate(cli, tmp_path: Path) -> None:  # noqa: ANN001
    """The synchronize must end where the copy it waits for ends plus its return latency: a
    600 us stall before the copy is unexplained time and strict error, not host time of the
    synchronize call (epoch timestamps used to break the launch-end / sync-start tie)."""
    code, out, err = cli("validate", _epoch_sync_trace(tmp_path / "s.json", 600.0),
                         "--format", "json", "--strict", "--max-error", "10%")
    d = json.loads(out)
    step = d["steps"][0]
    assert step["unexplained_us"] >= 600.0
    assert step["strict_error"] < -0.5
    assert code == 1 and d["passed"] is False


@pytest.mark.parametrize("fault", FAULTS)
def test_a_stall_on_an_inference_server_is_judged_on_its_request(fault: str) -> None:
    """No step annotations, three requests (`tests.test_requests.served`): each request is a
    window of the replay, and the fault is placed inside one (the middle one: the ``kernel``
    fault on its device work, which the worker's synchronize waits for; the ``host`` fault in
    the gap after ``prep``) and judged on that request's growth, the whole stall, not on the
    trace's step column (0 everywhere: the first request, which the stall does not touch)."""
    events = served()
    got = inject(fault, events, build_graph(events))
    assert got is not None
    faulted, where = got
    assert (where.rank, where.step) == (0, 1)
    s = seen(events, faulted, where, None, model_for(load_spec("h100"), mode="auto"))
    assert s.measured_us == pytest.approx(STALL_US)
    assert s.all, {k: (v.carried_us, v.unexplained_us) for k, v in s.replays.items()}
