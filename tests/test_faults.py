"""Faults and input shapes that must end in one line (or finish), never a traceback or a stall:
a full disk while writing, running out of memory, deep nesting, timestamps past the int64-ns
window, gigabytes of leading whitespace."""

from __future__ import annotations

import errno
import gzip
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mtia_trace.cli import main
from mtia_trace.ingest.nesting import depths
from tests.conftest import SAMPLES
from tests.fuzzcases import trace_doc

SAMPLE = SAMPLES / "torch_cpu_dlrm"


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("mtia-trace: error: "), err
    return lines[0]


def _full_disk(*_a: object, **_k: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_replay_onto_a_full_disk_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import mtia_trace.storage as storage

    monkeypatch.setattr(storage, "write_table", _full_disk)
    code = main(["replay", str(SAMPLE), "--hw", "mtia300", "-o", str(tmp_path / "run"), "-q"])
    assert code == 2
    assert "no space left on device" in _one_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []  # nothing half-written, no temporary left


def test_pyarrow_full_disk_text_is_recognised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import mtia_trace.storage as storage

    def arrow_full(*_a: object, **_k: object) -> None:  # pyarrow puts the errno in its text
        raise OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space "
                      "left on device")

    monkeypatch.setattr(storage, "write_table", arrow_full)
    code = main(["replay", str(SAMPLE), "--hw", "mtia300", "-o", str(tmp_path / "run"), "-q"])
    assert code == 2 and "no space left" in _one_line(capsys.readouterr().err)


def test_synth_onto_a_full_disk_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import mtia_trace.synth.generate as generate

    monkeypatch.setattr(generate, "write_trace", _full_disk)
    code = main(["synth", "-o", str(tmp_path / "t"), "--ranks", "2", "--steps", "1"])
    assert code == 2
    assert "no space left on device" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "t").exists()


def test_out_of_memory_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    import mtia_trace.ingest as ingest

    def no_memory(*_a: object, **_k: object) -> None:
        raise MemoryError

    monkeypatch.setattr(ingest, "read_all", no_memory)
    assert main(["inspect", str(SAMPLE)]) == 2
    assert "out of memory" in _one_line(capsys.readouterr().err)


def test_depths_of_deep_and_random_forests() -> None:
    """Pointer jumping gives every row its number of ancestors (a chain 100k deep, forests)."""
    rng = np.random.default_rng(0)
    chain = np.arange(-1, 100_000 - 1)
    assert (depths(chain) == np.arange(100_000)).all()
    for n in (1, 7, 500):
        parent = np.array([-1] + [int(rng.integers(-1, i)) for i in range(1, n)])
        ref = np.zeros(n, dtype=np.int64)
        for i in range(n):
            ref[i] = 0 if parent[i] < 0 else ref[parent[i]] + 1
        assert (depths(parent) == ref).all()


@pytest.mark.parametrize("ts", [9.3e15, -1e16, 1e17])
def test_timestamps_past_the_ns_window_are_refused(ts: float, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Past 2^63 ns the graph's integer keys overflow: such a trace is refused, not replayed
    too long with a numpy warning."""
    doc = trace_doc(steps=2)
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = e["ts"] - doc["traceEvents"][1]["ts"] + ts
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    code = main(["replay", str(path), "--hw", "mtia300", "-o", str(tmp_path / "run"), "-q"])
    assert code == 2 and "ts" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_leading_whitespace_is_not_kept(tmp_path: Path) -> None:
    """64 MiB of whitespace before the document: read without holding it."""
    from mtia_trace import ingest

    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        for _ in range(64):
            fh.write(b" \n\t\r" * 2**18)
        fh.write(json.dumps(trace_doc()).encode())
    tracemalloc.start()
    try:
        trace = ingest.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert trace.events.num_rows > 0
    assert peak < 24 * 2**20, f"peak {peak / 2**20:.0f} MiB"
