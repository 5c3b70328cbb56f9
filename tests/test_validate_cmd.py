"""`mtia-trace validate`: exit status against --max-error, output columns, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SAMPLES


def _late_kernel_trace(path: Path) -> Path:
    """One step whose kernel starts 2950 us after its launch (beyond the 1000 us ready-lag cap):
    the replay cannot reproduce the delay, so the step replays ~49% short."""
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
    assert lines[0].split() == ["rank", "step", "measured_us", "replayed_us", "error"]
    rows = [ln.split() for ln in lines[1:] if ln.split() and ln.split()[0].isdigit()]
    assert [(r[0], r[1]) for r in rows] == [("0", "2"), ("0", "3"), ("1", "2"), ("1", "3")]
    for r in rows:
        assert float(r[3]) == pytest.approx(float(r[2]), rel=1e-6)
        assert "!" not in r
    assert lines[-1].startswith("median |error| 0.000%, worst 0.000%")


def test_above_threshold_fails_and_flags_step(cli, tmp_path):
    trace = _late_kernel_trace(tmp_path / "late.json")
    code, out, err = cli("validate", trace)
    assert code == 1
    row = [ln.split() for ln in out.splitlines() if ln.split()[:2] == ["0", "1"]][0]
    assert float(row[2]) == pytest.approx(4000.0)
    assert float(row[3]) < 0.6 * 4000.0
    assert row[-1] == "!"
    assert "exceeds 2.000%" in err


def test_threshold_is_honoured(cli, tmp_path):
    trace = _late_kernel_trace(tmp_path / "late.json")
    code, _out, _err = cli("validate", trace, "--max-error", "60%")
    assert code == 0
    code, _out, _err = cli("validate", trace, "--max-error", "0.4")
    assert code == 1


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
