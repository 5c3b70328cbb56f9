"""`mtia-trace validate`: exit status against --max-error, output columns, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SAMPLES


def _late_kernel_trace(path: Path) -> Path:
    """One step whose kernel starts 2950 us after its launch, a device synchronize waits for it:
    nothing in the trace explains the delay."""
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 4000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 50, "dur": 10, "args": {"correlation": 1, "External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
         "ts": 100, "dur": 3500, "args": {"correlation": 2, "External id": 2}},
        {"ph": "X", "cat": "kernel", "name": "sm80_gemm", "pid": 0, "tid": 7, "ts": 3000,
         "dur": 500, "args": {"correlation": 1, "External id": 1, "device": 0, "stream": 7}},
    ]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_sample_passes_with_columns(cli):
    code, out, err = cli("validate", SAMPLES / "torch_cpu_dlrm")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["rank", "step", "measured_us", "replayed_us", "error", "strict",
                                "unexplained_us"]
    rows = [ln.split() for ln in lines[1:] if ln.split() and ln.split()[0].isdigit()]
    assert [(r[0], r[1]) for r in rows] == [("0", "2"), ("0", "3"), ("1", "2"), ("1", "3")]
    for r in rows:
        assert float(r[3]) == pytest.approx(float(r[2]), rel=1e-6)
        assert "!" not in r
    assert any(ln.startswith("median |error| 0.000%, worst 0.000%; strict:") for ln in lines)
    assert any(ln.startswith("unexplained: ") for ln in lines)
    assert lines[-1].startswith("strict keeps as measured: host gaps")


def _stalled_kernel_trace(path: Path, stall: float) -> Path:
    """One step: a kernel launched at 50 us starts ``stall`` us after its launch (within the
    ready-lag cap, so the default replay keeps it), a device synchronize waits for it."""
    k_start = 50 + stall
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": k_start + 500 + 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 50, "dur": 10, "args": {"correlation": 1, "External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
         "ts": 60, "dur": k_start + 500 + 1 - 60, "args": {"correlation": 2, "External id": 2}},
        {"ph": "X", "cat": "kernel", "name": "sm80_gemm", "pid": 0, "tid": 7, "ts": k_start,
         "dur": 500, "args": {"correlation": 1, "External id": 1, "device": 0, "stream": 7}},
    ]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_injected_stall_fails_strict_not_default(cli, tmp_path):
    trace = _stalled_kernel_trace(tmp_path / "stall.json", 600.0)
    code, out, _err = cli("validate", trace, "--max-error", "1%")
    assert code == 0  # the default error keeps the measured lag: 0.000%
    row = [ln.split() for ln in out.splitlines() if ln.split()[:2] == ["0", "1"]][0]
    assert row[4] == "+0.000%"
    measured = float(row[2])
    strict = float(row[5].rstrip("%")) / 100
    assert strict == pytest.approx(-600.0 / measured, abs=1e-4)  # the stall is the strict error
    assert float(row[6]) >= 600.0  # and unexplained time
    code, out, err = cli("validate", trace, "--max-error", "1%", "--strict")
    assert code == 1 and "strict step error" in err


def test_late_kernel_is_unexplained_by_default_and_fails_strict(cli, tmp_path):
    """A kernel starting 2950 us after its launch with nothing in the trace to explain it: the
    default replay keeps the lag (no silent re-timing) and counts it as unexplained and as a
    start the graph does not explain; the strict replay drops it, so the step replays ~74%
    short and the kernel 2.95 ms early, and --strict fails on both."""
    trace = _late_kernel_trace(tmp_path / "late.json")
    code, out, err = cli("validate", trace)
    assert code == 0, err
    row = [ln.split() for ln in out.splitlines() if ln.split()[:2] == ["0", "1"]][0]
    assert float(row[3]) == pytest.approx(4000.0)
    assert float(row[6]) >= 2950.0 - 1e-6  # unexplained
    assert "1 device events start more than 1000 us after every input" in out
    code, out, err = cli("validate", trace, "--strict")
    assert code == 1
    row = [ln.split() for ln in out.splitlines() if ln.split()[:2] == ["0", "1"]][0]
    assert float(row[5].rstrip("%")) / 100 < -0.4
    assert row[-1] == "!"
    assert "exceeds 2.000%" in err and "device-start p90 73.750%" in err
    assert "strict device starts: |replayed - measured| median 73.750%" in out


def test_threshold_is_honoured(cli, tmp_path):
    trace = _late_kernel_trace(tmp_path / "late.json")
    code, _out, _err = cli("validate", trace, "--strict", "--max-error", "80%")
    assert code == 0
    code, _out, _err = cli("validate", trace, "--strict", "--max-error", "0.6")
    assert code == 1  # step and device start are both 73.75% off


def test_json_reports_device_starts(cli, tmp_path):
    trace = _late_kernel_trace(tmp_path / "late.json")
    code, out, _err = cli("validate", trace, "--format", "json")
    d = json.loads(out)
    assert code == 0 and d["passed"] is True
    assert d["device_start"] == {"events": 1, "median_us": 0.0, "p90_us": 0.0, "median": 0.0,
                                 "p90": 0.0}
    assert d["strict_device_start"]["median_us"] == pytest.approx(2950.0)
    assert d["device_starts_unexplained"] == 1 and d["strict_keeps_measured"]


@pytest.mark.parametrize("args,needle", [
    (["--max-error", "abc"], "--max-error"),
    (["--max-error", "-1%"], "non-negative"),
])
def test_bad_max_error_is_one_line(cli, args, needle):
    code, out, err = cli("validate", SAMPLES / "torch_cpu_dlrm", *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_missing_trace_is_one_line(cli, tmp_path):
    code, out, err = cli("validate", tmp_path / "nope.json")
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "nope.json" in err
