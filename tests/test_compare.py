"""`compare`: deltas per component, the CI verdict and its exit codes, through the CLI."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import report_sample

from analyzers.report.compare import (
    MARKDOWN_LIMIT,
    compare_runs,
    parse_threshold,
    render_compare_markdown,
)
from analyzers.report.run_data import run_from_result
from mtia_trace.errors import UsageError
from tests.conftest import invoke_cli as cli


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {
        "base": report_sample.write_run(report_sample.build_run(), root / "base"),
        "same": report_sample.write_run(report_sample.build_run(), root / "same"),
        # +210 µs of collectives on a 1,440 µs step: +14.6%
        "slow": report_sample.write_run(report_sample.build_run(comm_scale=1.5), root / "slow"),
        # +40 µs of compute: +2.8%, under a 5% threshold
        "bit_slower": report_sample.write_run(report_sample.build_run(gemm_us=440.0),
                                              root / "bit_slower"),
    }




def test_exit_0_no_regression(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(["compare", str(runs["base"]), str(runs["same"])], capsys)
    assert code == 0 and err == ""
    assert "✅ **No regression**: step_time 1,440.0 → 1,440.0 µs (+0.0%)" in out
    code, out, _ = cli(["compare", str(runs["base"]), str(runs["bit_slower"])], capsys)
    assert code == 0 and "(+2.8%)" in out


def test_exit_1_regression_past_threshold(runs: dict[str, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["compare", str(runs["base"]), str(runs["slow"])], capsys)
    assert code == 1
    assert "❌ **Regression**: step_time 1,440.0 → 1,650.0 µs (+14.6%)" in out
    # the largest change comes first and is the collective
    rows = [line for line in out.splitlines() if line.startswith("| ") and "Δ" not in line]
    assert rows[0].startswith("| step_time |") and rows[1].startswith("| collective | 388.0 | 592.0 | +204.0 | 1.53×")
    # a looser threshold or another metric passes
    assert cli(["compare", str(runs["base"]), str(runs["slow"]), "--threshold", "20%"], capsys)[0] == 0
    assert cli(["compare", str(runs["base"]), str(runs["slow"]), "--metric", "compute"], capsys)[0] == 0
    assert cli(["compare", str(runs["base"]), str(runs["bit_slower"]), "--metric", "compute",
                "--threshold", "0.05"], capsys)[0] == 1


@pytest.mark.parametrize("args", [
    ["--threshold", "five"], ["--threshold", "-3%"], ["--metric", "latency"], ["--hw", "h100"],
], ids=["threshold-nan", "threshold-negative", "unknown-metric", "one-hw-with-two-runs"])
def test_exit_2_bad_input(runs: dict[str, Path], args: list[str],
                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(["compare", str(runs["base"]), str(runs["same"]), *args], capsys)
    assert code == 2 and out == ""
    assert err.startswith("mtia-trace: error: ") and err.count("\n") == 1


def test_exit_2_new_run_missing(runs: dict[str, Path], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(["compare", str(runs["base"]), str(tmp_path / "nope")], capsys)
    assert code == 2 and "does not exist" in err


def test_exit_3_baseline_missing(runs: dict[str, Path], tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(["compare", str(tmp_path / "main-baseline"), str(runs["same"])], capsys)
    assert code == 3 and out == ""
    assert "baseline run not found" in err and err.count("\n") == 1


def test_json_for_machines(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["compare", str(runs["base"]), str(runs["slow"]), "--format", "json"],
                       capsys)
    d = orjson.loads(out)
    assert code == 1 and d["regressed"] is True and d["metric"] == "step_time"
    assert d["gate"]["delta"] == pytest.approx(210.0) and d["gate"]["rel"] == pytest.approx(210 / 1440)
    deltas = [abs(c["delta"]) for c in d["components"]]
    assert deltas == sorted(deltas, reverse=True)
    assert {c["name"] for c in d["components"]} >= {"step_time", "compute", "collective", "idle"}


def test_markdown_fits_a_job_summary(runs: dict[str, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "summary.md"
    code, out, _ = cli(["compare", str(runs["base"]), str(runs["slow"]), "-o", str(dest)], capsys)
    text = dest.read_text()
    assert code == 1 and out == "" and 0 < len(text.encode()) < MARKDOWN_LIMIT
    assert "### Per-rank collective time per op" in text and "### Analyzer tables" not in text


def test_zero_baseline_component_counts_as_regression() -> None:
    base = run_from_result(report_sample.build_run(), name="a")
    # compare retry against itself with the retry removed from the baseline
    steps = base.steps.set_column(base.steps.schema.get_field_index("retry_us"), "retry_us",
                                  [[0.0] * base.steps.num_rows])
    zero = run_from_result(report_sample.build_run(), name="z")
    zero.steps = steps
    c = compare_runs(zero, base, metric="retry", threshold=1.0)
    assert c.regressed and "retry" in render_compare_markdown(c)


def test_parse_threshold() -> None:
    assert parse_threshold("5%") == pytest.approx(0.05)
    assert parse_threshold("0.2") == pytest.approx(0.2)
    with pytest.raises(UsageError):
        parse_threshold("nan%")


def test_compare_trace_on_two_specs_needs_the_trace(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(["compare", str(tmp_path / "t.json"), "--hw", "h100", "--hw", "mtia300"],
                       capsys)
    assert code == 2 and "trace not found" in err


def test_compare_one_trace_on_two_specs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a bundled two-rank trace; WHEN compared on h100 (baseline) and mtia300
    trace = Path(__file__).resolve().parent.parent / "sample_traces" / "torch_cpu_dlrm"
    code, out, err = cli(["compare", str(trace), "--hw", "h100", "--hw", "mtia300", "--quiet",
                          "--format", "json", "--threshold", "1000%"], capsys)
    # THEN both runs were replayed and compared, and nothing but the result was printed
    d = orjson.loads(out)
    assert code == 0 and err == ""
    assert (d["baseline"]["hardware"], d["new"]["hardware"]) == ("h100", "mtia300")
    gate = d["gate"]
    assert gate["a"] > 0 and gate["b"] > 0 and gate["a"] != gate["b"]


def test_compare_keeps_only_sums_that_mean_something(runs: dict[str, Path]) -> None:
    from analyzers.report.run_data import load_run

    c = compare_runs(load_run(runs["base"]), load_run(runs["slow"]))
    # per-rank collective time per op, per rank-step: the all-to-all kernel runs 300 -> 450 µs,
    # 20 µs of which queue, so a rank's own time in it is 280 -> 430 µs
    coll = {d.name: d for d in c.collectives}
    assert set(coll) == {"all_to_all (4 ranks)", "all_reduce (4 ranks)"}
    assert (coll["all_to_all (4 ranks)"].a, coll["all_to_all (4 ranks)"].b) == (
        pytest.approx(280.0), pytest.approx(430.0))
    # the rows add up to the per-rank collective time
    total = next(d for d in c.rank_collectives if d.name.startswith("per-rank"))
    assert sum(d.b for d in c.collectives) == pytest.approx(total.b)
    # changed ops: only ops whose critical time moved, the collectives' kernels first
    assert c.top_ops and all(abs(d.delta) > 0 for d in c.top_ops)
    assert c.warnings == []  # same trace, ranks, overrides and version


def test_compare_warns_when_runs_are_not_like_for_like(runs: dict[str, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    other = report_sample.write_run(
        report_sample.build_run(), tmp_path / "other",
        {**report_sample.RUN_META, "tool_version": "9.9.9",
         "traces": [{"path": "x.json", "sha256": "f" * 64}],
         "options": {"mode": "scaled", "overrides": ["hbm.bandwidth_GBps=1"]}})
    code, out, err = cli(["compare", str(runs["base"]), str(other), "--format", "html"], capsys)
    assert code == 0 and out.startswith("<!DOCTYPE html>") and "Not like for like" in out
    for what in ("different traces", "overrides differ"):
        assert what in err
    assert err.count("mtia-trace: warning:") == 2
    # the writer stamps its own version, so a run from another version is made in memory
    import msgspec

    from analyzers.report.compare import like_for_like
    from analyzers.report.run_data import load_run

    base = load_run(runs["base"], analyses=False)
    old = load_run(runs["same"], analyses=False)
    old.meta = msgspec.structs.replace(old.meta, tool_version="0.0.1")
    assert [w for w in like_for_like(base, old) if "tool versions differ" in w]
    assert like_for_like(base, load_run(runs["same"], analyses=False)) == []
