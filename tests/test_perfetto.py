"""`export --perfetto`: Chrome-trace JSON that re-ingests with the run's slices and times."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pyarrow.compute as pc
import pytest
import report_sample

from analyzers.report.run_data import load_run
from mtia_trace.cli import main
from mtia_trace.ingest import load

SHIFT_US = 7.25


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("perfetto")
    result = report_sample.build_run()
    ev = result.events  # replayed times differ from measured ones: the export must use these
    for col in ("start_us", "end_us"):
        ev = ev.set_column(ev.schema.get_field_index(col), ev.schema.field(col),
                           pc.add(ev.column(col), SHIFT_US))
    result.events = ev
    run_dir = report_sample.write_run(result, root / "sample")
    out = root / "sample.json"
    assert run_cli(["export", str(run_dir), "--perfetto", str(out), "--quiet"]) == 0
    return run_dir, out


def run_cli(argv: list[str]) -> int:
    return main(argv)


def _doc(path: Path) -> list[dict]:
    return orjson.loads(path.read_bytes())["traceEvents"]


def test_one_track_per_rank_and_stream(exported: tuple[Path, Path]) -> None:
    run_dir, out = exported
    events = load_run(run_dir, analyses=False).events
    doc = _doc(out)
    procs = sorted(e["args"]["name"] for e in doc if e["ph"] == "M" and e["name"] == "process_name")
    assert procs == [f"rank {r}" for r in range(report_sample.RANKS)]
    threads = {(e["pid"], e["tid"]) for e in doc if e["ph"] == "M" and e["name"] == "thread_name"}
    tracks = set(zip(events.column("rank").to_pylist(), events.column("track").to_pylist()))
    assert len(threads) == len(tracks) == report_sample.RANKS * 3
    # every slice sits on a named thread of its rank
    assert {(e["pid"], e["tid"]) for e in doc if e["ph"] == "X"} == threads


def test_slices_carry_their_attribution_component(exported: tuple[Path, Path]) -> None:
    doc = _doc(exported[1])
    by_kind = {}
    for e in doc:
        if e["ph"] == "X":
            by_kind.setdefault(e["args"]["kind"], set()).add(e["args"]["component"])
    assert by_kind["gemm"] == {"compute"} and by_kind["embedding"] == {"fetch"}
    assert by_kind["collective"] == {"collective"} and by_kind["runtime"] == {"host"}
    assert by_kind["annotation"] == {"none"}


def test_flow_arrows_for_launches_and_collectives(exported: tuple[Path, Path]) -> None:
    run_dir, out = exported
    run = load_run(run_dir, analyses=False)
    doc = _doc(out)
    starts = {e["id"]: e for e in doc if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    cats = Counter(e["cat"] for e in starts.values())
    launches = int((run.events.column("launch_id").to_numpy() >= 0).sum())
    coll_edges = run.edges.column("type").to_pylist().count("collective")
    assert cats == {"ac2g": launches, "collective": coll_edges} and launches > 0
    slices = {(e["pid"], e["tid"], e["ts"]) for e in doc if e["ph"] == "X"}
    for f in ends.values():  # each arrow lands on the start of a slice
        assert (f["pid"], f["tid"], f["ts"]) in slices
    assert any(starts[i]["pid"] != ends[i]["pid"] for i in starts)  # collectives cross ranks


def test_reingests_with_the_same_slices_and_times(exported: tuple[Path, Path]) -> None:
    run_dir, out = exported
    run = load_run(run_dir, analyses=False).events
    back = load(out).events
    assert back.num_rows == run.num_rows
    assert Counter(back.column("name").to_pylist()) == Counter(run.column("name").to_pylist())
    got = np.sort(np.stack([back.column("ts_us").to_numpy(),
                            back.column("ts_us").to_numpy() + back.column("dur_us").to_numpy()]),
                  axis=1)
    want = np.sort(np.stack([run.column("start_us").to_numpy(), run.column("end_us").to_numpy()]),
                   axis=1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    measured = np.sort(run.column("ts_us").to_numpy())
    np.testing.assert_allclose(got[0] - measured, SHIFT_US)


def test_refuses_to_overwrite(exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, out = exported
    assert run_cli(["export", str(run_dir), "--perfetto", str(out)]) == 2 and "--force" in capsys.readouterr().err


def test_replayed_sample_trace_round_trips(tmp_path: Path) -> None:
    # GIVEN a bundled two-rank trace replayed on mtia300 by the real pipeline
    trace = Path(__file__).resolve().parent.parent / "sample_traces" / "torch_cpu_dlrm"
    run_dir, out = tmp_path / "run", tmp_path / "run.json"
    assert run_cli(["replay", str(trace), "--hw", "mtia300", "--out", str(run_dir), "--quiet"]) == 0
    assert run_cli(["export", str(run_dir), "--perfetto", str(out), "--quiet"]) == 0
    # THEN the export reads back with every slice at its replayed start and end
    run = load_run(run_dir, analyses=False).events
    back = load(out).events
    assert back.num_rows == run.num_rows > 100
    for got, want in ((back.column("ts_us").to_numpy(), run.column("start_us").to_numpy()),
                      (back.column("ts_us").to_numpy() + back.column("dur_us").to_numpy(),
                       run.column("end_us").to_numpy())):
        np.testing.assert_allclose(np.sort(got), np.sort(want), rtol=0, atol=1e-6)


def _nests(slices: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Slices of one thread that overlap an enclosing slice without fitting inside it."""
    bad, stack = [], []
    for s, e in sorted(slices, key=lambda x: (x[0], -x[1])):
        while stack and s >= stack[-1] - 1e-9:
            stack.pop()
        if stack and e > stack[-1] + 1e-9:
            bad.append((s, e))
        stack.append(e)
    return bad


@pytest.mark.parametrize("sample,hw", [("torch_cpu_dlrm", "h100"),
                                       ("synth/dcnv2_train_2rank", "mtia300")])
def test_replayed_slices_nest_on_the_bundled_samples(sample: str, hw: str, tmp_path: Path) -> None:
    trace = Path(__file__).resolve().parent.parent / "sample_traces" / sample
    run_dir, out = tmp_path / "run", tmp_path / "run.json"
    assert run_cli(["replay", str(trace), "--hw", hw, "--out", str(run_dir), "--quiet"]) == 0
    assert run_cli(["export", str(run_dir), "--perfetto", str(out), "--quiet"]) == 0
    doc = _doc(out)
    threads: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in doc:
        if e["ph"] == "X":
            threads.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    assert sum(map(len, threads.values())) > 1000
    assert {k: _nests(v) for k, v in threads.items() if _nests(v)} == {}
    # the critical-path track of each rank is a sequence: each slice ends before the next begins
    for r in {e["pid"] for e in doc if e["ph"] == "b"}:
        marks = [(e["ts"], e["ph"]) for e in doc if e["ph"] in "be" and e["pid"] == r]
        assert [p for _, p in marks] == ["b", "e"] * (len(marks) // 2)
        ts = [t for t, _ in marks]
        assert ts == sorted(ts)


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    from runfixture import tiny_meta, tiny_tables

    from analyzers.report.perfetto import perfetto_trace
    from mtia_trace.storage import write_run

    run = write_run(tiny_tables(), tmp_path_factory.mktemp("tiny") / "r", tiny_meta())
    return perfetto_trace(load_run(run.path, analyses=False))["traceEvents"]


def _series(doc: list[dict], name: str, pid: int, key: str) -> list[tuple[float, float]]:
    return [(e["ts"], e["args"][key]) for e in doc
            if e["ph"] == "C" and e["name"] == name and e["pid"] == pid]


def test_counter_tracks_on_the_tiny_run(tiny_export: list[dict]) -> None:
    # GIVEN two ranks x two steps of 1,000 us: per step an all-reduce (400 us, queued 20 us in
    # step 1), launches 8 us long 2 us (embedding) and 172 / 272 us (GEMM) ahead of their kernels
    doc = tiny_export
    for r in (0, 1):
        running = _series(doc, "collectives running", r, "collectives")
        assert [v for _, v in running] == [1, 0, 1, 0]
        waits = _series(doc, "waiting for engines / links", r, "events")
        ar_start = 1000 + 60 + 300 + 20
        assert waits == [(ar_start - 20, 1), (ar_start, 0)]
        queued = _series(doc, f"launch queue dev:{r}:7", r, "queued")
        outstanding = _series(doc, f"launch queue dev:{r}:7", r, "outstanding")
        assert max(v for _, v in queued) == 1 and max(v for _, v in outstanding) == 2
        assert queued[-1][1] == outstanding[-1][1] == 0
        on = _series(doc, "critical path: collective", r, "on")
        assert {v for _, v in on} == {0, 1}
    # the critical path of rank 1, step 0: the embedding, the all-reduce, the optimizer
    names = [e["name"] for e in doc if e["ph"] == "b" and e["pid"] == 1 and e["ts"] < 1000]
    assert names == ["embedding_bag_kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                     "optimizer_kernel"]


def test_a_span_that_outlives_its_enclosing_span_moves_to_a_lane_of_its_own() -> None:
    """Measured traces hold spans that start inside another and end after it (an MTIA
    ``hccl:all_to_all`` runs 2.5 s past its ``c10d::alltoall_base_``); Perfetto needs each
    thread's slices to nest, so such a span goes to the thread's next lane."""
    import numpy as np
    import pyarrow as pa

    from analyzers.report.perfetto import LANE, nesting_lanes
    ev = pa.table({"rank": [0, 0, 0, 0, 0], "ph": ["X"] * 5,
                   "start_us": [0.0, 10.0, 20.0, 30.0, 200.0],
                   "end_us": [100.0, 50.0, 40.0, 2_500_000.0, 300.0]})
    tid = nesting_lanes(ev, np.ones(5, dtype=np.int64))
    assert tid.tolist() == [1, 1, 1, 1 + LANE, 1]
    for lane in set(tid.tolist()):
        spans = [(s, e) for s, e, t in zip(ev.column("start_us").to_pylist(),
                                           ev.column("end_us").to_pylist(), tid.tolist())
                 if t == lane]
        assert _nests(spans) == []
