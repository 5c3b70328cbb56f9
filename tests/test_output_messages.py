"""What the output rules say: the message names what is at a destination; a second writer of a
run is refused before its replay; whatif takes --force like every other writer; a sweep says
how long it has left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mtia_trace.errors import UsageError
from tests.conftest import SAMPLES

SAMPLE = SAMPLES / "torch_cpu_dlrm"


RUN_NAME = "torch_cpu_dlrm-mtia300"  # what `-o FOLDER` writes for SAMPLE on one target


@pytest.mark.parametrize("kind,what", [("file", "a file"), ("devnull", "a device")])
def test_replay_into_something_that_is_not_a_folder_says_what_is_there(
        tmp_path: Path, cli, kind: str, what: str) -> None:
    dest = {"file": tmp_path / "f", "devnull": Path(os.devnull)}[kind]
    if kind == "file":
        dest.write_text("x")
    code, _, err = cli("replay", SAMPLE, "--hw", "mtia300", "-q", "-o", dest)
    assert code == 2 and err.count("\n") == 1
    assert f"(it is {what})" in err and "names the folder runs are written in" in err
    if kind == "file":
        assert dest.read_text() == "x"


def test_replay_into_a_folder_holding_other_files_writes_beside_them(tmp_path: Path,
                                                                     cli) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep.txt").write_text("x")
    code, out, _ = cli("replay", SAMPLE, "--hw", "mtia300", "-q", "-o", tmp_path / "d")
    assert code == 0 and out.strip() == f"run written to {tmp_path / 'd' / RUN_NAME}"
    assert (tmp_path / "d" / "keep.txt").read_text() == "x"


@pytest.mark.parametrize("kind,what", [("file", "a file"),
                                       ("nonempty", "a directory holding other files")])
def test_replay_onto_something_else_at_the_run_path_says_what_is_there(
        tmp_path: Path, cli, kind: str, what: str) -> None:
    dest = tmp_path / RUN_NAME
    if kind == "file":
        dest.write_text("x")
    else:
        dest.mkdir()
        (dest / "keep.txt").write_text("x")
    code, _, err = cli("replay", SAMPLE, "--hw", "mtia300", "-q", "-o", tmp_path, "--force")
    assert code == 2 and err.count("\n") == 1
    assert f"(it is {what})" in err and "a run already exists" not in err


def test_replay_onto_an_empty_directory_says_so(tmp_path: Path, cli) -> None:
    (tmp_path / RUN_NAME).mkdir()
    code, _, err = cli("replay", SAMPLE, "--hw", "mtia300", "-q", "-o", tmp_path)
    assert code == 2 and "an empty directory is there; pass --force" in err
    assert cli("replay", SAMPLE, "--hw", "mtia300", "-q", "-o", tmp_path, "--force")[0] == 0


def test_o_names_the_folder_whatever_the_number_of_targets(tmp_path: Path, cli) -> None:
    """One shape: `-o F` writes F/<trace>-<hw> for one target as for two, and a folder holding
    one run stands for that run where a command takes one run."""
    assert cli("replay", SAMPLE, "--hw", "mtia300", "-q", "-o", tmp_path / "one")[0] == 0
    assert cli("replay", SAMPLE, "--hw", "mtia300,h100", "-q", "-o", tmp_path / "two")[0] == 0
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == [RUN_NAME]
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["torch_cpu_dlrm-h100",
                                                                    RUN_NAME]
    code, out, _ = cli("analyze", tmp_path / "one", "step_breakdown", "--format", "json")
    assert code == 0 and out.lstrip().startswith(("[", "{"))
    code, _, err = cli("analyze", tmp_path / "two", "step_breakdown")
    assert code == 2 and "holds 2 runs" in err and err.count("\n") == 1
    code, _, err = cli("replay", SAMPLE, "--hw", "mtia300", "-q", "-o", tmp_path / "one" / RUN_NAME)
    assert code == 2 and "is a run directory; -o/--output names the folder" in err


def test_a_second_writer_is_refused_before_replaying(tmp_path: Path, cli,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """While one replay computes a run for DEST, another to DEST fails at once (before it
    ingests anything); the claim goes when the first one ends, and one left by a dead process
    is taken over."""
    import mtia_trace.replay_job as job
    from mtia_trace.destinations import _HOST, claimed

    dest = tmp_path / "runs" / RUN_NAME
    ingested = []
    monkeypatch.setattr(job.ingest, "load", lambda *a, **k: ingested.append(a) or 1 / 0)
    with claimed(dest):
        code, _, err = cli("replay", SAMPLE, "--hw", "mtia300", "-q", "-o", tmp_path / "runs")
        assert code == 2 and "another mtia-trace (process" in err and ingested == []
    assert [p.name for p in tmp_path.iterdir()] == []  # the claim and its folder are gone
    (tmp_path / ".run.claim").write_text(f"{_HOST} 999999999")  # a process that is not running
    with claimed(tmp_path / "run"):  # taken over
        assert (tmp_path / ".run.claim").read_text() == f"{_HOST} {os.getpid()}"
    assert not (tmp_path / ".run.claim").exists()


def test_claim_of_a_live_process_is_kept(tmp_path: Path) -> None:
    from mtia_trace.destinations import _HOST, claimed

    (tmp_path / ".run.claim").write_text(f"{_HOST} {os.getppid()}")
    with pytest.raises(UsageError, match=f"process {os.getppid()}"):
        with claimed(tmp_path / "run"):
            pass
    assert (tmp_path / ".run.claim").exists()


def test_whatif_takes_force_and_checks_before_replaying(tmp_path: Path, cli) -> None:
    out = tmp_path / "w.csv"
    out.write_text("keep")
    code, _, err = cli("whatif", SAMPLE, "--top", "2", "-q", "--format", "csv", "-o", out)
    assert code == 2 and "pass --force" in err and out.read_text() == "keep"
    code, _, _ = cli("whatif", SAMPLE, "--top", "2", "-q", "--format", "csv", "-o", out,
                     "--force")
    assert code == 0 and out.read_text().startswith('"group"')


def test_sweep_progress_says_how_long_is_left() -> None:
    from mtia_trace.ingest import load
    from replay.sweep import parse_vary, sweep

    said: list[str] = []
    sweep(load(SAMPLE).events, "mtia300", parse_vary(["comm.message_engines=4,8,16"]),
          progress=said.append)
    points = [m for m in said if m.startswith("point ")]
    assert len(points) == 3 and "left" not in points[0]
    assert all(" left)" in m for m in points[1:]), points
