"""`mtia-trace replay`: ingest -> replay -> run directory, through the CLI entry point."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import orjson
import pytest
from conftest import REAL, requires_real

from analyzers import ANALYZERS, run_all
from mtia_trace.runs import connect, query
from mtia_trace.storage import find_runs, open_run


def write_trace(folder: Path) -> Path:
    """Two ranks, two steps, one GEMM each; rank 1's kernel is 100 us longer."""
    folder.mkdir()
    for rank in range(2):
        events = []
        for s in range(2):
            t = 1000 + s * 1000
            events += [
                {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
                 "tid": 1, "ts": t, "dur": 900},
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                 "ts": t + 10, "dur": 50, "args": {"External id": s + 1}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                 "tid": 1, "ts": t + 20, "dur": 10,
                 "args": {"correlation": s + 1, "External id": s + 1}},
                {"ph": "X", "cat": "kernel", "name": "sm80_gemm", "pid": 0, "tid": 7,
                 "ts": t + 40, "dur": 300 + 100 * rank,
                 "args": {"correlation": s + 1, "External id": s + 1, "device": 0, "stream": 7}},
            ]
        doc = {"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
    return folder




def test_replay_writes_a_run_and_prints_the_attribution(tmp_path: Path, cli) -> None:
    trace = write_trace(tmp_path / "mini")
    code, out, err = cli("replay", trace, "--out", tmp_path / "run")
    assert (code, err) == (0, "")
    assert "as-measured: attribution per step (mean over ranks)" in out and "total_us" in out
    assert out.rstrip().endswith(f"run written to {tmp_path / 'run' / 'mini-as-measured'}")
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("step"))
    assert [line.split()[0] for line in lines[header + 2:header + 5]] == ["0", "1", "mean"]
    run = open_run(tmp_path / "run")
    meta = run.meta
    assert meta.hardware == "as-measured" and meta.seed == 0
    assert meta.options.mode == "auto" and meta.options.loss_rate == 0.0
    assert {t.rank: t.sha256 for t in meta.traces} == {
        r: hashlib.sha256((trace / f"rank{r}.json").read_bytes()).hexdigest() for r in (0, 1)}
    assert set(meta.timings_s) >= {"ingest", "replay", "write"}
    steps = run.read("steps")
    assert steps.num_rows == 4 and sorted(set(steps.column("step").to_pylist())) == [0, 1]


def test_several_targets_write_one_run_each_queryable_together(tmp_path: Path, cli) -> None:
    trace = write_trace(tmp_path / "mini")
    code, out, err = cli("replay", trace, "--hw", "as-measured,mtia300", "--out", tmp_path / "runs",
                         "--quiet")
    assert code == 0, err
    assert out.splitlines() == [f"run written to {tmp_path / 'runs' / 'mini-as-measured'}",
                                f"run written to {tmp_path / 'runs' / 'mini-mtia300'}"]
    runs = find_runs([tmp_path / "runs"])
    assert [r.name for r in runs] == ["mini-as-measured", "mini-mtia300"]
    mtia = open_run(tmp_path / "runs" / "mini-mtia300").meta
    assert mtia.spec["name"] == "mtia300" and "values" in mtia.spec
    got = query(connect(runs), "SELECT run, count(*) AS n FROM steps GROUP BY run ORDER BY run")
    assert got.to_pylist() == [{"run": "mini-as-measured", "n": 4}, {"run": "mini-mtia300", "n": 4}]


def test_existing_run_is_refused_before_ingesting(tmp_path: Path, cli) -> None:
    trace = write_trace(tmp_path / "mini")
    assert cli("replay", trace, "--out", tmp_path / "run")[0] == 0
    before = (tmp_path / "run" / "mini-as-measured" / "run.json").read_bytes()
    code, out, err = cli("replay", tmp_path / "gone" / "mini", "--out", tmp_path / "run")
    assert code == 2 and err.count("\n") == 1 and "a run already exists there; pass --force" in err
    assert (tmp_path / "run" / "mini-as-measured" / "run.json").read_bytes() == before
    code, _, _ = cli("replay", trace, "--out", tmp_path / "run", "--force", "--seed", "7")
    assert code == 0 and orjson.loads((tmp_path / "run" / "mini-as-measured" / "run.json").read_bytes())["seed"] == 7


@pytest.mark.parametrize("args,message", [
    (("--set", "hbm_bw=1"), "--set: as-measured replay has no hardware spec to override"),
    (("--hw", "nosuchchip"), "nosuchchip: no such hardware spec; use one of"),
    (("--loss-rate", "0.1"), "--loss-rate: as-measured replay keeps measured durations"),
])
def test_bad_options_are_one_line_errors(tmp_path: Path, cli, args, message) -> None:
    trace = write_trace(tmp_path / "mini")
    code, _, err = cli("replay", trace, "--out", tmp_path / "run", *args)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


@requires_real
def test_real_cpu_trace_replays_and_every_analyzer_runs(tmp_path: Path, cli) -> None:
    trace = REAL / "torch_cpu" / "dev_rank2_small_rank0.pt.trace.json.gz"
    if not trace.is_file():
        pytest.skip(f"{trace} not found")
    code, _, err = cli("replay", trace, "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    tables = run_all(connect([tmp_path / "run"]))
    assert set(tables) == set(ANALYZERS)
    assert tables["step_breakdown"].num_rows > 0 and tables["top_ops"].num_rows > 0
