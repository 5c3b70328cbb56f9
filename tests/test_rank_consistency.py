"""Ranks that disagree: an 8-rank synthetic trace with one rank edited is warned about (inspect,
run.json, report) or, where no schedule exists (swapped sequence numbers), refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtia_trace.cli import main
from tests.conftest import only_run
from tests.rank_edits import (
    EDITS,
    EXPECT_ERROR,
    NEEDLES,
    ODD_NEEDLES,
    ODDITIES,
    edit,
    odd_doc,
    synth_docs,
    write_docs,
)


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    return synth_docs(tmp_path_factory.mktemp("ranks"))


def _inspect(folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict | str]:
    code = main(["inspect", str(folder), "--format", "json"])
    io = capsys.readouterr()
    return code, json.loads(io.out) if code == 0 else io.err


def test_consistent_ranks_give_no_warning(docs: dict[int, dict], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _inspect(write_docs(docs, tmp_path / "t"), capsys)
    assert code == 0 and isinstance(out, dict) and out["warnings"] == []


@pytest.mark.parametrize("kind", [k for k in EDITS if k not in EXPECT_ERROR])
def test_a_disagreeing_rank_is_warned_about(kind: str, docs: dict[int, dict], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _inspect(write_docs(docs | {3: edit(docs, kind)}, tmp_path / "t"), capsys)
    assert code == 0 and isinstance(out, dict)
    hits = [w for w in out["warnings"] if NEEDLES[kind] in w]
    assert hits, (kind, out["warnings"])
    # the warning names the rank that differs
    who = "rank 99" if kind == "rank_99" else "rank 3"
    assert any(who in w for w in hits), hits


def test_warnings_reach_run_json_and_report(docs: dict[int, dict], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_docs(docs | {3: edit(docs, "size_x1000")}, tmp_path / "t")
    run = tmp_path / "run"
    assert main(["replay", str(trace), "--hw", "mtia300", "-o", str(run), "-q"]) == 0
    meta = json.loads((only_run(run) / "run.json").read_text())
    assert any("message bytes" in w for w in meta["warnings"])
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    assert "message bytes" in capsys.readouterr().out


@pytest.mark.parametrize("cmd", ["replay", "inspect"])
def test_swapped_sequence_numbers_are_refused_in_one_line(
        docs: dict[int, dict], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        cmd: str) -> None:
    trace = write_docs(docs | {3: edit(docs, "swapped_seq")}, tmp_path / "t")
    code = main(["replay", str(trace), "--hw", "mtia300", "-o", str(tmp_path / "run"), "-q"]
                if cmd == "replay" else ["inspect", str(trace)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert NEEDLES["swapped_seq"] in err and "rank 3" in err
    assert "seq 1 " in err and "seq 2 " in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("kind", ODDITIES)
def test_single_rank_oddities_are_warned_about(kind: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Recorded times and links the replay depends on: warned with a count (host and device
    under one pid: handled, no warning)."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(odd_doc(kind)))
    code, out = _inspect(path, capsys)
    assert code == 0 and isinstance(out, dict)
    if ODD_NEEDLES[kind]:
        assert any(ODD_NEEDLES[kind] in w for w in out["warnings"]), out["warnings"]
    else:
        assert out["warnings"] == []


def test_a_plain_trace_has_no_oddity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.fuzzcases import trace_doc

    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace_doc(steps=3)))
    code, out = _inspect(path, capsys)
    assert code == 0 and isinstance(out, dict) and out["warnings"] == []


def test_checks_across_ranks_on_shards_equal_those_of_one_load(tmp_path: Path) -> None:
    # a distributed ingest reads the ranks in parts: the checks across ranks run on every
    # part's facts together and give what one load of all ranks gives, for a consistent trace,
    # an edited one and a 2-of-4-ranks part (which alone would say "world_size is 4 but 2")
    from mtia_trace.ingest import cross_rank_warnings, load

    docs = synth_docs(tmp_path, ranks=4, steps=2)
    for kind in ("none", "size_x1000", "seq_off_by_one", "step_fewer", "rank_99"):
        trace = write_docs(docs if kind == "none" else docs | {2: edit(docs, kind, rank=2)},
                           tmp_path / kind)
        whole = load(trace)
        files = sorted(trace.iterdir())
        for parts in ([files[:2], files[2:]], [[f] for f in files]):
            loaded = [load(p, cross_rank=False) for p in parts]
            got = [w for t in loaded for w in t.warnings] + \
                cross_rank_warnings([t.cross for t in loaded])  # type: ignore[misc]
            assert sorted(got) == sorted(whole.warnings), (kind, len(parts))
        if kind != "none":
            assert any(NEEDLES[kind] in w for w in whole.warnings), kind


def test_distributed_replay_writes_the_warnings_across_ranks(tmp_path: Path) -> None:
    # one rank per shard: no shard sees another rank, yet run.json carries the warnings
    # across ranks a single-process replay writes, and swapped sequence numbers are refused
    # with the single-process replay's words (a shard saw only its own ranks' order)
    distributed = pytest.importorskip("distributed")
    from mtia_trace.errors import TraceFormatError
    from mtia_trace.replay_job import ReplayOptions, cost_model, replay_trace
    from replay.distributed import driver

    docs = synth_docs(tmp_path, ranks=4, steps=1)
    trace = write_docs(docs | {2: edit(docs, "size_x1000", rank=2)}, tmp_path / "t")
    swapped = write_docs(docs | {2: edit(docs, "swapped_seq", rank=2)}, tmp_path / "sw")
    one = tmp_path / "one"
    assert main(["replay", str(trace), "--hw", "mtia300", "-o", str(one), "-q"]) == 0
    local = json.loads((only_run(one) / "run.json").read_text())["warnings"]
    assert any(NEEDLES["size_x1000"] in w for w in local), local
    opts = ReplayOptions(hws=["mtia300"])
    with pytest.raises(TraceFormatError) as alone:
        replay_trace(swapped, {"mtia300": tmp_path / "sw1"}, opts)
    model, spec, _ = cost_model("mtia300", opts)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        _, meta = driver.replay_distributed(trace, model, tmp_path / "two", {"hardware": "mtia300"},
                                            client=client, shards=4)
        with pytest.raises(TraceFormatError) as shards:
            driver.replay_distributed(swapped, model, tmp_path / "sw2", {}, client=client,
                                      shards=2)
    written = json.loads((tmp_path / "two" / "run.json").read_text())["warnings"]
    assert written == meta["warnings"]
    assert sorted(written) == sorted(local), (written, local)
    assert str(shards.value) == str(alone.value)
    assert "rank 2 runs" in str(shards.value)
    assert not (tmp_path / "sw2").exists()


def test_peer_check_is_worked_per_group_not_per_collective(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # 400 all-reduces on 2 ranks of one group: what a collective must find is worked out once
    # for the group (it was once per collective, a pandas lookup each: 20,000 took seconds)
    from mtia_trace.ingest import consistency, load

    for r in (0, 1):
        ev = [{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
               "ts": 1000.0 + 10 * i, "dur": 5.0,
               "args": {"Seq": i, "Collective name": "allreduce", "In msg nelems": 1024,
                        "Out msg nelems": 1024, "dtype": "Float", "Group size": 2,
                        "Process Group Name": "0"}} for i in range(400 - r)]
        (tmp_path / f"rank{r}.json").write_text(json.dumps(
            {"traceEvents": ev, "distributedInfo": {"rank": r, "world_size": 2}}))
    calls = []
    orig = consistency._expected
    monkeypatch.setattr(consistency, "_expected", lambda *a: calls.append(a) or orig(*a))
    warned = [w for w in load(tmp_path).warnings if "did not find all their peers" in w]
    assert len(calls) == 1, len(calls)
    # the one collective rank 1 lacks is still found and named
    assert warned and warned[0].startswith("1 of 400 collectives") and "seq 399" in warned[0], \
        warned
