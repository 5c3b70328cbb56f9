"""One output rule for every command: no overwrite without --force, never inside a run,
destinations checked before work starts, stale temporaries cleaned."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from runfixture import tiny_meta, tiny_tables
from test_replay_cmd import write_trace

from mtia_trace import destinations, ingest
from mtia_trace.storage import write_run


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return write_run(tiny_tables(), tmp_path / "runs" / "a", tiny_meta()).path


SQL = "SELECT * FROM steps"

#: (argv, with {run} the run directory, {target} the output path) for every command that writes.
WRITERS = [
    ("query", "{run}", SQL, "-o", "{target}"),
    ("query", "{run}", SQL, "--format", "parquet", "-o", "{target}"),
    ("analyze", "{run}", "step_breakdown", "-o", "{target}"),
    ("analyze", "{run}", "-o", "{target}"),
    ("report", "{run}", "-o", "{target}"),
    ("export", "{run}", "--perfetto", "{target}"),
    ("compare", "{run}", "{run}", "-o", "{target}"),
]


@pytest.mark.parametrize("argv", WRITERS, ids=lambda a: " ".join(a[:3]))
@pytest.mark.parametrize("force", [False, True])
def test_nothing_is_ever_written_inside_a_run(run: Path, cli, argv: tuple, force: bool) -> None:
    before = tree(run)
    for target in (run / "steps.parquet", run / "new.txt", run / "sub" / "x.md"):
        args = [a.format(run=run, target=target) for a in argv] + (["--force"] if force else [])
        code, out, err = cli(*args)
        assert code == 2 and err.count("\n") == 1, err
        assert f"inside the run directory {run}" in err
        assert tree(run) == before


@pytest.mark.parametrize("argv", WRITERS, ids=lambda a: " ".join(a[:3]))
def test_existing_file_needs_force(run: Path, tmp_path: Path, cli, argv: tuple) -> None:
    target = tmp_path / "out.txt"
    target.write_text("keep me")
    args = [a.format(run=run, target=target) for a in argv]
    code, _, err = cli(*args)
    assert code == 2 and "already exists; pass --force" in err and err.count("\n") == 1
    assert target.read_text() == "keep me"
    code, _, err = cli(*args, "--force")
    assert code == 0, err
    assert target.read_bytes() != b"keep me"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("bad,message", [
    ("{file}/x.csv", "is a file, not a directory"),
    ("{tmp}/" + "n" * 300 + ".csv", "name too long"),
    ("{tmp}", "is a directory; give a file name"),
])
def test_bad_destinations_fail_before_any_work(run: Path, tmp_path: Path, cli, bad: str,
                                               message: str) -> None:
    (tmp_path / "file").write_text("")
    target = bad.format(file=tmp_path / "file", tmp=tmp_path)
    code, out, err = cli("query", run, SQL, "-o", target)
    assert code == 2 and message in err and err.count("\n") == 1 and out == ""


@pytest.mark.parametrize("bad,message", [
    ("{file}/run", "is a file, not a directory"),
    ("{tmp}/" + "n" * 300, "name too long"),
    ("{run}/nested", "inside the run directory"),
])
def test_replay_out_is_checked_before_ingest(run: Path, tmp_path: Path, cli, bad: str,
                                             message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    trace = write_trace(tmp_path / "trace")
    monkeypatch.setattr(ingest, "load", lambda *a, **k: pytest.fail("ingested before the check"))
    out = bad.format(file=tmp_path / "file", tmp=tmp_path, run=run)
    code, _, err = cli("replay", trace, "--hw", "mtia300", "--out", out)
    assert code == 2 and message in err and err.count("\n") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_parent_is_refused_up_front(run: Path, tmp_path: Path, cli) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, _, err = cli("query", run, SQL, "-o", ro / "x.csv")
        assert code == 2 and "permission denied or read-only" in err
    finally:
        ro.chmod(0o755)


def test_synth_force_never_replaces_a_run_or_other_folder(run: Path, tmp_path: Path, cli) -> None:
    other = tmp_path / "notes"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    before = tree(run.parent)
    for dest, message in ((run, "is the run directory"),
                          (other, "is not a folder of synthetic traces")):
        code, _, err = cli("synth", "-o", dest, "--ranks", "2", "--steps", "1", "--force")
        assert code == 2 and message in err and err.count("\n") == 1
    assert tree(run.parent) == before and (other / "notes.txt").read_text() == "mine"


def _temporary(parent: Path, pid: int, age_s: float, host: str = destinations._HOST) -> Path:
    d = parent / f".gone.tmp-{host}-{pid}-abcdef"
    d.mkdir(parents=True)
    (d / "events.parquet").write_bytes(b"partial")
    old = time.time() - age_s
    os.utime(d, (old, old))
    return d


def _dead_pid() -> int:
    pid = 2**22 - 1
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except OSError:
            pass
        pid -= 1


def test_stale_temporaries_are_cleaned_on_the_next_write(tmp_path: Path) -> None:
    parent = tmp_path / "runs"
    dead = _temporary(parent, _dead_pid(), age_s=120)
    ancient = _temporary(parent, os.getpid(), age_s=2 * destinations.STALE_S, host="ffff")
    live = parent / f".live.tmp-{destinations._HOST}-{os.getpid()}-abcdef"
    live.mkdir()
    young = parent / f".young.tmp-{destinations._HOST}-{_dead_pid()}-abcdef"
    young.mkdir()
    other_host = _temporary(parent, _dead_pid(), age_s=120, host="ffff" if
                            destinations._HOST != "ffff" else "fffe")
    write_run(tiny_tables(), parent / "b", tiny_meta())
    left = {p.name for p in parent.iterdir()}
    assert dead.name not in left and ancient.name not in left
    assert {live.name, young.name, other_host.name, "b"} <= left
