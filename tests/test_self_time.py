"""An op's self time is that op's time (DESIGN §3): a critical parent's self time belongs to the
op (critical_us, top_ops, the headline, whatif groups); "untracked" is only what lies outside
every op, the same figure as the steps' ``unexplained_us``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analyzers import ANALYZERS
from analyzers.report.build import report_dict
from analyzers.report.headline import attribution, host_split
from analyzers.report.run_data import load_run
from mtia_trace.ingest import load
from mtia_trace.runs import connect
from replay.counterfactual import candidate_groups, prepare
from tests.conftest import REAL, SAMPLES, invoke_cli

# one step of 1,000 us on one thread: aten::linear [100, 900) around aten::t [110, 120) and
# aten::copy_ [130, 200), so 720 us of its own (self) time; aten::relu [950, 990); gaps outside
# every op: 100 + 50 + 10 = 160 us
LINEAR_SELF_US = 800.0 - 10.0 - 70.0
GAPS_US = 100.0 + 50.0 + 10.0


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": 1000.0 + ts,
            "dur": dur, "args": {}}


def _parent_trace(path: Path) -> Path:
    events = [_x("ProfilerStep#1", 0, 1000, "user_annotation"),
              _x("aten::linear", 100, 800), _x("aten::t", 110, 10), _x("aten::copy_", 130, 70),
              _x("aten::relu", 950, 40)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _replay(trace: Path, out: Path, capsys: pytest.CaptureFixture[str]):
    code, _out, err = invoke_cli(["replay", trace, "-o", out, "--force", "-q"], capsys)
    assert code == 0, err
    return load_run(out)


def test_parent_self_time_is_the_ops_critical_time(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = _replay(_parent_trace(tmp_path / "t.json"), tmp_path / "run", capsys)
    ev = {r["name"]: r for r in run.events.to_pylist()}
    assert ev["aten::linear"]["critical"]
    assert ev["aten::linear"]["critical_us"] == pytest.approx(LINEAR_SELF_US)
    assert ev["aten::copy_"]["critical_us"] == pytest.approx(70.0)
    assert ev["ProfilerStep#1"]["critical_us"] == 0.0  # annotations mark time, own none
    # every microsecond of the step: ops' own time + gaps outside every op
    own = sum(r["critical_us"] for r in ev.values())
    steps = run.steps.to_pylist()
    assert own + steps[0]["unexplained_us"] == pytest.approx(steps[0]["total_us"])
    assert steps[0]["unexplained_us"] == pytest.approx(GAPS_US)

    top = {r["name"]: r for r in ANALYZERS["top_ops"].run(connect([tmp_path / "run"])).to_pylist()}
    assert top["aten::linear"]["critical_us"] == pytest.approx(LINEAR_SELF_US)
    assert top["aten::linear"]["busy_us"] == pytest.approx(LINEAR_SELF_US)  # own, not inclusive
    assert top["aten::linear"]["critical_place"] == 1

    a = attribution(run)
    h = host_split(run, a)
    assert h.untracked_us == pytest.approx(GAPS_US)
    assert h.ops_us == pytest.approx(1000.0 - GAPS_US)
    assert h.top_op == "aten::linear"
    d = report_dict(run)
    keys = [b["key"] for b in d["bottlenecks"]]
    assert keys[0] == "host_ops" and "aten::linear" in d["bottlenecks"][0]["text"]
    assert d["host_split_us_per_rank_step"]["unexplained"] == pytest.approx(GAPS_US)


def test_whatif_groups_offer_kinds_that_only_parents_have(tmp_path: Path) -> None:
    """aten::linear (kind gemm) has children, so no gemm is a leaf: its kind is still a group."""
    p = prepare(load(_parent_trace(tmp_path / "t.json")).events)
    assert ("kind", "kind=gemm") in candidate_groups(p)


def _untracked_vs_unexplained(trace: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> tuple[float, float, dict]:
    run = _replay(trace, tmp_path / "run", capsys)
    a = attribution(run)
    unx = float(np.mean(run.steps.column("unexplained_us").to_numpy()))
    return host_split(run, a).untracked_us, unx, report_dict(run)


def test_sample_cpu_trace_untracked_is_unexplained(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled torch CPU sample: aten::linear's self time (most of its run) is critical
    and the headline's untracked time is the 1.96 ms of unexplained gaps, not 44% of the step."""
    untracked, unx, d = _untracked_vs_unexplained(SAMPLES / "torch_cpu_dlrm", tmp_path, capsys)
    assert untracked == pytest.approx(unx)
    assert untracked / d["step_time_us"]["mean"] < 0.10
    run = load_run(tmp_path / "run")
    lin = [r for r in run.events.to_pylist() if r["name"] == "aten::linear"]
    assert all(r["critical"] for r in lin)
    top = {r["name"]: r for r in ANALYZERS["top_ops"].run(connect([tmp_path / "run"])).to_pylist()}
    assert top["aten::linear"]["critical_place"] == 1


def test_real_cpu_trace_untracked_is_unexplained(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted((REAL / "torch_cpu").glob("dev_rank2_small_rank*.pt.trace.json.gz"))
    if len(files) != 2:
        pytest.skip("torch_cpu/dev_rank2_small not found (../shared)")
    trace = tmp_path / "trace"
    trace.mkdir()
    for f in files:
        shutil.copy(f, trace / f.name)
    untracked, unx, d = _untracked_vs_unexplained(trace, tmp_path, capsys)
    assert untracked == pytest.approx(unx)
    run = load_run(tmp_path / "run")
    sel = [r for r in run.events.to_pylist() if r["name"] == "aten::index_select"]
    assert sel and all(r["critical"] for r in sel)
    assert sum(r["critical_us"] for r in sel) > 0

