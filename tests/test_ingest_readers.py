"""Reading a trace's files on several processes (`ingest.readers`) gives the table a serial read
gives, and bad input still fails in one line naming the file."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from mtia_trace.cli import main
from mtia_trace.errors import MtiaTraceError, TraceFormatError
from mtia_trace.ingest import decode, load, readers

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = [ROOT / "sample_traces" / "torch_cpu_dlrm", ROOT / "sample_traces" / "synth" /
           "dcnv2_train_2rank"]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="readers fork on Linux")


@pytest.fixture
def parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read every multi-file trace on two processes, however small."""
    monkeypatch.setattr(readers, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setenv(readers.WORKERS_ENV, "2")


@linux
@pytest.mark.parametrize("trace", SAMPLES, ids=lambda p: p.name)
def test_parallel_read_gives_the_serial_table(trace: Path, parallel: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    par = load(trace)
    monkeypatch.setenv(readers.WORKERS_ENV, "1")
    ser = load(trace)
    assert (par.readers, ser.readers) == (2, 1)
    assert par.events.equals(ser.events, check_metadata=True)
    assert par.warnings == ser.warnings
    assert [f.path for f in par.files] == [f.path for f in ser.files]
    assert [f.sha256 for f in par.files] == [f.sha256 for f in ser.files]


@linux
def test_progress_reports_every_file_in_order(parallel: None) -> None:
    seen: list[tuple[str, int, int]] = []
    tr = load(SAMPLES[1], progress=lambda f, i, n: seen.append((f, i, n)))
    assert tr.readers == 2
    assert [i for _, i, _ in seen] == list(range(len(tr.files)))
    assert [f for f, _, _ in seen] == [f.path for f in tr.files]


def _events(n: int) -> dict:
    return {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                             "ts": float(i), "dur": 1.0} for i in range(n)]}


@linux
def test_a_bad_file_read_in_a_worker_fails_in_one_line(tmp_path: Path, parallel: None,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "trace"
    folder.mkdir()
    for r in range(6):
        (folder / f"rank{r}.json").write_text(json.dumps(_events(3)))
    bad = folder / "rank4.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": -2}]}')
    with pytest.raises(TraceFormatError, match="negative durations") as exc:
        load(folder)
    assert str(exc.value).startswith(str(bad))
    assert main(["inspect", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"mtia-trace: error: {exc.value}"]


def test_a_bad_worker_count_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for text in ("0", "two", "-1"):
        monkeypatch.setenv(readers.WORKERS_ENV, text)
        with pytest.raises(MtiaTraceError, match=readers.WORKERS_ENV):
            load(SAMPLES[0])
    assert main(["inspect", str(SAMPLES[0])]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "not a process count" in lines[0]


def test_small_traces_and_single_files_are_read_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(readers.WORKERS_ENV, "4")
    files = sorted(SAMPLES[1].glob("*.json*"))
    assert len(files) >= 2
    assert readers.workers_for(files) == 1  # far under PARALLEL_MIN_BYTES
    assert readers.workers_for(files[:1]) == 1
    monkeypatch.setattr(readers, "PARALLEL_MIN_BYTES", 0)
    assert readers.workers_for(files[:1]) == 1
    assert readers.workers_for(files) == (2 if sys.platform.startswith("linux") else 1)


def test_json_size_of_a_gzip_file_is_its_gunzipped_size(tmp_path: Path) -> None:
    doc = json.dumps(_events(500)).encode()
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(doc))
    plain = tmp_path / "t.json"
    plain.write_bytes(doc)
    assert decode.json_bytes(gz) == len(doc)
    assert decode.json_bytes(plain) == len(doc)
    assert decode.json_bytes(tmp_path / "missing.json") == 0


@linux
def test_a_fifo_is_sized_without_being_opened(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "rank0.json"
    os.mkfifo(fifo)
    assert decode.json_bytes(fifo) == 0  # returns at once: opening a FIFO would block


@linux
def test_parallel_read_of_a_copied_trace_keeps_file_order(tmp_path: Path, parallel: None) -> None:
    """More files than batches: results come back in file order, not completion order."""
    folder = tmp_path / "many"
    folder.mkdir()
    src = sorted(SAMPLES[0].glob("*.json.gz"))
    for r in range(12):
        doc = json.loads(gzip.decompress(src[r % len(src)].read_bytes()))
        doc.setdefault("distributedInfo", {})["rank"] = r
        doc["distributedInfo"]["world_size"] = 12
        (folder / f"rank{r:02d}.json").write_text(json.dumps(doc))
    tr = load(folder)
    assert tr.readers == 2
    assert [f.rank for f in tr.files] == list(range(12))
    assert [Path(f.path).name for f in tr.files] == [f"rank{r:02d}.json" for r in range(12)]


def test_heap_release_runs_everywhere() -> None:
    import platform

    from mtia_trace.ingest import heap

    heap.release()  # a no-op where there is no glibc, never an error
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert (heap._libc() is not None) == glibc


def test_the_ingest_builds_on_the_system_pool_and_puts_the_default_back(tmp_path: Path) -> None:
    import pyarrow as pa

    from mtia_trace.ingest import heap

    before = pa.default_memory_pool().backend_name
    with heap.system_arrow_pool():
        assert pa.default_memory_pool().backend_name == pa.system_memory_pool().backend_name
    assert pa.default_memory_pool().backend_name == before
    held = pa.system_memory_pool().bytes_allocated()
    tr = load(SAMPLES[0])
    assert pa.default_memory_pool().backend_name == before
    # the table's text was allocated from the system pool, and outlives the switch
    assert pa.system_memory_pool().bytes_allocated() - held >= tr.events.column("name").nbytes
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(TraceFormatError):
        load(bad)
    assert pa.default_memory_pool().backend_name == before
