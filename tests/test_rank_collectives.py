"""Per-rank collective time: the rank_collectives view, its analyzer, the report headline and
`compare`, on hand-built runs whose answers follow from their events."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from runfixture import tiny_meta, tiny_tables

from analyzers import rank_collective_ops, rank_collectives
from analyzers.report.build import build_report, report_dict
from analyzers.report.compare import compare_dict, compare_runs, render_compare_markdown
from analyzers.report.render_markdown import render_markdown
from analyzers.report.run_data import load_run
from mtia_trace import schema
from mtia_trace.runs import connect, query
from mtia_trace.storage import write_run


def _with_extra(tables: dict[str, pa.Table], rows: list[dict]) -> dict[str, pa.Table]:
    """``tables`` with ``rows`` appended to events (ids continue the table's)."""
    ev = tables["events"]
    n = ev.num_rows
    cols: dict[str, list] = {f.name: [] for f in schema.REPLAYED_EVENTS_SCHEMA}
    for i, row in enumerate(rows):
        full = {"event_id": n + i, "ph": "X", "critical": False, "bound_by": "none",
                "src_file": f"rank{row['rank']}.json", "ts_us": row["start_us"],
                "dur_us": row["end_us"] - row["start_us"], **row}
        for name in cols:
            cols[name].append(full.get(name, 0.0 if schema.REPLAYED_EVENTS_SCHEMA.field(name).type
                                       == pa.float64() else None))
    extra = schema.from_columns({k: v for k, v in cols.items()
                                 if any(x is not None for x in v)},
                                schema=schema.REPLAYED_EVENTS_SCHEMA)
    return {**tables, "events": pa.concat_tables([ev, extra])}


#: Rank 0 gets a host-side c10d op (its device collectives count, not the host op); rank 1 a
#: device p2p in step 0: 30 us transfer + 5 us post, after 7 us in a queue and 3 us for its peer.
ASYMMETRIC = [
    {"rank": 0, "step": 0, "name": "c10d::allreduce_", "cat": "cpu_op", "kind": "collective",
     "track": "host:100:1", "is_device": False, "device": -1, "stream": -1,
     "start_us": 300.0, "end_us": 1300.0, "collective_us": 1000.0},
    {"rank": 1, "step": 0, "name": "ncclDevKernel_SendRecv", "cat": "kernel", "kind": "p2p",
     "track": "dev:1:13", "is_device": True, "device": 1, "stream": 13,
     "start_us": 900.0, "end_us": 935.0, "collective_us": 30.0, "host_us": 5.0,
     "queue_us": 7.0, "peer_wait_us": 3.0, "coll_bytes_in": 1e6, "coll_op": "send"},
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    base = tiny_tables()
    return {"tiny": write_run(base, root / "tiny", tiny_meta()).path,
            "asym": write_run(_with_extra(base, ASYMMETRIC), root / "asym", tiny_meta()).path}


def _view(path: Path) -> dict[tuple[int, int], dict]:
    rows = query(connect([path]), "SELECT * FROM rank_collectives").to_pylist()
    return {(r["rank"], r["step"]): r for r in rows}


def test_view_known_answers_on_the_tiny_run(runs: dict[str, Path]) -> None:
    # GIVEN two ranks x two steps, one 400 us all-reduce per rank-step (20 us of it retries in
    # step 1, after 20 us in a queue)
    v = _view(runs["tiny"])
    assert sorted(v) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for (_, s), r in v.items():
        assert r["collectives"] == 1 and r["bytes"] == 4e6
        assert r["transfer_us"] == pytest.approx(400.0 - 20.0 * s)
        assert r["retry_us"] == pytest.approx(20.0 * s)
        assert r["busy_us"] == pytest.approx(400.0) and r["post_us"] == 0.0
        assert r["queue_us"] == pytest.approx(20.0 * s)
        # the steps table puts 400 - q of transfer and q of retry on the critical path
        assert r["critical_us"] == pytest.approx(400.0)


def test_view_two_rank_asymmetric_case(runs: dict[str, Path]) -> None:
    v = _view(runs["asym"])
    # rank 0's host-side op is not counted: the rank has device collectives
    assert v[(0, 0)]["busy_us"] == pytest.approx(400.0) and v[(0, 0)]["collectives"] == 1
    r = v[(1, 0)]
    assert r["collectives"] == 2
    assert r["transfer_us"] == pytest.approx(430.0) and r["post_us"] == pytest.approx(5.0)
    assert r["busy_us"] == pytest.approx(435.0)
    assert r["queue_us"] == pytest.approx(7.0) and r["peer_wait_us"] == pytest.approx(3.0)
    assert v[(1, 1)]["busy_us"] == pytest.approx(400.0)


def test_cpu_only_rank_counts_its_host_collectives(tmp_path: Path) -> None:
    # GIVEN rank 1 recorded no device events: its collectives are host ops
    t = tiny_tables()
    ev = t["events"]
    on_host = pa.array([False] * ev.num_rows)
    t["events"] = ev.set_column(ev.schema.get_field_index("is_device"), "is_device", on_host)
    t = _with_extra(t, [dict(ASYMMETRIC[0], rank=1, track="host:101:1")])
    v = _view(write_run(t, tmp_path / "cpu", tiny_meta()).path)
    # every rank is host-only now, so each counts its host collectives: 1000 us more in step 0
    assert v[(1, 0)]["busy_us"] == pytest.approx(1400.0)
    assert v[(0, 0)]["busy_us"] == pytest.approx(400.0)


def test_per_op_rows_add_up_to_the_per_rank_time(runs: dict[str, Path]) -> None:
    con = connect([runs["asym"]])
    ops = {(r["coll_op"], r["ranks"]): r for r in rank_collective_ops.run(con).to_pylist()}
    # the all-reduces: 400 us per rank-step; rank 1's send: 35 us once in 4 rank-steps; rank 0's
    # host-side op is not counted (the rank has device collectives)
    assert set(ops) == {("all_reduce", 2), ("send", 0)}
    assert ops[("all_reduce", 2)]["busy_us"] == pytest.approx(400.0)
    assert ops[("send", 0)]["busy_us"] == pytest.approx(35.0 / 4)
    assert ops[("send", 0)]["collectives"] == pytest.approx(0.25)
    m = rank_collectives.means(rank_collectives.run(con))
    assert m is not None and sum(r["busy_us"] for r in ops.values()) == pytest.approx(m["busy_us"])


def test_analyzer_means_and_the_report_headline(runs: dict[str, Path]) -> None:
    con = connect([runs["asym"]])
    per_rank = {r["rank"]: r for r in rank_collectives.run(con).to_pylist()}
    assert per_rank[0]["busy_us"] == pytest.approx(400.0)
    assert per_rank[1]["busy_us"] == pytest.approx((435.0 + 400.0) / 2)
    m = rank_collectives.means(rank_collectives.run(con))
    assert m is not None and m["busy_us"] == pytest.approx((3 * 400.0 + 435.0) / 4)
    data = load_run(runs["asym"])
    text = render_markdown(build_report(data, with_figures=False))
    assert "Per-rank collective time **408.8 µs** per rank-step" in text
    assert "of which **400.0 µs** exposed on the critical path" in text
    assert report_dict(data)["rank_collectives_us_per_rank_step"]["busy_us"] == pytest.approx(408.75)


def test_compare_shows_per_rank_and_exposed_collective_time(runs: dict[str, Path]) -> None:
    c = compare_runs(load_run(runs["tiny"]), load_run(runs["asym"]))
    rows = {d.name: d for d in c.rank_collectives}
    busy = rows["per-rank collective time (transfer + post)"]
    assert (busy.a, busy.b) == (pytest.approx(400.0), pytest.approx(408.75))
    assert busy.ratio == pytest.approx(408.75 / 400.0)
    assert rows["exposed collective time (critical path)"].delta == pytest.approx(0.0)
    md = render_compare_markdown(c)
    assert "| per-rank collective time (transfer + post) | 400.0 | 408.8 | +8.8 | 1.02× |" in md
    j = compare_dict(c)["rank_collectives"]
    assert [r["column"] for r in j] == ["busy_us", "critical_us", "queue_us", "peer_wait_us"]
    # queue: 0 and 20 us per rank in steps 0 and 1, plus rank 1's 7 us in step 0
    assert (j[2]["a"], j[2]["b"]) == (pytest.approx(10.0), pytest.approx(47.0 / 4))
