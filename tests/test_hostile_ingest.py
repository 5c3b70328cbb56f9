"""Hostile trace files: every one refused in one line (exit 2) naming the file, never a traceback,
a hang or an out-of-memory; suspicious but possible ones warned about."""

from __future__ import annotations

import copy
import gzip
import json
import os
from pathlib import Path

import pytest

from mtia_trace.errors import TraceFormatError
from mtia_trace.ingest import load
from mtia_trace.ingest.decode import DEFAULT_MAX_BYTES, MAX_BYTES_ENV, max_bytes

EPOCH_US = 1_700_000_000_000_000


def trace_doc(rank: int = 0, steps: int = 2) -> dict:
    """One rank: per step a ProfilerStep, an op, its launch and a kernel, then a device sync."""
    events: list[dict] = []
    for s in range(steps):
        t = EPOCH_US + 1000 + s * 1000
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
             "tid": 1, "ts": t, "dur": 900},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10,
             "dur": 50, "args": {"External id": s + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": t + 20, "dur": 10, "args": {"correlation": s + 1, "External id": s + 1}},
            {"ph": "X", "cat": "kernel", "name": "sm80_gemm", "pid": 0, "tid": 7, "ts": t + 40,
             "dur": 300 + 100 * rank,
             "args": {"correlation": s + 1, "External id": s + 1, "device": 0, "stream": 7}},
        ]
    return {"distributedInfo": {"rank": rank, "world_size": 1}, "traceEvents": events}


def write(path: Path, doc: dict | str) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def refused(path: Path, *needles: str) -> str:
    with pytest.raises(TraceFormatError) as info:
        load(path)
    msg = str(info.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg
    return msg


def test_a_good_trace_loads(tmp_path: Path) -> None:
    tr = load(write(tmp_path / "t.json", trace_doc()))
    assert tr.events.num_rows == 8 and tr.warnings == []


@pytest.mark.parametrize("where,value,needle", [
    ("ext", 2**63, "$.traceEvents[2].args.External id"),
    ("ext", 2**64 + 5, "$.traceEvents[2].args.External id"),
    ("corr", -(2**63) - 1, "$.traceEvents[3].args.correlation"),
    ("pid", 2**70, "$.traceEvents[0].pid"),
    ("ts", 1e300, "$.traceEvents[0].ts"),
    ("dur", 1e18, "$.traceEvents[1].dur"),
    ("rank", 2**40, "rank 1099511627776 is out of range"),
    ("rank", 2**70, "distributedInfo.rank"),
    ("step", "ProfilerStep#2147483648", "numbers a step past 2147483647"),
    ("step", "ProfilerStep#" + "9" * 30, "numbers a step past"),
])
def test_out_of_range_numbers_are_refused(tmp_path: Path, where: str, value: object,
                                          needle: str) -> None:
    doc = trace_doc()
    ev = doc["traceEvents"]
    if where == "ext":
        ev[2]["args"]["External id"] = value
    elif where == "corr":
        ev[3]["args"]["correlation"] = value
    elif where in ("pid", "ts"):
        ev[0][where] = value
    elif where == "dur":
        ev[1]["dur"] = value
    elif where == "rank":
        doc["distributedInfo"]["rank"] = value
    else:
        ev[0]["name"] = value
    refused(write(tmp_path / "t.json", doc), "t.json", needle)


@pytest.mark.parametrize("deep", ["[" * 5000 + "]" * 5000, '{"a":' * 5000 + "0" + "}" * 5000])
@pytest.mark.parametrize("where", ["skipped arg", "top level"])
def test_deep_nesting_is_refused_even_in_skipped_keys(tmp_path: Path, deep: str,
                                                      where: str) -> None:
    doc = trace_doc()
    if where == "skipped arg":
        doc["traceEvents"][1]["args"]["junk"] = "__DEEP__"
    else:
        doc["junk"] = "__DEEP__"
    text = json.dumps(doc).replace('"__DEEP__"', deep)
    refused(write(tmp_path / "t.json", text), "nested too deeply")


def test_fifo_and_devices_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "rank0.json"
    os.mkfifo(fifo)
    refused(fifo, "is a FIFO")
    refused(tmp_path, "rank0.json: is a FIFO", "remove or move it")
    refused(Path("/dev/zero"), "is a character device")


def test_symlink_loop_in_a_trace_folder_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", trace_doc())
    (tmp_path / "rank1.json").symlink_to("rank1.json")
    refused(tmp_path, "rank1.json: unreadable")


def test_read_and_gunzip_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert max_bytes() == DEFAULT_MAX_BYTES
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (64 * 2**20), compresslevel=9))  # 64 KiB on disk
    monkeypatch.setenv(MAX_BYTES_ENV, "8M")
    refused(bomb, "gunzipped JSON exceeds the 8.0 MiB read limit", MAX_BYTES_ENV)
    big = write(tmp_path / "big.json", " " * (9 * 2**20))
    refused(big, "the file (9.0 MiB) exceeds the 8.0 MiB read limit")
    monkeypatch.setenv(MAX_BYTES_ENV, "lots")
    with pytest.raises(Exception, match="MTIA_TRACE_MAX_BYTES=lots: not a size"):
        load(big)


def test_truncated_and_concatenated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(trace_doc()).encode())
    refused(write_bytes(tmp_path / "cut.json.gz", data[:-20]), "corrupt or truncated gzip")
    half = json.dumps(trace_doc()).encode()
    two = gzip.compress(half[:100]) + gzip.compress(half[100:])
    assert load(write_bytes(tmp_path / "two.json.gz", two)).events.num_rows == 8


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("event,new_ts,needle", [
    (3, 0, "lies 1.7e+09 s away from the rank's other events"),
    (3, EPOCH_US - 3 * 10**9, "lies 3000 s away"),
    (3, EPOCH_US + 1040 - 5 * 10**6, "us before the runtime call that launches it"),
    (0, 0, "'ProfilerStep#0'"),
])
def test_corrupt_timestamps_name_the_event(tmp_path: Path, event: int, new_ts: float,
                                           needle: str) -> None:
    doc = trace_doc(steps=2)
    doc["traceEvents"][event]["ts"] = new_ts
    refused(write(tmp_path / "t.json", doc), "t.json: event", "timestamp is corrupt", needle)


def test_fully_duplicated_events_are_warned_about(tmp_path: Path) -> None:
    doc = trace_doc()
    doc["traceEvents"] += copy.deepcopy(doc["traceEvents"][1:3])
    tr = load(write(tmp_path / "t.json", doc))
    assert any("2 events are exact duplicates" in w for w in tr.warnings), tr.warnings
