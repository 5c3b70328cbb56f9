"""Distributed replay on a local 2-worker Dask cluster equals the single-process replay, also when
workers are killed mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")

from mtia_trace.replay_job import ReplayOptions, replay_trace  # noqa: E402
from mtia_trace.runs import connect, query  # noqa: E402
from mtia_trace.storage import open_run  # noqa: E402

CLI = [sys.executable, "-c", "import sys; from mtia_trace.cli import main; sys.exit(main())"]
RANKS = 64
HW = "mtia300"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.fixture(scope="module")
def client():  # noqa: ANN201
    """One local cluster (2 worker processes, 1 thread each) for every test in this file."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:  # noqa: ANN001
    tr = tmp_path_factory.mktemp("dist") / "syn64"
    r = _cli("synth", "--preset", "dlrm-dcnv2", "--ranks", str(RANKS), "--steps", "1", "--batch",
             "512", "--sharding", "rw", "-o", str(tr))
    assert r.returncode == 0, r.stderr
    return tr


@pytest.fixture(scope="module")
def runs(trace, client):  # noqa: ANN001, ANN201
    """(single-process run, run on the cluster through the CLI)."""
    one, two = trace.parent / "one", trace.parent / "two"
    replay_trace(trace, {HW: one}, ReplayOptions(hws=[HW]))
    r = _cli("replay", str(trace), "--hw", HW, "--out", str(two), "-q",
             "--scheduler", client.scheduler.address)
    assert r.returncode == 0, r.stderr
    return open_run(one), open_run(two)


def _same(a, b, keys: list[str]) -> None:  # noqa: ANN001
    a = a.to_pandas().sort_values(keys, kind="stable").reset_index(drop=True)
    b = b.to_pandas().sort_values(keys, kind="stable").reset_index(drop=True)
    assert list(a.columns) == list(b.columns) and len(a) == len(b) and len(a) > 0
    for c in a.columns:
        if a[c].dtype.kind == "f":  # bit for bit: every time depends on its own track only
            np.testing.assert_array_equal(b[c].to_numpy(), a[c].to_numpy(), err_msg=c)
        else:
            assert a[c].equals(b[c]), c


EVENT_COLS = ["event_id", "rank", "start_us", "end_us", "compute_us", "collective_us", "queue_us",
              "peer_wait_us", "parent_id", "launch_id", "bound_src", "critical"]


def _same_run(one, two) -> None:  # noqa: ANN001
    _same(one.read("steps"), two.read("steps"), ["rank", "step"])
    _same(one.read("summary"), two.read("summary"), ["rank", "component"])
    _same(one.read("collectives"), two.read("collectives"), ["pg", "coll_seq"])
    _same(one.read("events").select(EVENT_COLS), two.read("events").select(EVENT_COLS),
          ["event_id"])
    _same(one.read("edges"), two.read("edges"), ["src", "dst", "type"])


def test_same_run_as_single_process(runs) -> None:  # noqa: ANN001
    one, two = runs
    _same_run(one, two)
    assert two.meta.distributed is not None and one.meta.distributed is None
    assert two.meta.distributed["coupling_iterations"][0] >= 2
    assert two.meta.rows == one.meta.rows


def test_events_partitioned_by_rank(runs) -> None:  # noqa: ANN001
    _one, two = runs
    for table in ("events", "edges"):
        files = sorted(p.name for p in (two.path / table).iterdir())
        assert files == [f"rank-{r:06d}.parquet" for r in range(RANKS)], table


def test_query_works_on_partitioned_run(runs) -> None:  # noqa: ANN001
    one, two = runs
    sql = "SELECT rank, count(*) n, sum(end_us - start_us) s FROM events GROUP BY rank ORDER BY rank"
    a, b = query(connect(one.path), sql), query(connect(two.path), sql)
    assert a.column("n").equals(b.column("n")) and a.num_rows == RANKS
    np.testing.assert_allclose(a.column("s").to_numpy(), b.column("s").to_numpy(), atol=1e-6)


def test_lost_workers_are_retried_without_corrupting_the_run(runs, trace, client) -> None:  # noqa: ANN001, E501
    """SIGKILL one worker between coupling iterations (its shard's ingested, costed state is
    lost) and the other while the partitions are being written: Dask recomputes the lost tasks
    on the restarted workers and the run equals the single-process one."""
    one, _two = runs
    pids = sorted(client.run(os.getpid).values())
    killed: list[int] = []

    def kill_at(msg: str) -> None:
        if (("schedule: coupling iteration 2," in msg and not killed)
                or (msg.startswith("wrote ranks") and len(killed) == 1)):
            pid = pids[len(killed)]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    dest = trace.parent / "lost"
    replay_trace(trace, {HW: dest}, ReplayOptions(hws=[HW], scheduler=client.scheduler.address),
                 progress=kill_at)
    assert killed == pids
    client.wait_for_workers(2, timeout=600)  # returns once both are back; generous under load
    assert set(client.run(os.getpid).values()).isdisjoint(pids)  # both were restarted
    lost = open_run(dest)
    _same_run(one, lost)
    for table in ("events", "edges"):
        assert len(list((dest / table).iterdir())) == RANKS, table
    assert [p.name for p in dest.parent.iterdir() if p.name.startswith(".lost")] == []


def _with_leaf_annotation(src: Path, dst: Path) -> None:
    """Copy a synth trace and add, on every rank's main thread, a leaf user annotation between
    the step's final synchronize and the step's end: on the critical path, not work."""
    import gzip
    import json

    dst.mkdir()
    for f in sorted(src.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        ev = doc["traceEvents"]
        step = next(e for e in ev if e.get("name", "").startswith("ProfilerStep#"))
        sync = max((e for e in ev if e.get("name") == "cudaDeviceSynchronize"),
                   key=lambda e: e["ts"])
        gap = step["ts"] + step["dur"] - (sync["ts"] + sync["dur"])
        ev.append({"ph": "X", "cat": "user_annotation", "name": "## log ##",
                   "pid": step["pid"], "tid": step["tid"],
                   "ts": round(sync["ts"] + sync["dur"] + gap / 4, 3), "dur": round(gap / 2, 3),
                   "args": {"External id": 10**6, "Record function id": 0}})
        (dst / f.name).write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_leaf_host_annotation_same_as_single_process(tmp_path, client) -> None:  # noqa: ANN001
    base = tmp_path / "s2"
    r = _cli("synth", "--preset", "dlrm-dcnv2", "--ranks", "2", "--steps", "1", "--batch", "512",
             "-o", str(base))
    assert r.returncode == 0, r.stderr
    tr = tmp_path / "annotated"
    _with_leaf_annotation(base, tr)
    one, two = tmp_path / "one", tmp_path / "two"
    replay_trace(tr, {HW: one}, ReplayOptions(hws=[HW]))
    replay_trace(tr, {HW: two}, ReplayOptions(hws=[HW], scheduler=client.scheduler.address))
    a, b = open_run(one), open_run(two)
    _same_run(a, b)
    ev = a.read("events").to_pandas()
    mark = ev[ev["name"] == "## log ##"]
    assert len(mark) == 2 and not mark["critical"].any()  # an annotation is never critical
    # it is on the path: the step's end is reached through it
    assert (mark["end_us"].to_numpy() < ev.loc[ev["name"] == "ProfilerStep#1", "end_us"].max()).all()


def test_unreachable_scheduler_is_one_line(tmp_path) -> None:  # noqa: ANN001
    r = _cli("replay", "sample_traces/synth/dcnv2_train_2rank", "--out", str(tmp_path / "x"),
             "--scheduler", "tcp://127.0.0.1:9")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "scheduler" in r.stderr
    assert not (tmp_path / "x").exists()
