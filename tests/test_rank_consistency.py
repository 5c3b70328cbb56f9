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
