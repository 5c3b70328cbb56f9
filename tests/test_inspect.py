"""`mtia-trace inspect` on the bundled sample trace."""

from __future__ import annotations

import re

import pytest

from mtia_trace.cli import main
from mtia_trace.ingest import load
from mtia_trace.trace_summary import summarize
from tests.conftest import SAMPLES

SAMPLE = SAMPLES / "torch_cpu_dlrm"


def test_inspect_prints_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "ranks: 2 (0, 1)" in out
    assert re.search(r"rank 0: #2 \d+\.\d\d ms, #3 \d+\.\d\d ms", out)
    assert "device streams: none (CPU-only" in out
    assert re.search(r"events by kind: .*gemm \d+.*collective \d+", out)
    assert "top ops by host self time:" in out and "aten::" in out
    assert re.search(r"all_to_all\s+pg 0\s+4x", out) and re.search(r"all_reduce\s+pg 0\s+4x", out)
    assert "warnings: none" in out


def test_summary_matches_the_table() -> None:
    trace = load(SAMPLE)
    s = summarize(trace, top=5)
    ev = trace.events.to_pandas()
    steps = ev[ev["name"].str.startswith("ProfilerStep#")]
    assert sorted(s.steps["measured_us"]) == sorted(steps["dur_us"])
    assert s.counts == ev["kind"].value_counts().to_dict()
    assert len(s.top_ops) == 5 and s.top_ops["total_us"].is_monotonic_decreasing
    assert s.top_ops["share"].sum() <= 1.0
    a2a = s.collectives[s.collectives["coll_op"] == "all_to_all"]
    per_call = ev[ev["name"] == "c10d::alltoall_base_"]["coll_bytes_in"].sum()
    assert float(a2a["bytes_in"].iloc[0]) == per_call > 0


def test_inspect_reports_warnings(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    import json
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2,
         "args": {"device": 0, "stream": 7}}]}))
    assert main(["inspect", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "dev:0:7" in out and "1 of 1 device events have no launching runtime call" in out


def test_stream_busy_is_work_only_and_counts_overlaps_once(tmp_path) -> None:
    """A ``gpu_user_annotation`` span over kernels is not work; overlapping kernels count once."""
    import json
    dev = {"device": 0, "stream": 7}
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "gpu_user_annotation", "name": "## fwd ##", "pid": 0, "tid": 7,
         "ts": 0, "dur": 1000, "args": dev},
        {"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 10, "dur": 100,
         "args": dev},
        {"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": 60, "dur": 100,
         "args": dev},
        {"ph": "X", "cat": "kernel", "name": "c", "pid": 0, "tid": 7, "ts": 500, "dur": 50,
         "args": dev}]}))
    s = summarize(load(tmp_path / "t.json"))
    row = s.streams[s.streams["track"] == "dev:0:7"].iloc[0]
    assert row["busy_us"] == pytest.approx(150 + 50)
    assert row["events"] == 3
