"""Every registered analyzer: documented, runs on a tiny run, and matches its golden CSV.

Regenerate the golden files after an intended change with
``pytest tests/test_analyzers.py --update-golden`` and review the diff.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pyarrow as pa
import pytest
from runfixture import tiny_meta, tiny_tables

from analyzers import ANALYZERS, run_all, select
from mtia_trace.errors import UsageError
from mtia_trace.runs import connect
from mtia_trace.schema import ATTRIBUTION
from mtia_trace.storage import write_run

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):
    run = write_run(tiny_tables(), tmp_path_factory.mktemp("runs") / "tiny", tiny_meta())
    return connect([run])


def golden_csv(table: pa.Table) -> str:
    """Deterministic CSV: floats to 6 significant digits, nulls empty."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.column_names)
    for row in table.to_pylist():
        w.writerow(["" if v is None else format(v, ".6g") if isinstance(v, float) else v
                    for v in row.values()])
    return buf.getvalue()


@pytest.mark.parametrize("name", list(ANALYZERS))
def test_analyzer_is_documented(name: str) -> None:
    a = ANALYZERS[name]
    assert a.NAME == name
    assert a.DESCRIPTION and "\n" not in a.DESCRIPTION and a.DESCRIPTION.endswith(".")
    from mtia_trace.cli import analyze_cmd

    assert name in (analyze_cmd.analyze.__doc__ or "")


@pytest.mark.parametrize("name", list(ANALYZERS))
def test_analyzer_matches_golden(name: str, con, update_golden: bool) -> None:
    # GIVEN the tiny two-rank run  WHEN the analyzer runs
    table = ANALYZERS[name].run(con)
    # THEN it returns a non-empty table equal to the reviewed golden CSV
    assert isinstance(table, pa.Table) and table.num_rows > 0
    text = golden_csv(table)
    path = GOLDEN / f"{name}.csv"
    if update_golden:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} missing; run pytest with --update-golden"
    assert text == path.read_text()


def test_known_answers(con) -> None:
    tables = run_all(con)
    steps = tables["step_breakdown"].to_pylist()
    parts = ATTRIBUTION
    for s in steps:  # components sum to the step and shares to 100 %
        assert sum(s[f"{p}_us"] for p in parts) == pytest.approx(s["total_us"])
        assert sum(s[f"{p}_pct"] for p in parts) == pytest.approx(100.0)
    # rank 1's embedding is 100 us slower: it is the late rank of every all-reduce
    strag = tables["stragglers"].to_pylist()
    assert [(r["late_rank"], r["lead_us"]) for r in strag] == [(1, 100.0), (1, 100.0)]
    # all-reduces overlap the GEMM by 200+180 us on rank 0 and 300+280 us on rank 1
    ov = {r["rank"]: r for r in tables["overlap"].to_pylist()}
    assert ov[0]["overlap_us"] == pytest.approx(380.0) and ov[1]["overlap_us"] == pytest.approx(580.0)
    assert ov[0]["overlap_pct"] == pytest.approx(47.5)
    (ec,) = tables["unoverlapped_comm"].to_pylist()
    assert ec["busy_us"] == pytest.approx(1600.0) and ec["unoverlapped_us"] == pytest.approx(640.0)
    # only step 1's all-reduces queued (20 us each, one per rank)
    q = tables["queueing"].to_pylist()
    assert {(r["rank"], r["step"], r["queue_us"]) for r in q} == {(0, 1, 20.0), (1, 1, 20.0)}
    # the optimizer's waits for the all-reduce are covered by the all-reduce's stream: the rank
    # stands idle only for the 60 us before its first kernel launch, in each of the two steps
    idle = {(r["rank"], r["cause"]): r["idle_us"] for r in tables["idle"].to_pylist()}
    assert idle == {(0, "launch"): pytest.approx(120.0), (1, "launch"): pytest.approx(120.0)}
    fetch = tables["fetch_stalls"].to_pylist()[0]
    assert fetch["name"] == "embedding_bag_kernel"
    assert fetch["achieved_gbps"] == pytest.approx(6.4e6 / 1000.0 / 1e3)
    cp = tables["critical_path"].to_pylist()
    assert [r["name"] for r in cp if r["step"] == 0 and r["rank"] == 1] == [
        "embedding_bag_kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "optimizer_kernel"]
    top = tables["top_ops"].to_pylist()
    assert top[0]["name"].startswith("ncclDevKernel_AllReduce")
    assert next(r for r in top if r["name"] == "sm90_gemm")["critical_us"] == 0.0
    # launches: 8 us calls; the embedding starts 2 us after its call ends, the GEMM waits for
    # it (rank 0: 172 us, rank 1: 272 us); the GEMM's call outlives the 100 us cutoff
    kl = {r["rank"]: r for r in tables["kernel_launches"].to_pylist()}
    assert [(kl[r]["launches"], kl[r]["cpu_mean_us"], kl[r]["delay_max_us"], kl[r]["delay_outliers"])
            for r in (0, 1)] == [(4, 8.0, 172.0, 2), (4, 8.0, 272.0, 2)]
    assert kl[0]["delay_mean_us"] == pytest.approx((2.0 + 172.0) / 2)
    # one launch waits at a time; the GEMM is launched while the embedding still runs
    sq = tables["stream_queues"].to_pylist()
    assert [(r["stream"], r["max_queued"], r["max_outstanding"]) for r in sq] == [
        ("dev:0:7", 1, 2), ("dev:1:7", 1, 2)]
    # rank 0: queued 10 + 180 us per step over a 1,510 us span (first launch to last end)
    assert sq[0]["mean_queued"] == pytest.approx(2 * (10.0 + 180.0) / 1510.0)
    # '## forward ##' spans [5, 95) us of each step; the critical embedding covers [60, 95)
    (ua,) = tables["user_annotations"].to_pylist()
    assert (ua["name"], ua["count"], ua["busy_us"], ua["critical_us"]) == (
        "## forward ##", 4, pytest.approx(360.0), pytest.approx(140.0))


def test_select_rejects_unknown_names() -> None:
    with pytest.raises(UsageError, match="nope: unknown analyzer; choose from step_breakdown"):
        select(["nope"])
    assert [a.NAME for a in select(["idle", "top_ops"])] == ["idle", "top_ops"]


def test_critical_path_keeps_innermost_events_and_collapses_repeats(tmp_path: Path) -> None:
    from mtia_trace import schema

    # GIVEN one rank whose critical path is A enclosing B, C, C, D
    names = ["A", "B", "C", "C", "D"]
    start = [0.0, 0.0, 40.0, 60.0, 80.0]
    end = [100.0, 40.0, 60.0, 80.0, 100.0]
    n = len(names)
    events = schema.from_columns({
        "rank": [0] * n, "event_id": list(range(n)), "name": names, "kind": ["host_op"] * n,
        "ph": ["X"] * n, "track": ["host:1:1"] * n, "is_device": [False] * n,
        "ts_us": start, "dur_us": [e - s for s, e in zip(start, end)], "step": [0] * n,
        "parent_id": [-1, 0, 0, 0, 0], "depth": [0, 1, 1, 1, 1], "start_us": start,
        "end_us": end, "critical": [True] * n, "bound_by": ["none"] + ["track"] * 4,
        **{c: [0.0] * n for c in ("compute_us", "fetch_us", "collective_us", "retry_us",
                                  "host_us", "queue_us")},
    }, schema=schema.REPLAYED_EVENTS_SCHEMA)
    tables = {**tiny_tables(), "events": events}
    con = connect([write_run(tables, tmp_path / "r", {})])
    # WHEN the critical path is collapsed  THEN the chain is B, C x2, D
    rows = ANALYZERS["critical_path"].run(con).to_pylist()
    assert [(r["name"], r["events"], r["busy_us"]) for r in rows] == [
        ("B", 1, 40.0), ("C", 2, 40.0), ("D", 1, 20.0)]


def test_docs_describe_every_analyzer() -> None:
    text = (Path(__file__).parent.parent / "docs" / "analyzers.md").read_text()
    for name, a in ANALYZERS.items():
        assert f"## {name}\n\n{a.DESCRIPTION}\n" in text, f"docs/analyzers.md lacks {name}"


@pytest.mark.parametrize("sample", ["synth/dcnv2_train_2rank", "torch_cpu_dlrm"])
def test_idle_is_wall_time_within_the_steps(sample: str, tmp_path: Path) -> None:
    """A rank's idle time is wall time with nothing running: it never exceeds its step time."""
    from mtia_trace.ingest import load
    from replay.run import replay_events
    from tests.conftest import SAMPLES

    res = replay_events(load(str(SAMPLES / sample)).events)
    run = write_run({t: getattr(res, t) for t in ("events", "edges", "steps", "collectives",
                                                   "summary")}, tmp_path / "r", tiny_meta())
    idle = ANALYZERS["idle"].run(connect([run])).to_pandas()
    steps = res.steps.to_pandas().groupby("rank").total_us.sum()
    per_rank = idle.groupby("rank").idle_us.sum()
    assert not per_rank.empty
    for r, us in per_rank.items():
        assert 0 <= us <= steps[r] * (1 + 1e-9)
    assert (idle.pct_of_step <= 100 + 1e-9).all()
