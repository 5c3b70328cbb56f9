"""Distributed replay on a local 2-worker Dask cluster equals the single-process replay."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")

from mtia_trace.runs import connect, query  # noqa: E402
from mtia_trace.storage import open_run  # noqa: E402

CLI = [sys.executable, "-c", "from mtia_trace.cli import main; main()"]
TOL = 1e-9


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):  # noqa: ANN001, ANN201
    d = tmp_path_factory.mktemp("dist")
    tr = d / "syn64"
    r = _cli("synth", "--preset", "dlrm-dcnv2", "--ranks", "64", "--steps", "1", "--batch",
             "4096", "--sharding", "rw", "-o", str(tr))
    assert r.returncode == 0, r.stderr
    r = _cli("replay", str(tr), "--hw", "mtia300", "--out", str(d / "one"), "-q")
    assert r.returncode == 0, r.stderr
    r = _cli("replay", str(tr), "--hw", "mtia300", "--out", str(d / "two"), "-q", "--workers", "2")
    assert r.returncode == 0, r.stderr
    return open_run(d / "one"), open_run(d / "two")


def _same(a, b, keys: list[str]) -> None:  # noqa: ANN001
    a = a.to_pandas().sort_values(keys, kind="stable").reset_index(drop=True)
    b = b.to_pandas().sort_values(keys, kind="stable").reset_index(drop=True)
    assert list(a.columns) == list(b.columns) and len(a) == len(b) and len(a) > 0
    for c in a.columns:
        if a[c].dtype.kind == "f":
            np.testing.assert_allclose(b[c].to_numpy(), a[c].to_numpy(), rtol=0, atol=TOL,
                                       err_msg=c)
        else:
            assert a[c].equals(b[c]), c


def test_steps_and_attribution_match(runs) -> None:  # noqa: ANN001
    one, two = runs
    _same(one.read("steps"), two.read("steps"), ["rank", "step"])
    _same(one.read("summary"), two.read("summary"), ["rank", "component"])


def test_events_partitioned_and_equal(runs) -> None:  # noqa: ANN001
    one, two = runs
    assert (two.path / "events").is_dir() and len(two.table_files("events")) == 64
    cols = ["event_id", "rank", "start_us", "end_us", "compute_us", "collective_us", "queue_us",
            "coll_wait_us", "parent_id", "launch_id"]
    _same(one.read("events").select(cols), two.read("events").select(cols), ["event_id"])
    _same(one.read("edges"), two.read("edges"), ["src", "dst", "type"])
    assert two.meta["distributed"]["coupling_iterations"][0] >= 2


def test_query_works_on_partitioned_run(runs) -> None:  # noqa: ANN001
    one, two = runs
    sql = "SELECT rank, count(*) n, sum(end_us - start_us) s FROM events GROUP BY rank ORDER BY rank"
    a, b = query(connect(one.path), sql), query(connect(two.path), sql)
    assert a.column("n").equals(b.column("n"))
    np.testing.assert_allclose(a.column("s").to_numpy(), b.column("s").to_numpy(), atol=1e-6)


def test_unreachable_scheduler_is_one_line(tmp_path) -> None:  # noqa: ANN001
    r = _cli("replay", "sample_traces/synth/dcnv2_train_2rank", "--out", str(tmp_path / "x"),
             "--scheduler", "tcp://127.0.0.1:9")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "scheduler" in r.stderr
    assert not (tmp_path / "x").exists()
