"""Two shapes of real traces that crashed the replay: host collectives nested in host collectives
in a trace without device work (a CPU-side trace of a GPU job), and flow events inconsistent with
their kernels (a dependency cycle)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from replay.graph import build_graph
from replay.hardware import model_for
from replay.run import replay_events
from replay.whatif import parse_whatif
from tests.conftest import REAL, requires_real
from tests.replay_tables import host, table


def nested_host_collectives(ranks: int = 2) -> object:
    """Per rank, six ``nccl:all_to_all`` ranges each around the ``record_param_comms`` op that
    carries the same collective (pg, seq, bytes), and no device events."""
    rows = []
    for r in range(ranks):
        rows.append(host(r, 0, 1000, name="ProfilerStep#1", kind="annotation", step=1))
        for i in range(6):
            kw = dict(kind="collective", coll_op="all_to_all", pg="0", coll_seq=i, step=1)
            rows.append(host(r, 10 + 120 * i, 100, name="nccl:all_to_all", depth=1, **kw))
            rows.append(host(r, 15 + 120 * i, 80, name="record_param_comms", depth=2, **kw))
    t = table(rows)
    b = np.where(np.asarray(t.column("kind").to_pylist()) == "collective", 1e6, 0.0)
    return t.set_column(t.schema.get_field_index("coll_bytes_in"), "coll_bytes_in", [b])


@pytest.mark.parametrize("hw", ["mtia300", "h100"])
def test_nested_host_collectives_replay_on_every_target(hw: str) -> None:
    t = nested_host_collectives()
    r = replay_events(t, model_for(hw))
    assert r.steps.num_rows == 2
    w = replay_events(t, model_for(hw), whatifs=[parse_whatif("name=record_param_comms:x0.5")])
    assert w.steps.num_rows == 2
    # the inner op carries the collective; the outer range holds no unit of the pool
    ev = r.events
    names = np.asarray(ev.column("name").to_pylist())
    assert (ev.column("collective_us").to_numpy()[names == "record_param_comms"] > 0).all()


def _cpu_side(src: Path, dest: Path) -> Path:
    """The host side of a GPU trace: only its CPU ops and annotations (no runtime calls, no
    device events), as a CPU-only profile of the same job records it."""
    dest.mkdir()
    for f in sorted(src.glob("*.json.gz")):
        d = json.loads(gzip.open(f).read())
        d["traceEvents"] = [e for e in d["traceEvents"]
                            if e.get("cat") in ("cpu_op", "user_annotation") or e.get("ph") == "M"]
        (dest / f.name.removesuffix(".gz")).write_text(json.dumps(d))
    return dest


@requires_real
@pytest.mark.parametrize("hw", ["mtia300", "h100"])
def test_cpu_side_of_a_real_gpu_job_replays(hw: str, tmp_path: Path, cli) -> None:  # noqa: ANN001
    src = REAL / "hta" / "trace_filter"  # 2 ranks of a 128-rank NCCL job: nccl:all_to_all x4
    if not src.is_dir():
        pytest.skip(f"{src} not found")
    trace = _cpu_side(src, tmp_path / "trace")
    code, _, err = cli("replay", trace, "--hw", hw, "-o", tmp_path / "run")
    assert code == 0, err
    assert "only through launch and collective latencies" in err
    code, _, err = cli("whatif", trace, "--hw", hw, "--top", "3")
    assert code == 0, err


def _inconsistent_flows(path: Path) -> Path:
    """A kernel whose correlation id names a launch made after it ran, behind a synchronize
    that waited for the stream: launch -> kernel -> stream -> sync -> host -> launch is a cycle."""
    def x(name: str, cat: str, ts: float, dur: float, tid: int, pid: int = 1, **args: object):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid,
                "tid": tid, "args": args}
    ev = [x("ProfilerStep#1", "user_annotation", 0, 200, 1),
          x("cudaLaunchKernel", "cuda_runtime", 1, 2, 1, correlation=3),
          x("cudaDeviceSynchronize", "cuda_runtime", 10, 90, 1, correlation=4),
          x("cudaLaunchKernel", "cuda_runtime", 110, 2, 1, correlation=2),
          x("k1", "kernel", 20, 70, 7, pid=0, correlation=2, stream=7, device=0),
          x("k2", "kernel", 92, 6, 7, pid=0, correlation=3, stream=7, device=0)]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_edge_closing_a_cycle_is_dropped_and_warned(tmp_path: Path, cli) -> None:  # noqa: ANN001
    trace = _inconsistent_flows(tmp_path / "t.json")
    code, out, _ = cli("inspect", trace)
    assert code == 0 and "closed a cycle" in out and "warnings: none" not in out
    code, out, err = cli("validate", trace)
    assert code in (0, 1) and "closed a cycle" in err and "Traceback" not in err
    assert "rank" in out  # the table was printed
    code, _, err = cli("replay", trace, "--hw", "h100", "-o", tmp_path / "run")
    assert code == 0 and "1 dependency edge(s)" in err


def test_only_backward_edges_that_close_a_cycle_are_dropped(tmp_path: Path) -> None:
    from mtia_trace.ingest import load

    g = build_graph(load(_inconsistent_flows(tmp_path / "t.json")).events)
    assert g.notes["backward_edges"] == 1 and g.notes["cycle_edges_dropped"] == 1
    # a kernel starting a little before its launch (clock skew) runs backward but closes no
    # cycle: it stays
    rows = [host(0, 10, 5, name="L", kind="runtime", correlation=1),
            {"rank": 0, "track": "dev:0:7", "is_device": True, "device": 0, "stream": 7,
             "ts_us": 9.0, "dur_us": 5.0, "kind": "gemm", "name": "k", "correlation": 1}]
    g = build_graph(table(rows))
    assert g.notes["backward_edges"] == 1 and g.notes["cycle_edges_dropped"] == 0
